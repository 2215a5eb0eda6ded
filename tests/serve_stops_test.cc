// `engine serve` with vLLM's per-request options, end to end over localhost: stop conditions
// (the model's EOS ids from its config, ignore_eos, min_tokens, stop_token_ids) give OpenAI
// finish_reason "stop" and vllm:request_success_total{finished_reason="stop"}; cache_salt
// isolates prefix-cache hits; POST /reset_prefix_cache drops the cached blocks.
//
// The model is the tiny one with every token id declared end-of-sequence (eos_token_id: the list
// 0..255): the first is its EOS and the others stop ids (unless ignore_eos), so any first token
// ends a request, whatever the random weights sample.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "serving/home.h"
#include "tests/serve_process.h"
#include "tests/test_util.h"

extern char** environ;

namespace servelab {
namespace {

using namespace servelab::test_util;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string EosModel() {
  std::string ids;
  for (int t = 0; t < 256; ++t) ids += (t ? ", " : "") + std::to_string(t);
  return "name: tiny-eos\nnum_layers: 2\nhidden_size: 64\nnum_heads: 4\nnum_kv_heads: 2\n"
         "head_dim: 16\nintermediate_size: 128\nvocab_size: 256\ndtype: fp32\n"
         "max_position_embeddings: 2048\neos_token_id: [" +
         ids + "]\n";
}

std::string Experiment(const fs::path& model) {
  return "name: serve-stops\nseed: 3\nmodel: " + model.string() +
         "\nhardware: H100-SXM\n"
         "serving:\n  block_size: 16\n  num_gpu_blocks: 256\n  max_num_batched_tokens: 2048\n"
         "  max_num_seqs: 16\n  max_model_len: 1024\n"
         "policies: {prefix_cache: hash, preemption: recompute}\n"
         "workload:\n  type: synthetic\n  num_requests: 1\n  arrival: {process: poisson, rate: 1}\n"
         "  prompt_len: {dist: fixed, value: 8}\n  output_len: {dist: fixed, value: 4}\n";
}

fs::path write_stops_experiment(const fs::path& dir) {
  write_file(dir / "tiny-eos.yaml", EosModel());
  write_file(dir / "serve.yaml", Experiment(dir / "tiny-eos.yaml"));
  return dir / "serve.yaml";
}

// `engine serve` on the EOS model (tests/serve_process.h), with a JSON client.
class Server : public ServeProcess {
 public:
  explicit Server(const fs::path& dir) : ServeProcess(dir, write_stops_experiment(dir), {}) {}
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port());
    c.set_read_timeout(30);
    return c;
  }
  json post(const std::string& path, const json& body, int* status = nullptr) const {
    httplib::Client c = client();
    const httplib::Result r = c.Post(path, body.dump(), "application/json");
    if (!r) return json();
    if (status != nullptr) *status = r->status;
    return json::parse(r->body);
  }
  // The value of the first sample of `name` in /metrics (-1 when absent).
  double metric(const std::string& name_and_labels) const {
    httplib::Client c = client();
    const httplib::Result r = c.Get("/metrics");
    if (!r) return -1;
    const std::string text = "\n" + r->body;
    const std::size_t p = text.find("\n" + name_and_labels + " ");
    if (p == std::string::npos) return -1;
    const std::size_t v = p + 1 + name_and_labels.size() + 1;
    return std::stod(text.substr(v, text.find('\n', v) - v));
  }
  // Waits until `name_and_labels` reaches `value` (the loop publishes counters after each step).
  double wait_metric(const std::string& name_and_labels, double value) const {
    double got = -1;
    for (int i = 0; i < 250 && (got = metric(name_and_labels)) < value; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return got;
  }
};

const std::string kLabels = "{model_name=\"tiny-eos\"}";

// The `data:` payloads of a streamed response, [DONE] left out.
std::vector<json> Chunks(const std::string& body) {
  std::vector<json> chunks;
  for (std::size_t p = 0; (p = body.find("data: ", p)) != std::string::npos;) {
    const std::size_t e = body.find("\n\n", p);
    const std::string payload = body.substr(p + 6, e - p - 6);
    if (payload != "[DONE]") chunks.push_back(json::parse(payload));
    p = e;
  }
  return chunks;
}

json Prompt(int len, int first = 1) {
  json p = json::array();
  for (int t = 0; t < len; ++t) p.push_back((first + t) % 256);
  return p;
}

// As vLLM's detokenizer: the token that ended a request at EOS or a stop id is counted and has
// its logprobs entry, but its text is not shown (include_stop_str_in_output shows it); a stop id
// is the choice's stop_reason (an integer), the EOS none. Streamed, the finish rides on that
// token's chunk. (logit_bias forces the token: 66 "B" is a stop id here, 0 the EOS.)
TEST(ServeStops, TheStopTokensTextIsHiddenAndAStopIdIsTheStopReason) {
  const fs::path dir = temp_dir("serve_stop_token");
  Server s(dir);
  const json forced = {
      {"prompt", Prompt(8)}, {"max_tokens", 8}, {"logprobs", 0}, {"logit_bias", {{"66", 100}}}};
  json r = s.post("/v1/completions", forced);
  ASSERT_TRUE(r.contains("choices")) << r.dump();
  const json& c = r["choices"][0];
  EXPECT_EQ(c["finish_reason"], "stop");
  EXPECT_EQ(c["text"], "");
  EXPECT_EQ(c["stop_reason"], 66);
  EXPECT_EQ(c["logprobs"]["tokens"], json::array({"B"}));
  EXPECT_EQ(r["usage"]["completion_tokens"], 1);
  json shown = forced;
  shown["include_stop_str_in_output"] = true;
  r = s.post("/v1/completions", shown);
  EXPECT_EQ(r["choices"][0]["text"], "B");
  EXPECT_EQ(r["choices"][0]["stop_reason"], 66);
  json eos = forced;
  eos["logit_bias"] = {{"0", 100}};
  r = s.post("/v1/completions", eos);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["choices"][0]["text"], "");
  EXPECT_TRUE(!r["choices"][0].contains("stop_reason") || r["choices"][0]["stop_reason"].is_null())
      << r.dump();
  // Chat, streamed: no content, and the finish with its stop_reason on the one token's chunk.
  httplib::Client client = s.client();
  const json chat = {{"messages", {{{"role", "user"}, {"content", "hello"}}}},
                     {"max_tokens", 5},
                     {"logit_bias", {{"66", 100}}},
                     {"stream", true}};
  const httplib::Result sr = client.Post("/v1/chat/completions", chat.dump(), "application/json");
  ASSERT_TRUE(sr);
  ASSERT_EQ(sr->status, 200) << sr->body;
  const std::vector<json> chunks = Chunks(sr->body);
  ASSERT_EQ(chunks.size(), 1u) << sr->body;
  const json& only = chunks[0]["choices"][0];
  EXPECT_EQ(only["delta"]["content"], "");
  EXPECT_EQ(only["finish_reason"], "stop");
  EXPECT_EQ(only["stop_reason"], 66);
  fs::remove_all(dir);
}

TEST(ServeStops, EosIgnoreEosMinTokensAndTheirMetrics) {
  const fs::path dir = temp_dir("serve_stops");
  Server s(dir);
  // Any first token is an EOS id: "stop" after one token.
  json r = s.post("/v1/completions", {{"prompt", Prompt(8)}, {"max_tokens", 8}});
  ASSERT_TRUE(r.contains("choices")) << r.dump();
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["usage"]["completion_tokens"], 1);
  // ignore_eos: up to max_tokens.
  r = s.post("/v1/completions", {{"prompt", Prompt(8)}, {"max_tokens", 8}, {"ignore_eos", true}});
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["completion_tokens"], 8);
  // min_tokens: EOS and stop ids cannot end it (nor be sampled) before 3 tokens.
  r = s.post("/v1/completions", {{"prompt", Prompt(8)}, {"max_tokens", 8}, {"min_tokens", 3}});
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["usage"]["completion_tokens"], 3);
  // Chat, streaming: the last chunk carries "stop".
  httplib::Client c = s.client();
  const json chat = {{"messages", {{{"role", "user"}, {"content", "hello"}}}},
                     {"max_tokens", 5},
                     {"min_tokens", 2},
                     {"stream", true}};
  const httplib::Result sr = c.Post("/v1/chat/completions", chat.dump(), "application/json");
  ASSERT_TRUE(sr);
  ASSERT_EQ(sr->status, 200) << sr->body;
  const std::vector<json> chunks = Chunks(sr->body);
  // Two tokens; the reason rides on the second, or on an empty chunk after it when the finish
  // reached the handler after the token.
  ASSERT_GE(chunks.size(), 2u) << sr->body;
  ASSERT_LE(chunks.size(), 3u) << sr->body;
  for (std::size_t k = 0; k + 1 < chunks.size(); ++k) {
    EXPECT_TRUE(chunks[k]["choices"][0]["finish_reason"].is_null()) << sr->body;
  }
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "stop");
  // vllm:request_success_total by reason.
  const std::string series = "vllm:request_success_total{model_name=\"tiny-eos\",finished_reason=";
  EXPECT_EQ(s.wait_metric(series + "\"stop\"}", 3), 3);
  EXPECT_EQ(s.metric(series + "\"length\"}"), 1);
  // Bad values: 400 naming the field.
  int status = 0;
  r = s.post("/v1/completions", {{"prompt", Prompt(4)}, {"stop_token_ids", {256}}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["param"], "stop_token_ids");
  r = s.post("/v1/completions", {{"prompt", Prompt(4)}, {"max_tokens", 2}, {"min_tokens", 3}},
             &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["param"], "min_tokens");
  r = s.post("/v1/completions", {{"prompt", Prompt(4)}, {"min_tokens", -1}}, &status);
  EXPECT_EQ(status, 400);
  r = s.post("/v1/completions", {{"prompt", Prompt(4)}, {"cache_salt", ""}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["param"], "cache_salt");
  // The experiment's queue is fcfs: a nonzero priority is refused (vLLM refuses one without
  // priority scheduling); 0 and a `user` are fine.
  r = s.post("/v1/completions", {{"prompt", Prompt(4)}, {"priority", 1}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["param"], "priority");
  r = s.post("/v1/completions", {{"prompt", Prompt(4)}, {"priority", 0}, {"user", "alice"}},
             &status);
  EXPECT_EQ(status, 200) << r.dump();
  // A malformed body quoting a byte that is not UTF-8 is a 400 with a JSON error (it was a 500:
  // the error's JSON could not be written).
  const httplib::Result bad =
      c.Post("/v1/completions", std::string("{\"prompt\": \"hi\"}\xf2, 1}"), "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
  EXPECT_EQ(json::parse(bad->body)["error"]["code"], "invalid_json") << bad->body;
}

// Served with the priority queue order, requests carry their priority to the scheduler.
TEST(ServeStops, PriorityIsAcceptedWithPriorityScheduling) {
  const fs::path dir = temp_dir("serve_priority");
  ServeProcess s(dir, write_stops_experiment(dir), {"--set", "policies.queue=priority"});
  httplib::Client c("127.0.0.1", s.port());
  c.set_read_timeout(30);
  for (int priority : {5, -3, 0}) {
    const json body = {{"prompt", Prompt(4)}, {"priority", priority}, {"user", "bob"}};
    const httplib::Result r = c.Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(r) << priority;
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_TRUE(json::parse(r->body).contains("choices")) << r->body;
  }
}

TEST(ServeStops, CacheSaltIsolatesHitsAndResetPrefixCacheDropsThem) {
  const fs::path dir = temp_dir("serve_salt");
  Server s(dir);
  const std::string queries = "vllm:prefix_cache_queries_total" + kLabels;
  const std::string hits = "vllm:prefix_cache_hits_total" + kLabels;
  double queried = 0;
  // Sends the 48-token prompt with `salt` and returns the hit tokens it added.
  const auto send = [&](const std::string& salt) {
    const double before = s.metric(hits);
    json body = {{"prompt", Prompt(48, 7)}, {"max_tokens", 1}};
    if (!salt.empty()) body["cache_salt"] = salt;
    const json r = s.post("/v1/completions", body);
    EXPECT_TRUE(r.contains("choices")) << r.dump();
    queried += 48;
    EXPECT_EQ(s.wait_metric(queries, queried), queried);
    return s.metric(hits) - before;
  };
  EXPECT_EQ(send("tenant-a"), 0);
  EXPECT_EQ(send("tenant-b"), 0);   // another salt: no hit
  EXPECT_EQ(send(""), 0);           // no salt: no hit either
  EXPECT_EQ(send("tenant-a"), 32);  // the same salt: two full blocks (one token left to compute)
  EXPECT_EQ(send(""), 32);
  // The windowed hit rate (the last 1000 requests: all of them so far) and the cumulative one.
  const std::string recent = "servelab:prefix_cache_hit_rate_recent" + kLabels;
  EXPECT_NEAR(s.metric(recent), 64.0 / 240.0, 1e-4);
  // POST /reset_prefix_cache: nothing in flight, so it succeeds; then nothing hits.
  int status = 0;
  const json r = s.post("/reset_prefix_cache", json::object(), &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(r["success"], true);
  EXPECT_EQ(send("tenant-a"), 0);
  EXPECT_EQ(send("tenant-a"), 32);
  // The reset emptied the window: only the two requests since count; the counters go on.
  EXPECT_NEAR(s.metric(recent), 32.0 / 96.0, 1e-4);
  EXPECT_EQ(s.metric(hits), 96);
}

// The byte offsets of the UTF-8 characters of `text` (and text.size() last).
std::vector<std::size_t> CharStarts(const std::string& text) {
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) at.push_back(i);
  }
  at.push_back(text.size());
  return at;
}

// Stop strings (vLLM's `stop`, engine/stop_strings.h): the output ends where the detokenized
// text first contains one (here two characters, so two byte tokens at least), cut before it (or
// after it with include_stop_str_in_output), finish_reason "stop" and stop_reason the string;
// streaming sends no text past the cut. ignore_eos lets the EOS model generate.
TEST(ServeStops, StopStringsEndTheTextAndTheStream) {
  const fs::path dir = temp_dir("serve_stop_strings");
  Server s(dir);
  const json base = {{"prompt", Prompt(8, 30)}, {"max_tokens", 16}, {"ignore_eos", true}};
  json r = s.post("/v1/completions", base);
  ASSERT_TRUE(r.contains("choices")) << r.dump();
  const std::string full = r["choices"][0]["text"];
  EXPECT_FALSE(r["choices"][0].contains("stop_reason"));  // only when a stop string matched
  const std::vector<std::size_t> at = CharStarts(full);
  ASSERT_GE(at.size(), 4u) << full;  // at least 3 characters
  // The first two-character substring (not at the very end) found first where it is: the text
  // before it is what a stop on it leaves.
  std::size_t c = 0;
  for (std::size_t k = 1; k + 3 < at.size(); ++k) {
    if (full.find(full.substr(at[k], at[k + 2] - at[k])) == at[k]) {
      c = k;
      break;
    }
  }
  const std::string stop = full.substr(at[c], at[c + 2] - at[c]);
  SCOPED_TRACE("output '" + full + "', stop '" + stop + "'");
  json body = base;
  body["stop"] = stop;
  r = s.post("/v1/completions", body);
  EXPECT_EQ(r["choices"][0]["text"], full.substr(0, at[c]));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["choices"][0]["stop_reason"], stop);
  const int stopped_tokens = r["usage"]["completion_tokens"];
  EXPECT_GE(stopped_tokens, 2);
  EXPECT_LT(stopped_tokens, 16);
  // include_stop_str_in_output; a list of stops, one never met.
  body["stop"] = {"never met: \x01\x02\x03", stop};
  body["include_stop_str_in_output"] = true;
  r = s.post("/v1/completions", body);
  EXPECT_EQ(r["choices"][0]["text"], full.substr(0, at[c + 2]));
  EXPECT_EQ(r["choices"][0]["stop_reason"], stop);
  EXPECT_EQ(r["usage"]["completion_tokens"], stopped_tokens);
  // Streaming: the deltas add up to the cut text, the last carries the reasons.
  body.erase("include_stop_str_in_output");
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  httplib::Client client = s.client();
  const httplib::Result sr = client.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(sr);
  ASSERT_EQ(sr->status, 200) << sr->body;
  const std::vector<json> chunks = Chunks(sr->body);
  ASSERT_GE(chunks.size(), 2u) << sr->body;
  std::string streamed;
  for (std::size_t k = 0; k + 1 < chunks.size(); ++k) {
    const json& choice = chunks[k]["choices"][0];
    streamed += choice["text"].get<std::string>();
    EXPECT_EQ(choice["finish_reason"].is_null(), k + 2 < chunks.size()) << sr->body;
  }
  EXPECT_EQ(streamed, full.substr(0, at[c]));
  EXPECT_EQ(chunks[chunks.size() - 2]["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(chunks[chunks.size() - 2]["choices"][0]["stop_reason"], stop);
  EXPECT_EQ(chunks.back()["usage"]["completion_tokens"], stopped_tokens);
  // The requests a stop string ended count as finished with "stop", not aborted.
  const std::string series = "vllm:request_success_total{model_name=\"tiny-eos\",finished_reason=";
  EXPECT_EQ(s.wait_metric(series + "\"stop\"}", 3), 3);
  EXPECT_EQ(s.metric(series + "\"abort\"}"), 0);
  // n = 2, greedy: both samples meet a stop string made of their last two printable ASCII
  // characters (near max_tokens, where the loop may finish them before the handler sees the
  // string); the request counts as "stop", as with n = 1 (it was counted "length").
  json greedy = base;
  greedy["temperature"] = 0;
  r = s.post("/v1/completions", greedy);
  const std::string g = r["choices"][0]["text"];
  const auto printable = [](char ch) { return ch >= 0x20 && ch < 0x7f; };
  std::size_t k = g.size() < 2 ? 0 : g.size() - 2;
  while (k > 0 && !(printable(g[k]) && printable(g[k + 1]) && g.find(g.substr(k, 2)) == k)) {
    --k;
  }
  ASSERT_TRUE(printable(g[k]) && printable(g[k + 1]) && g.find(g.substr(k, 2)) == k) << g;
  // The first request and this one ran to max_tokens.
  EXPECT_EQ(s.wait_metric(series + "\"length\"}", 2), 2);
  json two = greedy;
  two["n"] = 2;
  // top_k 1 at temperature 1: the greedy text in both choices (n > 1 greedy is vLLM's 400).
  two["temperature"] = 1.0;
  two["top_k"] = 1;
  two["stop"] = g.substr(k, 2);
  r = s.post("/v1/completions", two);
  ASSERT_EQ(r["choices"].size(), 2u) << r.dump();
  for (const json& choice : r["choices"]) EXPECT_EQ(choice["finish_reason"], "stop") << r.dump();
  EXPECT_EQ(s.wait_metric(series + "\"stop\"}", 4), 4);
  EXPECT_EQ(s.metric(series + "\"length\"}"), 2);
  // Bad values: 400 naming the field.
  int status = 0;
  for (const json& bad : {json(3), json::array({""}), json::array({"a", 1})}) {
    r = s.post("/v1/completions", {{"prompt", Prompt(4)}, {"stop", bad}}, &status);
    EXPECT_EQ(status, 400) << bad.dump();
    EXPECT_EQ(r["error"]["param"], "stop") << bad.dump();
  }
  r = s.post("/v1/completions", {{"prompt", Prompt(4)}, {"include_stop_str_in_output", "yes"}},
             &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["param"], "include_stop_str_in_output");
}

// With speculative decoding configured, /metrics carries vLLM's spec-decode counters; without
// it, none of them.
TEST(ServeStops, SpecDecodeCountersInMetrics) {
  const fs::path dir = temp_dir("serve_spec_metrics");
  write_file(dir / "tiny-eos.yaml", EosModel());
  std::string experiment = Experiment(dir / "tiny-eos.yaml");
  const std::string serving = "serving:\n";
  experiment.insert(
      experiment.find(serving) + serving.size(),
      "  speculative_config: {method: ngram, num_speculative_tokens: 3, prompt_lookup_min: 1,\n"
      "    prompt_lookup_max: 4}\n");
  write_file(dir / "spec.yaml", experiment);
  ServeProcess p(dir, dir / "spec.yaml", {});
  httplib::Client c("127.0.0.1", p.port());
  c.set_read_timeout(30);
  // A repetitive prompt: the n-gram proposer finds drafts.
  json prompt = json::array();
  for (int i = 0; i < 8; ++i) {
    for (int t : {65, 66, 67}) prompt.push_back(t);
  }
  const json body = {{"prompt", prompt}, {"max_tokens", 24}, {"ignore_eos", true}};
  const httplib::Result r = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const auto metric = [&](const std::string& name) -> double {
    const httplib::Result m = c.Get("/metrics");
    if (!m) return -1;
    const std::string text = "\n" + m->body;
    const std::size_t at = text.find("\n" + name + " ");
    if (at == std::string::npos) return -1;
    const std::size_t v = at + 1 + name.size() + 1;
    return std::stod(text.substr(v, text.find('\n', v) - v));
  };
  double drafts = -1;
  for (int i = 0; i < 250 && (drafts = metric("vllm:spec_decode_num_drafts_total" + kLabels)) <= 0;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GT(drafts, 0);
  const double draft_tokens = metric("vllm:spec_decode_num_draft_tokens_total" + kLabels);
  const double accepted = metric("vllm:spec_decode_num_accepted_tokens_total" + kLabels);
  EXPECT_GE(draft_tokens, drafts);
  EXPECT_GE(accepted, 0);
  EXPECT_LE(accepted, draft_tokens);
  double per_pos = 0;
  for (int i = 0; i < 3; ++i) {
    const double v = metric(
        "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"tiny-eos\",position=\"" +
        std::to_string(i) + "\"}");
    EXPECT_GE(v, 0) << i;
    per_pos += v;
  }
  EXPECT_EQ(per_pos, accepted);
  // The server without speculation shows none.
  const fs::path plain_dir = dir / "plain";
  fs::create_directories(plain_dir);
  Server plain(plain_dir);
  EXPECT_EQ(plain.metric("vllm:spec_decode_num_drafts_total" + kLabels), -1);
}

// `engine run` with a workload's sampling keys: the model's EOS ids (not the simulator's EOS
// point) end requests, min_tokens first; a model without EOS runs to max_tokens.
TEST(EngineRunStops, TheModelsEosEndsRequestsAfterMinTokens) {
  const fs::path dir = temp_dir("engine_run_stops");
  write_file(dir / "tiny-eos.yaml", EosModel());
  const std::string workload =
      "workload:\n  type: synthetic\n  num_requests: 6\n  arrival: {process: poisson, rate: 100}\n"
      "  prompt_len: {dist: fixed, value: 20}\n  output_len: {dist: fixed, value: 10}\n"
      "  sampling: {max_tokens: 12, min_tokens: 3}\n";
  const auto run = [&](const std::string& name, const std::string& model) {
    write_file(dir / (name + ".yaml"), "name: " + name + "\nseed: 3\nmodel: " + model +
                                           "\nhardware: H100-SXM\nserving: {block_size: 16, "
                                           "num_gpu_blocks: 128, max_model_len: 512}\n" +
                                           workload);
    const std::string cmd = servelab_program("engine") + " run " +
                            (dir / (name + ".yaml")).string() + " --out " + (dir / name).string() +
                            " > /dev/null 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << name;
    std::map<std::string, int> out;
    for (const auto& r : read_csv(dir / name / "requests.csv")) {
      ++out[r.at("output_tokens") + " " + r.at("reason")];
    }
    return out;
  };
  EXPECT_EQ(run("eos", (dir / "tiny-eos.yaml").string()),
            (std::map<std::string, int>{{"3 stop", 6}}));
  EXPECT_EQ(run("plain", "tiny"), (std::map<std::string, int>{{"12 length", 6}}));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
