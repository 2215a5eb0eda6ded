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

json Prompt(int len, int first = 1) {
  json p = json::array();
  for (int t = 0; t < len; ++t) p.push_back((first + t) % 256);
  return p;
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
  std::vector<json> chunks;
  for (std::size_t p = 0; (p = sr->body.find("data: ", p)) != std::string::npos;) {
    const std::size_t e = sr->body.find("\n\n", p);
    const std::string payload = sr->body.substr(p + 6, e - p - 6);
    if (payload != "[DONE]") chunks.push_back(json::parse(payload));
    p = e;
  }
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
