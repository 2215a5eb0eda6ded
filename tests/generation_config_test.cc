// engine serve's --generation-config and --override-generation-config (engine/generation_config.h):
// where the defaults come from, what a request that leaves fields out samples with, the cap on
// max_tokens, the generation config's extra EOS ids, and bad input as exit 2 naming the file
// and the key.
#include "engine/generation_config.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config_error.h"
#include "engine/openai_api.h"
#include "serving/home.h"
#include "serving/tokenizer.h"
#include "tests/serve_process.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using json = nlohmann::json;
using test_util::Cli;
using test_util::read_file;
using test_util::run_engine_cli;
using test_util::ServeProcess;
using test_util::temp_dir;
using test_util::write_file;
namespace fs = std::filesystem;

// write_file, making the folders above it first.
void write_in(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  write_file(p, text);
}

// The message of the ConfigError `f` throws ("" when it throws none).
template <typename F>
std::string config_error(F f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(GenerationConfig, SourcesAndWhatTheyRead) {
  const fs::path dir = temp_dir("generation_config_sources");
  // servelab: greedy with nothing else; vllm: temperature 1.
  GenerationDefaults d = load_generation_defaults("servelab", "", "", 256);
  EXPECT_TRUE(d.greedy());
  d = load_generation_defaults("vllm", "", "", 256);
  EXPECT_FALSE(d.greedy());
  EXPECT_EQ(d.sampling.temperature, 1.0);
  EXPECT_EQ(d.describe(), "temperature 1");
  // A checkpoint folder's file: vLLM's six keys and eos_token_id; do_sample, max_length and the
  // others ignored; a null is absent.
  write_in(dir / "ckpt" / "generation_config.json",
           R"({"bos_token_id": 1, "do_sample": true, "eos_token_id": [7, 9], "max_length": 4096,
                 "temperature": 0.6, "top_p": 0.9, "top_k": -1, "min_p": null,
                 "repetition_penalty": 1.1, "max_new_tokens": 64, "transformers_version": "4"})");
  write_in(dir / "ckpt" / "model.safetensors", "");
  for (const std::string& weights :
       {(dir / "ckpt").string(), (dir / "ckpt" / "model.safetensors").string()}) {
    d = load_generation_defaults("auto", weights, "", 256);
    EXPECT_EQ(d.source, (dir / "ckpt" / "generation_config.json").string());
    EXPECT_EQ(d.sampling.temperature, 0.6);
    EXPECT_EQ(d.sampling.top_p, 0.9);
    EXPECT_EQ(d.sampling.top_k, 0);
    EXPECT_EQ(d.sampling.min_p, 0.0);
    EXPECT_EQ(d.sampling.repetition_penalty, 1.1);
    EXPECT_EQ(d.max_new_tokens, 64);  // under auto a default, not a cap (vLLM's get_max_tokens)
    EXPECT_FALSE(d.max_tokens_cap);
    EXPECT_EQ(d.eos_token_ids, (std::vector<std::int32_t>{7, 9}));
  }
  EXPECT_EQ(load_generation_defaults("auto", "", "", 256).source,  // no weights: vLLM's
            "vLLM's defaults (no generation_config.json beside --weights)");
  EXPECT_EQ(load_generation_defaults("auto", (dir / "none").string(), "", 256).sampling.temperature,
            1.0);
  // A folder or a file given directly; servelab and vllm never read one.
  EXPECT_EQ(load_generation_defaults((dir / "ckpt").string(), "", "", 256).sampling.top_p, 0.9);
  d = load_generation_defaults((dir / "ckpt" / "generation_config.json").string(), "", "", 256);
  EXPECT_EQ(d.max_new_tokens, 64);
  EXPECT_EQ(d.max_tokens_cap, 64);  // a path's max_new_tokens caps every request
  EXPECT_TRUE(
      load_generation_defaults("vllm", (dir / "ckpt").string(), "", 256).eos_token_ids.empty());
  // The override applies last, on any source.
  d = load_generation_defaults("auto", (dir / "ckpt").string(),
                               R"({"temperature": 0, "top_k": 20, "max_new_tokens": 8})", 256);
  EXPECT_EQ(d.sampling.temperature, 0.0);
  EXPECT_EQ(d.sampling.top_k, 20);
  EXPECT_EQ(d.sampling.top_p, 0.9);
  EXPECT_EQ(d.max_new_tokens, 8);
  EXPECT_EQ(d.max_tokens_cap, 8);  // the override's caps, on any source
  EXPECT_FALSE(d.greedy());        // its repetition penalty still adjusts the logits
  EXPECT_EQ(d.describe(),
            "temperature 0, top_p 0.9, top_k 20, repetition_penalty 1.1, "
            "max_new_tokens 8, max_tokens at most 8");
  d = load_generation_defaults("servelab", "", R"({"repetition_penalty": 1.3})", 256);
  EXPECT_EQ(d.sampling.temperature, 0.0);
  EXPECT_EQ(d.sampling.repetition_penalty, 1.3);
  fs::remove_all(dir);
}

TEST(GenerationConfig, BadInputNamesTheFileAndTheKey) {
  const fs::path dir = temp_dir("generation_config_bad");
  const auto error_of = [&](const std::string& text) {
    write_in(dir / "generation_config.json", text);
    return config_error([&] { load_generation_defaults(dir.string(), "", "", 256); });
  };
  const std::string file = (dir / "generation_config.json").string();
  for (const auto& [text, key] : std::vector<std::pair<std::string, std::string>>{
           {R"({"temperature": -1})", "temperature"},
           {R"({"top_p": 0})", "top_p"},
           {R"({"top_k": 2.5})", "top_k"},
           {R"({"min_p": 3})", "min_p"},
           {R"({"repetition_penalty": 0})", "repetition_penalty"},
           {R"({"max_new_tokens": 0})", "max_new_tokens"},
           {R"({"eos_token_id": "x"})", "eos_token_id"},
           {R"({"eos_token_id": [1, 999]})", "eos_token_id"},
           // Integers past int32 (or int64) are out of range, not wrapped into it.
           {R"({"eos_token_id": 4294967296})", "eos_token_id"},
           {R"({"eos_token_id": 2147483648})", "eos_token_id"},
           {R"({"top_k": 18446744073709551615})", "top_k"},
       }) {
    const std::string e = error_of(text);
    EXPECT_NE(e.find(file + ": " + key + ":"), std::string::npos) << text << " -> " << e;
  }
  EXPECT_NE(error_of("{not json").find(file + ": not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(R"({"temperature": 0.1, "temperature": 2})")
                .find(file + ": key \"temperature\" appears twice"),
            std::string::npos);
  EXPECT_NE(error_of("[1]").find(file + ": expected a JSON object"), std::string::npos);
  EXPECT_NE(config_error([&] {
              load_generation_defaults((dir / "nope").string(), "", "", 256);
            }).find("does not exist"),
            std::string::npos);
  // The override is strict: an unknown key, a null or bad JSON is an error naming the option.
  for (const char* text :
       {R"({"do_sample": true})", R"({"temperature": null})", "{", R"({"top_p": 2})"}) {
    EXPECT_NE(config_error([&] {
                load_generation_defaults("vllm", "", text, 256);
              }).find("--override-generation-config: "),
              std::string::npos)
        << text;
  }
  fs::remove_all(dir);
}

// A request takes the defaults for the fields it leaves out and its own for the others; a
// server without defaults leaves a request that names nothing to the engine (greedy); the cap
// applies to an explicit max_tokens too, the default to chat requests that give none (as vLLM).
TEST(GenerationConfig, RequestsTakeTheDefaultsOfWhatTheyLeaveOut) {
  const std::unique_ptr<Tokenizer> bytes =
      load_tokenizer(home_path("data/tokenizers/bytes/tokenizer.json"));
  ApiLimits limits{"tiny", 256, 64, {}};
  const auto parse = [&](const std::string& body) {
    return parse_completion_request(body, false, limits, *bytes);
  };
  EXPECT_FALSE(parse(R"({"prompt": "a"})").sampling);
  RequestSampling defaults;
  defaults.temperature = 0.6;
  defaults.top_p = 0.9;
  defaults.top_k = 20;
  defaults.repetition_penalty = 1.1;
  limits.sampling_defaults = defaults;
  limits.max_tokens_cap = 8;
  CompletionRequest r = parse(R"({"prompt": "a"})");
  ASSERT_TRUE(r.sampling);
  EXPECT_EQ(r.sampling->temperature, 0.6);
  EXPECT_EQ(r.sampling->top_p, 0.9);
  EXPECT_EQ(r.sampling->top_k, 20);
  EXPECT_EQ(r.sampling->repetition_penalty, 1.1);
  EXPECT_EQ(r.max_tokens, 8);
  r = parse(R"({"prompt": "a", "temperature": 0, "top_k": -1, "seed": 4, "max_tokens": 30})");
  EXPECT_EQ(r.sampling->temperature, 0.0);
  EXPECT_EQ(r.sampling->top_k, 0);
  EXPECT_EQ(r.sampling->top_p, 0.9);
  EXPECT_EQ(r.sampling->seed, std::optional<std::uint64_t>(4));
  EXPECT_EQ(r.max_tokens, 8);
  EXPECT_EQ(parse(R"({"prompt": "a", "max_tokens": 3})").max_tokens, 3);
  // The default of chat requests that give none: max_new_tokens, at most the rest of the
  // context (64 here); completions keep 16.
  limits.max_tokens_cap.reset();
  const auto chat = [&](const std::string& fields) {
    return parse_completion_request(
               R"({"messages": [{"role": "user", "content": "hi"}])" + fields + "}", true, limits,
               *bytes)
        .max_tokens;
  };
  const std::int32_t rest = chat("");
  limits.default_max_tokens = 5;
  EXPECT_EQ(chat(""), 5);
  EXPECT_EQ(chat(R"(, "max_tokens": 9)"), 9);
  EXPECT_EQ(parse(R"({"prompt": "a"})").max_tokens, 16);
  limits.default_max_tokens = 5000;
  EXPECT_EQ(chat(""), rest);
}

// The tiny model behind the byte tokenizer (token 66 is "B").
const std::string kExperiment =
    "name: generation-config\nseed: 3\nmodel: tiny\nhardware: H100-SXM\n"
    "serving: {block_size: 16, num_gpu_blocks: 256, max_num_batched_tokens: 2048, "
    "max_num_seqs: 64, max_model_len: 1024}\n"
    "workload: {type: synthetic, num_requests: 1, prompt_len: {dist: fixed, value: 4}, "
    "output_len: {dist: fixed, value: 4}}\n";

json complete(const ServeProcess& s, const json& body) {
  httplib::Client c("127.0.0.1", s.port());
  c.set_read_timeout(30);
  const httplib::Result r = c.Post("/v1/completions", body.dump(), "application/json");
  if (!r || r->status != 200) {
    ADD_FAILURE() << (r ? r->body : "no response");
    return json::object();
  }
  return json::parse(r->body);
}

// The tokens of a completion, by their log probabilities under the raw logits (the byte
// tokenizer shows many tokens as the same U+FFFD, so texts can hide a difference), `n` first.
json first_tokens(const json& completion, std::size_t n) {
  const json& all = completion["choices"][0]["logprobs"]["token_logprobs"];
  json out = json::array();
  for (std::size_t i = 0; i < n && i < all.size(); ++i) out.push_back(all[i]);
  return out;
}

// Through `engine serve`: a request that names nothing is what the same request naming the
// defaults is on a server without them, its own fields win; the file's max_new_tokens caps it;
// its eos_token_id ends a request; the server says where its defaults came from.
TEST(GenerationConfig, EngineServeAppliesTheDefaults) {
  const fs::path dir = temp_dir("generation_config_serve");
  write_in(dir / "serve.yaml", kExperiment);
  const json plain = {{"prompt", {1, 2, 3, 4, 5}}, {"max_tokens", 12}, {"logprobs", 0}};
  json named = plain;
  named["repetition_penalty"] = 0.05;
  named["max_tokens"] = 7;
  // 66 ("B") forced by its bias: "BBBBB" without an EOS.
  const json forced = {{"prompt", {1, 2, 3}}, {"max_tokens", 5}, {"logit_bias", {{"66", 100}}}};
  json want_named, want_plain;
  for (const char* sub : {"a", "b"}) fs::create_directories(dir / sub);
  {
    ServeProcess server(dir / "a", dir / "serve.yaml", {});
    want_named = complete(server, named);
    want_plain = complete(server, plain);
    EXPECT_EQ(complete(server, forced)["choices"][0]["text"], "BBBBB");
    EXPECT_EQ(read_file(dir / "a" / "serve.out").find("defaults"), std::string::npos);
  }
  ASSERT_NE(first_tokens(want_named, 7), first_tokens(want_plain, 7));
  write_in(dir / "ckpt" / "generation_config.json",
           R"({"temperature": 0.0, "repetition_penalty": 0.05, "max_new_tokens": 7,
                 "eos_token_id": 66})");
  {
    ServeProcess server(dir / "b", dir / "serve.yaml",
                        {"--generation-config", (dir / "ckpt").string()});
    const json got = complete(server, plain);
    EXPECT_EQ(got["choices"][0]["text"], want_named["choices"][0]["text"]);
    EXPECT_EQ(first_tokens(got, 7), first_tokens(want_named, 7));
    EXPECT_EQ(got["usage"]["completion_tokens"], 7);
    json own = plain;  // a request's own field wins
    own["repetition_penalty"] = 1;
    EXPECT_EQ(first_tokens(complete(server, own), 12), first_tokens(want_plain, 7));
    // The file's EOS id ends the forced request at its first token.
    const json stopped = complete(server, forced);
    EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop") << stopped.dump();
    EXPECT_EQ(stopped["choices"][0]["text"], "");
    EXPECT_EQ(stopped["usage"]["completion_tokens"], 1);
    const std::string out = read_file(dir / "b" / "serve.out");
    EXPECT_NE(out.find("defaults of the sampling fields requests leave out, from " +
                       (dir / "ckpt" / "generation_config.json").string() +
                       ": temperature 0, repetition_penalty 0.05, max_new_tokens 7, max_tokens "
                       "at most 7"),
              std::string::npos)
        << out;
  }
  fs::remove_all(dir);
}

TEST(GenerationConfig, BadSourcesAreExitCode2) {
  const fs::path dir = temp_dir("generation_config_cli");
  write_in(dir / "serve.yaml", kExperiment);
  write_in(dir / "g" / "generation_config.json", R"({"top_p": 7})");
  const std::string base = "serve " + (dir / "serve.yaml").string() + " --port 0 ";
  Cli c = run_engine_cli(base + "--generation-config " + (dir / "missing").string(), dir);
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find("does not exist"), std::string::npos) << c.err;
  c = run_engine_cli(base + "--generation-config " + (dir / "g").string(), dir);
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find((dir / "g" / "generation_config.json").string() + ": top_p:"),
            std::string::npos)
      << c.err;
  c = run_engine_cli(base + "--override-generation-config '{\"seed\": 3}'", dir);
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find("--override-generation-config: unknown key 'seed'"), std::string::npos)
      << c.err;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
