// Tests of the trace readers (Mooncake, BurstGPT, Vidur, generic CSV/JSONL, ServeLab format),
// the transforms, trace statistics and `trace convert`, against the shipped traces' published
// figures and small files written here.
#include "traces/trace_readers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/json_depth.h"
#include "serving/config_node.h"
#include "serving/home.h"
#include "tests/test_util.h"
#include "traces/csv_reader.h"
#include "traces/trace_stats.h"
#include "traces/transforms.h"
#include "traces/workload.h"

namespace servelab {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kRepo = servelab_home().string();
const std::string kConversation = kRepo + "/traces/mooncake/conversation_trace.jsonl";
const std::string kSynthetic = kRepo + "/traces/mooncake/synthetic_trace.jsonl";
const std::string kAzureConv = kRepo + "/traces/azure2023/AzureLLMInferenceTrace_conv.csv";

std::unique_ptr<Workload> from_yaml(const std::string& yaml, std::uint64_t seed = 7) {
  const ConfigNode root = ConfigNode::load_string(yaml, "test.yaml");
  return make_workload(root.at("workload"), seed, ".");
}

std::vector<RequestSpec> drain(Workload& w) {
  std::vector<RequestSpec> out;
  while (std::optional<RequestSpec> r = w.next()) out.push_back(std::move(*r));
  return out;
}

std::vector<RequestSpec> read_all(const std::string& yaml, std::uint64_t seed = 7) {
  return drain(*from_yaml(yaml, seed));
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// A file under the test's temporary directory holding `text`; returns its path.
std::string write_file(const std::string& name, const std::string& text) {
  const auto dir = servelab::test_util::kept_temp_dir("trace_test");
  const std::string path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

TraceStats stats_of(const std::string& yaml, std::int32_t block_tokens) {
  auto w = from_yaml(yaml);
  return compute_trace_stats(*w, block_tokens);
}

// --- Shipped traces ----------------------------------------------------------------------

TEST(TraceReaders, MooncakeConversationMatchesPublishedStats) {
  const TraceStats s =
      stats_of("workload: {type: mooncake, path: " + kConversation + "}", /*block_tokens=*/512);
  EXPECT_EQ(s.requests, 12031);
  EXPECT_NEAR(s.span_s / 60, 58.95, 0.05);
  EXPECT_NEAR(s.input.mean, 12035.06, 0.01);  // 144,793,823 / 12,031
  EXPECT_NEAR(s.output.mean, 342.62, 0.01);
  EXPECT_EQ(s.input.p50, 6909);
  EXPECT_EQ(s.input.p99, 85401);
  EXPECT_EQ(s.output.p50, 350);
  EXPECT_EQ(s.output.p99, 1120);
  EXPECT_EQ(s.blocks, 288500);
  ASSERT_TRUE(s.repeated_block_fraction.has_value());
  EXPECT_NEAR(*s.repeated_block_fraction, 0.366, 0.001);
}

TEST(TraceReaders, MooncakeSyntheticMatchesPublishedStats) {
  const TraceStats s = stats_of("workload: {type: mooncake, path: " + kSynthetic + "}", 512);
  EXPECT_EQ(s.requests, 3993);
  EXPECT_NEAR(s.span_s / 60, 17.0, 0.05);
  EXPECT_NEAR(s.input.mean, 15325.5, 0.1);
  EXPECT_NEAR(s.output.mean, 149.1, 0.1);
  ASSERT_TRUE(s.repeated_block_fraction.has_value());
  EXPECT_NEAR(*s.repeated_block_fraction, 0.640, 0.001);
}

TEST(TraceReaders, AzureConversationStats) {
  const TraceStats s = stats_of("workload: {type: azure, path: " + kAzureConv + "}", 0);
  EXPECT_EQ(s.requests, 19366);
  EXPECT_NEAR(s.span_s, 3501.7, 0.05);
  EXPECT_NEAR(s.rate, 5.53, 0.01);
  EXPECT_EQ(s.input.p50, 1020);
  EXPECT_EQ(s.input.p99, 4142);
  EXPECT_EQ(s.input.max, 14050);
  EXPECT_EQ(s.output.p50, 129);
  EXPECT_EQ(s.output.p99, 601);
  EXPECT_EQ(s.output.max, 1000);
  EXPECT_NEAR(s.input.mean, 1155, 1);
  EXPECT_NEAR(s.output.mean, 211, 1);
  EXPECT_FALSE(s.repeated_block_fraction.has_value());
  EXPECT_GT(s.interarrival_cv, 0);
  const std::string table = format_trace_stats(s);
  EXPECT_THAT(table, HasSubstr("19366"));
  EXPECT_THAT(table, HasSubstr("14050"));
}

TEST(TraceReaders, MooncakeEqualHashIdsAreEqualContent) {
  // The first two requests of the conversation trace both start with hash id 0.
  const std::vector<RequestSpec> a =
      read_all("workload: {type: mooncake, path: " + kConversation + ", max_requests: 5}", 1);
  const std::vector<RequestSpec> b =
      read_all("workload: {type: mooncake, path: " + kConversation + ", max_requests: 5}", 99);
  ASSERT_EQ(a.size(), 5u);
  EXPECT_EQ(a[0].prompt[0], a[1].prompt[0]);
  EXPECT_EQ(a[0].prompt[0], (PromptSegment{mooncake_content_id(0), 0, 512}));
  EXPECT_NE(a[0].prompt[1], a[1].prompt[1]);
  // Independent of the experiment seed: the same ids are the same tokens in any experiment.
  EXPECT_EQ(a[0].prompt, b[0].prompt);
  // 6758 tokens over 14 hash ids: 13 full blocks and a partial one of 6758 - 13*512 = 102.
  EXPECT_EQ(a[0].prompt_len, 6758);
  ASSERT_EQ(a[0].prompt.size(), 14u);
  EXPECT_EQ(a[0].prompt.back().length, 102u);
  EXPECT_EQ(a[0].max_output_tokens, 500);
  EXPECT_EQ(a[0].arrival_ns, 0);
}

TEST(TraceReaders, MooncakeTailBeyondHashIdsIsFreshAndTimesInMs) {
  const std::string path = write_file(
      "tail.jsonl",
      "{\"timestamp\": 1000, \"input_length\": 1030, \"output_length\": 5, \"hash_ids\": [7, 8]}\n"
      "{\"timestamp\": 3500, \"input_length\": 600, \"output_length\": 2, \"hash_ids\": [7, 9]}\n");
  const auto rs = read_all("workload: {type: mooncake, path: " + path + "}");
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[1].arrival_ns, 2'500'000'000);
  ASSERT_EQ(rs[0].prompt.size(), 3u);
  EXPECT_EQ(rs[0].prompt[2].length, 6u);
  EXPECT_EQ(rs[0].prompt_len, 1030);
  EXPECT_EQ(rs[1].prompt[0], rs[0].prompt[0]);
  EXPECT_EQ(rs[1].prompt[1].length, 88u);
}

TEST(TraceReaders, MooncakeMalformedRowNamesFileAndLine) {
  const std::string path = write_file(
      "bad.jsonl",
      "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5, \"hash_ids\": [1]}\n"
      "{\"timestamp\": 5, \"input_length\": \"ten\", \"output_length\": 5, \"hash_ids\": [1]}\n");
  const std::string msg =
      error_of([&] { read_all("workload: {type: mooncake, path: " + path + "}"); });
  EXPECT_THAT(msg, HasSubstr(path + ":2: expected a positive integer input_length"));
  const std::string path2 = write_file(
      "bad2.jsonl",
      "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5, \"hash_ids\": [1, 2]}\n");
  EXPECT_THAT(error_of([&] { read_all("workload: {type: mooncake, path: " + path2 + "}"); }),
              HasSubstr(path2 + ":1: expected input_length > 512"));
  // A timestamp past the simulator's clock, integer or not, the same limit and message.
  for (const char* ts : {"5000000000000", "5000000000000.0"}) {
    const std::string late = write_file(
        "late.jsonl", std::string("{\"timestamp\": ") + ts +
                          ", \"input_length\": 10, \"output_length\": 5, \"hash_ids\": [1]}\n");
    EXPECT_THAT(error_of([&] { read_all("workload: {type: mooncake, path: " + late + "}"); }),
                HasSubstr(late + ":1: expected a timestamp (ms) below 4.6e12 (146 years)"));
  }
}

// Text quoted in messages: control bytes and bytes that are not UTF-8 are written as \xNN (a
// gzip file's header never reaches the terminal raw); UTF-8 stays, cut after max_chars bytes.
TEST(TraceReaders, QuotedTextEscapesBinaryBytes) {
  EXPECT_EQ(shorten("t,p,o"), "t,p,o");
  EXPECT_EQ(shorten(std::string("\x1f\x8b\x08\x00"
                                "ab",
                                6)),
            "\\x1f\\x8b\\x08\\x00ab");
  EXPECT_EQ(shorten("caf\xc3\xa9\tx"), "caf\xc3\xa9\\x09x");
  EXPECT_EQ(shorten(std::string(100, 'a')), std::string(80, 'a') + "...");
  EXPECT_EQ(shorten("\xe2\x82", 80), "\\xe2\\x82");  // a cut-off sequence
}

// A row nested 100,000 levels deep (a 200 KB line, under the 1 MiB line limit) is a malformed row
// naming the file and line, not a stack overflow when the message quotes it.
TEST(TraceReaders, DeeplyNestedJsonRowsNameFileAndLine) {
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  const std::string path = write_file(
      "deep.jsonl",
      "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5, \"hash_ids\": [1]}\n"
      "{\"timestamp\": 5, \"input_length\": 10, \"output_length\": 5, \"hash_ids\": " +
          deep + "}\n");
  EXPECT_THAT(error_of([&] { read_all("workload: {type: mooncake, path: " + path + "}"); }),
              HasSubstr(path + ":2: expected a JSON object nested at most 256 levels deep"));
  // A key twice in a row: which one holds would be a guess.
  const std::string twice = write_file(
      "twice.jsonl",
      "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5, \"output_length\": 7, "
      "\"hash_ids\": [1]}\n");
  EXPECT_THAT(
      error_of([&] { read_all("workload: {type: mooncake, path: " + twice + "}"); }),
      HasSubstr(twice + ":1: expected each key once in a row, got '\"output_length\" twice'"));
  // The depth count skips brackets inside strings.
  EXPECT_EQ(json_nesting_depth(R"({"a": "[[[{{", "b": [1, {"c": "\"]"}]})"), 3u);
  EXPECT_EQ(json_nesting_depth("42"), 0u);
  // The end of the container a text opens with, the same way (a tool call's JSON in a model's
  // output, engine/tool_parser.cc).
  EXPECT_EQ(json_container_end(R"({"a": "}"}; {"b": 1})"), 10u);
  EXPECT_EQ(json_container_end(R"([1, [2], {"c": "]"}] tail)"), 20u);
  EXPECT_EQ(json_container_end(R"({"a": [1, 2})"), std::string_view::npos);
}

// --- BurstGPT -----------------------------------------------------------------------------

const char* kBurst =
    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "5,ChatGPT,472,18,490,Conversation log\n"
    "45,ChatGPT,1087,0,1087,Conversation log\n"
    "118.5,GPT-4,417,276,693,Conversation log\n"
    "130,ChatGPT,1360,1065,2425,API log\n";

TEST(TraceReaders, BurstGptDropsFailedAndFiltersModel) {
  const std::string path = write_file("burst.csv", kBurst);
  const auto all = read_all("workload: {type: burstgpt, path: " + path + "}");
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].arrival_ns, 0);
  EXPECT_EQ(all[1].arrival_ns, 113'500'000'000);
  EXPECT_EQ(all[1].prompt_len, 417);
  EXPECT_EQ(all[1].max_output_tokens, 276);
  EXPECT_EQ(all[2].id, 2u);

  const auto chat = read_all("workload: {type: burstgpt, path: " + path + ", model: ChatGPT}");
  ASSERT_EQ(chat.size(), 2u);
  EXPECT_EQ(chat[1].prompt_len, 1360);
  EXPECT_EQ(chat[1].arrival_ns, 125'000'000'000);
  // Times count from the file's first row even when the filter drops it: the GPT-4 request
  // arrives 113.5 s in, as in the whole trace (it arrived at 0, so that a mix of the two models
  // read as two classes lost their relative timing).
  const auto gpt4 = read_all("workload: {type: burstgpt, path: " + path + ", model: GPT-4}");
  ASSERT_EQ(gpt4.size(), 1u);
  EXPECT_EQ(gpt4[0].arrival_ns, 113'500'000'000);
  // A dropped row still has to be in time order.
  std::string unordered = kBurst;
  unordered.replace(unordered.find("118.5,GPT-4"), 5, "1.5");
  const std::string bad = write_file("burst_unordered.csv", unordered);
  try {
    read_all("workload: {type: burstgpt, path: " + bad + ", model: ChatGPT}");
    ADD_FAILURE() << "an unordered row was accepted";
  } catch (const ConfigError& e) {
    // Times in seconds, whatever the file's unit (they were nanoseconds).
    EXPECT_THAT(e.what(), HasSubstr(":4: expected a time no earlier than line 3's (45 s; rows must "
                                    "be in time order), got '1.5 s'"));
  }

  const auto with_failed =
      read_all("workload: {type: burstgpt, path: " + path + ", include_failed: true}");
  ASSERT_EQ(with_failed.size(), 4u);
  EXPECT_EQ(with_failed[1].max_output_tokens, 1);

  // trace stats says how many rows the filters left out (the failed one; with a model, the
  // other model's rows too).
  auto counted = [&](const std::string& yaml) {
    const TraceStats st = compute_trace_stats(*from_yaml(yaml), 0);
    return std::pair{st.filtered_rows, format_trace_stats(st)};
  };
  const auto [failed_only, failed_text] = counted("workload: {type: burstgpt, path: " + path + "}");
  EXPECT_EQ(failed_only, 1);
  EXPECT_THAT(failed_text,
              HasSubstr("filtered rows          1 (left out by the reader's filters)"));
  EXPECT_EQ(counted("workload: {type: burstgpt, path: " + path + ", model: ChatGPT}").first, 2);
  const auto [none, none_text] =
      counted("workload: {type: burstgpt, path: " + path + ", include_failed: true}");
  EXPECT_EQ(none, 0);
  EXPECT_THAT(none_text, Not(HasSubstr("filtered rows")));
}

TEST(TraceReaders, BurstGptOptionalLaterColumns) {
  const std::string path = write_file("burst2.csv",
                                      "Timestamp,Model,Request tokens,Response tokens,Total "
                                      "tokens,Log Type,Session ID,Elapsed time\n"
                                      "0.5,GPT-4,10,20,30,Conversation log,abc,1.5\n"
                                      "1.5,GPT-4,11,21,32,Conversation log,abc,2.5\n");
  const auto rs = read_all("workload: {type: burstgpt, path: " + path + "}");
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[1].arrival_ns, 1'000'000'000);
}

TEST(TraceReaders, MalformedCsvRowErrorsOrLenientSkips) {
  const std::string path =
      write_file("burst_bad.csv",
                 "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                 "1,ChatGPT,10,20,30,Conversation log\n"
                 "2,ChatGPT,ten,20,30,Conversation log\n"
                 "3,ChatGPT,10,20\n"
                 "4,ChatGPT,12,22,34,Conversation log\n");
  const std::string msg =
      error_of([&] { read_all("workload: {type: burstgpt, path: " + path + "}"); });
  EXPECT_THAT(msg,
              HasSubstr(path + ":3: expected a non-negative integer Request tokens, got 'ten'"));

  auto w = from_yaml("workload: {type: burstgpt, path: " + path + ", lenient: true}");
  const auto rs = drain(*w);
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[1].prompt_len, 12);
  EXPECT_EQ(rs[1].id, 1u);
  EXPECT_EQ(w->skipped_rows(), 2);
  EXPECT_EQ(compute_trace_stats(
                *from_yaml("workload: {type: burstgpt, path: " + path + ", lenient: true}"), 0)
                .skipped_rows,
            2);
}

TEST(TraceReaders, OutOfOrderRowIsAnError) {
  const std::string path = write_file(
      "vidur_order.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n2,5,5\n1,5,5\n");
  EXPECT_THAT(error_of([&] { read_all("workload: {type: vidur, path: " + path + "}"); }),
              HasSubstr(path + ":3: expected a time no earlier than line 2's"));
}

TEST(TraceReaders, MissingColumnAndEmptyTrace) {
  const std::string path = write_file("nocol.csv", "arrived_at,num_prefill_tokens\n1,2\n");
  EXPECT_THAT(error_of([&] { read_all("workload: {type: vidur, path: " + path + "}"); }),
              HasSubstr(path + ":1: expected a header with a column 'num_decode_tokens'"));
  const std::string empty =
      write_file("empty.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n");
  EXPECT_THAT(error_of([&] { read_all("workload: {type: vidur, path: " + empty + "}"); }),
              HasSubstr("empty trace"));
  EXPECT_THAT(error_of([&] { read_all("workload: {type: vidur, path: x.csv, colour: red}"); }),
              HasSubstr("colour"));
}

// --- Vidur and generic readers ------------------------------------------------------------

TEST(TraceReaders, VidurCsv) {
  const std::string path = write_file("vidur.csv",
                                      "arrived_at,num_prefill_tokens,num_decode_tokens,extra\n"
                                      "10.25,100,20,x\n10.75,200,30,y\n12,300,40,z\n");
  const auto rs =
      read_all("workload: {type: vidur, path: " + path + ", time_scale: 2, start_s: 1}");
  ASSERT_EQ(rs.size(), 3u);
  EXPECT_EQ(rs[0].arrival_ns, 1'000'000'000);
  EXPECT_EQ(rs[1].arrival_ns, 2'000'000'000);
  EXPECT_EQ(rs[2].arrival_ns, 4'500'000'000);
  EXPECT_EQ(rs[2].prompt_len, 300);
  EXPECT_EQ(rs[2].max_output_tokens, 40);
  // Unknown content: one fresh stream per request, none shared.
  EXPECT_NE(rs[0].prompt[0].content_id, rs[1].prompt[0].content_id);
}

TEST(TraceReaders, GenericCsvWithColumnMapping) {
  const std::string path =
      write_file("generic.csv", "t_ms,in,out,prio,who\n0,10,5,2,1\n250,20,6,0,3\n1000,30,7,-1,0\n");
  const auto rs = read_all(
      "workload: {type: csv, path: " + path +
      ", arrival_unit: ms, columns: {arrival: t_ms, prompt_tokens: in, output_tokens: out, "
      "priority: prio, tenant: who}}");
  ASSERT_EQ(rs.size(), 3u);
  EXPECT_EQ(rs[1].arrival_ns, 250'000'000);
  EXPECT_EQ(rs[2].arrival_ns, 1'000'000'000);
  EXPECT_EQ(rs[1].prompt_len, 20);
  EXPECT_EQ(rs[0].priority, 2);
  EXPECT_EQ(rs[2].priority, -1);
  EXPECT_EQ(rs[1].tenant, 3u);
  // A column named twice in the header: which one `in` maps to would be a guess.
  const std::string twice = write_file("twice.csv", "t_ms,in,out,in\n0,10,5,12\n");
  EXPECT_THAT(
      error_of([&] {
        read_all("workload: {type: csv, path: " + twice +
                 ", columns: {arrival: t_ms, prompt_tokens: in, output_tokens: out}}");
      }),
      HasSubstr(twice + ":1: expected each column named once in the header, got 'in twice'"));
}

TEST(TraceReaders, GenericJsonlWithColumnMapping) {
  const std::string path = write_file(
      "generic.jsonl",
      "{\"at\": 1.5, \"p\": 10, \"o\": 3, \"tenant\": 4}\n{\"at\": 2, \"p\": 11, \"o\": 4, "
      "\"tenant\": 5}\n");
  const auto rs = read_all("workload: {type: jsonl, path: " + path +
                           ", columns: {arrival: at, prompt_tokens: p, output_tokens: o, tenant: "
                           "tenant}}");
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[1].arrival_ns, 500'000'000);
  EXPECT_EQ(rs[1].prompt_len, 11);
  EXPECT_EQ(rs[1].tenant, 5u);
  const std::string bad = write_file("generic_bad.jsonl", "{\"at\": 1, \"p\": 10}\n");
  EXPECT_THAT(error_of([&] {
                read_all("workload: {type: jsonl, path: " + bad +
                         ", columns: {arrival: at, prompt_tokens: p, output_tokens: o}}");
              }),
              HasSubstr(bad + ":1: expected a field \"o\""));
}

// --- Transforms ---------------------------------------------------------------------------

std::string vidur_file() {
  std::string text = "arrived_at,num_prefill_tokens,num_decode_tokens\n";
  for (int i = 0; i < 1000; ++i) {
    text += std::to_string(i) + "," + std::to_string(100 + i) + "," + std::to_string(10 + i) + "\n";
  }
  return write_file("vidur1000.csv", text);
}

TEST(TraceTransforms, RateScaleHalvesArrivalTimes) {
  const std::string path = vidur_file();
  const auto base = read_all("workload: {type: vidur, path: " + path + "}");
  const auto fast =
      read_all("workload: {type: vidur, path: " + path + ", transforms: {rate_scale: 2}}");
  ASSERT_EQ(base.size(), fast.size());
  for (std::size_t i = 0; i < base.size(); ++i)
    EXPECT_EQ(fast[i].arrival_ns, base[i].arrival_ns / 2);
}

TEST(TraceTransforms, WindowKeepsAndRebasesAndRenumbers) {
  const std::string path = vidur_file();
  const auto rs = read_all("workload: {type: vidur, path: " + path +
                           ", transforms: {window_s: [100, 200], shift_s: 5}}");
  ASSERT_EQ(rs.size(), 100u);
  EXPECT_EQ(rs[0].arrival_ns, 5'000'000'000);
  EXPECT_EQ(rs[0].prompt_len, 200);
  EXPECT_EQ(rs[99].arrival_ns, 104'000'000'000);
  for (std::size_t i = 0; i < rs.size(); ++i) EXPECT_EQ(rs[i].id, i);
}

TEST(TraceTransforms, SampleIsDeterministicFractionWithRenumberedIds) {
  const std::string path = vidur_file();
  const std::string yaml = "workload: {type: vidur, path: " + path + ", transforms: {sample: 0.3}}";
  const auto a = read_all(yaml, 11);
  const auto b = read_all(yaml, 11);
  const auto c = read_all(yaml, 12);
  EXPECT_GT(a.size(), 250u);
  EXPECT_LT(a.size(), 350u);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, i);
    EXPECT_EQ(a[i].arrival_ns, b[i].arrival_ns);
  }
  bool differs = a.size() != c.size();
  for (std::size_t i = 0; !differs && i < a.size(); ++i)
    differs = a[i].arrival_ns != c[i].arrival_ns;
  EXPECT_TRUE(differs);
}

TEST(TraceTransforms, CapsKeepSharedPrefixes) {
  const auto rs = read_all("workload: {type: mooncake, path: " + kConversation +
                           ", max_requests: 20, transforms: {max_prompt_tokens: 700, "
                           "max_output_tokens: 100}}");
  ASSERT_EQ(rs.size(), 20u);
  for (const RequestSpec& r : rs) {
    EXPECT_LE(r.prompt_len, 700);
    EXPECT_LE(r.max_output_tokens, 100);
    std::int64_t sum = 0;
    for (const PromptSegment& s : r.prompt) sum += s.length;
    EXPECT_EQ(sum, r.prompt_len);
  }
  EXPECT_EQ(rs[0].prompt[0], rs[1].prompt[0]);
  EXPECT_EQ(rs[0].prompt[1].length, 188u);
}

TEST(TraceTransforms, AppliesToSyntheticAndRejectsBadKeys) {
  const auto rs = read_all(
      "workload: {type: synthetic, num_requests: 50, arrival: {process: fixed, rate: 1}, "
      "prompt_len: {dist: fixed, value: 100}, output_len: {dist: fixed, value: 10}, "
      "transforms: {max_prompt_tokens: 60}}");
  ASSERT_EQ(rs.size(), 50u);
  EXPECT_EQ(rs[3].prompt_len, 60);
  EXPECT_THAT(error_of([&] {
                read_all("workload: {type: vidur, path: " + vidur_file() +
                         ", transforms: {rate_scael: 2}}");
              }),
              HasSubstr("rate_scael"));
  EXPECT_THAT(error_of([&] {
                read_all("workload: {type: vidur, path: " + vidur_file() +
                         ", transforms: {window_s: [5, 1]}}");
              }),
              HasSubstr("end > start"));
  // A window narrower than a nanosecond is refused at once (it failed later: "no requests").
  EXPECT_THAT(error_of([&] {
                read_all("workload: {type: vidur, path: " + vidur_file() +
                         ", transforms: {window_s: [0, 1e-12]}}");
              }),
              HasSubstr("at least 1 ns apart"));
  // Arrivals pushed past 2^62 ns by the transforms are errors naming the section, not wrapped
  // (out of order) times.
  const std::string synthetic =
      "workload: {type: synthetic, num_requests: 5, start_s: 1e9, arrival: {process: fixed, "
      "rate: 1}, prompt_len: {dist: fixed, value: 100}, output_len: {dist: fixed, value: 10}, ";
  EXPECT_THAT(error_of([&] { read_all(synthetic + "transforms: {shift_s: 1e12}}"); }),
              HasSubstr("workload.transforms': request 0 would arrive more than 2^62 ns"));
  EXPECT_THAT(error_of([&] { read_all(synthetic + "transforms: {rate_scale: 1e-300}}"); }),
              HasSubstr("workload.transforms': request 0 would arrive"));
  EXPECT_THAT(error_of([&] {
                read_all(
                    "workload: {type: synthetic, duration_s: 1e-10, arrival: {process: fixed, "
                    "rate: 1}, prompt_len: {dist: fixed, value: 100}, output_len: {dist: fixed, "
                    "value: 10}}");
              }),
              HasSubstr("a number of seconds in [1e-9, 1e9]"));
}

// --- ServeLab format and the trace command ------------------------------------------------

void expect_same(const std::vector<RequestSpec>& a, const std::vector<RequestSpec>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, b[i].id);
    EXPECT_EQ(a[i].arrival_ns, b[i].arrival_ns);
    EXPECT_EQ(a[i].prompt, b[i].prompt);
    EXPECT_EQ(a[i].prompt_len, b[i].prompt_len);
    EXPECT_EQ(a[i].max_output_tokens, b[i].max_output_tokens);
    EXPECT_EQ(a[i].priority, b[i].priority);
    EXPECT_EQ(a[i].tenant, b[i].tenant);
  }
}

TEST(TraceConvert, MooncakeRoundTripIsIdentical) {
  const std::string out = write_file("conv_servelab.csv", "");
  std::filesystem::remove(out);  // convert refuses an existing output without --force
  EXPECT_EQ(trace_command({"convert", kConversation, out}), 0);
  const auto original = read_all("workload: {type: mooncake, path: " + kConversation + "}", 0);
  const auto back = read_all("workload: {type: servelab, path: " + out + "}", 0);
  expect_same(original, back);
  EXPECT_EQ(detect_trace_format(out), "servelab");
}

TEST(TraceConvert, GenericRoundTripKeepsPriorityAndTenant) {
  const std::string in =
      write_file("generic_rt.csv", "t,in,out,prio,who\n0.5,10,5,2,1\n0.75,20,6,0,3\n1,30,7,-1,0\n");
  const std::string yaml = "workload: {type: csv, path: " + in +
                           ", columns: {arrival: t, prompt_tokens: in, output_tokens: out, "
                           "priority: prio, tenant: who}}";
  auto w = from_yaml(yaml, 0);
  const std::string out = write_file("generic_rt_out.csv", "");
  EXPECT_EQ(write_servelab_trace(*w, out), 3);
  expect_same(read_all(yaml, 0), read_all("workload: {type: servelab, path: " + out + "}", 0));
}

TEST(TraceConvert, DetectsFormatsAndRejectsBadArguments) {
  EXPECT_EQ(detect_trace_format(kAzureConv), "azure");
  EXPECT_EQ(detect_trace_format(kConversation), "mooncake");
  EXPECT_EQ(detect_trace_format(write_file("b.csv", kBurst)), "burstgpt");
  EXPECT_EQ(detect_trace_format(vidur_file()), "vidur");
  EXPECT_THAT(error_of([] { trace_command({"stats"}); }), HasSubstr("FILE is required"));
  EXPECT_THAT(error_of([] { trace_command({"frobnicate"}); }), HasSubstr("usage"));
  EXPECT_THAT(error_of([] {
                trace_command({"stats", kAzureConv, "--format", "xml"});
              }),
              HasSubstr("--format: expected auto, azure, mooncake, burstgpt, vidur or servelab, "
                        "got 'xml'"));
  EXPECT_THAT(error_of([] { detect_trace_format(write_file("what.csv", "a,b\n1,2\n")); }),
              HasSubstr("--format"));
  // "-" is no file (it wrote one named "-"), and an output's folder must exist before the work.
  EXPECT_THAT(error_of([] {
                trace_command({"convert", kAzureConv, "-"});
              }),
              HasSubstr("'-': this output is a file, not standard output"));
  EXPECT_THAT(error_of([] {
                trace_command({"convert", kAzureConv, "no/such/dir/x.csv"});
              }),
              HasSubstr("no/such/dir/x.csv: its folder no/such/dir does not exist"));
  // A pipe read once for its header would reach the reader without it.
  EXPECT_THAT(error_of([] { detect_trace_format("/dev/null"); }),
              HasSubstr("/dev/null: not a regular file (a pipe or device is read only once), so "
                        "its format cannot be detected; name it with --format"));
  EXPECT_EQ(trace_command({"stats", kSynthetic}), 0);
}

TEST(TraceConvert, ServeLabFormatErrors) {
  const std::string path =
      write_file("sl_bad.csv",
                 "arrival_ns,prompt_tokens,output_tokens,priority,tenant,segments\n"
                 "0,10,1,0,0,5:0:10\n"
                 "5,10,1,0,0,5:0:9\n");
  EXPECT_THAT(error_of([&] { read_all("workload: {type: servelab, path: " + path + "}"); }),
              HasSubstr(path + ":3: expected segments totalling prompt_tokens (10)"));
  // A segment past its stream's 2^32 positions (offsets wrapped), a fractional arrival (rounded
  // silently): errors naming the line.
  const std::string over =
      write_file("sl_over.csv",
                 "arrival_ns,prompt_tokens,output_tokens,priority,tenant,segments\n"
                 "0,10,1,0,0,1:4294967295:10\n");
  EXPECT_THAT(error_of([&] { read_all("workload: {type: servelab, path: " + over + "}"); }),
              HasSubstr(over + ":2: expected a segment content_id:offset:length"));
  const std::string frac =
      write_file("sl_frac.csv",
                 "arrival_ns,prompt_tokens,output_tokens,priority,tenant,segments\n"
                 "1.5,10,1,0,0,1:0:10\n");
  EXPECT_THAT(error_of([&] { read_all("workload: {type: servelab, path: " + frac + "}"); }),
              HasSubstr(frac + ":2: expected an integer arrival_ns"));
  // A header with spaces after its commas (detected as ServeLab's) is read.
  const std::string spaced =
      write_file("sl_spaced.csv",
                 "arrival_ns, prompt_tokens, output_tokens, priority, tenant, segments\n"
                 "0,10,1,0,0,1:0:10\n");
  EXPECT_EQ(read_all("workload: {type: servelab, path: " + spaced + "}").size(), 1u);
}

}  // namespace
}  // namespace servelab
