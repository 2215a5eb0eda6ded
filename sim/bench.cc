#include "sim/bench.h"

#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string_view>
#include <thread>
#include <vector>

#include "core/json_depth.h"
#include "core/request.h"
#include "core/sampling_params.h"
#include "serving/cli.h"
#include "serving/interrupt.h"
#include "serving/lora_modules.h"
#include "serving/model_config.h"
#include "serving/output_file.h"
#include "serving/recorder.h"
#include "traces/workload.h"

namespace servelab {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Endpoint {
  std::string base;  // scheme://host:port
  std::string path;  // /v1/completions
};

Endpoint parse_url(const std::string& url) {
  const std::size_t scheme = url.find("://");
  if (scheme == std::string::npos ||
      (url.compare(0, scheme, "http") != 0 && url.compare(0, scheme, "https") != 0)) {
    throw ConfigError("--url: expected http://HOST:PORT or https://HOST:PORT, got '" + url + "'");
  }
  const std::size_t slash = url.find('/', scheme + 3);
  Endpoint e;
  e.base = url.substr(0, slash);
  if (e.base.size() <= scheme + 3) throw ConfigError("--url: no host in '" + url + "'");
  // host:port (an IPv6 host is bracketed): the port, when given, is a number in [1, 65535].
  const std::string authority = e.base.substr(scheme + 3);
  const std::size_t colon = authority.rfind(':');
  if (colon != std::string::npos && authority.find(']', colon) == std::string::npos) {
    const std::string port = authority.substr(colon + 1);
    const bool digits = !port.empty() && port.size() <= 5 &&
                        port.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || std::stoi(port) < 1 || std::stoi(port) > 65535) {
      throw ConfigError("--url: port '" + port + "' in '" + url +
                        "': expected a number in [1, 65535]");
    }
  }
  std::string path = slash == std::string::npos ? "" : url.substr(slash);
  while (!path.empty() && path.back() == '/') path.pop_back();
  const std::string suffix = "/completions";
  if (path.size() >= suffix.size() &&
      path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0) {
    e.path = path;
  } else {
    e.path = path + (path.size() >= 3 && path.compare(path.size() - 3, 3, "/v1") == 0
                         ? "/completions"
                         : "/v1/completions");
  }
  return e;
}

// The models GET /v1/models lists, in its order; nullopt when the server answers that path with
// an error status (a server without the endpoint). Throws ConfigError when the server cannot be
// reached or answers something that is no model list.
std::optional<std::vector<std::string>> served_models(const Endpoint& e) {
  httplib::Client client(e.base);
  client.set_connection_timeout(10);
  client.set_read_timeout(30);
  const std::string prefix = e.path.substr(0, e.path.rfind("/completions"));
  const std::string models_path =
      prefix.size() >= 3 && prefix.compare(prefix.size() - 3, 3, "/v1") == 0 ? prefix + "/models"
                                                                             : "/v1/models";
  const httplib::Result res = client.Get(models_path);
  if (!res) {
    throw ConfigError("--url " + e.base + ": cannot reach the server (" +
                      httplib::to_string(res.error()) + ")");
  }
  if (res->status != 200) return std::nullopt;
  const std::string where = "--url " + e.base + models_path;
  if (json_too_deep(res->body)) throw ConfigError(where + ": the answer is no model list");
  std::vector<std::string> names;
  try {
    const json list = json::parse(res->body);
    for (const json& m : list.at("data")) {
      names.push_back(m.at("id").get<std::string>());
    }
  } catch (const json::exception&) {
    throw ConfigError(where + ": the answer is no model list");
  }
  return names;
}

// The model name to send: --model when the server lists it (or lists nothing to check against),
// else the first model GET /v1/models lists.
std::string choose_model(const Endpoint& e, const std::string& requested) {
  const std::optional<std::vector<std::string>> served = served_models(e);
  if (requested.empty()) {
    if (!served)
      throw ConfigError("--url " + e.base + ": GET /v1/models failed; pass --model NAME");
    if (served->empty())
      throw ConfigError("--url " + e.base + ": no model listed; pass --model NAME");
    return served->front();
  }
  // Every request would be refused (HTTP 404): say so before sending any.
  if (served && !served->empty() &&
      std::find(served->begin(), served->end(), requested) == served->end()) {
    std::string list;
    for (const std::string& n : *served) list += (list.empty() ? "'" : ", '") + n + "'";
    throw ConfigError("--model " + requested + ": the server at " + e.base +
                      " does not serve it (GET /v1/models lists " + list + ")");
  }
  return requested;
}

// The server's board energy counter, servelab:gpu_energy_joules_total on GET /metrics (`engine
// serve --device cuda` where NVML answers; docs/serving.md), or nullopt when the server has no
// /metrics, no such counter (vLLM, a CPU engine) or an unreadable value.
std::optional<double> server_joules(const Endpoint& e) {
  httplib::Client client(e.base);
  client.set_connection_timeout(10);
  client.set_read_timeout(30);
  const httplib::Result res = client.Get("/metrics");
  if (!res || res->status != 200) return std::nullopt;
  const std::string_view name = "servelab:gpu_energy_joules_total";
  std::istringstream in(res->body);
  for (std::string line; std::getline(in, line);) {
    if (line.compare(0, name.size(), name) != 0 || line.size() == name.size()) continue;
    if (line[name.size()] != '{' && line[name.size()] != ' ') continue;
    const std::string value = line.substr(line.rfind(' ') + 1);
    char* end = nullptr;
    const double j = std::strtod(value.c_str(), &end);
    if (end == value.c_str() || *end != '\0' || !std::isfinite(j) || j < 0) return std::nullopt;
    return j;
  }
  return std::nullopt;
}

struct Outcome {
  RequestRecord record;
  std::vector<TimeNs> gaps;
};

// ": MESSAGE" from an OpenAI error body ({"error": {"message": ...}}) on one line, or "" when
// `body` is not one (the body of a refused request reaches the content receiver).
std::string error_message(const std::string& body) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("error") || !j["error"].is_object() ||
      !j["error"].contains("message") || !j["error"]["message"].is_string()) {
    return "";
  }
  std::string m = j["error"]["message"].get<std::string>();
  std::replace(m.begin(), m.end(), '\n', ' ');
  return ": " + m;
}

// One streamed request; times relative to `send`.
Outcome send_one(httplib::Client& client, const Endpoint& e, const std::string& model,
                 const std::vector<LoraModule>& lora_modules, const RequestSpec& spec,
                 std::int32_t vocab_size) {
  json prompt = json::array();
  for (std::int32_t p = 0; p < spec.prompt_len; ++p) {
    prompt.push_back(prompt_token_value(spec, p, vocab_size));
  }
  json body = {{"model", spec.lora_id != 0 ? lora_model_name(lora_modules, spec.lora_id) : model},
               {"prompt", prompt},
               {"max_tokens", spec.max_output_tokens},
               {"temperature", 0.0},
               {"ignore_eos", true},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  // A request's priority (vLLM's field; sent only when not the default 0, which a server without
  // priority scheduling refuses) and tenant (OpenAI's `user`, "tenant-N"; none for tenant 0).
  if (spec.priority != 0) body["priority"] = spec.priority;
  if (spec.tenant != 0) body["user"] = "tenant-" + std::to_string(spec.tenant);
  // Parallel sampling (workload `n`): n choices, streamed by index. TTFT is the first chunk of
  // any choice, the gaps are taken within each choice, output_tokens is usage's sum over them
  // (docs/metrics.md "Parallel sampling": the simulator's definitions).
  if (spec.n > 1) body["n"] = spec.n;
  // The workload's draws (workload.sampling: temperature, top_p, top_k, min_p, seed, penalties),
  // as a client's fields; greedy (temperature 0) otherwise.
  if (const RequestSampling* d = spec.sampling.get()) {
    body["temperature"] = d->temperature;
    body["top_p"] = d->top_p;
    if (d->top_k != 0) body["top_k"] = d->top_k;
    if (d->min_p != 0) body["min_p"] = d->min_p;
    if (d->seed) body["seed"] = *d->seed;
    if (d->presence_penalty != 0) body["presence_penalty"] = d->presence_penalty;
    if (d->frequency_penalty != 0) body["frequency_penalty"] = d->frequency_penalty;
    if (d->repetition_penalty != 1) body["repetition_penalty"] = d->repetition_penalty;
  }
  // Log probabilities (workload.sampling: logprobs, prompt_logprobs). A stream cannot carry vLLM's
  // prompt_logprobs field, so the prompt's come as an lm-eval client asks for them, `echo` with
  // `logprobs`: the server then computes both with the larger of the two counts of alternatives.
  if (spec.logprobs >= 0 || spec.prompt_logprobs >= 0) {
    body["logprobs"] = std::max(spec.logprobs, spec.prompt_logprobs);
  }
  if (spec.prompt_logprobs >= 0) body["echo"] = true;
  Outcome o;
  RequestRecord& r = o.record;
  r.id = spec.id;
  r.lora_id = spec.lora_id;
  r.request_class = spec.request_class;
  r.arrival_ns = spec.arrival_ns;
  r.prompt_tokens = spec.prompt_len;
  std::string buffer;
  std::optional<Clock::time_point> first, last;
  std::vector<std::optional<Clock::time_point>> last_of(static_cast<std::size_t>(spec.n));
  std::int32_t chunks = 0;
  std::optional<std::int32_t> usage_tokens;
  bool done = false;
  std::string stream_error, finish_reason;
  const Clock::time_point send = Clock::now();
  httplib::Request req;
  req.method = "POST";
  req.path = e.path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  req.content_receiver = [&](const char* data, std::size_t len, std::uint64_t, std::uint64_t) {
    buffer.append(data, len);
    // Server-sent events: "data: ..." lines, events separated by blank lines.
    for (std::size_t nl = buffer.find('\n'); nl != std::string::npos; nl = buffer.find('\n')) {
      std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.rfind("data:", 0) != 0) continue;
      std::string payload = line.substr(5);
      if (!payload.empty() && payload[0] == ' ') payload.erase(0, 1);
      if (payload == "[DONE]") {
        done = true;
        continue;
      }
      const Clock::time_point now = Clock::now();
      json chunk;
      if (json_too_deep(payload)) {
        stream_error = "stream chunk nested too deep";
        return false;
      }
      try {
        chunk = json::parse(payload);
      } catch (const json::exception&) {
        stream_error = "malformed stream chunk";
        return false;
      }
      if (chunk.contains("error")) {
        stream_error = chunk["error"].value("message", "error in stream");
        continue;
      }
      if (chunk.contains("choices") && chunk["choices"].is_array() && !chunk["choices"].empty()) {
        const json& choice = chunk["choices"][0];
        std::size_t index = 0;
        if (spec.n > 1) {
          if (!choice.is_object() || !choice.contains("index") ||
              !choice["index"].is_number_unsigned() ||
              choice["index"].get<std::uint64_t>() >= last_of.size()) {
            stream_error = "a stream chunk without a choice index below n";
            return false;
          }
          index = choice["index"].get<std::size_t>();
        }
        if (!first) first = now;
        if (last_of[index]) {
          o.gaps.push_back(
              std::chrono::duration_cast<std::chrono::nanoseconds>(now - *last_of[index]).count());
        }
        last = last_of[index] = now;
        ++chunks;
        if (choice.is_object() && choice.contains("finish_reason") &&
            choice["finish_reason"].is_string()) {
          finish_reason = choice["finish_reason"].get<std::string>();  // "length", "stop"
        }
      }
      if (chunk.contains("usage") && chunk["usage"].is_object() &&
          chunk["usage"].contains("completion_tokens") &&
          chunk["usage"]["completion_tokens"].is_number_integer()) {
        usage_tokens = chunk["usage"]["completion_tokens"].get<std::int32_t>();
      }
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = client.send(req, res, err);
  const auto rel = [&](Clock::time_point t) {
    return spec.arrival_ns + std::chrono::duration_cast<std::chrono::nanoseconds>(t - send).count();
  };
  if (!sent && res.status <= 0) {
    r.status = RequestStatus::kAborted;
    r.reason = "HTTP request failed (" + httplib::to_string(err) + ")";
  } else if (res.status >= 400 && res.status < 500) {
    r.status = RequestStatus::kRejected;
    r.reason = "HTTP " + std::to_string(res.status) + error_message(buffer);
  } else if (res.status != 200 || !done || !first || !stream_error.empty()) {
    r.status = RequestStatus::kAborted;
    r.reason = res.status != 200       ? "HTTP " + std::to_string(res.status)
               : !stream_error.empty() ? stream_error
                                       : "stream ended without [DONE]";
  } else {
    r.status = RequestStatus::kFinished;
    r.reason = finish_reason;
  }
  r.output_tokens = usage_tokens.value_or(chunks);
  r.samples = spec.n;
  if (first) r.first_token_ns = rel(*first);
  if (r.status == RequestStatus::kFinished) r.finish_ns = rel(*last);
  if (r.status != RequestStatus::kFinished) o.gaps.clear();
  return o;
}

}  // namespace

BenchOutput run_bench(const ExperimentConfig& config, const BenchOptions& options) {
  if (options.max_concurrency < 1) throw ConfigError("--max-concurrency: expected at least 1");
  const Endpoint endpoint = parse_url(options.url);
  // cpp-httplib sends without MSG_NOSIGNAL: a server that hung up must not kill the client.
  std::signal(SIGPIPE, SIG_IGN);
  const ModelConfig model_config = load_model(config.model, default_catalog_dir());
  std::unique_ptr<Workload> workload =
      limit_workload(make_workload(config.workload_section(), config.seed, config.base_dir),
                     config.max_requests, config.max_duration_ns, config.file);
  if (workload->dependent()) {
    throw ConfigError(config.file +
                      ": sim bench replays independent workloads only (a session's turns depend "
                      "on when the previous ones finish)");
  }
  RunOutput out;
  out.backend = "bench";
  out.workload = workload->describe();
  const std::string final_dir =
      options.out_dir.empty() ? "out/" + config.name + "-bench" : options.out_dir;
  check_out_dir(final_dir);
  const std::string model = choose_model(endpoint, options.model);
  const std::vector<LoraModule> lora_modules =
      parse_lora_modules(options.lora_modules, config.scheduler.lora, model);

  StagedDir stage(final_dir);
  out.out_dir = stage.temp_path();
  Recorder recorder(config.slo, config.outputs.steps_csv ? out.out_dir + "/steps.csv" : "", "");
  if (!config.request_classes.empty()) recorder.set_request_classes(config.request_classes);

  std::mutex mu;
  std::condition_variable cv;
  std::deque<RequestSpec> ready;  // sent by the dispatcher, waiting for a worker
  std::vector<Outcome> outcomes;
  bool closed = false;
  std::atomic<std::int64_t> sent{0}, finished{0}, failed{0};
  std::vector<std::thread> workers;
  const auto stop_workers = [&] {
    {
      std::lock_guard lock(mu);
      closed = true;
    }
    cv.notify_all();
    for (std::thread& t : workers) {
      if (t.joinable()) t.join();
    }
  };
  // Whatever leaves this function (an exception while starting the workers or reading the
  // workload included) stops and joins the workers first: a joinable std::thread destroyed
  // would end the process with std::terminate.
  struct JoinWorkers {
    const decltype(stop_workers)& stop;
    ~JoinWorkers() { stop(); }
  } join_workers{stop_workers};
  for (int w = 0; w < options.max_concurrency; ++w) {
    workers.emplace_back([&] {
      httplib::Client client(endpoint.base);
      client.set_connection_timeout(10);
      client.set_read_timeout(static_cast<time_t>(options.timeout_s));
      client.set_write_timeout(30);
      client.set_keep_alive(true);
      while (true) {
        RequestSpec spec;
        {
          std::unique_lock lock(mu);
          cv.wait(lock, [&] { return closed || !ready.empty(); });
          if (ready.empty()) return;
          spec = std::move(ready.front());
          ready.pop_front();
        }
        Outcome o = send_one(client, endpoint, model, lora_modules, spec, model_config.vocab_size);
        (o.record.status == RequestStatus::kFinished ? finished : failed)++;
        std::lock_guard lock(mu);
        outcomes.push_back(std::move(o));
      }
    });
  }

  // The server's board energy over the run, when it reports one (read before the first request
  // and after the last answer).
  const std::optional<double> joules_before = server_joules(endpoint);
  // Dispatch at the arrival times.
  std::optional<RequestSpec> next = workload->next();
  const TimeNs first_arrival = next ? next->arrival_ns : 0;
  TimeNs last_arrival = first_arrival;
  const Clock::time_point start = Clock::now();
  Clock::time_point last_progress = start;
  const auto report = [&](bool force) {
    if (options.progress == nullptr) return;
    const Clock::time_point now = Clock::now();
    if (!force && now - last_progress < std::chrono::seconds(1)) return;
    last_progress = now;
    std::fprintf(options.progress, "\r  sent %lld, finished %lld, failed %lld, %.1f s   ",
                 static_cast<long long>(sent.load()), static_cast<long long>(finished.load()),
                 static_cast<long long>(failed.load()),
                 std::chrono::duration<double>(now - start).count());
    std::fflush(options.progress);
  };
  try {
    while (next) {
      throw_if_interrupted();
      const auto due = start + std::chrono::nanoseconds(next->arrival_ns - first_arrival);
      if (Clock::now() < due) {
        std::this_thread::sleep_until(std::min(due, Clock::now() + std::chrono::milliseconds(100)));
        report(false);
        continue;
      }
      last_arrival = next->arrival_ns;
      {
        std::lock_guard lock(mu);
        ready.push_back(std::move(*next));
      }
      cv.notify_one();
      ++sent;
      next = workload->next();
    }
    while (finished + failed < sent) {
      throw_if_interrupted();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      report(false);
    }
  } catch (...) {
    {
      std::lock_guard lock(mu);
      ready.clear();
    }
    stop_workers();
    throw;
  }
  stop_workers();
  report(true);
  if (options.progress != nullptr) std::fputs("\n", options.progress);
  const std::optional<double> joules_after = joules_before ? server_joules(endpoint) : std::nullopt;

  std::sort(outcomes.begin(), outcomes.end(),
            [](const Outcome& a, const Outcome& b) { return a.record.id < b.record.id; });
  TimeNs end = last_arrival;
  std::string first_failure;
  for (const Outcome& o : outcomes) {
    if (first_failure.empty() && o.record.status != RequestStatus::kFinished) {
      first_failure = "request " + std::to_string(o.record.id) + ": " + o.record.reason;
    }
    recorder.add_measured(o.record, o.gaps);
    end = std::max({end, o.record.finish_ns, o.record.first_token_ns});
  }
  out.totals.first_arrival_ns = first_arrival;
  out.totals.end_ns = end;
  out.totals.num_arrivals = sent;
  recorder.finalize(first_arrival, end, PrefixCacheStats{});
  out.summary = recorder.summary();
  out.summary.skipped_trace_rows = workload->skipped_rows();
  if (joules_before && joules_after && *joules_after >= *joules_before) {
    out.summary.measured_joules = *joules_after - *joules_before;
  }
  write_run_outputs(config, recorder, {out.backend, model, options.url, /*gpus_unknown=*/true},
                    out);
  stage.commit();
  out.out_dir = stage.final_path();
  return {std::move(out), std::move(first_failure)};
}

int bench_command(const std::vector<std::string>& args) {
  BenchOptions options;
  const ExperimentArgs a = parse_experiment_args(
      args, "sim bench",
      [&](CLI::App& app) {
        app.add_option("--url", options.url,
                       "the server: http://HOST:PORT (POSTs to /v1/completions)")
            ->type_name("URL");
        app.add_option("--model", options.model,
                       "the model name to send (default: the first of GET /v1/models)")
            ->type_name("NAME");
        app.add_option("--lora-modules", options.lora_modules,
                       "the model names of LoRA adapters, as the server serves them (requests "
                       "under other adapters send lora-ID)")
            ->type_name("NAME=ID[:RANK] ...");
        app.add_option("--max-concurrency", options.max_concurrency,
                       "requests open at once at most (default 256)")
            ->check(cli::integer_in(1, 100000))
            ->type_name("N");
      },
      "Replay the experiment's workload against an OpenAI-compatible server (/v1/completions, "
      "streaming) at its arrival times, measure TTFT, ITL, TPOT and E2E as vLLM's "
      "benchmark_serving does, and write summary.json, requests.csv, steps.csv (header only) "
      "and config.yaml to the run folder (default out/<experiment name>-bench/), for `sim "
      "validate SIM_DIR BENCH_DIR`.");
  if (options.url.empty()) throw UsageError("sim bench: --url URL is required");
  options.out_dir = a.out_dir;
  const ExperimentConfig config = load_experiment(a.experiment, a.overrides, a.seed);
  options.progress = a.show_progress() ? stderr : nullptr;
  const BenchOutput bench = run_bench(config, options);
  const RunOutput& run = bench.run;
  if (!a.quiet) {
    std::printf(
        "bench %s against %s: %lld requests, %lld finished, %lld failed; wrote %s\n",
        config.name.c_str(), options.url.c_str(), static_cast<long long>(run.summary.num_requests),
        static_cast<long long>(run.summary.completed),
        static_cast<long long>(run.summary.rejected + run.summary.aborted), run.out_dir.c_str());
    std::printf("  ttft p50 %.3f ms, tpot p50 %.3f ms, itl p50 %.3f ms, e2e p50 %.3f ms\n",
                run.summary.ttft_ms.p50, run.summary.tpot_ms.p50, run.summary.itl_ms.p50,
                run.summary.e2e_ms.p50);
  }
  if (run.summary.num_requests > 0 && run.summary.completed == 0) {
    std::fprintf(stderr, "sim bench: error: no request finished (%s); wrote %s\n",
                 printable(bench.first_failure).c_str(), run.out_dir.c_str());
    return 1;
  }
  return 0;
}

}  // namespace servelab
