// `engine serve` end to end, over localhost with ephemeral ports and the tiny model: the OpenAI
// endpoints (completions and chat, streaming and not), every malformed-input case answered 400
// with an OpenAI error object, overload answered 429, 256 concurrent streaming clients with
// /metrics checked against the requests sent, clients that disconnect (aborted, no block left
// held: the server checks the pool's invariants after every abort and its gauges return to 0),
// SIGTERM draining in-flight requests then exiting 0, and `sim bench` against the server with
// `sim validate` reading its run folder.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "serving/home.h"
#include "tests/sentencepiece_layout.h"
#include "tests/serve_process.h"
#include "tests/test_util.h"

extern char** environ;

namespace servelab {
namespace {

using namespace servelab::test_util;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

const std::string kServeExperiment =
    "name: serve-test\nseed: 3\nmodel: tiny\nhardware: H100-SXM\n"
    "serving:\n  block_size: 16\n  num_gpu_blocks: 512\n  max_num_batched_tokens: 4096\n"
    "  max_num_seqs: 256\n  max_model_len: 2048\n"
    "policies: {prefix_cache: hash, preemption: recompute}\n"
    "workload:\n  type: synthetic\n  num_requests: 20\n"
    "  arrival: {process: poisson, rate: 40}\n"
    "  prompt_len: {dist: uniform, min: 20, max: 100}\n"
    "  output_len: {dist: uniform, min: 4, max: 24}\n"
    "  shared_prefix: {num_prefixes: 2, length: 32, fraction: 0.5}\n";

fs::path write_serve_experiment(const fs::path& dir) {
  write_file(dir / "serve.yaml", kServeExperiment);
  return dir / "serve.yaml";
}

// `engine serve` on kServeExperiment (tests/serve_process.h).
class ServerProcess : public ServeProcess {
 public:
  ServerProcess(const fs::path& dir, const std::vector<std::string>& extra)
      : ServeProcess(dir, write_serve_experiment(dir), extra) {}
};

httplib::Client client_for(const ServerProcess& s) {
  httplib::Client c("127.0.0.1", s.port());
  c.set_read_timeout(30);
  return c;
}

// A /v1/completions answer that must be 200, parsed (null when the request failed).
json completion_ok(httplib::Client& c, const json& body) {
  const httplib::Result r = c.Post("/v1/completions", body.dump(), "application/json");
  EXPECT_TRUE(r);
  EXPECT_EQ(r ? r->status : 0, 200) << (r ? r->body : "");
  return r ? json::parse(r->body) : json();
}

struct Stream {
  int status = 0;
  std::vector<json> chunks;  // parsed data: payloads before [DONE]
  bool done = false;
  std::string body;
};

// A streaming POST; collects the SSE events.
Stream post_stream(const ServerProcess& s, const std::string& path, const json& body) {
  httplib::Client c = client_for(s);
  Stream out;
  std::string buffer;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, std::size_t len, std::uint64_t, std::uint64_t) {
    buffer.append(data, len);
    out.body.append(data, len);
    for (std::size_t p = buffer.find("\n\n"); p != std::string::npos; p = buffer.find("\n\n")) {
      const std::string event = buffer.substr(0, p);
      buffer.erase(0, p + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        out.done = true;
      } else {
        out.chunks.push_back(json::parse(payload));
      }
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err;
  if (!c.send(req, res, err)) {
    out.body = "request failed: " + httplib::to_string(err) + " after: " + out.body;
  }
  out.status = res.status;
  if (res.status != 200 && res.status > 0) out.body = res.body;
  return out;
}

// Metric value of the line starting with `series` (name plus labels, as rendered).
double metric(const std::string& text, const std::string& series) {
  const std::size_t p = text.find("\n" + series + " ");
  if (p == std::string::npos) return -1;
  const std::size_t v = p + 1 + series.size() + 1;
  return std::stod(text.substr(v, text.find('\n', v) - v));
}

std::string scrape_port(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(30);
  const httplib::Result r = c.Get("/metrics");
  return r && r->status == 200 ? "\n" + r->body : "";
}

std::string scrape(const ServerProcess& s) { return scrape_port(s.port()); }

const std::string kLabels = "{model_name=\"tiny\"}";

// /metrics once no request is running or waiting (at most 20 s): a non-streaming response can
// reach the client before the engine loop has retired its request and updated the gauges.
std::string scrape_settled(int port) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::string m = scrape_port(port);
  while (std::chrono::steady_clock::now() < deadline &&
         (metric(m, "vllm:num_requests_running" + kLabels) != 0 ||
          metric(m, "vllm:num_requests_waiting" + kLabels) != 0)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    m = scrape_port(port);
  }
  return m;
}

TEST(EngineServe, CompletionsChatModelsAndHealth) {
  const fs::path dir = temp_dir("serve_basic");
  ServerProcess server(dir, {});
  httplib::Client c = client_for(server);
  const httplib::Result health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  const httplib::Result models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "tiny");

  // Token ids, not streamed.
  const json body = {{"model", "tiny"}, {"prompt", {1, 2, 3, 4, 5}}, {"max_tokens", 6}};
  const httplib::Result r1 = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r1);
  ASSERT_EQ(r1->status, 200) << r1->body;
  const json j1 = json::parse(r1->body);
  EXPECT_EQ(j1["object"], "text_completion");
  EXPECT_EQ(j1["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(j1["usage"]["completion_tokens"], 6);
  EXPECT_EQ(j1["choices"][0]["finish_reason"], "length");
  // Greedy decoding: the same prompt gives the same text.
  const httplib::Result r2 = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r2);
  EXPECT_EQ(json::parse(r2->body)["choices"][0]["text"], j1["choices"][0]["text"]);

  // Streamed: the same text in chunks, then usage, then [DONE].
  json sbody = body;
  sbody["stream"] = true;
  sbody["stream_options"] = {{"include_usage", true}};
  const Stream st = post_stream(server, "/v1/completions", sbody);
  ASSERT_EQ(st.status, 200) << st.body;
  EXPECT_TRUE(st.done);
  std::string text;
  int with_choices = 0;
  for (const json& ch : st.chunks) {
    if (!ch["choices"].empty()) {
      ++with_choices;
      text += ch["choices"][0]["text"].get<std::string>();
    }
  }
  EXPECT_EQ(text, j1["choices"][0]["text"].get<std::string>());
  EXPECT_GE(with_choices, 1);
  ASSERT_FALSE(st.chunks.empty());
  EXPECT_EQ(st.chunks.back()["usage"]["completion_tokens"], 6);
  EXPECT_EQ(st.chunks[st.chunks.size() - 2]["choices"][0]["finish_reason"], "length");

  // vLLM's continuous_usage_stats: usage in every chunk, the tokens so far; without
  // include_usage, none.
  sbody["stream_options"]["continuous_usage_stats"] = true;
  const Stream cu = post_stream(server, "/v1/completions", sbody);
  ASSERT_EQ(cu.status, 200) << cu.body;
  int so_far = 0;
  for (const json& ch : cu.chunks) {
    if (ch["choices"].empty()) continue;
    ASSERT_TRUE(ch.contains("usage")) << ch.dump();
    EXPECT_EQ(ch["usage"]["prompt_tokens"], 5);
    EXPECT_GE(ch["usage"]["completion_tokens"].get<int>(), so_far);
    so_far = ch["usage"]["completion_tokens"];
  }
  EXPECT_EQ(so_far, 6);
  sbody["stream_options"] = {{"continuous_usage_stats", true}};
  for (const json& ch : post_stream(server, "/v1/completions", sbody).chunks) {
    EXPECT_FALSE(ch.contains("usage")) << ch.dump();
  }

  // A text prompt (the stand-in byte tokenizer: one token per byte).
  const json tbody = {{"prompt", "hello"}, {"max_tokens", 3}};
  const httplib::Result r3 = c.Post("/v1/completions", tbody.dump(), "application/json");
  ASSERT_TRUE(r3);
  ASSERT_EQ(r3->status, 200) << r3->body;
  EXPECT_EQ(json::parse(r3->body)["usage"]["prompt_tokens"], 5);

  // Chat, not streamed and streamed.
  const json chat = {
      {"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 4}};
  const httplib::Result r4 = c.Post("/v1/chat/completions", chat.dump(), "application/json");
  ASSERT_TRUE(r4);
  ASSERT_EQ(r4->status, 200) << r4->body;
  const json j4 = json::parse(r4->body);
  EXPECT_EQ(j4["object"], "chat.completion");
  EXPECT_EQ(j4["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j4["usage"]["completion_tokens"], 4);
  json schat = chat;
  schat["stream"] = true;
  const Stream sc = post_stream(server, "/v1/chat/completions", schat);
  ASSERT_EQ(sc.status, 200);
  EXPECT_TRUE(sc.done);
  ASSERT_FALSE(sc.chunks.empty());
  EXPECT_EQ(sc.chunks[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(sc.chunks[0]["choices"][0]["delta"]["role"], "assistant");
  fs::remove_all(dir);
}

// A client's temperature, top_p and seed, and n choices: a seeded request gets the same text
// every time, alone or among others; choice k of a seeded request with n choices is the text of
// the same request seeded with seed + k; streamed choices carry their index and each its own
// finish; a stop string ends only the choice whose text it is found in; usage counts every
// choice's tokens; nothing holds blocks afterwards.
TEST(EngineServe, SeededSamplingAndParallelChoices) {
  const fs::path dir = temp_dir("serve_sampling");
  ServerProcess server(dir, {});
  httplib::Client c = client_for(server);
  const auto complete = [&](const json& body) { return completion_ok(c, body); };
  const auto seeded = [](std::int64_t seed) {
    return json{{"prompt", {1, 2, 3, 4, 5}},
                {"max_tokens", 16},
                {"temperature", 1.0},
                {"top_p", 0.95},
                {"seed", seed}};
  };
  const std::string t0 = complete(seeded(123))["choices"][0]["text"];
  const std::string t1 = complete(seeded(124))["choices"][0]["text"];
  const std::string t2 = complete(seeded(125))["choices"][0]["text"];
  EXPECT_NE(t0, t1);
  EXPECT_EQ(complete(seeded(123))["choices"][0]["text"], t0);
  // Among other requests (greedy and sampled ones in the same batches): the same text.
  std::vector<std::thread> clients;
  std::vector<std::string> crowd(6);
  for (std::size_t i = 0; i < crowd.size(); ++i) {
    clients.emplace_back([&, i] {
      httplib::Client own = client_for(server);
      const json body = i % 2 == 0 ? seeded(123) : json{{"prompt", {9, 8, 7}}, {"max_tokens", 12}};
      const httplib::Result r = own.Post("/v1/completions", body.dump(), "application/json");
      if (r && r->status == 200) crowd[i] = json::parse(r->body)["choices"][0]["text"];
    });
  }
  for (std::thread& t : clients) t.join();
  for (std::size_t i = 0; i < crowd.size(); i += 2) EXPECT_EQ(crowd[i], t0) << i;

  // n = 3: choice k is seed 123 + k's text.
  json three = seeded(123);
  three["n"] = 3;
  const json j = complete(three);
  ASSERT_EQ(j["choices"].size(), 3u);
  const std::vector<std::string> want = {t0, t1, t2};
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(j["choices"][k]["index"], k);
    EXPECT_EQ(j["choices"][k]["text"], want[k]) << k;
    EXPECT_EQ(j["choices"][k]["finish_reason"], "length");
  }
  EXPECT_EQ(j["usage"]["completion_tokens"], 48);
  // Streamed: the same texts by index, one finish each, then usage.
  json sthree = three;
  sthree["stream"] = true;
  sthree["stream_options"] = {{"include_usage", true}};
  const Stream st = post_stream(server, "/v1/completions", sthree);
  ASSERT_EQ(st.status, 200) << st.body;
  EXPECT_TRUE(st.done);
  std::vector<std::string> texts(3);
  std::vector<int> finishes(3, 0);
  for (const json& ch : st.chunks) {
    if (ch["choices"].empty()) continue;
    const std::size_t k = ch["choices"][0]["index"];
    ASSERT_LT(k, 3u);
    texts[k] += ch["choices"][0]["text"].get<std::string>();
    finishes[k] += ch["choices"][0]["finish_reason"].is_null() ? 0 : 1;
  }
  EXPECT_EQ(texts, want);
  EXPECT_EQ(finishes, (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(st.chunks.back()["usage"]["completion_tokens"], 48);

  // A stop string: an ASCII character of choice 1's text ends each choice at its first
  // occurrence, with finish_reason "stop" there and "length" where it never occurs.
  const auto ascii =
      std::find_if(t1.begin() + 1, t1.end(), [](char ch) { return ch > ' ' && ch < 127; });
  ASSERT_NE(ascii, t1.end()) << "choice 1 has no printable ASCII character: " << t1;
  const std::string stop(1, *ascii);
  json stopped = three;
  stopped["stop"] = stop;
  const json js = complete(stopped);
  ASSERT_EQ(js["choices"].size(), 3u);
  std::int64_t stopped_choices = 0;
  for (std::size_t k = 0; k < 3; ++k) {
    const std::size_t at = want[k].find(stop);
    const json& ch = js["choices"][k];
    if (at == std::string::npos) {
      EXPECT_EQ(ch["text"], want[k]) << k;
      EXPECT_EQ(ch["finish_reason"], "length") << k;
    } else {
      ++stopped_choices;
      EXPECT_EQ(ch["text"], want[k].substr(0, at)) << k;
      EXPECT_EQ(ch["finish_reason"], "stop") << k;
      EXPECT_EQ(ch["stop_reason"], stop) << k;
    }
  }
  EXPECT_GE(stopped_choices, 1);
  EXPECT_LT(js["usage"]["completion_tokens"].get<int>(), 48);
  // Presence and frequency penalties change a greedy output; zero ones do not. (Compared by
  // the tokens' logprobs: the text shows many byte tokens as the same U+FFFD. 300 tokens of a
  // 256-token vocabulary repeat one.)
  const json greedy = {{"prompt", {1, 2, 3, 4, 5}}, {"max_tokens", 300}, {"logprobs", 0}};
  const auto tokens_of = [&](const json& body) {
    return complete(body)["choices"][0]["logprobs"]["token_logprobs"];
  };
  const json plain = tokens_of(greedy);
  json zero = greedy;
  zero["presence_penalty"] = 0;
  zero["frequency_penalty"] = 0.0;
  EXPECT_EQ(tokens_of(zero), plain);
  json penalized = greedy;
  penalized["presence_penalty"] = 2;
  penalized["frequency_penalty"] = 2;
  EXPECT_NE(tokens_of(penalized), plain);
  // vLLM's repetition_penalty and OpenAI's logit_bias too; a bias of 100 on a token makes every
  // token that one (its logprob under the raw logits, the same each time).
  json repeated = greedy;
  repeated["repetition_penalty"] = 2.5;
  EXPECT_NE(tokens_of(repeated), plain);
  json biased = {{"prompt", {1, 2, 3, 4, 5}},
                 {"max_tokens", 5},
                 {"logprobs", 0},
                 {"logit_bias", {{"65", 100}}}};
  const json forced = complete(biased)["choices"][0];
  EXPECT_EQ(forced["text"], "AAAAA") << forced.dump();
  // vLLM's return_tokens_as_token_ids: the logprobs name tokens by id.
  biased["return_tokens_as_token_ids"] = true;
  biased["logprobs"] = 1;
  const json by_id = complete(biased)["choices"][0]["logprobs"];
  EXPECT_EQ(by_id["tokens"], json(std::vector<std::string>(5, "token_id:65"))) << by_id.dump();
  EXPECT_TRUE(by_id["top_logprobs"][0].contains("token_id:65")) << by_id.dump();
  EXPECT_EQ(by_id["text_offset"][1], 11);  // offsets count the names' characters
  // vLLM's allowed_token_ids: a sampled choice draws only those; bad_words bans one of them
  // ("A" is token 65), leaving the other; truncate_prompt_tokens keeps the prompt's last 2.
  json allowed = {{"prompt", {1, 2, 3, 4, 5}},
                  {"max_tokens", 12},
                  {"temperature", 1.5},
                  {"seed", 3},
                  {"allowed_token_ids", {66, 65}}};
  const std::string ab = complete(allowed)["choices"][0]["text"];
  EXPECT_EQ(ab.size(), 12u);
  EXPECT_EQ(ab.find_first_not_of("AB"), std::string::npos) << ab;
  allowed["bad_words"] = {"A"};
  allowed["truncate_prompt_tokens"] = 2;
  const json only_b = complete(allowed);
  EXPECT_EQ(only_b["choices"][0]["text"], std::string(12, 'B')) << only_b.dump();
  EXPECT_EQ(only_b["usage"]["prompt_tokens"], 2);
  // top_k 1 at any temperature is greedy.
  json top1 = greedy;
  top1["temperature"] = 3.0;
  top1["top_k"] = 1;
  top1["seed"] = 5;
  EXPECT_EQ(tokens_of(top1), plain);
  // More choices than the server has seats (max_num_seqs 256): the scheduler's reason, on n.
  json many = seeded(1);
  many["n"] = 300;
  const httplib::Result rm = c.Post("/v1/completions", many.dump(), "application/json");
  ASSERT_TRUE(rm);
  EXPECT_EQ(rm->status, 400);
  EXPECT_EQ(json::parse(rm->body)["error"]["param"], "n") << rm->body;
  EXPECT_NE(rm->body.find("max_num_seqs"), std::string::npos) << rm->body;
  const std::string m = scrape_settled(server.port());
  EXPECT_EQ(metric(m, "vllm:kv_cache_usage_perc" + kLabels), 0.0);
  fs::remove_all(dir);
}

// vLLM's /tokenize and /detokenize: a prompt's ids are what the completion endpoints count for
// it (usage.prompt_tokens), chat's too; /detokenize gives the text back; a model not served is
// 404, a bad id 400.
TEST(EngineServe, TokenizeAndDetokenize) {
  const fs::path dir = temp_dir("serve_tokenize");
  ServerProcess server(dir, {});
  httplib::Client c = client_for(server);
  const auto post = [&](const std::string& path, const json& body, int want = 200) {
    const httplib::Result r = c.Post(path, body.dump(), "application/json");
    EXPECT_TRUE(r);
    if (!r) return json();
    EXPECT_EQ(r->status, want) << path << " " << body.dump() << " -> " << r->body;
    return json::parse(r->body);
  };
  const json t = post("/tokenize", {{"prompt", "hello"}});
  EXPECT_EQ(t["tokens"], json({104, 101, 108, 108, 111}));
  EXPECT_EQ(t["count"], 5);
  EXPECT_EQ(t["max_model_len"], 2048);
  EXPECT_TRUE(t["token_strs"].is_null());
  const json done = post("/v1/completions", {{"prompt", "hello"}, {"max_tokens", 1}});
  EXPECT_EQ(done["usage"]["prompt_tokens"], t["count"]);
  const json messages = {{{"role", "user"}, {"content", "hi there"}}};
  const json ct = post("/tokenize", {{"messages", messages}});
  const json chat = post("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 1}});
  EXPECT_EQ(chat["usage"]["prompt_tokens"], ct["count"]);
  EXPECT_EQ(post("/detokenize", {{"tokens", t["tokens"]}})["prompt"], "hello");
  EXPECT_EQ(post("/detokenize", {{"tokens", {1, 999}}}, 400)["error"]["param"], "tokens");
  EXPECT_EQ(post("/tokenize", {{"model", "nope"}, {"prompt", "a"}}, 404)["error"]["code"],
            "model_not_found");
  fs::remove_all(dir);
}

// A model's chat template: engine serve finds tokenizer_config.json's chat_template beside
// --tokenizer (as vLLM loads it with the tokenizer) and renders chat messages with it, /tokenize
// and the chat endpoint alike; the template's raise_exception is a 400 with its message;
// --chat-template replaces it.
TEST(EngineServe, ChatTemplateBesideTheTokenizerRendersChats) {
  const fs::path dir = temp_dir("serve_chat_template");
  fs::copy_file(servelab_home() / "data/tokenizers/bytes/tokenizer.json", dir / "tokenizer.json");
  const json config = {
      {"eos_token", "</s>"},
      {"chat_template",
       "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system "
       "messages') }}{% endif %}<{{ m.role }}>{{ m.content }}{% endfor %}"
       "{% if add_generation_prompt %}<assistant>{% endif %}"}};
  write_file(dir / "tokenizer_config.json", config.dump());
  const json messages = {{{"role", "user"}, {"content", "hi"}}};
  const auto bytes = [](const std::string& text) {
    json ids = json::array();
    for (const unsigned char ch : text) ids.push_back(static_cast<int>(ch));
    return ids;
  };
  {
    ServerProcess server(dir, {"--tokenizer", (dir / "tokenizer.json").string()});
    httplib::Client c = client_for(server);
    const auto post = [&](const std::string& path, const json& body, int want) {
      const httplib::Result r = c.Post(path, body.dump(), "application/json");
      EXPECT_TRUE(r);
      if (!r) return json();
      EXPECT_EQ(r->status, want) << path << " " << body.dump() << " -> " << r->body;
      return json::parse(r->body);
    };
    const json t = post("/tokenize", {{"messages", messages}}, 200);
    EXPECT_EQ(t["tokens"], bytes("<user>hi<assistant>"));
    const json chat =
        post("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 2}}, 200);
    EXPECT_EQ(chat["usage"]["prompt_tokens"], t["count"]);
    const json refused =
        post("/v1/chat/completions",
             {{"messages", {{{"role", "system"}, {"content", "x"}}}}, {"max_tokens", 2}}, 400);
    EXPECT_EQ(refused["error"]["message"], "'messages': no system messages") << refused.dump();
    EXPECT_EQ(refused["error"]["param"], "messages");
  }
  ServerProcess inline_template(
      dir, {"--tokenizer", (dir / "tokenizer.json").string(), "--chat-template",
            "{{ eos_token }}{{ messages[-1].content | upper }}"});
  httplib::Client c = client_for(inline_template);
  const httplib::Result r =
      c.Post("/tokenize", json({{"messages", messages}}).dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["tokens"], bytes("</s>HI")) << r->body;
  fs::remove_all(dir);
}

// Tool calling (vLLM's --enable-auto-tool-choice --tool-call-parser hermes): a request's tools
// reach the chat template, and a choice whose text holds <tool_call> blocks comes back as
// tool_calls (content null, finish_reason "tool_calls"), streamed or not, the same calls and ids
// both ways; parallel_tool_calls false keeps the first; tool_choice "none" leaves the text alone.
// The byte tokenizer gets the hermes tags as tokens and one token that is a whole call, which a
// logit bias makes the model write.
TEST(EngineServe, ToolCallsComeBackAsToolCalls) {
  const fs::path dir = temp_dir("serve_tools");
  json doc = json::parse(read_file(servelab_home() / "data/tokenizers/bytes/tokenizer.json"));
  const std::string call = R"(<tool_call>{"name":"get_weather","arguments":{"city":"Paris"}})"
                           "</tool_call>";
  doc["added_tokens"] = {{{"id", 1}, {"content", call}, {"special", false}},
                         {{"id", 2}, {"content", "<tool_call>"}, {"special", false}},
                         {{"id", 3}, {"content", "</tool_call>"}, {"special", false}}};
  write_file(dir / "tokenizer.json", doc.dump());
  write_file(
      dir / "tokenizer_config.json",
      json({{"chat_template",
             "{% if tools %}[{% for t in tools %}{{ t.function.name }};{% endfor %}]{% endif "
             "%}{% for m in messages %}{{ m.role }}:{{ m.content }}|{% endfor %}"}})
          .dump());
  ServerProcess server(dir, {"--tokenizer", (dir / "tokenizer.json").string(),
                             "--enable-auto-tool-choice", "--tool-call-parser", "hermes"});
  httplib::Client c = client_for(server);
  const json tools = {{{"type", "function"},
                       {"function",
                        {{"name", "get_weather"},
                         {"parameters", {{"type", "object"}, {"properties", json::object()}}}}}}};
  json body = {{"messages", {{{"role", "user"}, {"content", "Weather?"}}}},
               {"tools", tools},
               {"max_tokens", 2},
               {"logit_bias", {{"1", 100}}}};
  const auto chat = [&](const json& b) {
    const httplib::Result r = c.Post("/v1/chat/completions", b.dump(), "application/json");
    EXPECT_TRUE(r);
    EXPECT_EQ(r ? r->status : 0, 200) << (r ? r->body : "");
    return r ? json::parse(r->body) : json();
  };
  const json plain_args = R"({"city": "Paris"})";  // re-written as Python's json.dumps
  const json two = chat(body);
  const json& choice = two["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << two.dump();
  EXPECT_TRUE(choice["message"]["content"].is_null()) << two.dump();
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 2u) << two.dump();
  for (const json& tc : choice["message"]["tool_calls"]) {
    EXPECT_EQ(tc["type"], "function");
    EXPECT_EQ(tc["function"]["name"], "get_weather");
    EXPECT_EQ(tc["function"]["arguments"], plain_args);
    EXPECT_EQ(tc["id"].get<std::string>().rfind("chatcmpl-tool-", 0), 0u) << tc.dump();
  }
  EXPECT_NE(choice["message"]["tool_calls"][0]["id"], choice["message"]["tool_calls"][1]["id"]);
  // The template saw the tools (the prompt names them).
  const httplib::Result t =
      c.Post("/tokenize", json({{"messages", body["messages"]}, {"tools", tools}}).dump(),
             "application/json");
  ASSERT_TRUE(t);
  EXPECT_EQ(two["usage"]["prompt_tokens"], json::parse(t->body)["count"]);
  EXPECT_EQ(json::parse(t->body)["count"], std::string("[get_weather;]user:Weather?|").size());
  // Streamed: no content, the calls on the last chunk with their indices, the same as above
  // but for the ids (each response has its own).
  body["stream"] = true;
  const Stream st = post_stream(server, "/v1/chat/completions", body);
  ASSERT_TRUE(st.done) << st.body;
  std::string content;
  json streamed_calls = json::array();
  std::string finish;
  for (const json& ch : st.chunks) {
    const json& delta = ch["choices"][0]["delta"];
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    if (delta.contains("tool_calls")) {
      for (const json& tc : delta["tool_calls"]) streamed_calls.push_back(tc);
    }
    if (!ch["choices"][0]["finish_reason"].is_null()) finish = ch["choices"][0]["finish_reason"];
    // While the parser holds the call back nothing is sent (vLLM skips a delta it has nothing
    // for): every chunk says something.
    EXPECT_TRUE(delta.contains("role") || delta.contains("tool_calls") ||
                !ch["choices"][0]["finish_reason"].is_null() ||
                (delta.contains("content") && delta["content"] != ""))
        << ch.dump();
  }
  EXPECT_EQ(content, "");
  EXPECT_EQ(finish, "tool_calls");
  ASSERT_EQ(streamed_calls.size(), 2u) << st.body;
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(streamed_calls[i]["index"], i);
    EXPECT_EQ(streamed_calls[i]["function"], choice["message"]["tool_calls"][i]["function"]);
  }
  // parallel_tool_calls false: the first call alone.
  body.erase("stream");
  body["parallel_tool_calls"] = false;
  EXPECT_EQ(chat(body)["choices"][0]["message"]["tool_calls"].size(), 1u);
  // tool_choice "none": the text as the model wrote it.
  body["tool_choice"] = "none";
  const json none = chat(body);
  EXPECT_EQ(none["choices"][0]["message"]["content"], call + call) << none.dump();
  EXPECT_FALSE(none["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(none["choices"][0]["finish_reason"], "length");
  fs::remove_all(dir);
}

// A mistral call the parser cannot read is content without its [TOOL_CALLS] token (vLLM's
// tool_content), streamed or not: the non-streamed message kept the token.
TEST(EngineServe, UnreadableMistralCallIsTheSameContentStreamedOrNot) {
  const fs::path dir = temp_dir("serve_mistral");
  json doc = json::parse(read_file(servelab_home() / "data/tokenizers/bytes/tokenizer.json"));
  doc["added_tokens"] = {{{"id", 1}, {"content", "hi [TOOL_CALLS] nope"}, {"special", false}},
                         {{"id", 2}, {"content", "[TOOL_CALLS]"}, {"special", false}}};
  write_file(dir / "tokenizer.json", doc.dump());
  write_file(
      dir / "tokenizer_config.json",
      json({{"chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}"}}).dump());
  ServerProcess server(dir, {"--tokenizer", (dir / "tokenizer.json").string(),
                             "--enable-auto-tool-choice", "--tool-call-parser", "mistral"});
  httplib::Client c = client_for(server);
  json body = {{"messages", {{{"role", "user"}, {"content", "go"}}}},
               {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}},
               {"max_tokens", 1},
               {"logit_bias", {{"1", 100}}}};
  const httplib::Result r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json whole = json::parse(r->body);
  EXPECT_EQ(whole["choices"][0]["message"]["content"], "hi  nope") << whole.dump();
  EXPECT_FALSE(whole["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "length");
  body["stream"] = true;
  const Stream st = post_stream(server, "/v1/chat/completions", body);
  ASSERT_TRUE(st.done) << st.body;
  std::string content;
  for (const json& ch : st.chunks) {
    const json& delta = ch["choices"][0]["delta"];
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    EXPECT_FALSE(delta.contains("tool_calls")) << ch.dump();
  }
  EXPECT_EQ(content, "hi  nope") << st.body;
  fs::remove_all(dir);
}

// Structured outputs (docs/serving.md "Structured outputs"): every output of a schema, a regex
// or a choice, greedy or sampled, streamed or not, is text the constraint accepts, ended at its
// grammar's end by the request's stop token id (the tiny model has no EOS); a forced tool choice
// comes back as tool calls of the tools' schema. What cannot be held is a 400 naming the field.
TEST(EngineServe, StructuredOutputsHoldTheTextToTheirGrammar) {
  const fs::path dir = temp_dir("serve_structured");
  write_file(
      dir / "tokenizer_config.json",
      json({{"chat_template", "{% for m in messages %}{{ m.role }}:{{ m.content }}|{% endfor %}"}})
          .dump());
  fs::copy_file(servelab_home() / "data/tokenizers/bytes/tokenizer.json", dir / "tokenizer.json");
  ServerProcess server(dir, {"--tokenizer", (dir / "tokenizer.json").string()});
  httplib::Client c = client_for(server);
  const auto post = [&](const std::string& path, const json& body, int status = 200) {
    const httplib::Result r = c.Post(path, body.dump(), "application/json");
    EXPECT_TRUE(r);
    EXPECT_EQ(r ? r->status : 0, status) << (r ? r->body : "") << "\n" << body.dump();
    return r ? json::parse(r->body) : json();
  };
  const json schema = {{"type", "object"},
                       {"properties",
                        {{"ok", {{"type", "boolean"}}},
                         {"color", {{"enum", {"red", "green", "blue"}}}},
                         {"size", {{"type", "string"}, {"maxLength", 3}}}}},
                       {"required", {"ok", "color"}}};
  const auto characters = [](const std::string& s) {  // maxLength counts code points
    return std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; });
  };
  const auto valid = [&](const std::string& text) {
    const json j = json::parse(text, nullptr, false);
    return !j.is_discarded() && j.is_object() && j["ok"].is_boolean() &&
           (j["color"] == "red" || j["color"] == "green" || j["color"] == "blue") &&
           (!j.contains("size") || characters(j["size"].get<std::string>()) <= 3);
  };
  json body = {{"prompt", "Answer in JSON:"},
               {"max_tokens", 80},
               {"stop_token_ids", {1}},
               {"structured_outputs", {{"json", schema}, {"disable_any_whitespace", true}}}};
  const json greedy = post("/v1/completions", body);
  const std::string text = greedy["choices"][0]["text"];
  EXPECT_TRUE(valid(text)) << text;
  EXPECT_EQ(greedy["choices"][0]["finish_reason"], "stop") << greedy.dump();
  // Streamed: the same text.
  json streaming = body;
  streaming["stream"] = true;
  const Stream st = post_stream(server, "/v1/completions", streaming);
  ASSERT_TRUE(st.done) << st.body;
  std::string streamed;
  for (const json& ch : st.chunks) streamed += ch["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, text);
  // Through response_format (any whitespace: the whitespace bytes biased away, or the random
  // model may spend max_tokens on them).
  const json no_space = {{"32", -100}, {"9", -100}, {"10", -100}, {"13", -100}};
  json rf = body;
  rf.erase("structured_outputs");
  rf["response_format"] = {{"type", "json_schema"},
                           {"json_schema", {{"name", "answer"}, {"schema", schema}}}};
  rf["logit_bias"] = no_space;
  const json via_rf = post("/v1/completions", rf);
  EXPECT_TRUE(valid(via_rf["choices"][0]["text"])) << via_rf.dump();
  // Sampled choices: each valid.
  body["n"] = 4;
  body["temperature"] = 1.0;
  body["seed"] = 5;
  const json sampled = post("/v1/completions", body);
  EXPECT_EQ(sampled["choices"].size(), 4u);
  for (const json& ch : sampled["choices"]) {
    EXPECT_TRUE(valid(ch["text"].get<std::string>())) << ch.dump();
  }
  // A choice, a regex.
  json choice = {{"prompt", "Pick:"},
                 {"max_tokens", 10},
                 {"stop_token_ids", {1}},
                 {"temperature", 1.0},
                 {"n", 6},
                 {"structured_outputs", {{"choice", {"yes", "no", "maybe"}}}}};
  const json picked = post("/v1/completions", choice);
  EXPECT_EQ(picked["choices"].size(), 6u);
  for (const json& ch : picked["choices"]) {
    const std::string t = ch["text"];
    EXPECT_TRUE(t == "yes" || t == "no" || t == "maybe") << t;
  }
  choice["structured_outputs"] = {{"regex", "[a-c]{2}-[0-9]{1,2}"}};
  const json matched = post("/v1/completions", choice);
  for (const json& ch : matched["choices"]) {
    const std::string t = ch["text"];
    EXPECT_TRUE(std::regex_match(t, std::regex("[a-c]{2}-[0-9]{1,2}"))) << t;
  }
  choice["structured_outputs"] = {
      {"grammar",
       "root ::= greeting \" \" name\ngreeting ::= \"hi\" | \"hello\"  # two\n"
       "name ::= [A-Z] [a-z]{1,3}"}};
  const json grammared = post("/v1/completions", choice);
  EXPECT_EQ(grammared["choices"].size(), 6u);
  for (const json& ch : grammared["choices"]) {
    const std::string t = ch["text"];
    EXPECT_TRUE(std::regex_match(t, std::regex("(hi|hello) [A-Z][a-z]{1,3}"))) << t;
  }
  // Chat with json_object: when it ends, a JSON object or array.
  const json chat_obj =
      post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "JSON please"}}}},
                                    {"max_tokens", 60},
                                    {"stop_token_ids", {1}},
                                    {"response_format", {{"type", "json_object"}}}});
  const std::string obj = chat_obj["choices"][0]["message"]["content"];
  if (chat_obj["choices"][0]["finish_reason"] == "stop") {
    const json j = json::parse(obj, nullptr, false);
    EXPECT_TRUE(!j.is_discarded() && (j.is_object() || j.is_array())) << obj;
  }
  EXPECT_TRUE(obj.starts_with("{") || obj.starts_with("[")) << obj;

  // tool_choice "required" and named: tool calls of the tools' schema, content "", finish_reason
  // "tool_calls" for "required" (vLLM's), the output's for a named function. A tool whose
  // parameters are {} takes an empty object (its schema {} allowed any JSON value).
  const json tools = {
      {{"type", "function"},
       {"function",
        {{"name", "get_weather"},
         {"parameters",
          {{"type", "object"},
           {"properties", {{"city", {{"enum", {"Paris", "Oslo"}}}}}},
           {"required", {"city"}}}}}}},
      {{"type", "function"}, {"function", {{"name", "now"}, {"parameters", json::object()}}}}};
  json ask = {{"messages", {{{"role", "user"}, {"content", "Weather?"}}}},
              {"tools", tools},
              {"tool_choice", "required"},
              {"max_tokens", 1000},
              {"stop_token_ids", {1}},
              {"temperature", 1.0},
              {"seed", 3},
              {"n", 3}};
  // The random model would add items until max_tokens: ',' (44) biased away, so an array ends
  // after its first call (where ',' is the only way on, inside a call, it is still drawn).
  ask["logit_bias"] = no_space;
  ask["logit_bias"]["44"] = -100;
  int ended = 0;
  const json required_answer = post("/v1/chat/completions", ask);
  EXPECT_EQ(required_answer["choices"].size(), 3u);
  for (const json& ch : required_answer["choices"]) {
    if (ch["finish_reason"] == "length") continue;  // cut by max_tokens: the text as content
    EXPECT_EQ(ch["finish_reason"], "tool_calls") << ch.dump();
    ++ended;
    EXPECT_EQ(ch["message"]["content"], "") << ch.dump();
    ASSERT_GE(ch["message"]["tool_calls"].size(), 1u) << ch.dump();
    for (const json& tc : ch["message"]["tool_calls"]) {
      const json args = json::parse(tc["function"]["arguments"].get<std::string>());
      if (tc["function"]["name"] == "get_weather") {
        EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Oslo") << tc.dump();
      } else {
        EXPECT_EQ(tc["function"]["name"], "now");
        EXPECT_EQ(args, json::object());
      }
    }
  }
  EXPECT_GE(ended, 1);
  ask["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  ask["n"] = 1;
  ask["stream"] = true;
  const Stream named = post_stream(server, "/v1/chat/completions", ask);
  ASSERT_TRUE(named.done) << named.body;
  json calls = json::array();
  std::string finish;
  for (const json& ch : named.chunks) {
    const json& delta = ch["choices"][0]["delta"];
    if (delta.contains("tool_calls")) {
      for (const json& tc : delta["tool_calls"]) calls.push_back(tc);
    }
    if (!ch["choices"][0]["finish_reason"].is_null()) finish = ch["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(finish, "stop");
  ASSERT_EQ(calls.size(), 1u) << named.body;
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  const json args = json::parse(calls[0]["function"]["arguments"].get<std::string>());
  EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Oslo") << calls.dump();
  // A named choice's type, when given, is "function" (vLLM's 400 otherwise).
  ask.erase("stream");
  ask["tool_choice"]["type"] = "bogus";
  const json bogus = post("/v1/chat/completions", ask, 400);
  EXPECT_NE(bogus.dump().find("'tool_choice.type': expected \\\"function\\\""), std::string::npos)
      << bogus.dump();

  // Refused, naming the field.
  const auto refused = [&](const json& b, const std::string& param, const std::string& says) {
    const json e = post("/v1/completions", b, 400);
    EXPECT_EQ(e["error"]["param"], param) << e.dump();
    EXPECT_NE(e["error"]["message"].get<std::string>().find(says), std::string::npos) << e.dump();
  };
  json b = {{"prompt", "x"}, {"stop_token_ids", {1}}};
  b["structured_outputs"] = {{"json", {{"properties", {{"n", {{"uniqueItems", true}}}}}}}};
  refused(b, "structured_outputs",
          "/properties/n/uniqueItems: the keyword \"uniqueItems\" is not supported");
  b["structured_outputs"] = {{"regex", "a(b"}};
  refused(b, "structured_outputs", "regex: offset");
  b["structured_outputs"] = {{"grammar", "root ::= item\nitem ::= item \"a\" | \"b\""}};
  refused(b, "structured_outputs", "the rule 'item' is left-recursive");
  b["structured_outputs"] = {{"structural_tag", "{}"}};
  refused(b, "structured_outputs", "'structured_outputs.structural_tag' is not supported");
  // Too ambiguous at its start (a choice among thousands): refused on arrival; it stopped the
  // engine, and with it the server, at the first step.
  json many = json::array();
  for (int i = 0; i < 4200; ++i) many.push_back("a" + std::to_string(i));
  b["structured_outputs"] = {{"choice", many}};
  refused(b, "structured_outputs", "more than 4096 parses alive at once");
  // Nested past the parsers' bounds: refused, not a stack overflow.
  b["structured_outputs"] = {
      {"grammar", "root ::= " + std::string(300, '(') + "\"a\"" + std::string(300, ')')}};
  refused(b, "structured_outputs", "groups nested more than 256 deep");
  b["structured_outputs"] = {
      {"json", "{\"const\": " + std::string(100000, '[') + std::string(100000, ']') + "}"}};
  refused(b, "structured_outputs", "the schema's text is nested more than 256 levels deep");
  b.erase("structured_outputs");
  b["max_tokens"] = 2147483648LL;
  refused(b, "max_tokens", "'max_tokens': expected at most 16777216, got 2147483648");
  b.erase("max_tokens");
  b["prompt"] = json::array({9223372036854775808ULL});
  refused(b, "prompt", "token id 9223372036854775808 is outside the vocabulary");
  b["prompt"] = "x";
  b["structured_outputs"] = {{"choice", {"a"}}, {"regex", "a"}};
  refused(b, "structured_outputs", "exactly one of");
  b["response_format"] = {{"type", "json_object"}};
  refused(b, "response_format", "give one");
  b.erase("structured_outputs");
  b.erase("stop_token_ids");
  refused(b, "response_format", "the model has no EOS token; give stop_token_ids");
  b["stop_token_ids"] = {1};
  b["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}};
  refused(b, "response_format", "'response_format.json_schema.schema': required");
  // min_tokens past a complete grammar would ban its only tokens (the output ran on as NUL
  // bytes, the grammar broken): the combination is refused.
  b["response_format"] = {{"type", "json_object"}};
  b["min_tokens"] = 6;
  refused(b, "min_tokens", "cannot be combined with a structured output");
  fs::remove_all(dir);
}

// vLLM's --reasoning-parser deepseek_r1 with tool calling: a chat choice's <think> ... </think>
// comes back as reasoning_content, the rest as content, or read for tool calls when the request
// has tools; streamed as delta.reasoning_content, the same split. Completions are left alone.
TEST(EngineServe, ReasoningComesBackAsReasoningContent) {
  const fs::path dir = temp_dir("serve_reasoning");
  json doc = json::parse(read_file(servelab_home() / "data/tokenizers/bytes/tokenizer.json"));
  const std::string answer = "<think>add them</think>It is 3.";
  const std::string call =
      R"(<think>ask the tool</think><tool_call>{"name":"add","arguments":{"a":1}}</tool_call>)";
  doc["added_tokens"] = {{{"id", 1}, {"content", answer}, {"special", false}},
                         {{"id", 2}, {"content", call}, {"special", false}},
                         {{"id", 3}, {"content", "<think>"}, {"special", false}},
                         {{"id", 4}, {"content", "</think>"}, {"special", false}},
                         {{"id", 5}, {"content", "<tool_call>"}, {"special", false}},
                         {{"id", 6}, {"content", "</tool_call>"}, {"special", false}}};
  write_file(dir / "tokenizer.json", doc.dump());
  write_file(
      dir / "tokenizer_config.json",
      json({{"chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}"}}).dump());
  ServerProcess server(
      dir, {"--tokenizer", (dir / "tokenizer.json").string(), "--reasoning-parser", "deepseek_r1",
            "--enable-auto-tool-choice", "--tool-call-parser", "hermes"});
  httplib::Client c = client_for(server);
  const auto post = [&](const std::string& path, const json& b) {
    const httplib::Result r = c.Post(path, b.dump(), "application/json");
    EXPECT_TRUE(r);
    EXPECT_EQ(r ? r->status : 0, 200) << (r ? r->body : "");
    return r ? json::parse(r->body) : json();
  };
  json body = {{"messages", {{{"role", "user"}, {"content", "1 + 2?"}}}},
               {"max_tokens", 1},
               {"logit_bias", {{"1", 100}}}};
  const json plain = post("/v1/chat/completions", body);
  EXPECT_EQ(plain["choices"][0]["message"]["reasoning_content"], "add them") << plain.dump();
  EXPECT_EQ(plain["choices"][0]["message"]["content"], "It is 3.");
  EXPECT_EQ(plain["choices"][0]["finish_reason"], "length");
  // Streamed: the same split.
  const auto streamed = [&](const json& b) {
    json s = b;
    s["stream"] = true;
    const Stream st = post_stream(server, "/v1/chat/completions", s);
    EXPECT_TRUE(st.done) << st.body;
    json out = {{"reasoning", ""}, {"content", ""}, {"calls", json::array()}, {"finish", ""}};
    for (const json& ch : st.chunks) {
      const json& delta = ch["choices"][0]["delta"];
      if (delta.contains("reasoning_content")) {
        out["reasoning"] =
            out["reasoning"].get<std::string>() + delta["reasoning_content"].get<std::string>();
      }
      if (delta.contains("content")) {
        out["content"] = out["content"].get<std::string>() + delta["content"].get<std::string>();
      }
      for (const json& tc : delta.value("tool_calls", json::array())) out["calls"].push_back(tc);
      if (!ch["choices"][0]["finish_reason"].is_null())
        out["finish"] = ch["choices"][0]["finish_reason"];
    }
    return out;
  };
  const json st = streamed(body);
  EXPECT_EQ(st["reasoning"], "add them") << st.dump();
  EXPECT_EQ(st["content"], "It is 3.");
  // With tools: the reasoning, then the content after it read for calls.
  body["logit_bias"] = {{"2", 100}};
  body["tools"] = {{{"type", "function"}, {"function", {{"name", "add"}}}}};
  const json tools = post("/v1/chat/completions", body);
  const json& message = tools["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "ask the tool") << tools.dump();
  EXPECT_TRUE(message["content"].is_null());
  ASSERT_EQ(message["tool_calls"].size(), 1u);
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], R"({"a": 1})");
  EXPECT_EQ(tools["choices"][0]["finish_reason"], "tool_calls");
  const json st_tools = streamed(body);
  EXPECT_EQ(st_tools["reasoning"], "ask the tool") << st_tools.dump();
  EXPECT_EQ(st_tools["content"], "");
  ASSERT_EQ(st_tools["calls"].size(), 1u);
  EXPECT_EQ(st_tools["calls"][0]["function"], message["tool_calls"][0]["function"]);
  EXPECT_EQ(st_tools["finish"], "tool_calls");
  // The completions endpoint shows the text as it is.
  const json completion =
      post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}, {"logit_bias", {{"1", 100}}}});
  EXPECT_EQ(completion["choices"][0]["text"], answer);
  // Structured outputs bind the answer, not the thinking: </think> (favoured by the bias) ends a
  // free reasoning, then the grammar holds (it masked </think> from the first token before
  // the server read the parser's token ids: the output was all reasoning).
  const json constrained =
      post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                    {"max_tokens", 3},
                                    {"logit_bias", {{"4", 100}}},
                                    {"stop_token_ids", {0}},
                                    {"structured_outputs", {{"regex", "[a-c]+"}}}});
  const json& cm = constrained["choices"][0]["message"];
  ASSERT_TRUE(cm["content"].is_string()) << constrained.dump();
  EXPECT_TRUE(std::regex_match(cm["content"].get<std::string>(), std::regex("[a-c]{2}")))
      << constrained.dump();
  EXPECT_EQ(cm.value("reasoning_content", json("")), json("")) << constrained.dump();
  // A prompt that closed the thinking (its last marker </think>, as Qwen3's template writes
  // with enable_thinking false): the output is all content, streamed as it comes (vLLM's
  // prompt_is_reasoning_end); it was split, its answer given as reasoning.
  json closed = body;
  closed.erase("tools");
  closed["logit_bias"] = {{"1", 100}};
  closed["messages"] = {{{"role", "user"}, {"content", "1 + 2?<think></think>"}}};
  const json closed_answer = post("/v1/chat/completions", closed);
  const json& closed_message = closed_answer["choices"][0]["message"];
  EXPECT_EQ(closed_message["content"], answer) << closed_answer.dump();
  EXPECT_TRUE(closed_message["reasoning_content"].is_null()) << closed_answer.dump();
  const json closed_stream = streamed(closed);
  EXPECT_EQ(closed_stream["content"], answer) << closed_stream.dump();
  EXPECT_EQ(closed_stream["reasoning"], "");
  // A thinking opened again after it (its last marker <think>) is split as before.
  closed["messages"][0]["content"] = "1 + 2?</think><think>";
  EXPECT_EQ(post("/v1/chat/completions", closed)["choices"][0]["message"]["reasoning_content"],
            "add them");
  fs::remove_all(dir);
}

// vLLM's skip_special_tokens (default true): a choice's text leaves out the tokenizer's special
// tokens, streamed or not (a non-special added token stays); false keeps them; logprobs name
// them either way. /tokenize's return_token_strs names each token as tokenizer.json does.
TEST(EngineServe, SpecialTokensLeaveTheTextUnlessKept) {
  const fs::path dir = temp_dir("serve_special");
  json doc = json::parse(read_file(servelab_home() / "data/tokenizers/bytes/tokenizer.json"));
  doc["added_tokens"] = {{{"id", 65}, {"content", "<A>"}, {"special", true}},
                         {{"id", 66}, {"content", "<B>"}, {"special", false}}};
  write_file(dir / "tokenizer.json", doc.dump());
  ServerProcess server(dir, {"--tokenizer", (dir / "tokenizer.json").string()});
  httplib::Client c = client_for(server);
  const auto complete = [&](const json& body) { return completion_ok(c, body); };
  // A bias of 100 makes every token 65 (special), or 66 (not special) below.
  json forced = {{"prompt", {1, 2, 3}}, {"max_tokens", 3}, {"logit_bias", {{"65", 100}}}};
  json hidden = complete(forced);
  EXPECT_EQ(hidden["choices"][0]["text"], "") << hidden.dump();
  EXPECT_EQ(hidden["usage"]["completion_tokens"], 3);
  forced["logprobs"] = 0;
  EXPECT_EQ(complete(forced)["choices"][0]["logprobs"]["tokens"], json({"<A>", "<A>", "<A>"}));
  forced["skip_special_tokens"] = false;
  EXPECT_EQ(complete(forced)["choices"][0]["text"], "<A><A><A>");
  forced.erase("skip_special_tokens");
  forced.erase("logprobs");
  forced["stream"] = true;
  const Stream st = post_stream(server, "/v1/completions", forced);
  std::string streamed;
  for (const json& ch : st.chunks) streamed += ch["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, "");
  EXPECT_EQ(st.chunks.size(), 3u);
  json plain = {{"prompt", {1, 2, 3}}, {"max_tokens", 2}, {"logit_bias", {{"66", 100}}}};
  EXPECT_EQ(complete(plain)["choices"][0]["text"], "<B><B>");
  const httplib::Result t =
      c.Post("/tokenize", json({{"prompt", "x<A> y"}, {"return_token_strs", true}}).dump(),
             "application/json");
  ASSERT_TRUE(t);
  EXPECT_EQ(json::parse(t->body)["token_strs"], json({"x", "<A>", "\u0120", "y"})) << t->body;
  fs::remove_all(dir);
}

// A SentencePiece tokenizer (Llama 2's layout): a text prompt gets its "▁" marker; an output is
// decoded after its prompt, as vLLM's detokenizer does, so its first word keeps its space (the
// tokenizer's decode alone would strip it), streamed or not; logprobs tokens are each token's
// own decode (vLLM's, which strips it).
TEST(EngineServe, SentencePieceOutputsContinueThePromptsText) {
  const fs::path dir = temp_dir("serve_sentencepiece");
  const std::string sp = "\u2581";
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2},   {sp, 3},
                {"H", 4},     {"i", 5},   {sp + "H", 6}, {sp + "Hi", 7}};
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    vocab[hex] = 8 + b;
  }
  const json doc = test_util::llama2_layout(vocab, {sp + " H", sp + "H i"});
  write_file(dir / "tokenizer.json", doc.dump());
  // The tiny model with room for the 264 tokens.
  std::string model = read_file(servelab_home() / "experiments/catalog/models/tiny.yaml");
  model.replace(model.find("vocab_size: 256"), 15, "vocab_size: 320");
  model.replace(model.find("name: tiny"), 10, "name: tiny-sp");
  write_file(dir / "tiny-sp.yaml", model);
  std::string experiment = kServeExperiment;
  experiment.replace(experiment.find("model: tiny"), 11,
                     "model: " + (dir / "tiny-sp.yaml").string());
  write_file(dir / "serve.yaml", experiment);
  ServeProcess server(dir, dir / "serve.yaml", {"--tokenizer", (dir / "tokenizer.json").string()});
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(30);
  const httplib::Result t =
      c.Post("/tokenize", json({{"prompt", "Hi Hi"}}).dump(), "application/json");
  ASSERT_TRUE(t);
  EXPECT_EQ(json::parse(t->body)["tokens"], json({1, 7, 7})) << t->body;
  // Every output token is "▁Hi".
  json body = {{"prompt", "Hi"}, {"max_tokens", 3}, {"allowed_token_ids", {7}}, {"logprobs", 0}};
  const httplib::Result r = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json choice = json::parse(r->body)["choices"][0];
  EXPECT_EQ(choice["text"], " Hi Hi Hi");
  EXPECT_EQ(choice["logprobs"]["tokens"], json({"Hi", "Hi", "Hi"}));
  body.erase("logprobs");
  body["stream"] = true;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::string events;
  req.content_receiver = [&](const char* data, std::size_t len, std::uint64_t, std::uint64_t) {
    events.append(data, len);
    return true;
  };
  ASSERT_TRUE(c.send(req));
  std::string streamed;
  for (std::size_t at = events.find("data: {"); at != std::string::npos;
       at = events.find("data: {", at + 1)) {
    const std::size_t end = events.find("\n\n", at);
    streamed +=
        json::parse(events.substr(at + 6, end - at - 6))["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(streamed, " Hi Hi Hi") << events;
  // With the prompt's text echoed, the two read as one text.
  body = {{"prompt", "Hi"}, {"max_tokens", 1}, {"allowed_token_ids", {7}}, {"echo", true}};
  const httplib::Result e = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(e);
  EXPECT_EQ(json::parse(e->body)["choices"][0]["text"], "Hi Hi") << e->body;
  fs::remove_all(dir);
}

// Log probabilities: completions' vLLM shape (tokens, token_logprobs, top_logprobs dicts,
// text_offset) and chat's (content entries with token, logprob, bytes, top_logprobs); the same
// numbers streamed one token a chunk; with n choices each has its own.
TEST(EngineServe, LogprobsInEveryShape) {
  const fs::path dir = temp_dir("serve_logprobs");
  ServerProcess server(dir, {});
  httplib::Client c = client_for(server);
  const json body = {{"prompt", {1, 2, 3, 4, 5}}, {"max_tokens", 6}, {"logprobs", 3}};
  const httplib::Result r = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json lp = json::parse(r->body)["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 6u) << lp.dump();
  ASSERT_EQ(lp["token_logprobs"].size(), 6u);
  ASSERT_EQ(lp["top_logprobs"].size(), 6u);
  ASSERT_EQ(lp["text_offset"].size(), 6u);
  EXPECT_EQ(lp["text_offset"][0], 0);
  for (std::size_t i = 0; i < 6; ++i) {
    SCOPED_TRACE(i);
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
    // Greedy: the token is the most likely one, so the dict holds its 3 alternatives, itself
    // among them (fewer keys where two tokens' texts are the same: bytes of a character the
    // byte tokenizer shows as U+FFFD; the chat shape below carries the bytes).
    const json& top = lp["top_logprobs"][i];
    EXPECT_GE(top.size(), 1u) << top.dump();
    EXPECT_LE(top.size(), 3u) << top.dump();
    if (i > 0) {
      EXPECT_GE(lp["text_offset"][i], lp["text_offset"][i - 1]);
    }
  }
  // Streamed: one token's logprobs a chunk, the same numbers.
  json sbody = body;
  sbody["stream"] = true;
  const Stream st = post_stream(server, "/v1/completions", sbody);
  ASSERT_EQ(st.status, 200) << st.body;
  std::vector<double> streamed;
  for (const json& ch : st.chunks) {
    if (ch["choices"].empty()) continue;
    const json& l = ch["choices"][0]["logprobs"];
    ASSERT_TRUE(l.is_object()) << ch.dump();
    for (const json& v : l["token_logprobs"]) streamed.push_back(v.get<double>());
  }
  ASSERT_EQ(streamed.size(), 6u);
  for (std::size_t i = 0; i < 6; ++i) EXPECT_DOUBLE_EQ(streamed[i], lp["token_logprobs"][i]);
  // Chat.
  const json chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                     {"max_tokens", 4},
                     {"logprobs", true},
                     {"top_logprobs", 2}};
  const httplib::Result rc = c.Post("/v1/chat/completions", chat.dump(), "application/json");
  ASSERT_TRUE(rc);
  ASSERT_EQ(rc->status, 200) << rc->body;
  const json content = json::parse(rc->body)["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 4u);
  for (const json& t : content) {
    EXPECT_TRUE(t["token"].is_string());
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    EXPECT_TRUE(t["bytes"].is_array());
    ASSERT_EQ(t["top_logprobs"].size(), 2u);
    EXPECT_DOUBLE_EQ(t["top_logprobs"][0]["logprob"].get<double>(), t["logprob"].get<double>());
    EXPECT_GE(t["top_logprobs"][0]["logprob"].get<double>(),
              t["top_logprobs"][1]["logprob"].get<double>());
  }
  // Without asking: null.
  const httplib::Result plain = c.Post(
      "/v1/completions", json{{"prompt", {1, 2}}, {"max_tokens", 2}}.dump(), "application/json");
  ASSERT_TRUE(plain);
  EXPECT_TRUE(json::parse(plain->body)["choices"][0]["logprobs"].is_null());
  // n = 2, sampled: each choice has its own.
  const json two = {{"prompt", {1, 2, 3}}, {"max_tokens", 5}, {"logprobs", 1}, {"n", 2},
                    {"temperature", 1.0},  {"seed", 9}};
  const httplib::Result rn = c.Post("/v1/completions", two.dump(), "application/json");
  ASSERT_TRUE(rn);
  ASSERT_EQ(rn->status, 200) << rn->body;
  const json jn = json::parse(rn->body);
  ASSERT_EQ(jn["choices"].size(), 2u);
  for (const json& choice : jn["choices"]) {
    EXPECT_EQ(choice["logprobs"]["tokens"].size(), 5u);
    EXPECT_EQ(choice["logprobs"]["token_logprobs"].size(), 5u);
  }
  EXPECT_NE(jn["choices"][0]["logprobs"]["token_logprobs"],
            jn["choices"][1]["logprobs"]["token_logprobs"]);
  fs::remove_all(dir);
}

// Prompt log probabilities as lm-eval's loglikelihood asks for them (token ids, max_tokens 1,
// `echo` with `logprobs: 1`, temperature 0) and as vLLM's `prompt_logprobs` field: the echoed
// text and logprobs object start with the prompt (its first token null), each prompt token's
// logprob is the one the model gives it after its prefix (a greedy continuation's logprob, asked
// for directly, is the same number, and lm-eval's is_greedy holds for it), streamed echo sends
// the prompt first, and prompt_logprobs with stream is refused.
TEST(EngineServe, EchoAndPromptLogprobsAsLmEvalAsksForThem) {
  const fs::path dir = temp_dir("serve_echo");
  ServerProcess server(dir, {});
  httplib::Client c = client_for(server);
  const auto post = [&](const std::string& path, const json& body) {
    const httplib::Result r = c.Post(path, body.dump(), "application/json");
    EXPECT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  };
  std::vector<int> ids;
  for (int b = 'a'; b <= 'l'; ++b) ids.push_back(b);  // the byte tokenizer: "abcdefghijkl"
  // The greedy continuation of the prompt and its logprob.
  const json g = post("/v1/completions",
                      {{"prompt", ids}, {"max_tokens", 1}, {"logprobs", 1}, {"temperature", 0}});
  const int next = g["choices"][0]["logprobs"]["tokens"][0].get<std::string>().size() == 1
                       ? static_cast<unsigned char>(
                             g["choices"][0]["logprobs"]["tokens"][0].get<std::string>()[0])
                       : -1;
  const double next_lp = g["choices"][0]["logprobs"]["token_logprobs"][0].get<double>();
  std::vector<int> context = ids;
  if (next >= 0) context.push_back(next);
  const json e = post("/v1/completions", {{"prompt", {context}},
                                          {"max_tokens", 1},
                                          {"logprobs", 1},
                                          {"echo", true},
                                          {"temperature", 0}});
  const json& choice = e["choices"][0];
  EXPECT_EQ(choice["text"].get<std::string>().rfind("abcdefghijkl", 0), 0u) << choice.dump();
  const json& lp = choice["logprobs"];
  const std::size_t n = context.size() + 1;  // the prompt's tokens, then the generated one
  ASSERT_EQ(lp["tokens"].size(), n) << lp.dump();
  ASSERT_EQ(lp["token_logprobs"].size(), n);
  ASSERT_EQ(lp["top_logprobs"].size(), n);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  for (std::size_t i = 0; i < 12; ++i) {
    EXPECT_EQ(lp["tokens"][i], std::string(1, static_cast<char>('a' + i)));
    EXPECT_EQ(lp["text_offset"][i], i);
  }
  for (std::size_t i = 1; i < n; ++i) {
    SCOPED_TRACE(i);
    ASSERT_TRUE(lp["token_logprobs"][i].is_number());
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_GE(lp["top_logprobs"][i].size(), 1u);
  }
  if (next >= 0) {
    // lm-eval: sum(token_logprobs[ctxlen:-1]) is the continuation's loglikelihood, is_greedy
    // compares each with max(top_logprobs).
    const double cont = lp["token_logprobs"][12].get<double>();
    EXPECT_NEAR(cont, next_lp, 1e-4);
    double best = -1e9;
    for (const auto& [tok, v] : lp["top_logprobs"][12].items())
      best = std::max(best, v.get<double>());
    EXPECT_NEAR(best, cont, 1e-6);
  }
  // A text prompt echoes as the client sent it; the same numbers as its token ids.
  const json t = post("/v1/completions", {{"prompt", "abcdefghijkl"},
                                          {"max_tokens", 3},
                                          {"logprobs", 1},
                                          {"echo", true},
                                          {"temperature", 0}});
  EXPECT_EQ(t["choices"][0]["text"].get<std::string>().rfind("abcdefghijkl", 0), 0u);
  EXPECT_EQ(t["choices"][0]["logprobs"]["token_logprobs"][5], lp["token_logprobs"][5]);
  EXPECT_EQ(t["usage"]["prompt_tokens"], 12);
  // Streamed: the prompt's text and logprobs come in each choice's first chunk.
  const Stream st = post_stream(server, "/v1/completions",
                                {{"prompt", "abcdefghijkl"},
                                 {"max_tokens", 3},
                                 {"logprobs", 1},
                                 {"echo", true},
                                 {"temperature", 0},
                                 {"stream", true}});
  ASSERT_EQ(st.status, 200) << st.body;
  std::string text;
  std::vector<json> values;
  for (const json& ch : st.chunks) {
    if (ch["choices"].empty()) continue;
    text += ch["choices"][0]["text"].get<std::string>();
    for (const json& v : ch["choices"][0]["logprobs"]["token_logprobs"]) values.push_back(v);
  }
  EXPECT_EQ(text, t["choices"][0]["text"].get<std::string>());
  EXPECT_EQ(json(values), t["choices"][0]["logprobs"]["token_logprobs"]);
  EXPECT_EQ(st.chunks[0]["choices"][0]["logprobs"]["text_offset"][0], 0);
  // Echo without generation (max_tokens 0): the prompt alone, its logprobs alone; usage counts
  // the one token generated and not shown, as vLLM's does.
  const json only =
      post("/v1/completions",
           {{"prompt", "abcdefghijkl"}, {"max_tokens", 0}, {"logprobs", 1}, {"echo", true}});
  EXPECT_EQ(only["choices"][0]["text"], "abcdefghijkl");
  ASSERT_EQ(only["choices"][0]["logprobs"]["tokens"].size(), 12u);
  EXPECT_NEAR(only["choices"][0]["logprobs"]["token_logprobs"][5].get<double>(),
              lp["token_logprobs"][5].get<double>(), 1e-4);
  EXPECT_EQ(only["usage"]["completion_tokens"], 1);
  const Stream so = post_stream(
      server, "/v1/completions",
      {{"prompt", "abcdefghijkl"}, {"max_tokens", 0}, {"echo", true}, {"stream", true}});
  ASSERT_EQ(so.status, 200) << so.body;
  std::string streamed_only;
  for (const json& ch : so.chunks) {
    if (!ch["choices"].empty()) streamed_only += ch["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(streamed_only, "abcdefghijkl");
  // vLLM's prompt_logprobs: null first, then a dict per token with its rank and text.
  const json v = post("/v1/completions",
                      {{"prompt", "abcdefghijkl"}, {"max_tokens", 1}, {"prompt_logprobs", 2}});
  const json& pl = v["choices"][0]["prompt_logprobs"];
  ASSERT_EQ(pl.size(), 12u) << v.dump();
  EXPECT_TRUE(pl[0].is_null());
  for (std::size_t i = 1; i < 12; ++i) {
    SCOPED_TRACE(i);
    const std::string key = std::to_string('a' + static_cast<int>(i));
    ASSERT_TRUE(pl[i].contains(key)) << pl[i].dump();
    EXPECT_EQ(pl[i][key]["decoded_token"], std::string(1, static_cast<char>('a' + i)));
    EXPECT_GE(pl[i][key]["rank"].get<int>(), 1);
    EXPECT_NEAR(pl[i][key]["logprob"].get<double>(), lp["token_logprobs"][i].get<double>(), 1e-4);
    EXPECT_GE(pl[i].size(), 2u);  // the token and up to 2 alternatives
    EXPECT_LE(pl[i].size(), 3u);
  }
  EXPECT_TRUE(v["choices"][0]["logprobs"].is_null());
  const json chat =
      post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                    {"max_tokens", 2},
                                    {"prompt_logprobs", 0}});
  EXPECT_EQ(chat["prompt_logprobs"].size(), chat["usage"]["prompt_tokens"].get<std::size_t>());
  const httplib::Result bad = c.Post(
      "/v1/completions", json{{"prompt", "ab"}, {"prompt_logprobs", 1}, {"stream", true}}.dump(),
      "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(json::parse(bad->body)["error"]["param"], "prompt_logprobs");
  fs::remove_all(dir);
}

// A batch of prompts in one completions request (lm-eval with batch_size > 1): n choices per
// prompt, prompt i's at indices i * n .., each the text the prompt gets alone; usage sums the
// prompts; streamed, every index gets its chunks; echo with logprobs per prompt; a batch larger
// than --max-in-flight is 400.
TEST(EngineServe, BatchesOfPromptsAnswerEveryPromptByIndex) {
  const fs::path dir = temp_dir("serve_batch");
  ServerProcess server(dir, {"--max-in-flight", "8"});
  httplib::Client c = client_for(server);
  const auto post = [&](const json& body) {
    const httplib::Result r = c.Post("/v1/completions", body.dump(), "application/json");
    EXPECT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  };
  const std::vector<std::vector<int>> prompts = {{1, 2, 3}, {4, 5, 6, 7, 8}, {9, 10}};
  // n = 2 sampled with a seed: choice k is the text the prompt gets alone with seed + k (n > 1
  // with greedy sampling is vLLM's 400).
  std::vector<std::string> alone, greedy;
  for (const auto& p : prompts) {
    greedy.push_back(post({{"prompt", p}, {"max_tokens", 5}})["choices"][0]["text"]);
    for (const int seed : {7, 8}) {
      alone.push_back(post({{"prompt", p},
                            {"max_tokens", 5},
                            {"temperature", 1.0},
                            {"seed", seed}})["choices"][0]["text"]);
    }
  }
  const json b =
      post({{"prompt", prompts}, {"max_tokens", 5}, {"n", 2}, {"temperature", 1.0}, {"seed", 7}});
  ASSERT_EQ(b["choices"].size(), 6u) << b.dump();
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(b["choices"][i]["index"], i);
    EXPECT_EQ(b["choices"][i]["text"], alone[i]) << i;
  }
  // Greedy with n > 1 is refused, naming n (vLLM's "n must be 1 when using greedy sampling").
  const httplib::Result greedy_n =
      c.Post("/v1/completions", json({{"prompt", "x"}, {"max_tokens", 2}, {"n", 2}}).dump(),
             "application/json");
  ASSERT_TRUE(greedy_n);
  EXPECT_EQ(greedy_n->status, 400);
  EXPECT_NE(greedy_n->body.find("n must be 1 when using greedy sampling"), std::string::npos)
      << greedy_n->body;
  EXPECT_EQ(b["usage"]["prompt_tokens"], 10);
  EXPECT_EQ(b["usage"]["completion_tokens"], 30);
  // Streamed.
  const Stream st = post_stream(server, "/v1/completions",
                                {{"prompt", prompts},
                                 {"max_tokens", 5},
                                 {"stream", true},
                                 {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(st.status, 200) << st.body;
  std::map<int, std::string> texts;
  std::map<int, int> finishes;
  for (const json& ch : st.chunks) {
    if (ch["choices"].empty()) {
      EXPECT_EQ(ch["usage"]["prompt_tokens"], 10);
      continue;
    }
    const int index = ch["choices"][0]["index"];
    texts[index] += ch["choices"][0]["text"].get<std::string>();
    if (!ch["choices"][0]["finish_reason"].is_null()) ++finishes[index];
  }
  ASSERT_EQ(texts.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(texts[i], greedy[static_cast<std::size_t>(i)]) << i;
    EXPECT_EQ(finishes[i], 1) << i;
  }
  // lm-eval's loglikelihood batch: echo + logprobs per prompt.
  const json e = post({{"prompt", prompts}, {"max_tokens", 1}, {"logprobs", 1}, {"echo", true}});
  ASSERT_EQ(e["choices"].size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    const json& lp = e["choices"][i]["logprobs"];
    EXPECT_EQ(lp["token_logprobs"].size(), prompts[i].size() + 1) << i;
    EXPECT_TRUE(lp["token_logprobs"][0].is_null()) << i;
  }
  // More prompts than the server takes in flight.
  const httplib::Result big =
      c.Post("/v1/completions", json{{"prompt", std::vector<std::vector<int>>(9, {1, 2})}}.dump(),
             "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 400) << big->body;
  EXPECT_EQ(json::parse(big->body)["error"]["param"], "prompt");
  fs::remove_all(dir);
}

// The whole response to `request` (raw HTTP, which should ask for Connection: close).
std::string raw_exchange(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return "";
  }
  ::send(fd, request.data(), request.size(), 0);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) got.append(buf, n);
  ::close(fd);
  return got;
}

// A body over 16 MiB is 413, whether its length is declared (the library refuses to read it:
// the handler used to parse the empty body and answer 400 "malformed JSON") or it comes chunked
// (which the library does not limit: it was read whole); one just under is read and parsed.
TEST(EngineServe, BodiesOverSixteenMebibytesAre413) {
  const fs::path dir = temp_dir("serve_413");
  ServerProcess server(dir, {});
  httplib::Client c = client_for(server);
  const std::string big =
      "{\"prompt\": [1], \"max_tokens\": 1" + std::string((17u << 20), ' ') + "}";
  const httplib::Result declared = c.Post("/v1/completions", big, "application/json");
  ASSERT_TRUE(declared);
  EXPECT_EQ(declared->status, 413) << declared->body.substr(0, 200);
  const httplib::Result chunked = c.Post(
      "/v1/completions",
      [&](std::size_t offset, httplib::DataSink& sink) {
        const std::size_t n = std::min<std::size_t>(1 << 20, big.size() - offset);
        sink.write(big.data() + offset, n);
        if (offset + n == big.size()) sink.done();
        return true;
      },
      "application/json");
  ASSERT_TRUE(chunked);
  EXPECT_EQ(chunked->status, 413) << chunked->body.substr(0, 200);
  // Under the limit (white space padding a small request): read in full and answered.
  const std::string under =
      "{\"prompt\": [1], \"max_tokens\": 1" + std::string((15u << 20), ' ') + "}";
  const httplib::Result ok = c.Post("/v1/completions", under, "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body.substr(0, 300);
}

TEST(EngineServe, MalformedInputAnswers400WithAnOpenAIErrorObject) {
  const fs::path dir = temp_dir("serve_malformed");
  ServerProcess server(dir, {});
  httplib::Client c = client_for(server);
  struct Case {
    std::string path, body, param;
    int status = 400;
  };
  const std::string long_prompt = json(std::vector<int>(2048, 7)).dump();
  const std::vector<Case> cases = {
      {"/v1/completions", "{\"prompt\": [1, 2", ""},                       // malformed JSON
      {"/v1/completions", "[1, 2, 3]", ""},                                // not an object
      {"/v1/completions", "{\"prompt\": [1], \"bogus\": 1}", "bogus"},     // unknown field
      {"/v1/completions", "{\"prompt\": 17}", "prompt"},                   // wrong type
      {"/v1/completions", "{\"prompt\": [1, 256]}", "prompt"},             // outside the vocab
      {"/v1/completions", "{\"prompt\": [-1]}", "prompt"},                 // negative id
      {"/v1/completions", "{\"prompt\": [1.5]}", "prompt"},                // not an integer
      {"/v1/completions", "{\"prompt\": []}", "prompt"},                   // empty
      {"/v1/completions", "{\"prompt\": \"\"}", "prompt"},                 // empty text
      {"/v1/completions", "{\"max_tokens\": 3}", "prompt"},                // no prompt
      {"/v1/completions", "{\"prompt\": " + long_prompt + "}", "prompt"},  // too long
      {"/v1/completions", "{\"prompt\": [1, 2], \"max_tokens\": 2047}", "max_tokens"},
      {"/v1/completions", "{\"prompt\": [1], \"max_tokens\": 0}", "max_tokens"},
      {"/v1/completions", "{\"prompt\": [1], \"max_tokens\": \"8\"}", "max_tokens"},
      {"/v1/completions", "{\"prompt\": [1], \"temperature\": -0.7}", "temperature"},
      {"/v1/completions", "{\"prompt\": [1], \"top_p\": 1.5}", "top_p"},
      {"/v1/completions", "{\"prompt\": [1], \"n\": 0}", "n"},
      {"/v1/completions", "{\"prompt\": [1], \"stream\": \"yes\"}", "stream"},
      {"/v1/completions", "{\"prompt\": [1], \"stream_options\": {\"include_usage\": true}}",
       "stream_options"},
      {"/v1/completions", "{\"prompt\": [1], \"stop\": [\"\"]}", "stop"},
      {"/v1/completions", "{\"prompt\": [1], \"logprobs\": 21}", "logprobs"},
      {"/v1/completions", "{\"prompt\": [[1], \"ab\"]}", "prompt"},  // a mixed batch
      {"/v1/completions", "{\"prompt\": [1], \"model\": \"gpt-4\"}", "model", 404},
      {"/v1/chat/completions", "{\"max_tokens\": 3}", "messages"},
      {"/v1/chat/completions", "{\"messages\": \"hi\"}", "messages"},
      {"/v1/chat/completions", "{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}",
       "messages"},
      {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\"}]}", "messages"},
      {"/v1/chat/completions",
       "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
       "\"prompt\": [1]}",
       "prompt"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.path + " " + k.body.substr(0, 80));
    const httplib::Result r = c.Post(k.path, k.body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, k.status);
    const json j = json::parse(r->body);
    ASSERT_TRUE(j.contains("error"));
    const json& e = j["error"];
    for (const char* key : {"message", "type", "param", "code"})
      EXPECT_TRUE(e.contains(key)) << key;
    EXPECT_FALSE(e["message"].get<std::string>().empty());
    if (k.param.empty()) {
      EXPECT_TRUE(e["param"].is_null());
    } else {
      EXPECT_EQ(e["param"], k.param);
    }
  }
  // What the HTTP library answers itself has the error object too, with a reason: an unknown
  // path, and a POST without a body length (`curl -X POST URL` sends none).
  const httplib::Result unknown = c.Get("/v1/embeddings");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  EXPECT_NE(json::parse(unknown->body)["error"]["message"].get<std::string>().find(
                "no such endpoint: GET /v1/embeddings"),
            std::string::npos)
      << unknown->body;
  const std::string no_length =
      raw_exchange(server.port(),
                   "POST /reset_prefix_cache HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: "
                   "close\r\n\r\n");
  EXPECT_EQ(no_length.rfind("HTTP/1.1 400", 0), 0u) << no_length;
  EXPECT_NE(no_length.find("\"error\""), std::string::npos) << no_length;
  EXPECT_NE(no_length.find("Content-Length or chunked"), std::string::npos) << no_length;
  // A known path asked with another method: 405 naming the method it takes (FastAPI's status).
  for (const httplib::Result& wrong : {c.Get("/v1/completions"), c.Delete("/v1/chat/completions"),
                                       c.Post("/health", "", "application/json")}) {
    ASSERT_TRUE(wrong);
    EXPECT_EQ(wrong->status, 405) << wrong->body;
    EXPECT_NE(
        json::parse(wrong->body)["error"]["message"].get<std::string>().find("is not allowed on"),
        std::string::npos)
        << wrong->body;
    EXPECT_TRUE(wrong->has_header("Allow"));
  }
  // Still serving, nothing leaked into the engine.
  const std::string m = scrape(server);
  EXPECT_EQ(metric(m, "vllm:num_requests_running" + kLabels), 0);
  EXPECT_EQ(metric(m, "vllm:prompt_tokens_total" + kLabels), 0);
  // A JSON body sent as a form (curl -d without a Content-Type) is read as the body at any size
  // (the library refused one past 8 KiB as "too large"); a multipart form is a 400.
  const std::string long_stop =
      json{{"prompt", {1, 2}}, {"max_tokens", 1}, {"user", std::string(9000, 'x')}}.dump();
  const httplib::Result form =
      c.Post("/v1/completions", long_stop, "application/x-www-form-urlencoded");
  ASSERT_TRUE(form);
  EXPECT_EQ(form->status, 200) << form->body;
  const httplib::Result multipart =
      c.Post("/v1/completions", "--b\r\n\r\n--b--\r\n", "multipart/form-data; boundary=b");
  ASSERT_TRUE(multipart);
  EXPECT_EQ(multipart->status, 400) << multipart->body;
  fs::remove_all(dir);
}

TEST(EngineServe, OverloadAnswers429) {
  const fs::path dir = temp_dir("serve_overload");
  ServerProcess server(dir, {"--max-in-flight", "1"});
  std::vector<int> statuses(16, 0);
  std::vector<std::string> bodies(16);
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      httplib::Client c = client_for(server);
      const json body = {{"prompt", {1, 2, 3}}, {"max_tokens", 1500}};
      const httplib::Result r = c.Post("/v1/completions", body.dump(), "application/json");
      if (r) {
        statuses[i] = r->status;
        bodies[i] = r->body;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  int ok = 0, refused = 0;
  for (int i = 0; i < 16; ++i) {
    if (statuses[i] == 200) ++ok;
    if (statuses[i] == 429) {
      ++refused;
      const json e = json::parse(bodies[i])["error"];
      EXPECT_EQ(e["type"], "server_overloaded");
    }
    EXPECT_TRUE(statuses[i] == 200 || statuses[i] == 429) << statuses[i];
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(refused, 1);
  fs::remove_all(dir);
}

// A batched prompt list whose second prompt finds no slot: 429, and its first prompt, already
// submitted, is withdrawn, not counted as an aborted request in /metrics.
TEST(EngineServe, ARefusedBatchIsNotCountedAsAborted) {
  const fs::path dir = temp_dir("serve_batch_429");
  ServerProcess server(dir, {"--max-in-flight", "2"});
  // The busy request streams: its first bytes say it holds its slot. (The batch was sent while
  // it connected before: a batch holding both slots refused the busy request instead, under a
  // loaded machine's scheduling, and every later batch was answered.)
  std::atomic<bool> holding{false}, done{false};
  std::thread busy([&] {
    httplib::Client c = client_for(server);
    const json body = {
        {"prompt", {1, 2, 3}}, {"max_tokens", 1200}, {"ignore_eos", true}, {"stream", true}};
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, std::size_t, std::uint64_t, std::uint64_t) {
      holding = true;
      return true;
    };
    httplib::Response res;
    httplib::Error err;
    (void)c.send(req, res, err);
    done = true;
  });
  for (int i = 0; i < 3000 && !holding && !done; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(holding.load());
  httplib::Client c = client_for(server);
  const json batch = {{"prompt", {"hello", "world"}}, {"max_tokens", 3}};
  const httplib::Result r = c.Post("/v1/completions", batch.dump(), "application/json");
  const bool busy_ended = done.load();
  busy.join();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429) << (busy_ended ? "the busy request (1,200 tokens) ended first" : "");
  const std::string m = scrape_settled(server.port());
  EXPECT_NE(m.find("finished_reason=\"abort\"} 0\n"), std::string::npos) << m;
  fs::remove_all(dir);
}

// The experiment's admission policy (policies.admission) sheds with 429 too, naming the bound.
TEST(EngineServe, ShedRequestsAnswer429) {
  const fs::path dir = temp_dir("serve_shed");
  ServerProcess server(dir, {"--set", "serving.max_num_seqs=1", "--set",
                             "policies.admission={name: queue-length, max_waiting: 1}"});
  std::vector<int> statuses(8, 0);
  std::vector<std::string> bodies(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      httplib::Client c = client_for(server);
      const json body = {{"prompt", {1, 2, 3}}, {"max_tokens", 300}};
      const httplib::Result r = c.Post("/v1/completions", body.dump(), "application/json");
      if (r) {
        statuses[i] = r->status;
        bodies[i] = r->body;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  int ok = 0, shed = 0;
  for (int i = 0; i < 8; ++i) {
    if (statuses[i] == 200) ++ok;
    if (statuses[i] == 429) {
      ++shed;
      const json e = json::parse(bodies[i])["error"];
      EXPECT_EQ(e["type"], "server_overloaded");
      EXPECT_NE(e["message"].get<std::string>().find("max_waiting 1"), std::string::npos)
          << bodies[i];
    }
    EXPECT_TRUE(statuses[i] == 200 || statuses[i] == 429) << statuses[i] << " " << bodies[i];
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(shed, 1);
  fs::remove_all(dir);
}

TEST(EngineServe, TwoHundredFiftySixConcurrentStreamsAndTheirMetrics) {
  const fs::path dir = temp_dir("serve_256");
  // 1,024 blocks: room for all 256 at their longest (40 tokens, 3 blocks each) however their
  // arrivals interleave with the steps, so no run preempts (512 did when all 256 ran at once).
  ServerProcess server(dir, {"--set", "serving.num_gpu_blocks=1024"});
  constexpr int kClients = 256, kTokens = 8;
  std::vector<Stream> results(kClients);
  std::vector<int> prompt_len(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    prompt_len[i] = 4 + i % 29;
    threads.emplace_back([&, i] {
      std::vector<int> prompt;
      for (int k = 0; k < prompt_len[i]; ++k) prompt.push_back((i * 31 + k * 7) % 256);
      const json body = {{"prompt", prompt},
                         {"max_tokens", kTokens},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}}};
      results[i] = post_stream(server, "/v1/completions", body);
    });
  }
  for (std::thread& t : threads) t.join();
  std::int64_t prompt_total = 0;
  for (int i = 0; i < kClients; ++i) {
    SCOPED_TRACE(i);
    ASSERT_EQ(results[i].status, 200) << results[i].body;
    EXPECT_TRUE(results[i].done);
    ASSERT_FALSE(results[i].chunks.empty());
    EXPECT_EQ(results[i].chunks.back()["usage"]["completion_tokens"], kTokens);
    EXPECT_EQ(results[i].chunks.back()["usage"]["prompt_tokens"], prompt_len[i]);
    prompt_total += prompt_len[i];
  }
  const std::string m = scrape_settled(server.port());
  EXPECT_EQ(metric(m, "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"length\"}"),
            kClients);
  EXPECT_EQ(metric(m, "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"abort\"}"),
            0);
  EXPECT_EQ(metric(m, "vllm:prompt_tokens_total" + kLabels), prompt_total);
  EXPECT_EQ(metric(m, "vllm:generation_tokens_total" + kLabels), kClients * kTokens);
  EXPECT_EQ(metric(m, "vllm:time_to_first_token_seconds_count" + kLabels), kClients);
  EXPECT_EQ(metric(m, "vllm:inter_token_latency_seconds_count" + kLabels),
            kClients * (kTokens - 1));
  EXPECT_EQ(metric(m, "vllm:e2e_request_latency_seconds_count" + kLabels), kClients);
  EXPECT_EQ(metric(m, "vllm:e2e_request_latency_seconds_bucket{model_name=\"tiny\",le=\"+Inf\"}"),
            kClients);
  // No preemption: every prompt was looked up once.
  EXPECT_EQ(metric(m, "vllm:num_preemptions_total" + kLabels), 0);
  EXPECT_EQ(metric(m, "vllm:prefix_cache_queries_total" + kLabels), prompt_total);
  EXPECT_EQ(metric(m, "vllm:num_requests_running" + kLabels), 0);
  EXPECT_EQ(metric(m, "vllm:num_requests_waiting" + kLabels), 0);
  EXPECT_EQ(metric(m, "vllm:kv_cache_usage_perc" + kLabels), 0);
  fs::remove_all(dir);
}

// A raw connection that sends a streaming request and hangs up after `read_bytes` bytes of the
// response (0: at once).
void post_and_hang_up(int port, const std::string& body, std::size_t read_bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  std::string got;
  char buf[4096];
  while (got.size() < read_bytes) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
}

TEST(EngineServe, ClientsThatDisconnectAreAbortedAndHoldNoBlocks) {
  const fs::path dir = temp_dir("serve_disconnect");
  ServerProcess server(dir, {});
  const std::string streaming =
      json{{"prompt", std::vector<int>(300, 9)}, {"max_tokens", 1700}, {"stream", true}}.dump();
  const std::string plain = json{{"prompt", std::vector<int>(300, 5)}, {"max_tokens", 1700}}.dump();
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    // Streams read until their first token chunk; plain requests hang up at once.
    threads.emplace_back([&] { post_and_hang_up(server.port(), streaming, 300); });
    threads.emplace_back([&] { post_and_hang_up(server.port(), plain, 0); });
  }
  for (std::thread& t : threads) t.join();
  std::string m;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline) {
    m = scrape(server);
    const double aborted =
        metric(m, "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"abort\"}");
    const double finished =
        metric(m, "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"length\"}");
    // Counters move as each abort is applied, the gauges once the loop has applied them all: a
    // scrape in between sees both, so wait for the settled state rather than for the counters.
    if (aborted + finished >= 8 && metric(m, "vllm:num_requests_running" + kLabels) == 0 &&
        metric(m, "vllm:kv_cache_usage_perc" + kLabels) == 0)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Most of them are aborted long before 1700 tokens; whatever finished, nothing stays held.
  EXPECT_GE(metric(m, "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"abort\"}"),
            6);
  EXPECT_EQ(metric(m, "vllm:num_requests_running" + kLabels), 0);
  EXPECT_EQ(metric(m, "vllm:num_requests_waiting" + kLabels), 0);
  EXPECT_EQ(metric(m, "vllm:kv_cache_usage_perc" + kLabels), 0);
  // The server checked the pool's invariants after the aborts and is still serving.
  httplib::Client c = client_for(server);
  const httplib::Result r = c.Post(
      "/v1/completions", json{{"prompt", {1, 2}}, {"max_tokens", 2}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  ::kill(server.pid(), SIGTERM);
  EXPECT_EQ(server.wait_exit(std::chrono::seconds(20)), 0) << server.stderr_text();
  fs::remove_all(dir);
}

// Async scheduling (vLLM's --async-scheduling) under engine serve: the same greedy text as the
// synchronous server, clients that disconnect are aborted while a step is in flight and hold
// nothing afterwards, and /reset_prefix_cache works between steps.
TEST(EngineServe, AsyncSchedulingServesTheSameTextAndAbortsClients) {
  const fs::path dir = temp_dir("serve_async");
  fs::create_directories(dir / "sync");
  fs::create_directories(dir / "async");
  // With log probabilities (kept per sequence across the pipelined steps) and a seeded sampled
  // request beside it.
  const json body = {{"prompt", {1, 2, 3, 4, 5, 6, 7}}, {"max_tokens", 12}, {"logprobs", 2}};
  const json sampled = {
      {"prompt", {3, 1, 4}}, {"max_tokens", 10}, {"temperature", 0.9}, {"seed", 31}};
  std::string want, want_sampled;
  json want_logprobs;
  {
    ServerProcess sync(dir / "sync", {});
    httplib::Client c = client_for(sync);
    const httplib::Result r = c.Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    want = json::parse(r->body)["choices"][0]["text"].get<std::string>();
    want_logprobs = json::parse(r->body)["choices"][0]["logprobs"]["token_logprobs"];
    const httplib::Result rs = c.Post("/v1/completions", sampled.dump(), "application/json");
    ASSERT_TRUE(rs);
    want_sampled = json::parse(rs->body)["choices"][0]["text"].get<std::string>();
    ::kill(sync.pid(), SIGTERM);
    EXPECT_EQ(sync.wait_exit(std::chrono::seconds(20)), 0) << sync.stderr_text();
  }
  ServerProcess server(dir / "async", {"--set", "serving.async_scheduling=true"});
  httplib::Client c = client_for(server);
  const httplib::Result r = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], want);
  EXPECT_EQ(json::parse(r->body)["usage"]["completion_tokens"], 12);
  const json got_logprobs = json::parse(r->body)["choices"][0]["logprobs"]["token_logprobs"];
  ASSERT_EQ(got_logprobs.size(), 12u);
  ASSERT_EQ(want_logprobs.size(), 12u);
  for (std::size_t i = 0; i < 12; ++i) {
    EXPECT_NEAR(got_logprobs[i].get<double>(), want_logprobs[i].get<double>(), 1e-4) << i;
  }
  const httplib::Result rs = c.Post("/v1/completions", sampled.dump(), "application/json");
  ASSERT_TRUE(rs);
  EXPECT_EQ(json::parse(rs->body)["choices"][0]["text"], want_sampled);
  const std::string streaming =
      json{{"prompt", std::vector<int>(300, 9)}, {"max_tokens", 1700}, {"stream", true}}.dump();
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] { post_and_hang_up(server.port(), streaming, 300); });
  }
  for (std::thread& t : threads) t.join();
  std::string m;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline) {
    m = scrape(server);
    if (metric(m, "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"abort\"}") +
                metric(
                    m,
                    "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"length\"}") >=
            5 &&
        metric(m, "vllm:num_requests_running" + kLabels) == 0 &&
        metric(m, "vllm:kv_cache_usage_perc" + kLabels) == 0)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_GE(metric(m, "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"abort\"}"),
            3);
  EXPECT_EQ(metric(m, "vllm:num_requests_running" + kLabels), 0);
  EXPECT_EQ(metric(m, "vllm:kv_cache_usage_perc" + kLabels), 0);
  const httplib::Result reset = c.Post("/reset_prefix_cache", "", "application/json");
  ASSERT_TRUE(reset);
  EXPECT_EQ(reset->status, 200);
  EXPECT_EQ(reset->body, R"({"success":true})");
  // Still serving, the same text.
  const httplib::Result again = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(again);
  ASSERT_EQ(again->status, 200) << again->body;
  EXPECT_EQ(json::parse(again->body)["choices"][0]["text"], want);
  ::kill(server.pid(), SIGTERM);
  EXPECT_EQ(server.wait_exit(std::chrono::seconds(20)), 0) << server.stderr_text();
  fs::remove_all(dir);
}

TEST(EngineServe, SigtermDrainsInFlightRequestsThenExitsZero) {
  const fs::path dir = temp_dir("serve_sigterm");
  ServerProcess server(dir, {});
  std::atomic<bool> first_chunk{false};
  Stream st;
  std::thread client([&] {
    httplib::Client c = client_for(server);
    std::string buffer;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = json{{"prompt", std::vector<int>(100, 3)},
                    {"max_tokens", 1900},
                    {"stream", true},
                    {"stream_options", {{"include_usage", true}}}}
                   .dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, std::size_t len, std::uint64_t, std::uint64_t) {
      buffer.append(data, len);
      first_chunk = true;
      return true;
    };
    httplib::Response res;
    httplib::Error err;
    c.send(req, res, err);
    st.status = res.status;
    st.body = buffer;
  });
  while (!first_chunk) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ::kill(server.pid(), SIGTERM);
  // Draining: still running, refusing new requests. The server sees the signal at its loop's
  // next wake-up: wait until /health says so (a fixed 100 ms was too short for a loaded machine
  // to schedule it) rather than post before it.
  {
    httplib::Client h = client_for(server);
    for (int i = 0; i < 1000; ++i) {
      const httplib::Result r = h.Get("/health");
      if (!r || r->status == 503) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  int status = 0;
  const bool alive = waitpid(server.pid(), &status, WNOHANG) == 0;
  if (alive) {
    httplib::Client c = client_for(server);
    const httplib::Result r = c.Post(
        "/v1/completions", json{{"prompt", {1}}, {"max_tokens", 2}}.dump(), "application/json");
    if (r) {
      EXPECT_EQ(r->status, 503);
    }
  }
  client.join();
  EXPECT_EQ(st.status, 200);
  EXPECT_NE(st.body.find("\"completion_tokens\":1900"), std::string::npos);
  EXPECT_NE(st.body.find("data: [DONE]"), std::string::npos);
  if (alive) {
    EXPECT_EQ(server.wait_exit(std::chrono::seconds(20)), 0) << server.stderr_text();
  }
  fs::remove_all(dir);
}

TEST(EngineServe, SimBenchAgainstTheServerWritesARunFolderSimValidateReads) {
  const fs::path dir = temp_dir("serve_bench");
  ServerProcess server(dir, {});
  const std::string exp = (dir / "serve.yaml").string();
  const Cli bench = run_sim("bench " + exp + " --url " + server.url() + " --out " +
                                (dir / "bench").string() + " --progress",
                            dir);
  ASSERT_EQ(bench.code, 0) << bench.err;
  EXPECT_NE(bench.err.find("finished 20"), std::string::npos) << bench.err;  // progress line
  // A CPU server reports no board energy, so the folder has none.
  EXPECT_EQ(read_file(dir / "bench" / "summary.json").find("\"energy\""), std::string::npos);
  const Cli sim = run_sim("run " + exp + " --out " + (dir / "sim").string() + " --quiet", dir);
  ASSERT_EQ(sim.code, 0) << sim.err;
  const auto brows = read_csv(dir / "bench" / "requests.csv");
  const auto srows = read_csv(dir / "sim" / "requests.csv");
  ASSERT_EQ(brows.size(), 20u);
  ASSERT_EQ(srows.size(), 20u);
  std::int64_t prompt_total = 0, output_total = 0;
  // A request sent more than the dispatch jitter (10 ms) after its arrival counts from when it
  // was sent, and the bench says how many did (a loaded machine, e.g. under a sanitizer): exactly
  // those rows arrive later than the workload's.
  std::size_t waited = 0, later = 0;
  std::smatch said;
  if (std::regex_search(bench.err, said, std::regex("warning: ([0-9]+) requests waited"))) {
    waited = std::stoul(said[1].str());
  }
  for (std::size_t i = 0; i < brows.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(brows[i].at("id"), srows[i].at("id"));
    EXPECT_EQ(brows[i].at("status"), "finished");
    EXPECT_EQ(brows[i].at("prompt_tokens"), srows[i].at("prompt_tokens"));
    EXPECT_EQ(brows[i].at("output_tokens"), srows[i].at("output_tokens"));
    if (brows[i].at("arrival_s") != srows[i].at("arrival_s")) {
      ++later;
      EXPECT_GT(std::stod(brows[i].at("arrival_s")), std::stod(srows[i].at("arrival_s")) + 0.01);
    }
    EXPECT_EQ(brows[i].at("reason"), "length");  // the stream's finish_reason
    // What only the server knows is empty.
    EXPECT_EQ(brows[i].at("first_scheduled_s"), "");
    EXPECT_EQ(brows[i].at("cached_tokens"), "");
    EXPECT_EQ(brows[i].at("queueing_ms"), "");
    EXPECT_LE(std::stod(brows[i].at("ttft_ms")), std::stod(brows[i].at("e2e_ms")));
    EXPECT_GT(std::stod(brows[i].at("ttft_ms")), 0);
    prompt_total += std::stoll(brows[i].at("prompt_tokens"));
    output_total += std::stoll(brows[i].at("output_tokens"));
  }
  EXPECT_EQ(later, waited) << bench.err;
  const json summary = json::parse(read_file(dir / "bench" / "summary.json"));
  EXPECT_EQ(summary["run"]["backend"], "bench");
  EXPECT_EQ(summary["requests"]["completed"], 20);
  // The client does not know the server's GPUs: no count, no goodput per GPU.
  EXPECT_FALSE(summary["run"].contains("gpus"));
  EXPECT_FALSE(summary["goodput"].contains("requests_per_s_per_gpu"));
  EXPECT_EQ(json::parse(read_file(dir / "sim" / "summary.json"))["run"]["gpus"], 1);
  // The server saw exactly what the client sent; shared prefixes hit its prefix cache.
  const std::string m = scrape_settled(server.port());
  EXPECT_EQ(metric(m, "vllm:prompt_tokens_total" + kLabels), prompt_total);
  EXPECT_EQ(metric(m, "vllm:generation_tokens_total" + kLabels), output_total);
  EXPECT_EQ(metric(m, "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"length\"}"),
            20);
  EXPECT_GT(metric(m, "vllm:prefix_cache_hits_total" + kLabels), 0);
  const Cli validate =
      run_sim("validate " + (dir / "sim").string() + " " + (dir / "bench").string() + " --out " +
                  (dir / "validation").string(),
              dir);
  EXPECT_EQ(validate.code, 0) << validate.err;
  EXPECT_NE(validate.out.find("does not record its KV block count"), std::string::npos)
      << validate.out;
  EXPECT_NE(validate.out.find("(bench)\n"), std::string::npos) << validate.out;  // not "engine"
  const json v = json::parse(read_file(dir / "validation" / "validation.json"));
  EXPECT_EQ(v["requests"]["compared"], 20) << v.dump();
  fs::remove_all(dir);
}

// vLLM's return_token_ids: each choice's output ids (the tokens logprobs name by id) and the
// prompt's, the stream's the same ids chunk by chunk. A literal request's outputs are
// identified by value, so a next prompt that sends the reply's ids back hits the reply's
// blocks, as in vLLM: a 40-token prompt and a 30-token reply leave 69 computed tokens, 4 full
// blocks of 16 (2 of them holding reply tokens), and the follow-up hits all 64 tokens of them.
// A `sim bench` of sessions quotes the replies that way: two conversations of three turns hit
// 64 + 96 tokens each (a turn's computed blocks: 40 + 29 and 78 + 29 tokens).
TEST(EngineServe, TokenIdsComeBackAndQuotedRepliesHitTheirBlocks) {
  const fs::path dir = temp_dir("serve_token_ids");
  ServerProcess server(dir, {});
  httplib::Client c = client_for(server);
  std::vector<int> prompt;
  for (int i = 1; i <= 40; ++i) prompt.push_back(i);
  json body = {{"prompt", prompt},   {"max_tokens", 30},
               {"ignore_eos", true}, {"return_token_ids", true},
               {"logprobs", 0},      {"return_tokens_as_token_ids", true}};
  const json a = completion_ok(c, body);
  const json& choice = a["choices"][0];
  ASSERT_EQ(choice["token_ids"].size(), 30u) << a.dump();
  EXPECT_EQ(choice["prompt_token_ids"], json(prompt));
  for (std::size_t i = 0; i < 30; ++i) {
    EXPECT_EQ(choice["logprobs"]["tokens"][i],
              "token_id:" + std::to_string(choice["token_ids"][i].get<int>()))
        << i;
  }
  json sbody = body;
  sbody["stream"] = true;
  const Stream st = post_stream(server, "/v1/completions", sbody);
  ASSERT_EQ(st.status, 200) << st.body;
  json streamed = json::array();
  int with_prompt = 0;
  for (const json& ch : st.chunks) {
    if (ch["choices"].empty()) continue;
    for (const json& id : ch["choices"][0]["token_ids"]) streamed.push_back(id);
    if (ch["choices"][0].contains("prompt_token_ids")) {
      ++with_prompt;
      EXPECT_EQ(ch["choices"][0]["prompt_token_ids"], json(prompt));
    }
  }
  EXPECT_EQ(streamed, choice["token_ids"]);
  EXPECT_EQ(with_prompt, 1);
  // The follow-up: the prompt, the reply's ids, 8 new tokens.
  const std::string before = scrape_settled(server.port());
  std::vector<int> next = prompt;
  for (const json& id : choice["token_ids"]) next.push_back(id.get<int>());
  for (int i = 0; i < 8; ++i) next.push_back(200 + i);
  completion_ok(c, {{"prompt", next}, {"max_tokens", 1}});
  const std::string after = scrape_settled(server.port());
  EXPECT_EQ(metric(after, "vllm:prefix_cache_hits_total" + kLabels) -
                metric(before, "vllm:prefix_cache_hits_total" + kLabels),
            64);
  // Sessions through sim bench.
  write_file(dir / "chat.yaml",
             "name: chat\nseed: 2\nmodel: tiny\nhardware: H100-SXM\n"
             "workload: {type: multiturn, num_sessions: 2,"
             " session_arrival: {process: poisson, rate: 20}, turns: {dist: fixed, value: 3},"
             " think_time_s: {dist: fixed, value: 0.02},"
             " first_prompt_len: {dist: fixed, value: 40}, new_tokens: {dist: fixed, value: 8},"
             " output_len: {dist: fixed, value: 30}}\n");
  const Cli bench = run_sim("bench " + (dir / "chat.yaml").string() + " --url " + server.url() +
                                " --out " + (dir / "bench").string(),
                            dir);
  ASSERT_EQ(bench.code, 0) << bench.err;
  EXPECT_EQ(bench.err.find("without token ids"), std::string::npos) << bench.err;
  const auto rows = read_csv(dir / "bench" / "requests.csv");
  ASSERT_EQ(rows.size(), 6u);
  for (const auto& row : rows) EXPECT_EQ(row.at("status"), "finished");
  const std::string end = scrape_settled(server.port());
  EXPECT_EQ(metric(end, "vllm:prefix_cache_hits_total" + kLabels) -
                metric(after, "vllm:prefix_cache_hits_total" + kLabels),
            2 * (64 + 96));
  fs::remove_all(dir);
}

// `sim bench` sends a request's priority (when not 0) and tenant (as OpenAI's `user`): a server
// scheduling by priority serves a mix whose batch class has priority 1; an fcfs server refuses
// those requests (400, param priority), as vLLM does without priority scheduling.
// A workload with parallel sampling (`n: 3`) and draws (workload.sampling: the server accepts
// what sim bench sends of them): sim bench sends n and reads the choices by index,
// so its requests.csv has the simulator's output_tokens (every sample's tokens), the server's
// counter agrees, and TPOT is per sequence (docs/metrics.md "Parallel sampling").
TEST(EngineServe, SimBenchSendsNAndCountsEveryChoice) {
  const fs::path dir = temp_dir("serve_bench_n");
  ServerProcess server(dir, {});
  write_file(dir / "n.yaml",
             "name: bench-n\nseed: 5\nmodel: tiny\nhardware: H100-SXM\n"
             "serving: {block_size: 16, num_gpu_blocks: 512, max_num_batched_tokens: 4096, "
             "max_num_seqs: 256, max_model_len: 2048}\n"
             "workload: {type: synthetic, num_requests: 8, n: 3, arrival: {process: poisson, "
             "rate: 40}, prompt_len: {dist: fixed, value: 20}, output_len: {dist: fixed, value: "
             "6}, sampling: {temperature: 0.8, top_p: 0.9, seed: 3, presence_penalty: 0.5, top_k: "
             "50, min_p: 0.02, repetition_penalty: 1.1}}\n");
  const Cli bench = run_sim("bench " + (dir / "n.yaml").string() + " --url " + server.url() +
                                " --out " + (dir / "bench").string(),
                            dir);
  ASSERT_EQ(bench.code, 0) << bench.err;
  const Cli sim = run_sim(
      "run " + (dir / "n.yaml").string() + " --out " + (dir / "sim").string() + " --quiet", dir);
  ASSERT_EQ(sim.code, 0) << sim.err;
  const auto brows = read_csv(dir / "bench" / "requests.csv");
  const auto srows = read_csv(dir / "sim" / "requests.csv");
  ASSERT_EQ(brows.size(), 8u);
  ASSERT_EQ(srows.size(), 8u);
  for (std::size_t i = 0; i < brows.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(brows[i].at("status"), "finished") << brows[i].at("reason");
    EXPECT_EQ(brows[i].at("output_tokens"), "18");
    EXPECT_EQ(brows[i].at("output_tokens"), srows[i].at("output_tokens"));
    // Per sequence: (E2E - TTFT) / 5, not / 17.
    const double tpot = std::stod(brows[i].at("tpot_ms"));
    const double e2e = std::stod(brows[i].at("e2e_ms")), ttft = std::stod(brows[i].at("ttft_ms"));
    EXPECT_NEAR(tpot, (e2e - ttft) / 5, 1e-3 + 1e-3 * tpot);
  }
  const std::string m = scrape_settled(server.port());
  EXPECT_EQ(metric(m, "vllm:generation_tokens_total" + kLabels), 8 * 18);
  EXPECT_EQ(metric(m, "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"length\"}"),
            8);
  fs::remove_all(dir);
}

// workload.sampling.prompt_logprobs through `sim bench`: sent as echo + logprobs (a stream cannot
// carry vLLM's prompt_logprobs), each request answered in full, and the server's prefix cache is
// never read for them though the workload shares a prefix, as the simulator has it.
TEST(EngineServe, SimBenchSendsPromptLogprobsAsEcho) {
  const fs::path dir = temp_dir("serve_bench_plp");
  ServerProcess server(dir, {});
  write_file(dir / "plp.yaml",
             "name: bench-plp\nseed: 5\nmodel: tiny\nhardware: H100-SXM\n"
             "serving: {block_size: 16, num_gpu_blocks: 512, max_num_batched_tokens: 4096, "
             "max_num_seqs: 256, max_model_len: 2048}\n"
             "workload: {type: synthetic, num_requests: 6, arrival: {process: poisson, rate: 40}, "
             "prompt_len: {dist: fixed, value: 48}, output_len: {dist: fixed, value: 3}, "
             "shared_prefix: {num_prefixes: 1, length: 40, fraction: 1.0}, "
             "sampling: {prompt_logprobs: 1}}\n");
  const Cli bench = run_sim("bench " + (dir / "plp.yaml").string() + " --url " + server.url() +
                                " --out " + (dir / "bench").string(),
                            dir);
  ASSERT_EQ(bench.code, 0) << bench.err;
  const auto rows = read_csv(dir / "bench" / "requests.csv");
  ASSERT_EQ(rows.size(), 6u);
  for (const auto& r : rows) {
    EXPECT_EQ(r.at("status"), "finished") << r.at("reason");
    EXPECT_EQ(r.at("output_tokens"), "3");
  }
  const std::string m = scrape_settled(server.port());
  EXPECT_EQ(metric(m, "vllm:prefix_cache_queries_total" + kLabels), 0);
  EXPECT_EQ(metric(m, "vllm:prefix_cache_hits_total" + kLabels), 0);
  EXPECT_EQ(metric(m, "vllm:generation_tokens_total" + kLabels), 6 * 3);
  fs::remove_all(dir);
}

// `sim bench --model NAME` the server does not list is bad input, found before any request is
// sent; a bench in which every request fails writes its run folder (each request's reason) and
// exits 1 naming the first reason, so a script cannot take it for a measurement.
TEST(EngineServe, SimBenchRefusesAnUnservedModelAndFailsWhenNothingFinished) {
  const fs::path dir = temp_dir("serve_bench_fail");
  ServerProcess server(dir, {});
  const std::string exp = (dir / "serve.yaml").string();
  const Cli other = run_sim(
      "bench " + exp + " --url " + server.url() + " --model other --out " + (dir / "b").string(),
      dir);
  EXPECT_EQ(other.code, 2) << other.err;
  EXPECT_NE(other.err.find("--model other: the server at " + server.url() +
                           " does not serve it (GET /v1/models lists 'tiny')"),
            std::string::npos)
      << other.err;
  EXPECT_FALSE(fs::exists(dir / "b"));
  // Prompts longer than the server's max_model_len (2048): each one is refused with HTTP 400.
  write_file(dir / "long.yaml",
             "name: bench-long\nseed: 5\nmodel: tiny\nhardware: H100-SXM\n"
             "serving: {block_size: 16, num_gpu_blocks: 1024, max_num_batched_tokens: 8192, "
             "max_num_seqs: 256, max_model_len: 8192}\n"
             "workload: {type: synthetic, num_requests: 3, arrival: {process: poisson, rate: 40}, "
             "prompt_len: {dist: fixed, value: 3000}, output_len: {dist: fixed, value: 2}}\n");
  const Cli failed = run_sim("bench " + (dir / "long.yaml").string() + " --url " + server.url() +
                                 " --model tiny --out " + (dir / "b").string(),
                             dir);
  EXPECT_EQ(failed.code, 1) << failed.err;
  EXPECT_NE(failed.err.find("sim bench: error: no request finished (request 0: HTTP 400"),
            std::string::npos)
      << failed.err;
  const auto rows = read_csv(dir / "b" / "requests.csv");
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& r : rows) EXPECT_EQ(r.at("status"), "rejected") << r.at("reason");
  fs::remove_all(dir);
}

TEST(EngineServe, SimBenchSendsPriorityAndUser) {
  const fs::path dir = temp_dir("serve_bench_priority");
  fs::create_directories(dir / "priority");
  fs::create_directories(dir / "fcfs");
  write_file(dir / "mix.yaml",
             "name: bench-mix\nseed: 5\nmodel: tiny\nhardware: H100-SXM\n"
             "serving: {block_size: 16, num_gpu_blocks: 512, max_num_batched_tokens: 4096, "
             "max_num_seqs: 256, max_model_len: 2048}\n"
             "workload:\n  type: mix\n  parts:\n"
             "    - {class: chat, workload: {type: synthetic, num_requests: 6, arrival: {process: "
             "poisson, rate: 40}, prompt_len: {dist: fixed, value: 20}, output_len: {dist: fixed, "
             "value: 4}}}\n"
             "    - {class: batch, priority: 1, workload: {type: synthetic, num_requests: 6, "
             "arrival: {process: poisson, rate: 40}, prompt_len: {dist: fixed, value: 30}, "
             "output_len: {dist: fixed, value: 4}}}\n");
  // Statuses by class of one bench run against `server`.
  const auto bench = [&](const ServerProcess& server, const std::string& name) {
    const Cli b = run_sim("bench " + (dir / "mix.yaml").string() + " --url " + server.url() +
                              " --out " + (dir / ("bench-" + name)).string(),
                          dir);
    std::map<std::string, std::map<std::string, int>> statuses;
    std::string reasons;
    for (const auto& row : read_csv(dir / ("bench-" + name) / "requests.csv")) {
      ++statuses[row.at("class")][row.at("status")];
      reasons += row.at("reason") + "\n";
    }
    EXPECT_EQ(b.code, 0) << b.err;
    return std::make_pair(statuses, reasons);
  };
  {
    ServerProcess server(dir / "priority", {"--set", "policies.queue=priority"});
    auto [statuses, reasons] = bench(server, "priority");
    EXPECT_EQ(statuses["chat"]["finished"], 6) << reasons;
    EXPECT_EQ(statuses["batch"]["finished"], 6) << reasons;
  }
  ServerProcess server(dir / "fcfs", {});
  auto [statuses, reasons] = bench(server, "fcfs");
  EXPECT_EQ(statuses["chat"]["finished"], 6) << reasons;
  EXPECT_EQ(statuses["batch"]["rejected"], 6) << reasons;
  // The bench records the server's message with the status.
  EXPECT_NE(reasons.find("HTTP 400: 'priority': got 1 but the server does not schedule by "
                         "priority"),
            std::string::npos)
      << reasons;
  fs::remove_all(dir);
}

// LoRA adapters served by name (vLLM's --lora-modules; serving/lora_modules.h): GET /v1/models
// lists each with the base model as parent, a request naming an adapter runs under it (its
// greedy tokens differ from the base model's, the response names the adapter), an unknown name
// is 404, /metrics has vllm:lora_requests_info, and `sim bench` sends each request of a
// `workload.lora` under its adapter's name (all finish). Bad --lora-modules are exit code 2.
TEST(EngineServe, LoraAdaptersAreServedByNameAndSimBenchSendsThem) {
  const fs::path dir = temp_dir("serve_lora");
  std::string exp = kServeExperiment;
  exp.replace(exp.find("policies:"), 0, "  lora: {max_loras: 2, max_lora_rank: 8}\n");
  exp += "  lora: {adapters: 3, rank: 8}\n";
  write_file(dir / "lora.yaml", exp);
  ServeProcess server(dir, dir / "lora.yaml", {"--lora-modules", "sql=1", "chat=2:4", "lora-3=3"});
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(30);
  const httplib::Result models = c.Get("/v1/models");
  ASSERT_TRUE(models && models->status == 200);
  const json m = json::parse(models->body)["data"];
  ASSERT_EQ(m.size(), 4u) << m.dump();
  EXPECT_EQ(m[0]["id"], "tiny");
  EXPECT_TRUE(m[0]["parent"].is_null());
  EXPECT_EQ(m[1]["id"], "sql");
  EXPECT_EQ(m[1]["parent"], "tiny");
  EXPECT_EQ(m[2]["root"], "adapter 2 (rank 4)");
  const auto complete = [&](const std::string& model, int first) {
    const json body = {{"model", model},
                       {"prompt", {first, first + 1, first + 2, first + 3}},
                       {"max_tokens", 16},
                       {"ignore_eos", true}};
    const httplib::Result r = c.Post("/v1/completions", body.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
    const json j = r && r->status == 200 ? json::parse(r->body) : json::object();
    if (j.empty()) return std::string();
    EXPECT_EQ(j["model"], model);
    return j["choices"][0]["text"].get<std::string>();
  };
  int differ = 0;
  for (const int first : {3, 40, 90}) {
    const std::string base = complete("tiny", first), sql = complete("sql", first);
    EXPECT_EQ(complete("sql", first), sql);  // greedy: the same again
    differ += base != sql ? 1 : 0;
  }
  EXPECT_GT(differ, 0) << "adapter 1 never changed the base model's tokens";
  const httplib::Result missing =
      c.Post("/v1/completions", json({{"model", "lora-4"}, {"prompt", {1, 2}}}).dump(),
             "application/json");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  const std::string metrics = scrape_settled(server.port());
  EXPECT_NE(metrics.find("# TYPE vllm:lora_requests_info gauge\nvllm:lora_requests_info{max_lora="
                         "\"2\",waiting_lora_adapters=\"\",running_lora_adapters=\"\"} "),
            std::string::npos)
      << metrics;
  // sim bench sends the workload's adapters 1, 2 and 3 as sql, chat and lora-3.
  const Cli bench =
      run_sim("bench " + (dir / "lora.yaml").string() + " --url " + server.url() + " --out " +
                  (dir / "bench").string() + " --lora-modules sql=1 chat=2:4",
              dir);
  ASSERT_EQ(bench.code, 0) << bench.err;
  const json summary = json::parse(read_file(dir / "bench" / "summary.json"));
  EXPECT_EQ(summary["requests"]["completed"], 20) << summary.dump();
  std::int64_t adapted = 0;
  for (const auto& [id, n] : summary["lora"]["requests_by_adapter"].items()) {
    if (id != "base") adapted += n.get<std::int64_t>();
  }
  EXPECT_EQ(adapted, 20);
  // Names the server does not serve: exit code 2 before any request, naming the adapter and
  // the names served (adapter 2 would go as lora-2; the server serves it as chat).
  const Cli unserved =
      run_sim("bench " + (dir / "lora.yaml").string() + " --url " + server.url() + " --out " +
                  (dir / "bench-unserved").string() + " --lora-modules sql=1",
              dir);
  EXPECT_EQ(unserved.code, 2) << unserved.err;
  EXPECT_NE(unserved.err.find("adapter 2 (of workload.lora.adapters 3) as 'lora-2', which the "
                              "server at " +
                              server.url()),
            std::string::npos)
      << unserved.err;
  EXPECT_NE(unserved.err.find("'tiny', 'sql', 'chat', 'lora-3'"), std::string::npos)
      << unserved.err;
  EXPECT_FALSE(fs::exists(dir / "bench-unserved"));
  // Bad --lora-modules: exit code 2 with the reason, before the engine loads.
  const auto serve_error = [&](const std::string& yaml, const std::string& modules) {
    const std::string cmd = servelab_program("engine") + " serve " + yaml +
                            " --port 0 --lora-modules " + modules + " > " + (dir / "o").string() +
                            " 2> " + (dir / "e").string();
    const int status = std::system(cmd.c_str());
    EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 2) << modules;
    return read_file(dir / "e");
  };
  write_file(dir / "plain.yaml", kServeExperiment);
  const std::string lora = (dir / "lora.yaml").string();
  EXPECT_NE(serve_error((dir / "plain.yaml").string(), "sql=1").find("serving.lora"),
            std::string::npos);
  EXPECT_NE(serve_error(lora, "sql").find("expected NAME=ID or NAME=ID:RANK"), std::string::npos);
  EXPECT_NE(serve_error(lora, "sql=0").find("adapter id"), std::string::npos);
  EXPECT_NE(serve_error(lora, "sql=1:16").find("exceeds serving.lora.max_lora_rank (8)"),
            std::string::npos);
  EXPECT_NE(serve_error(lora, "sql=1 sql=2").find("given twice"), std::string::npos);
  EXPECT_NE(serve_error(lora, "sql=1 chat=1").find("already served as 'sql'"), std::string::npos);
  EXPECT_NE(serve_error(lora, "tiny=1").find("the base model's"), std::string::npos);
  fs::remove_all(dir);
}

TEST(EngineServe, BadCommandLinesAreUsageErrors) {
  const fs::path dir = temp_dir("serve_cli");
  const auto engine = [&](const std::string& args) {
    const std::string cmd = servelab_program("engine") + " " + args + " > " + (dir / "o").string() +
                            " 2> " + (dir / "e").string();
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  EXPECT_EQ(engine("serve"), 2);                      // neither EXP.yaml nor --model
  EXPECT_EQ(engine("serve x.yaml --model tiny"), 2);  // both
  EXPECT_EQ(engine("serve --model tiny --port 70000"), 2);
  {
    // A port a server listens on is refused, not shared with it (cpp-httplib's SO_REUSEPORT).
    const ServerProcess running(dir, {});
    EXPECT_EQ(engine("serve --model tiny --port " + std::to_string(running.port())), 2);
    EXPECT_NE(read_file(dir / "e").find("cannot bind"), std::string::npos) << read_file(dir / "e");
  }
  EXPECT_EQ(engine("serve --model no-such-model --port 0"), 2);
  EXPECT_NE(read_file(dir / "e").find("no-such-model"), std::string::npos);
  // A tokenizer with more tokens than the model (GPT-2's 50,257 for tiny's 256), a missing one.
  const std::string gpt2 = servelab_home().string() + "/data/tokenizers/gpt2/tokenizer.json";
  EXPECT_EQ(engine("serve --model tiny --port 0 --tokenizer " + gpt2), 2);
  EXPECT_NE(read_file(dir / "e").find("more than model tiny's 256"), std::string::npos)
      << read_file(dir / "e");
  EXPECT_EQ(engine("serve --model tiny --port 0 --tokenizer " + (dir / "none.json").string()), 2);
  EXPECT_NE(read_file(dir / "e").find("none.json"), std::string::npos) << read_file(dir / "e");
  // Tool calling: both flags or neither; a parser whose tags the tokenizer lacks.
  EXPECT_EQ(engine("serve --model tiny --port 0 --enable-auto-tool-choice"), 2);
  EXPECT_NE(read_file(dir / "e").find("--enable-auto-tool-choice needs --tool-call-parser"),
            std::string::npos)
      << read_file(dir / "e");
  EXPECT_EQ(engine("serve --model tiny --port 0 --tool-call-parser hermes"), 2);
  EXPECT_EQ(engine("serve --model tiny --port 0 --enable-auto-tool-choice --tool-call-parser "
                   "pythonic"),
            2);
  EXPECT_EQ(engine("serve --model tiny --port 0 --enable-auto-tool-choice --tool-call-parser "
                   "hermes"),
            2);
  EXPECT_NE(read_file(dir / "e").find("the tokenizer has no <tool_call> token"), std::string::npos)
      << read_file(dir / "e");
  EXPECT_EQ(engine("serve --model tiny --port 0 --reasoning-parser deepseek_r1"), 2);
  EXPECT_NE(read_file(dir / "e").find("the tokenizer has no <think> token"), std::string::npos)
      << read_file(dir / "e");
  EXPECT_EQ(engine("serve --model tiny --port 0 --chat-template-content-format xml"), 2);
  EXPECT_NE(read_file(dir / "e").find("--chat-template-content-format"), std::string::npos)
      << read_file(dir / "e");
  // A chat template that is neither a file nor a template; one outside the Jinja subset.
  EXPECT_EQ(engine("serve --model tiny --port 0 --chat-template " + (dir / "t.jinja").string()), 2);
  EXPECT_NE(read_file(dir / "e").find("t.jinja: no such file, and not a template"),
            std::string::npos)
      << read_file(dir / "e");
  // A template beside the tokenizer outside the subset: the error says how to give another.
  fs::create_directories(dir / "tok");
  fs::copy_file(servelab_home() / "data/tokenizers/bytes/tokenizer.json",
                dir / "tok/tokenizer.json");
  write_file(dir / "tok/tokenizer_config.json",
             R"({"chat_template": "{% call m() %}x{% endcall %}"})");
  EXPECT_EQ(
      engine("serve --model tiny --port 0 --tokenizer " + (dir / "tok/tokenizer.json").string()),
      2);
  EXPECT_NE(read_file(dir / "e").find("unsupported tag 'call'"), std::string::npos)
      << read_file(dir / "e");
  EXPECT_NE(read_file(dir / "e").find("--chat-template FILE gives another"), std::string::npos)
      << read_file(dir / "e");
  write_file(dir / "t.jinja", "line one\n{% include 'other.jinja' %}\n");
  EXPECT_EQ(engine("serve --model tiny --port 0 --chat-template " + (dir / "t.jinja").string()), 2);
  EXPECT_NE(read_file(dir / "e").find("t.jinja:2: unsupported tag 'include'"), std::string::npos)
      << read_file(dir / "e");
  EXPECT_EQ(run_sim("bench x.yaml", dir).code, 2);  // no --url
  // A server that cannot be reached, a URL that is not one: bad input, nothing written.
  write_file(dir / "e.yaml", kServeExperiment);
  const Cli unreachable = run_sim("bench " + (dir / "e.yaml").string() +
                                      " --url http://127.0.0.1:1 --out " + (dir / "b").string(),
                                  dir);
  EXPECT_EQ(unreachable.code, 2);
  EXPECT_NE(unreachable.err.find("cannot reach the server"), std::string::npos) << unreachable.err;
  EXPECT_FALSE(fs::exists(dir / "b"));
  const Cli not_url = run_sim("bench " + (dir / "e.yaml").string() + " --url localhost:8000", dir);
  EXPECT_EQ(not_url.code, 2);
  EXPECT_NE(not_url.err.find("--url: expected http://HOST:PORT"), std::string::npos) << not_url.err;
  for (const char* port : {"99999", "0", "80x"}) {
    const Cli bad_port = run_sim(
        "bench " + (dir / "e.yaml").string() + " --url http://127.0.0.1:" + port + "/v1", dir);
    EXPECT_EQ(bad_port.code, 2) << port;
    EXPECT_NE(bad_port.err.find("expected a number in [1, 65535]"), std::string::npos)
        << bad_port.err;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
