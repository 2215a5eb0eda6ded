#include "engine/server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <thread>

#include "core/scheduler_observer.h"
#include "core/stop_conditions.h"
#include "engine/engine_loop.h"
#include "engine/generation_config.h"
#include "engine/openai_api.h"
#include "engine/output_text.h"
#include "engine/reasoning_parser.h"
#include "engine/serve_metrics.h"
#include "engine/serve_queue.h"
#include "engine/stop_strings.h"
#include "engine/tool_call_stream.h"
#include "serving/home.h"
#include "serving/interrupt.h"
#include "serving/lora_modules.h"
#include "serving/replica.h"
#include "serving/tokenizer.h"
#include "serving/utf8.h"
#include "traces/sampling_options.h"

namespace servelab {

namespace {

constexpr auto kPoll = std::chrono::milliseconds(50);

// The executor as the replica's backend, keeping the log probabilities of each step's tokens
// (StepResult::logprobs, fork_logprobs) by sequence id until the observer hands them on with the
// tokens. A queue per sequence: with async scheduling the next plan runs before the previous one
// completes. Loop thread only.
class LogprobTap : public Backend {
 public:
  explicit LogprobTap(Backend& inner) : inner_(inner) {}
  std::string_view name() const override { return inner_.name(); }
  StepResult execute(const StepPlan& plan) override {
    StepResult r = inner_.execute(plan);
    std::size_t fork = 0;
    for (std::size_t i = 0; i < plan.requests.size(); ++i) {
      const ScheduledRequest& e = plan.requests[i];
      if (!e.samples) continue;
      if (i < r.logprobs.size() && e.spec->logprobs >= 0) pending_[e.id].push_back(r.logprobs[i]);
      for (std::int32_t k = 1; k < e.num_samples; ++k, ++fork) {
        if (fork < r.fork_logprobs.size() && e.spec->logprobs >= 0) {
          pending_[sample_request_id(e.id, k)].push_back(r.fork_logprobs[fork]);
        }
      }
    }
    // Prompt positions, each kept the first time it comes (a recompute after a preemption
    // computes them again).
    for (PromptLogprobs& p : r.prompt_logprobs) {
      const ScheduledRequest& e = plan.requests[p.entry];
      Prompt& kept = prompt_[e.id];
      if (kept.taken) continue;
      kept.values.resize(static_cast<std::size_t>(e.spec->prompt_len - 1));
      kept.filled.resize(kept.values.size());
      for (std::size_t j = 0; j < p.values.size(); ++j) {
        const auto at = static_cast<std::size_t>(p.first_position - 1) + j;
        if (kept.filled[at] != 0) continue;
        kept.values[at] = std::move(p.values[j]);
        kept.filled[at] = 1;
        ++kept.count;
      }
    }
    return r;
  }
  // Request req's prompt log probabilities, once all have come and the first time only.
  std::optional<std::vector<TokenLogprobs>> take_prompt(const Request& req) {
    const auto need = static_cast<std::size_t>(req.spec.prompt_len - 1);
    if (need == 0) {
      Prompt& kept = prompt_[req.id()];
      if (kept.taken) return std::nullopt;
      kept.taken = true;
      return std::vector<TokenLogprobs>{};
    }
    const auto it = prompt_.find(req.id());
    if (it == prompt_.end() || it->second.taken || it->second.count < need) return std::nullopt;
    it->second.taken = true;
    it->second.filled = {};
    return std::move(it->second.values);
  }
  // The oldest kept log probabilities of sequence `id` (none when it asked for none).
  std::optional<TokenLogprobs> take(RequestId id) {
    const auto it = pending_.find(id);
    if (it == pending_.end() || it->second.empty()) return std::nullopt;
    TokenLogprobs lp = std::move(it->second.front());
    it->second.pop_front();
    return lp;
  }
  // Request `id` (and its samples) ended: whatever a discarded step left goes.
  void forget(const Request& req) {
    pending_.erase(req.id());
    prompt_.erase(req.id());
    if (req.group == nullptr) return;
    for (const Request* s : req.group->samples) pending_.erase(s->id());
  }

 private:
  struct Prompt {
    std::vector<TokenLogprobs> values;  // position p at p - 1
    std::vector<std::uint8_t> filled;
    std::size_t count = 0;  // positions filled
    bool taken = false;     // handed to the request's channel
  };
  Backend& inner_;
  std::map<RequestId, std::deque<TokenLogprobs>> pending_;
  std::map<RequestId, Prompt> prompt_;
};

// Tokens and outcomes from the scheduler to the requests' channels and the metrics.
class ServeObserver : public SchedulerObserver {
 public:
  ServeObserver(ServeQueue& queue, ServeMetrics& metrics, LogprobTap& tap)
      : queue_(queue), metrics_(metrics), tap_(tap) {}
  void on_reject(const Request& req, TimeNs /*now*/) override {
    if (RequestChannel* ch = queue_.channel(req.id())) {
      ch->rejected(req.finish_reason, req.status == RequestStatus::kShed);
    }
    if (req.status == RequestStatus::kShed) metrics_.on_shed();
    queue_.done(req.id());
  }
  void on_step_tokens(std::span<const Request* const> requests,
                      std::span<const TimeNs> prev_token_ns, TimeNs now) override {
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const Request& r = *requests[i];
      if (prev_token_ns[i] < 0) metrics_.on_admitted(r.spec.prompt_len);
      metrics_.on_token(prev_token_ns[i], now, r.spec.arrival_ns);
      deliver(r);
    }
  }
  // Only the first token of a forked sample (k >= 1) comes alone: its request's TTFT was the
  // first token of sample 0.
  void on_token(const Request& req, TimeNs /*prev_token_ns*/, TimeNs /*now*/) override {
    metrics_.on_fork_token();
    deliver(req);
  }
  void on_preempt(const Request& /*req*/, TimeNs /*now*/) override { metrics_.on_preempt(); }
  void on_finish(const Request& req, TimeNs now) override {
    tap_.forget(req);
    RequestChannel* const ch = queue_.channel(req.id());
    std::vector<std::string> sample_reasons;
    if (req.group != nullptr) {
      for (const Request* s : req.group->samples) sample_reasons.push_back(s->finish_reason);
    }
    // A stop string's abort is a finish with "stop" (vLLM counts it so).
    const bool by_string =
        ch != nullptr && ch->finished(req.status, req.finish_reason, std::move(sample_reasons));
    if (ch == nullptr || !ch->withdrawn()) {
      metrics_.on_finish(req.status == RequestStatus::kFinished || by_string, req.spec.arrival_ns,
                         now, req.finish_reason == "stop" || by_string);
    }
    if (req.capped_from_tokens > 0) metrics_.on_capped();
    queue_.done(req.id());
  }

 private:
  void deliver(const Request& r) {
    std::optional<TokenLogprobs> lp = tap_.take(r.id());
    if (RequestChannel* ch = queue_.channel(base_request_id(r.id()))) {
      if (r.spec.prompt_logprobs >= 0 && r.spec.sample == 0) {
        if (auto prompt = tap_.take_prompt(r)) ch->prompt_logprobs(std::move(*prompt));
      }
      ch->token(r.spec.sample, r.output_tokens.back(), std::move(lp));
    }
  }
  ServeQueue& queue_;
  ServeMetrics& metrics_;
  LogprobTap& tap_;
};

// The queue as the loop's work source, refreshing the metrics' gauges as the state changes.
class ServeSource : public WorkSource {
 public:
  // `lora_modules`: the adapters' names (vllm:lora_requests_info), with `max_loras` > 0 only.
  ServeSource(ServeQueue& queue, ServeMetrics& metrics, Replica& replica, bool spec_decode,
              std::int32_t max_loras, const std::vector<LoraModule>& lora_modules)
      : queue_(queue),
        metrics_(metrics),
        replica_(replica),
        spec_decode_(spec_decode),
        max_loras_(max_loras),
        lora_modules_(lora_modules) {}
  void admit(TimeNs now, Scheduler& scheduler) override {
    queue_.admit(now, scheduler);
    publish();
  }
  bool wait_for_work(TimeNs now, const Scheduler& scheduler) override {
    return queue_.wait_for_work(now, scheduler);
  }
  void after_step(TimeNs /*end*/) override { publish(); }

 private:
  void publish() {
    const StepSnapshot s = replica_.snapshot();
    const double usage = s.num_usable_blocks > 0 ? static_cast<double>(s.kv_blocks_used) /
                                                       static_cast<double>(s.num_usable_blocks)
                                                 : 0.0;
    metrics_.set_state(s.running, s.waiting, usage, replica_.kv().stats());
    if (spec_decode_) metrics_.set_spec_decode(replica_.scheduler().counters());
    if (max_loras_ > 0) publish_lora();
  }
  void publish_lora() {
    std::vector<std::string> running, waiting;
    for (const Request* r : replica_.scheduler().running()) {
      if (r->spec.lora_id != 0) running.push_back(lora_model_name(lora_modules_, r->spec.lora_id));
    }
    for (const Request* r : replica_.scheduler().waiting()) {
      if (r->spec.lora_id != 0) waiting.push_back(lora_model_name(lora_modules_, r->spec.lora_id));
    }
    const double now_s =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    metrics_.set_lora(max_loras_, std::move(running), std::move(waiting), now_s);
  }
  ServeQueue& queue_;
  ServeMetrics& metrics_;
  Replica& replica_;
  bool spec_decode_;  // speculative decoding configured: publish its counters
  std::int32_t max_loras_;
  const std::vector<LoraModule>& lora_modules_;
};

// cpp-httplib 0.11 listens with a backlog of 5: a burst of clients connecting at once (a
// benchmark's 256 streams) overflows it and some connections are reset. The listening socket is
// a protected member; listen() again raises the backlog of a bound, listening socket.
class HttpServer : public httplib::Server {
 public:
  void raise_backlog(int backlog) { ::listen(svr_sock_, backlog); }
};

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.status == 429 || e.status == 503) res.set_header("Retry-After", "1");
  res.set_content(error_json(e), "application/json");
}

std::string sse(const std::string& json) { return "data: " + json + "\n\n"; }

// The largest request body the server reads (HTTP 413 past it).
constexpr std::size_t kMaxBodyBytes = std::size_t{16} << 20;

// A JSON route that reads its body itself (a ContentReader) and hands it to `fn(body, res)`:
// the HTTP library parses a body sent as a form (curl -d without a Content-Type) and refuses
// one past 8 KiB as "too large" before a plain handler runs; read this way it is the body, under
// the server's 16 MiB payload limit. The limit is kept here too: the library does not apply it
// to a chunked body, and a body it stops reading must be answered 413, not parsed as read so far.
template <class Fn>
httplib::Server::HandlerWithContentReader with_body(Fn fn) {
  return [fn](const httplib::Request& req, httplib::Response& res,
              const httplib::ContentReader& read) {
    if (req.is_multipart_form_data()) {  // the library would want part handlers to read it
      send_error(res, ApiError(400,
                               "expected a JSON body (Content-Type: application/json), got "
                               "multipart/form-data",
                               "invalid_request_error"));
      return;
    }
    std::string body;
    bool too_large = false;
    const bool complete = read([&](const char* data, std::size_t n) {
      if (body.size() + n > kMaxBodyBytes) {
        too_large = true;
        return false;
      }
      body.append(data, n);
      return true;
    });
    // A Content-Length past the limit: the library refuses to read the body at all.
    const std::string length = req.get_header_value("Content-Length");
    const bool declared_too_large =
        !length.empty() && std::strtoull(length.c_str(), nullptr, 10) > kMaxBodyBytes;
    if (too_large || declared_too_large) {
      send_error(res, ApiError(413, "the request body is over the server's limit of 16 MiB",
                               "invalid_request_error"));
      return;
    }
    if (!complete) {
      send_error(res, ApiError(400, "the request body could not be read in full",
                               "invalid_request_error"));
      return;
    }
    fn(body, res);
  };
}

// One choice (sample) of a response as its handler builds it.
struct Choice {
  std::vector<std::int32_t> tokens;     // the output so far (up to its stop string)
  std::vector<TokenLogprobs> logprobs;  // the tokens', when the request asked for them
  std::int64_t logprob_chars = 0;       // characters of the token texts streamed (text_offset)
  std::size_t text_sent = 0;            // bytes of its decoded text streamed
  bool first = true;
  bool finish_sent = false;
  bool stopped = false;  // a stop string ended it
  StopStrings stops;     // the request's stop strings (engine/stop_strings.h)
  // The text of its shown tokens (special ones left out unless the request keeps them, a stop
  // token unless include_stop_str_in_output), decoded as they arrive.
  OutputText text;
  // A stop token ended it (the model's EOS or a stop id: check_stop's "stop"): as vLLM's
  // detokenizer, its text is not shown unless include_stop_str_in_output; a stop id (not the
  // EOS) is vLLM's stop_reason.
  bool stop_token = false;
  std::optional<std::int32_t> stop_token_id;
  // A streamed chat choice whose tool calls are parsed (CompletionRequest::parse_tool_calls):
  // its text goes through this before it is sent (engine/tool_call_stream.h).
  std::optional<ToolCallStream> tools;
  // A streamed chat choice of a server with a reasoning parser: its text is split into
  // reasoning and content first (engine/reasoning_parser.h), the content then goes on.
  std::optional<ReasoningStream> reasoning;
};

// One prompt of a request (a batch of prompts has several): its engine request and n choices.
struct Part {
  std::shared_ptr<RequestChannel> channel = std::make_shared<RequestChannel>();
  RequestId id = 0;
  std::int32_t prompt_tokens = 0;
  std::vector<Choice> choices;  // n of them
  // Completions' echo: each choice's text starts with echo_text (the prompt), and its logprobs
  // with the prompt tokens' (prompt_lp, which arrives with the first token). `prompt`: the ids,
  // kept with echo, prompt log probabilities or return_token_ids.
  std::string echo_text;
  std::vector<std::int32_t> prompt;
  std::shared_ptr<std::vector<TokenLogprobs>> prompt_lp;
  // The prompt's last ids its output text is decoded after (special ones left out unless the
  // request keeps them), as vLLM's detokenizer is primed with the prompt: a SentencePiece
  // decoder strips the start of a text, not of an output that continues a prompt.
  std::vector<std::int32_t> context;
  // A chat prompt that closed the reasoning (prompt_ends_reasoning, with a reasoning parser): its
  // choices' text is all content, not split.
  bool reasoning_closed = false;
};

// What one request's handler shares with its content provider.
struct Exchange {
  ResponseMeta meta;
  std::int32_t max_tokens = 0;
  std::int32_t n = 1;
  bool logprobs = false;          // the request asked for log probabilities
  bool continuous_usage = false;  // usage in every chunk (stream_options.continuous_usage_stats)
  bool echo = false;
  bool echo_only = false;  // max_tokens 0: the prompt alone (the generated token is not shown)
  bool prompt_logprobs_field = false;  // the response carries vLLM's prompt_logprobs
  bool tokens_as_ids = false;          // vLLM's return_tokens_as_token_ids
  bool token_ids = false;              // vLLM's return_token_ids (Part::prompt kept)
  bool skip_special = true;            // vLLM's skip_special_tokens
  // Chat with tools and tool_choice "auto", "required" or named: the choices' text is parsed
  // for tool calls, with this parser (CompletionRequest::tool_parser).
  bool parse_tools = false;
  std::shared_ptr<const ToolParser> tool_parser;
  bool parallel_tools = true;
  // Every part's max_output_tokens and stop conditions (check_stop on a choice's tokens), and
  // whether a stop token's text is shown (include_stop_str_in_output).
  RequestSpec ends;
  bool show_stop_token = false;
  // The prompts, read one after another by the provider (`current`): a batch's later parts run
  // in the engine meanwhile, their tokens waiting in their channels.
  std::vector<Part> parts;
  std::size_t current = 0;
  std::vector<ChoiceText> texts;  // not streamed: the choices of the parts read so far
  std::int32_t prompt_tokens() const {
    std::int32_t sum = 0;
    for (const Part& p : parts) sum += p.prompt_tokens;
    return sum;
  }
  std::int32_t completion_tokens() const {
    std::size_t sum = 0;
    for (const Part& p : parts) {
      for (const Choice& c : p.choices) sum += c.tokens.size();
    }
    return static_cast<std::int32_t>(sum);
  }
};

// The model's EOS ids, then those of the generation config it does not have (vLLM stops at
// every EOS id of the generation config too).
std::vector<std::int32_t> with_extra_eos(std::vector<std::int32_t> model,
                                         const std::vector<std::int32_t>& extra) {
  for (const std::int32_t id : extra) {
    if (std::find(model.begin(), model.end(), id) == model.end()) model.push_back(id);
  }
  return model;
}

// A reasoning parser's <think> and </think> ids (ReasoningParser::check_tokenizer has made sure
// the tokenizer has them); none without a parser.
std::optional<std::pair<std::int32_t, std::int32_t>> reasoning_tokens(const ReasoningParser* parser,
                                                                      const Tokenizer& tokenizer) {
  if (parser == nullptr) return std::nullopt;
  const std::optional<std::int32_t> open = tokenizer.token_id("<think>");
  const std::optional<std::int32_t> close = tokenizer.token_id("</think>");
  if (!open || !close) return std::nullopt;
  return std::make_pair(*open, *close);
}

// Whether the experiment's scheduler reads RequestSpec::priority: the `priority` queue order or
// the `lowest-priority` victim rule.
bool schedules_by_priority(const ExperimentConfig& config) {
  return config.policies.queue.name == "priority" ||
         config.policies.preemption.get_string("victim") == "lowest-priority";
}

class Server {
 public:
  Server(const ExperimentConfig& config, const ServeOptions& options, EngineInstance& engine,
         const Tokenizer& tokenizer, const GenerationDefaults& defaults,
         std::shared_ptr<const ChatTemplate> chat_template,
         std::shared_ptr<const ToolParser> tool_parser,
         std::shared_ptr<const ReasoningParser> reasoning_parser)
      : options_(options),
        reasoning_parser_(std::move(reasoning_parser)),
        model_name_(options.served_model_name.empty() ? engine.llama.model.name
                                                      : options.served_model_name),
        tokenizer_(tokenizer),
        limits_{model_name_,
                engine.llama.model.vocab_size,
                config.scheduler.max_model_len,
                parse_lora_modules(options.lora_modules, config.scheduler.lora, model_name_),
                schedules_by_priority(config),
                config.scheduler.speculative.enabled()
                    ? "not returned with speculative decoding (serving.speculative_config)"
                    : "",
                defaults.greedy() ? std::nullopt : std::optional(defaults.sampling),
                defaults.max_new_tokens,
                defaults.max_tokens_cap,
                std::move(chat_template),
                std::move(tool_parser),
                options.exclude_tools_when_tool_choice_none,
                std::make_shared<const TokenTrie>(tokenizer, engine.llama.model.vocab_size),
                with_extra_eos(engine.llama.model.eos_token_ids, defaults.eos_token_ids),
                std::make_shared<GrammarCache>(),
                reasoning_tokens(reasoning_parser_.get(), tokenizer)},
        clock_(0),
        queue_(options.max_in_flight, clock_),
        metrics_(model_name_),
        tap_(*engine.executor),
        observer_(queue_, metrics_, tap_),
        replica_(scheduler_config_with_policies(config),
                 static_cast<std::int32_t>(engine.num_gpu_blocks), tap_, &observer_,
                 engine_kv_cache_options(config, engine),
                 static_cast<std::int32_t>(engine.num_cpu_blocks)),
        source_(queue_, metrics_, replica_, config.scheduler.speculative.enabled(),
                config.scheduler.lora.enabled() ? config.scheduler.lora.max_loras : 0,
                limits_.lora_modules),
        eos_token_ids_(with_extra_eos(engine.llama.model.eos_token_ids, defaults.eos_token_ids)),
        created_(static_cast<std::int64_t>(std::time(nullptr))) {
    RunSummary overload;
    fill_overload_flag(config, overload);
    metrics_.set_report_overload(overload.report_overload);
    metrics_.set_external_tier(engine.offload != nullptr);
    warm_up_engine(config, options_.engine, engine);
    prefill_pinned_prefixes(config, engine, replica_.kv());
    // From here on the board's joules count (the warm-up's are not the server's).
    metrics_.set_board_energy(engine.board_meter.get());
  }

  int run(std::FILE* log) {
    HttpServer http;
    // cpp-httplib serves a connection on one pool thread for as long as it is kept alive, idle
    // ones included: a client holding more idle connections than the pool has threads stalled
    // every new connection for up to the keep-alive timeout (3.7 s with 20 idle connections
    // and --max-in-flight 2; cpp-httplib's default timeout is 5 s). Room for 64 idle
    // connections beyond the requests in flight, and idle ones closed after a second.
    const std::size_t threads = options_.max_in_flight + 64;
    http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    http.set_keep_alive_timeout(1);
    http.set_payload_max_length(kMaxBodyBytes);
    http.set_tcp_nodelay(true);
    // cpp-httplib's default sets SO_REUSEPORT, which lets a second server bind a port in use
    // and take half its connections; SO_REUSEADDR alone still allows a restart while the old
    // socket is in TIME_WAIT, and a port in use fails to bind.
    http.set_socket_options([](auto sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    routes(http);
    int port = options_.port;
    if (port == 0) {
      port = http.bind_to_any_port(options_.host);
      if (port < 0) throw ConfigError("--host " + options_.host + ": cannot bind a port");
    } else if (!http.bind_to_port(options_.host, port)) {
      throw ConfigError("--port " + std::to_string(port) + ": cannot bind " + options_.host + ":" +
                        std::to_string(port) + " (in use, or not an address of this machine)");
    }
    http.raise_backlog(4096);
    std::thread http_thread([&] { http.listen_after_bind(); });
    std::exception_ptr loop_error;
    std::atomic<bool> loop_done{false};
    std::thread loop_thread([&] {
      try {
        SimulationTotals totals;
        run_engine_loop(replica_, source_, clock_, {}, totals);
      } catch (const std::exception& e) {
        loop_error = std::current_exception();
        queue_.abandon(std::string("the engine failed: ") + e.what());
      }
      loop_done = true;
    });
    if (log != nullptr) {
      std::fprintf(log, "engine serve: %s on %s, listening on http://%s:%d\n", model_name_.c_str(),
                   options_.engine.device.c_str(), options_.host.c_str(), port);
      std::fflush(log);
    }
    // SIGINT/SIGTERM: drain. The loop ends once nothing is in flight.
    while (interrupt_signal() == 0 && !loop_done) std::this_thread::sleep_for(kPoll);
    queue_.drain();
    loop_thread.join();
    // Every response still being written gets its end before the sockets close.
    while (active_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    http.stop();
    http_thread.join();
    if (loop_error) std::rethrow_exception(loop_error);
    if (log != nullptr) {
      std::fprintf(log, "engine serve: drained, exiting\n");
      std::fflush(log);
    }
    return 0;
  }

 private:
  void routes(HttpServer& http) {
    // A known path asked with another method is 405 naming the one it takes (as FastAPI answers
    // vLLM's); the library itself would say 404, as for an unknown path.
    http.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
      static const std::map<std::string, std::string, std::less<>> kMethods = {
          {"/health", "GET"},          {"/v1/models", "GET"},
          {"/metrics", "GET"},         {"/reset_prefix_cache", "POST"},
          {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"},
          {"/tokenize", "POST"},       {"/detokenize", "POST"}};
      const auto it = kMethods.find(req.path);
      if (it == kMethods.end() || req.method == it->second ||
          (req.method == "HEAD" && it->second == "GET")) {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      res.set_header("Allow", it->second);
      send_error(res, ApiError(405,
                               "method " + req.method + " is not allowed on " + req.path +
                                   " (it takes " + it->second + ")",
                               "invalid_request_error"));
      return httplib::Server::HandlerResponse::Handled;
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (queue_.draining()) {
        send_error(res, ApiError(503, "the server is shutting down", "server_shutting_down"));
      } else {
        res.set_content("", "text/plain");
      }
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(
          models_json(model_name_, created_, limits_.max_model_len, limits_.lora_modules),
          "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_.render(), "text/plain; version=0.0.4; charset=utf-8");
    });
    // vLLM's POST /reset_prefix_cache: drops every cached block when no request holds blocks.
    http.Post("/reset_prefix_cache", [this](const httplib::Request&, httplib::Response& res) {
      const std::optional<bool> ok = queue_.reset_prefix_cache(std::chrono::seconds(30));
      if (!ok) {
        send_error(res, ApiError(503, "the engine did not answer in time", "server_overloaded"));
        return;
      }
      res.set_content(*ok ? R"({"success":true})" : R"({"success":false})", "application/json");
    });
    http.Post("/v1/completions", with_body([this](const std::string& body, httplib::Response& res) {
                complete(body, res, false);
              }));
    http.Post("/v1/chat/completions",
              with_body([this](const std::string& body, httplib::Response& res) {
                complete(body, res, true);
              }));
    // vLLM's /tokenize and /detokenize: the prompt's ids as the completion endpoints encode it,
    // and the text of ids.
    http.Post("/tokenize", with_body([this](const std::string& body, httplib::Response& res) {
                try {
                  bool strs = false;
                  const std::vector<std::int32_t> ids =
                      parse_tokenize_request(body, limits_, tokenizer_, &strs);
                  res.set_content(
                      tokenize_json(ids, limits_.max_model_len, strs ? &tokenizer_ : nullptr),
                      "application/json");
                } catch (const ApiError& e) {
                  send_error(res, e);
                }
              }));
    http.Post("/detokenize", with_body([this](const std::string& body, httplib::Response& res) {
                try {
                  const std::vector<std::int32_t> ids = parse_detokenize_request(body, limits_);
                  res.set_content(detokenize_json(render_text(tokenizer_, ids)),
                                  "application/json");
                } catch (const ApiError& e) {
                  send_error(res, e);
                }
              }));
    // Errors the HTTP library answers itself (an unknown path, a method a path does not take, a
    // request it could not read) come with an empty body: give them the OpenAI error shape and
    // a reason. The routes' own errors already have one and are left alone.
    http.set_error_handler(httplib::Server::HandlerWithResponse(
        [](const httplib::Request& req, httplib::Response& res) {
          if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          std::string message = "HTTP " + std::to_string(res.status);
          if (res.status == 404) {
            message = "no such endpoint: " + req.method + " " + req.path +
                      " (docs/serving.md lists the endpoints)";
          } else if (res.status == 400) {
            message =
                "the request could not be read: a POST needs a body with a Content-Length or "
                "chunked encoding (curl: -d '{}')";
          } else if (res.status == 405) {
            message = "method " + req.method + " is not allowed on " + req.path;
          } else if (res.status == 413) {
            message = "the request body is too large";
          }
          send_error(
              res, ApiError(res.status, message,
                            res.status < 500 ? "invalid_request_error" : "internal_server_error"));
          return httplib::Server::HandlerResponse::Handled;
        }));
    http.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "internal error";
          try {
            std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          send_error(res, ApiError(500, what, "internal_server_error"));
        });
  }

  void complete(const std::string& body, httplib::Response& res, bool chat) {
    CompletionRequest parsed;
    try {
      parsed = parse_completion_request(body, chat, limits_, tokenizer_);
    } catch (const ApiError& e) {
      send_error(res, e);
      return;
    }
    auto ex = std::make_shared<Exchange>();
    ex->max_tokens = parsed.max_tokens;
    ex->n = parsed.n;
    ex->echo = parsed.echo;
    ex->echo_only = parsed.echo_only;
    ex->prompt_logprobs_field = parsed.prompt_logprobs_field;
    ex->tokens_as_ids = parsed.return_tokens_as_token_ids;
    ex->token_ids = parsed.return_token_ids;
    ex->skip_special = parsed.skip_special_tokens;
    ex->logprobs = parsed.logprobs >= 0;
    ex->continuous_usage = parsed.continuous_usage;
    ex->parse_tools = parsed.parse_tool_calls;
    ex->tool_parser = parsed.tool_parser;
    ex->parallel_tools = parsed.parallel_tool_calls;
    if (1 + parsed.more_prompts.size() > options_.max_in_flight) {
      send_error(res, ApiError(400,
                               "a batch of " + std::to_string(1 + parsed.more_prompts.size()) +
                                   " prompts, more than the server takes in flight (" +
                                   std::to_string(options_.max_in_flight) + ", --max-in-flight)",
                               "invalid_request_error", "prompt"));
      return;
    }
    RequestSpec spec;  // every prompt's fields but the prompt
    spec.max_output_tokens = parsed.max_tokens;
    spec.n = parsed.n;
    spec.logprobs = parsed.logprobs;
    spec.prompt_logprobs = parsed.prompt_logprobs;
    if (parsed.sampling) {
      spec.sampling = std::make_shared<const RequestSampling>(*parsed.sampling);
    }
    // Stop conditions: the model's EOS, the request's stop ids, min_tokens, ignore_eos.
    StopConditions stop;
    stop.ignore_eos = parsed.ignore_eos;
    stop.min_tokens = parsed.min_tokens;
    stop.stop_token_ids = std::move(parsed.stop_token_ids);
    stop = with_model_eos(std::move(stop), eos_token_ids_);
    if (stop.eos_token_id >= 0 || !stop.stop_token_ids.empty()) {
      spec.stop = std::make_shared<const StopConditions>(std::move(stop));
    }
    ex->ends.max_output_tokens = parsed.max_tokens;
    ex->ends.stop = spec.stop;
    ex->show_stop_token = parsed.include_stop_str_in_output;
    if (!parsed.cache_salt.empty()) spec.cache_salt = cache_salt_key(parsed.cache_salt);
    spec.lora_id = parsed.lora_id;
    spec.lora_rank = parsed.lora_rank;
    spec.priority = parsed.priority;
    spec.tenant = user_tenant(parsed.user);
    // One engine request per prompt, submitted together.
    parsed.more_prompts.insert(parsed.more_prompts.begin(), std::move(parsed.prompt));
    parsed.more_echo_texts.insert(parsed.more_echo_texts.begin(), std::move(parsed.echo_text));
    for (std::size_t i = 0; i < parsed.more_prompts.size(); ++i) {
      std::vector<std::int32_t>& ids = parsed.more_prompts[i];
      Part& p = ex->parts.emplace_back();
      p.prompt_tokens = static_cast<std::int32_t>(ids.size());
      if (chat && limits_.reasoning_tokens) {
        p.reasoning_closed = prompt_ends_reasoning(ids, limits_.reasoning_tokens->first,
                                                   limits_.reasoning_tokens->second);
      }
      if (parsed.echo || parsed.prompt_logprobs >= 0 || parsed.return_token_ids) p.prompt = ids;
      if (tokenizer_.decode_needs_context()) {
        for (auto it = ids.rbegin(); it != ids.rend() && p.context.size() < kDecodeContext; ++it) {
          if (!ex->skip_special || !tokenizer_.special(*it)) p.context.push_back(*it);
        }
        std::reverse(p.context.begin(), p.context.end());
      }
      if (parsed.echo) {
        p.echo_text = parsed.more_echo_texts[i].empty() ? render_text(tokenizer_, ids)
                                                        : std::move(parsed.more_echo_texts[i]);
      }
      p.choices.resize(static_cast<std::size_t>(parsed.n));
      for (Choice& c : p.choices) {
        c.stops = StopStrings(parsed.stop, parsed.include_stop_str_in_output, parsed.min_tokens);
        c.text.reset(tokenizer_, p.context);
      }
      // The request's fields with this prompt.
      RequestSpec one = spec;
      RequestSpec literal = make_literal_request(0, 0, std::move(ids), parsed.max_tokens);
      one.prompt = std::move(literal.prompt);
      one.prompt_len = literal.prompt_len;
      one.prompt_values = std::move(literal.prompt_values);
      one.outputs_by_value = literal.outputs_by_value;
      const ServeQueue::Submit submitted = queue_.submit(std::move(one), p.channel, &p.id);
      if (submitted == ServeQueue::Submit::kAccepted) continue;
      ex->parts.pop_back();
      withdraw_parts(*ex);
      if (submitted == ServeQueue::Submit::kFull) {
        send_error(
            res, ApiError(429,
                          "too many requests in flight (" + std::to_string(options_.max_in_flight) +
                              ", --max-in-flight); retry later",
                          "server_overloaded", "", "too_many_requests"));
      } else {
        send_error(res, ApiError(503, "the server is shutting down", "server_shutting_down"));
      }
      return;
    }
    // The loop admits or rejects each at its next turn (within one step).
    for (Part& p : ex->parts) {
      RequestChannel::State state = RequestChannel::State::kPending;
      for (int i = 0; i < 1200 && state == RequestChannel::State::kPending; ++i) {
        state = p.channel->wait_admission(kPoll);
      }
      if (state == RequestChannel::State::kRejected) {
        const RequestChannel::Update u = p.channel->take(std::chrono::milliseconds(0));
        withdraw_parts(*ex);
        if (p.channel->shed()) {  // the experiment's admission policy (policies.admission)
          send_error(res, ApiError(429, "the server is overloaded: " + u.reason + "; retry later",
                                   "server_overloaded", "", "too_many_requests"));
          return;
        }
        // The scheduler's reasons about parallel sampling name n (core/scheduler.cc
        // rejection_reason); the others concern the prompt.
        const bool about_n =
            parsed.n > 1 && (u.reason.find("parallel sampling") != std::string::npos ||
                             u.reason.rfind("n = ", 0) == 0);
        send_error(
            res, ApiError(400, "the engine refused the request: " + u.reason,
                          "invalid_request_error", about_n ? "n" : (chat ? "messages" : "prompt")));
        return;
      }
      if (state == RequestChannel::State::kPending) {
        abort_parts(*ex);
        send_error(
            res, ApiError(503, "the engine did not take the request in time", "server_overloaded"));
        return;
      }
    }
    ex->meta.id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(ex->parts[0].id);
    ex->meta.model = parsed.model;
    ex->meta.created = static_cast<std::int64_t>(std::time(nullptr));
    ex->meta.chat = chat;
    for (std::size_t i = 0; i < ex->parts.size() && parsed.stream; ++i) {
      for (std::size_t k = 0; k < ex->parts[i].choices.size(); ++k) {
        Choice& c = ex->parts[i].choices[k];
        const auto index = static_cast<std::int32_t>(i * ex->parts[i].choices.size() + k);
        if (ex->parse_tools) {
          c.tools.emplace(*ex->tool_parser, ex->meta.id, index, ex->parallel_tools);
        }
        if (chat && reasoning_parser_ != nullptr && !ex->parts[i].reasoning_closed) {
          c.reasoning.emplace(*reasoning_parser_);
        }
      }
    }
    ++active_;
    const bool stream = parsed.stream, usage = parsed.include_usage;
    auto provider = [this, ex, stream, usage](std::size_t /*offset*/, httplib::DataSink& sink) {
      Part& p = ex->parts[ex->current];
      const auto base = static_cast<std::int32_t>(ex->current) * ex->n;  // its first choice's index
      RequestChannel::Update u = p.channel->take(kPoll);
      if (!sink.is_writable()) return false;  // the client went away: the releaser aborts
      if (u.prompt_logprobs) p.prompt_lp = std::move(u.prompt_logprobs);
      const bool finished = u.state == RequestChannel::State::kFinished;
      const std::size_t n = p.choices.size();
      // Each choice's last token of this update (a finished request's last of each).
      std::vector<std::size_t> last_of(n, u.tokens.size());
      for (std::size_t i = 0; i < u.tokens.size(); ++i) {
        last_of[static_cast<std::size_t>(u.tokens[i].sample)] = i;
      }
      // Token by token: the stop strings are checked on the choice's text after each one, and a
      // stop drops that choice's tokens after it.
      std::vector<std::int32_t> newly_stopped;
      std::string out;
      for (std::size_t i = 0; i < u.tokens.size(); ++i) {
        const auto k = u.tokens[i].sample;
        Choice& c = p.choices[static_cast<std::size_t>(k)];
        if (c.stopped || c.stop_token) continue;
        c.tokens.push_back(u.tokens[i].value);
        if (ex->logprobs) c.logprobs.push_back(u.tokens[i].logprobs.value_or(TokenLogprobs{}));
        const auto count = static_cast<std::int32_t>(c.tokens.size());
        if (ex->ends.stop && check_stop(ex->ends, c.tokens) == StopReason::kStop) {
          c.stop_token = true;
          const StopConditions& s = *ex->ends.stop;
          if (s.ignore_eos || c.tokens.back() != s.eos_token_id) c.stop_token_id = c.tokens.back();
        }
        const std::int32_t id = c.tokens.back();
        if (!(c.stop_token && !ex->show_stop_token) &&
            !(ex->skip_special && tokenizer_.special(id))) {
          c.text.push(id);
        }
        const std::string& text = output_text(c);
        if (!c.stops.empty()) {
          c.stopped = c.stops.update(text, count);
          if (c.stopped) newly_stopped.push_back(k);
        }
        if (!stream) continue;
        // One event per token, as vLLM sends one per step; a choice's last token's carries its
        // finish_reason ("length" at max_tokens, "stop" at EOS, a stop token id or a stop
        // string).
        const bool last =
            c.stopped || c.stop_token || count == ex->max_tokens || (finished && i == last_of[k]);
        const std::string reason = !last                       ? ""
                                   : c.stopped || c.stop_token ? "stop"
                                   : finished                  ? finish_reason(u, k)
                                                               : "length";
        ChunkFields chunk{base + k,
                          next_text(c, text, last),
                          c.first,
                          reason,
                          c.stopped ? c.stops.matched() : "",
                          chunk_logprobs(*ex, c),
                          ex->logprobs ? c.logprob_chars : -1};
        if (last && !c.stopped) chunk.stop_token = c.stop_token_id;
        if (ex->token_ids) with_token_ids(chunk, p, c, c.tokens.size() - 1);
        chunk = with_parsers(c, std::move(chunk), last);
        // A parser holding everything back (a tool call being read, thinking still hidden)
        // leaves nothing to say: vLLM sends no chunk then (unless logprobs, usage or token ids
        // ride on it: vLLM's tool parsers drop those ids, a client quoting them could not).
        const bool held = (c.reasoning || c.tools) && !chunk.first && !last && chunk.text.empty() &&
                          chunk.reasoning.empty() && chunk.tool_calls.empty() && !ex->logprobs &&
                          !ex->continuous_usage && !ex->token_ids;
        if (!held) {
          out += sse(
              chunk_json(ex->meta, with_usage(*ex, p, c, with_echo(*ex, p, c, std::move(chunk)))));
        }
        if (ex->logprobs)
          c.logprob_chars +=
              static_cast<std::int64_t>(utf8::characters(logprob_token(*ex, c.tokens.back())));
        c.first = false;
        c.finish_sent = c.finish_sent || last;
      }
      if (!out.empty() && !sink.write(out.data(), out.size())) return false;
      // The scheduler stops generating at its next turn (vLLM aborts the request, or the one
      // child of a parallel-sampling request, in the engine core when its output processor finds
      // a stop string).
      for (const std::int32_t k : newly_stopped) {
        if (n > 1) {
          queue_.stop_sample(sample_request_id(p.id, k));
        } else {
          if (p.channel->stopped_by_string()) metrics_.recount_length_as_stop();
          queue_.abort(p.id);
        }
      }
      bool all_stopped = true;
      for (const Choice& c : p.choices) all_stopped = all_stopped && c.stopped;
      // Every sample of a parallel-sampling request ended at a stop string: the request is
      // counted "stop", as one sample's is above (the last sample may have run on to max_tokens
      // in the loop before its string was seen here).
      if (n > 1 && all_stopped && !newly_stopped.empty() && p.channel->stopped_by_string()) {
        metrics_.recount_length_as_stop();
      }
      if (finished || all_stopped) {
        std::string out;
        for (std::size_t k = 0; k < n; ++k) {
          Choice& c = p.choices[k];
          const auto index = static_cast<std::int32_t>(k);
          const std::string reason = c.stopped ? "stop" : finish_reason(u, index);
          const std::string stop_reason = c.stopped ? c.stops.matched() : "";
          std::string text = output_text(c);
          if (stream) {
            if (!c.finish_sent) {
              ChunkFields chunk{
                  base + index, next_text(c, text, true),           c.first, reason, stop_reason,
                  {},           ex->logprobs ? c.logprob_chars : -1};
              if (!c.stopped) chunk.stop_token = c.stop_token_id;
              if (ex->token_ids) with_token_ids(chunk, p, c, c.tokens.size());
              chunk = with_parsers(c, std::move(chunk), true);
              out += sse(chunk_json(ex->meta,
                                    with_usage(*ex, p, c, with_echo(*ex, p, c, std::move(chunk)))));
            }
            continue;
          }
          if (c.stopped) text.resize(c.stops.text_end());
          if (ex->echo_only) text.clear();
          ChoiceText& shown = ex->texts.emplace_back();
          shown.text = ex->echo ? p.echo_text + text : std::move(text);
          shown.finish_reason = reason;
          shown.stop_reason = stop_reason;
          if (!c.stopped) shown.stop_token = c.stop_token_id;
          if (ex->logprobs) {
            std::vector<TokenLogprobText>& lp = shown.logprobs.emplace();
            if (ex->echo) lp = prompt_logprob_texts(*ex, p);
            for (std::size_t t = 0; t < c.tokens.size() && !ex->echo_only; ++t) {
              lp.push_back(logprob_text(*ex, c.tokens[t], c.logprobs[t]));
            }
          }
          if (ex->prompt_logprobs_field) shown.prompt_logprobs = prompt_logprob_entries(p);
          if (ex->token_ids) {
            shown.token_ids = c.tokens;
            shown.prompt_token_ids = p.prompt;
          }
          if (ex->meta.chat && reasoning_parser_ != nullptr && p.reasoning_closed) {
            shown.reasoning_field = true;  // null: the prompt ended the thinking
          } else if (ex->meta.chat && reasoning_parser_ != nullptr) {
            ExtractedReasoning split = reasoning_parser_->extract(shown.text);
            shown.reasoning_field = true;
            shown.reasoning = std::move(split.reasoning);
            shown.content_null = !split.content;
            shown.text = split.content.value_or("");
          }
          if (ex->parse_tools) {
            ExtractedToolCalls found = parse_tool_calls(*ex->tool_parser, shown.text, ex->meta.id,
                                                        base + index, ex->parallel_tools);
            if (!found.calls.empty()) {
              shown.content_null = !found.content;
              shown.text = found.content.value_or("");
              shown.tool_calls = std::move(found.calls);
              shown.finish_reason = ex->tool_parser->finish_reason_with_calls(shown.finish_reason);
            } else if (found.content) {
              // No calls: the parser's content (mistral's without its [TOOL_CALLS] token), as
              // the stream sends it (ToolCallStream::finish).
              shown.text = std::move(*found.content);
            }
          }
        }
        if (ex->current + 1 < ex->parts.size()) {  // a batch: the next prompt's turn
          ++ex->current;
          if (!out.empty() && !sink.write(out.data(), out.size())) return false;
          return true;
        }
        if (stream) {
          if (usage) {
            out += sse(usage_chunk_json(ex->meta, ex->prompt_tokens(), ex->completion_tokens()));
          }
          out += "data: [DONE]\n\n";
        } else {
          out = completion_json(ex->meta, ex->texts, ex->prompt_tokens(), ex->completion_tokens());
        }
        if (!sink.write(out.data(), out.size())) return false;
        sink.done();
      } else if (u.state == RequestChannel::State::kAborted) {
        abort_parts(*ex);
        const std::string err = error_json(
            ApiError(500, "the engine aborted the request: " + u.reason, "internal_server_error"));
        const std::string out = stream ? sse(err) + "data: [DONE]\n\n" : err;
        sink.write(out.data(), out.size());
        sink.done();
      }
      return true;
    };
    auto releaser = [this, ex](bool success) {
      if (!success) abort_parts(*ex);  // no-ops for the parts that finished meanwhile
      --active_;
    };
    if (stream) {
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider("text/event-stream", provider, releaser);
    } else {
      res.set_chunked_content_provider("application/json", provider, releaser);
    }
  }

  // return_token_ids: a streamed chunk of choice `c` carries its ids from index `from` on (the
  // token it sends; none for a closing chunk) and, the choice's first, the prompt's.
  static void with_token_ids(ChunkFields& chunk, const Part& p, const Choice& c, std::size_t from) {
    chunk.token_ids.emplace(c.tokens.begin() + static_cast<std::ptrdiff_t>(from), c.tokens.end());
    if (c.first) chunk.prompt_token_ids = p.prompt;
  }

  // Aborts every part of a request that the engine may still run.
  void abort_parts(const Exchange& ex) {
    for (const Part& p : ex.parts) queue_.abort(p.id);
  }
  // The same for a request the handler refuses as a whole (one of its parts was refused): the
  // parts already submitted are not counted as aborted requests in /metrics.
  void withdraw_parts(const Exchange& ex) {
    for (const Part& p : ex.parts) p.channel->withdraw();
    abort_parts(ex);
  }

  // A choice's text: its shown tokens decoded (Choice::text), the tokenizer's special tokens
  // left out unless the request keeps them (vLLM's skip_special_tokens, default true).
  static const std::string& output_text(const Choice& c) { return c.text.text(); }
  // A token's text in a logprobs object: its own bytes (render_text's, for one id).
  std::string token_text(std::int32_t id) const {
    return render_text(tokenizer_, std::span<const std::int32_t>(&id, 1));
  }
  // A token as a logprobs object names it: its text, or "token_id:N" under vLLM's
  // return_tokens_as_token_ids (tokens whose texts are the same stay apart).
  std::string logprob_token(const Exchange& ex, std::int32_t id) const {
    return ex.tokens_as_ids ? "token_id:" + std::to_string(id) : token_text(id);
  }
  TokenLogprobText logprob_text(const Exchange& ex, std::int32_t id,
                                const TokenLogprobs& lp) const {
    TokenLogprobText t{logprob_token(ex, id), lp.logprob, {}};
    for (const auto& [alt, value] : lp.top) t.top.emplace_back(logprob_token(ex, alt), value);
    return t;
  }
  // An echoed prompt's tokens as a completions logprobs object shows them: the first without a
  // log probability (it has no context), the others with theirs (they arrive with the first
  // output token, before any chunk or response is written).
  std::vector<TokenLogprobText> prompt_logprob_texts(const Exchange& ex, const Part& p) const {
    std::vector<TokenLogprobText> shown;
    for (std::size_t t = 0; t < p.prompt.size(); ++t) {
      if (t == 0 || p.prompt_lp == nullptr || t > p.prompt_lp->size()) {
        TokenLogprobText none{logprob_token(ex, p.prompt[t]), 0.0f, {}, true};
        shown.push_back(std::move(none));
      } else {
        shown.push_back(logprob_text(ex, p.prompt[t], (*p.prompt_lp)[t - 1]));
      }
    }
    return shown;
  }
  // vLLM's prompt_logprobs entries (positions 1 .. prompt length - 1).
  std::vector<PromptTokenLogprobs> prompt_logprob_entries(const Part& p) const {
    std::vector<PromptTokenLogprobs> entries;
    if (p.prompt_lp == nullptr) return entries;
    for (std::size_t t = 1; t < p.prompt.size() && t <= p.prompt_lp->size(); ++t) {
      const TokenLogprobs& lp = (*p.prompt_lp)[t - 1];
      PromptTokenLogprobs& e = entries.emplace_back();
      e.id = p.prompt[t];
      e.text = token_text(e.id);
      e.logprob = lp.logprob;
      e.rank = lp.rank;
      for (const auto& [alt, value] : lp.top) e.top.push_back({alt, token_text(alt), value});
    }
    return entries;
  }
  // A choice's first streamed chunk under echo: the prompt's text before its own, and with
  // logprobs the prompt tokens' before its token's, from character 0.
  // Under echo_only the generated token's text and logprobs are dropped.
  ChunkFields with_echo(const Exchange& ex, const Part& p, Choice& c, ChunkFields chunk) const {
    if (ex.echo_only) {
      chunk.text.clear();
      chunk.logprobs.clear();
    }
    if (!ex.echo || !chunk.first) return chunk;
    chunk.text = p.echo_text + chunk.text;
    if (ex.logprobs) {
      std::vector<TokenLogprobText> shown = prompt_logprob_texts(ex, p);
      for (const TokenLogprobText& t : shown) {
        c.logprob_chars += static_cast<std::int64_t>(utf8::characters(t.token));
      }
      shown.insert(shown.end(), std::make_move_iterator(chunk.logprobs.begin()),
                   std::make_move_iterator(chunk.logprobs.end()));
      chunk.logprobs = std::move(shown);
      chunk.text_offset = 0;
    }
    return chunk;
  }
  // A streamed chunk's text through the choice's reasoning parser, when the server has one, and
  // its tool-call parser, when its calls are parsed: the reasoning and content that can go out
  // now, and on its last chunk the rest with the calls (its finish_reason then "tool_calls", as
  // vLLM's).
  static ChunkFields with_parsers(Choice& c, ChunkFields chunk, bool last) {
    if (c.reasoning) {  // the thinking first (engine/reasoning_parser.h); the content goes on
      ReasoningStream::Piece piece = c.reasoning->push(chunk.text);
      if (last) {
        ReasoningStream::Piece rest = c.reasoning->finish();
        piece.reasoning += rest.reasoning;
        piece.content += rest.content;
      }
      chunk.reasoning = std::move(piece.reasoning);
      chunk.text = std::move(piece.content);
    }
    if (!c.tools) return chunk;
    chunk.text = c.tools->push(chunk.text);
    if (!last) return chunk;
    ToolCallStream::End end = c.tools->finish();
    chunk.text += end.content;
    if (!end.calls.empty()) {
      chunk.tool_calls = std::move(end.calls);
      chunk.finish_reason = c.tools->parser().finish_reason_with_calls(chunk.finish_reason);
    }
    return chunk;
  }
  // A chunk with the choice's usage so far, when the request asked for it in every chunk.
  static ChunkFields with_usage(const Exchange& ex, const Part& p, const Choice& c,
                                ChunkFields chunk) {
    if (ex.continuous_usage) {
      chunk.prompt_tokens = p.prompt_tokens;
      chunk.completion_tokens = static_cast<std::int32_t>(c.tokens.size());
    }
    return chunk;
  }
  // The logprobs of a streamed chunk: its one token's (the choice's last), when asked.
  std::vector<TokenLogprobText> chunk_logprobs(const Exchange& ex, const Choice& c) const {
    if (!ex.logprobs) return {};
    return {logprob_text(ex, c.tokens.back(), c.logprobs.back())};
  }

  // The OpenAI finish_reason of choice k of a finished request: the scheduler's ("length" or
  // "stop"), its sample's with parallel sampling.
  static std::string finish_reason(const RequestChannel::Update& u, std::int32_t k) {
    const auto i = static_cast<std::size_t>(k);
    const std::string& reason = i < u.sample_reasons.size() ? u.sample_reasons[i] : u.reason;
    return reason == "stop" ? "stop" : "length";
  }

  // The text the tokens since the last call add, given the output's decoded `text`: what of it
  // may be streamed (StopStrings::sendable: a trailing U+FFFD, an incomplete UTF-8 sequence a
  // later token may complete, and the bytes that may begin a stop string wait, unless this is
  // the last token; after a stop string, the text before its end) beyond what was sent. Callers
  // decode the whole output each time (outputs are short next to what a step costs).
  static std::string next_text(Choice& c, std::string_view text, bool last) {
    const std::size_t n = c.stops.sendable(text, last);
    if (n <= c.text_sent) return "";
    std::string delta(text.substr(c.text_sent, n - c.text_sent));
    c.text_sent = n;
    return delta;
  }

  const ServeOptions& options_;
  const std::shared_ptr<const ReasoningParser> reasoning_parser_;  // null: none
  const std::string model_name_;
  const Tokenizer& tokenizer_;
  const ApiLimits limits_;
  const WallClock clock_;
  ServeQueue queue_;
  ServeMetrics metrics_;
  LogprobTap tap_;
  ServeObserver observer_;
  Replica replica_;
  ServeSource source_;
  const std::vector<std::int32_t> eos_token_ids_;  // the model's (ModelConfig::eos_token_ids)
  const std::int64_t created_;
  std::atomic<int> active_{0};
};

}  // namespace

int run_server(const ExperimentConfig& config, const ServeOptions& options, std::FILE* log) {
  if (options.max_in_flight < 1) throw ConfigError("--max-in-flight: expected at least 1");
  // The adapters' names before the engine loads (the Server checks them again against the
  // loaded model's name).
  parse_lora_modules(options.lora_modules, config.scheduler.lora,
                     options.served_model_name.empty() ? config.model : options.served_model_name);
  // cpp-httplib sends without MSG_NOSIGNAL: a client that hung up must not kill the server.
  std::signal(SIGPIPE, SIG_IGN);
  const std::string tokenizer_file = options.tokenizer.empty()
                                         ? home_path("data/tokenizers/bytes/tokenizer.json")
                                         : options.tokenizer;
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(tokenizer_file);
  // Before the engine loads: a bad template is an error in a second, not after the weights.
  std::shared_ptr<const ChatTemplate> chat_template;
  if (!options.chat_template.empty()) {
    chat_template = load_chat_template(options.chat_template, tokenizer_file);
  } else {
    try {
      chat_template = find_chat_template(tokenizer_file);
    } catch (const ConfigError& e) {
      throw ConfigError(std::string(e.what()) +
                        " (the chat template beside --tokenizer; --chat-template FILE gives "
                        "another)");
    }
  }
  if (chat_template != nullptr && options.chat_template_content_format != "auto") {
    chat_template = std::make_shared<const ChatTemplate>(chat_template->with_content_format(
        options.chat_template_content_format == "openai" ? ChatTemplate::ContentFormat::kOpenAi
                                                         : ChatTemplate::ContentFormat::kString));
  }
  if (log != nullptr && chat_template != nullptr) {
    std::fprintf(log,
                 "engine serve: chat messages rendered with the chat template of %s (content %s; "
                 "--chat-template-content-format)\n",
                 chat_template->origin().c_str(),
                 chat_template->content_format() == ChatTemplate::ContentFormat::kOpenAi
                     ? "as OpenAI's list of text parts"
                     : "as a string");
  }
  std::shared_ptr<const ToolParser> tool_parser;
  if (options.enable_auto_tool_choice != !options.tool_call_parser.empty()) {
    throw ConfigError(options.enable_auto_tool_choice
                          ? "--enable-auto-tool-choice needs --tool-call-parser NAME (the format "
                            "of the model's tool calls)"
                          : "--tool-call-parser needs --enable-auto-tool-choice (the parser reads "
                            "the calls of tool_choice \"auto\" only)");
  }
  if (options.enable_auto_tool_choice) {
    tool_parser = make_tool_parser(options.tool_call_parser);
    tool_parser->check_tokenizer(*tokenizer);
    if (log != nullptr) {
      std::fprintf(log, "engine serve: tool calls of tool_choice \"auto\" parsed as %s's\n",
                   tool_parser->name().c_str());
    }
  }
  std::shared_ptr<const ReasoningParser> reasoning_parser;
  if (!options.reasoning_parser.empty()) {
    reasoning_parser = make_reasoning_parser(options.reasoning_parser);
    reasoning_parser->check_tokenizer(*tokenizer);
  }
  EngineInstance engine = load_engine(config, options.engine);
  if (tokenizer->vocab_size() > engine.llama.model.vocab_size) {
    throw ConfigError(tokenizer_file + ": a vocabulary of " +
                      std::to_string(tokenizer->vocab_size()) + " tokens, more than model " +
                      engine.llama.model.name + "'s " +
                      std::to_string(engine.llama.model.vocab_size) + " (--tokenizer)");
  }
  const GenerationDefaults defaults =
      load_generation_defaults(options.generation_config, options.engine.weights,
                               options.override_generation_config, engine.llama.model.vocab_size);
  if (log != nullptr &&
      (options.generation_config != "servelab" || !options.override_generation_config.empty())) {
    std::fprintf(log,
                 "engine serve: defaults of the sampling fields requests leave out, from %s: %s "
                 "(--generation-config servelab: greedy)\n",
                 defaults.source.c_str(), defaults.describe().c_str());
  }
  Server server(config, options, engine, *tokenizer, defaults, std::move(chat_template),
                std::move(tool_parser), std::move(reasoning_parser));
  return server.run(log);
}

}  // namespace servelab
