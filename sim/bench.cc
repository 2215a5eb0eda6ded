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
#include "core/strings.h"
#include "serving/cli.h"
#include "serving/interrupt.h"
#include "serving/lora_modules.h"
#include "serving/model_config.h"
#include "serving/output_file.h"
#include "serving/quoted_replies.h"
#include "serving/recorder.h"
#include "serving/run_stage.h"
#include "traces/lora_workload.h"
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

// At most this many bytes of an answer are kept: a /v1/models or /metrics body, a stream line.
// A server that sends more is answering something else (or nothing that ends).
constexpr std::size_t kMaxAnswerBytes = 16u << 20;
// The first bytes of every answer, kept for the message of an error status (one_line shows 300).
constexpr std::size_t kErrorBodyBytes = 64u << 10;

// `text` on one line, at most 300 characters: control characters become spaces (the reasons
// go to requests.csv and to the terminal).
std::string one_line(std::string_view text) {
  std::string out(text.substr(0, 300));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  if (text.size() > 300) out += "...";
  return out;
}

// GET `path`: the status and the body (at most kMaxAnswerBytes), or the transport error.
struct Answer {
  int status = 0;  // 0: no answer (error says why)
  std::string body, error;
};
Answer get(const Endpoint& e, const std::string& path) {
  httplib::Client client(e.base);
  client.set_connection_timeout(10);
  client.set_read_timeout(30);
  Answer a;
  bool too_big = false;
  const httplib::Result res = client.Get(path, [&](const char* data, std::size_t len) {
    if (a.body.size() + len > kMaxAnswerBytes) {
      too_big = true;
      return false;
    }
    a.body.append(data, len);
    return true;
  });
  if (too_big) {
    a.error = "an answer longer than 16 MiB";
  } else if (!res) {
    a.error = httplib::to_string(res.error());
  } else {
    a.status = res->status;
  }
  return a;
}

// The models GET /v1/models lists, in its order; nullopt when the server answers that path with
// an error status (a server without the endpoint; `status` says which). Throws ConfigError when
// the server cannot be reached or answers something that is no model list.
std::optional<std::vector<std::string>> served_models(const Endpoint& e, int& status) {
  const std::string prefix = e.path.substr(0, e.path.rfind("/completions"));
  const std::string models_path =
      prefix.size() >= 3 && prefix.compare(prefix.size() - 3, 3, "/v1") == 0 ? prefix + "/models"
                                                                             : "/v1/models";
  const Answer a = get(e, models_path);
  if (a.status == 0) {
    throw ConfigError("--url " + e.base + ": cannot reach the server (GET " + models_path + ": " +
                      a.error + ")");
  }
  status = a.status;
  if (a.status != 200) return std::nullopt;
  const std::string where = "--url " + e.base + models_path;
  const auto no_list = [&](const std::string& what) {
    return ConfigError(where + ": the answer is no model list (" + what +
                       "; expected {\"data\": [{\"id\": NAME}, ...]})");
  };
  if (json_too_deep(a.body)) throw no_list("JSON nested too deep");
  const json list = json::parse(a.body, nullptr, /*allow_exceptions=*/false);
  if (list.is_discarded()) throw no_list("not JSON");
  if (!list.is_object() || !list.contains("data") || !list["data"].is_array()) {
    throw no_list("no \"data\" list");
  }
  std::vector<std::string> names;
  for (const json& m : list["data"]) {
    if (!m.is_object() || !m.contains("id") || !m["id"].is_string() ||
        m["id"].get_ref<const std::string&>().empty()) {
      throw no_list("an entry without a non-empty string \"id\"");
    }
    const std::string& id = m["id"].get_ref<const std::string&>();
    if (std::any_of(id.begin(), id.end(),
                    [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
      throw no_list("a model id with control characters");
    }
    names.push_back(id);
  }
  return names;
}

// "'a', 'b', ..." for an error message: the first 20 names and how many more.
std::string name_list(const std::vector<std::string>& names) {
  std::string list;
  std::size_t shown = 0;
  for (const std::string& n : names) {
    if (++shown > 20) {
      list += " and " + std::to_string(names.size() - 20) + " more";
      break;
    }
    list += (list.empty() ? "'" : ", '") + n + "'";
  }
  return list;
}

// The model name to send: --model when the server lists it (or lists nothing to check against),
// else the first model GET /v1/models lists. `served` is that list (nullopt: the server has no
// such endpoint, HTTP `status`).
std::string choose_model(const Endpoint& e, const std::string& requested,
                         const std::optional<std::vector<std::string>>& served, int status) {
  if (requested.empty()) {
    if (!served) {
      throw ConfigError("--url " + e.base + ": GET /v1/models answered HTTP " +
                        std::to_string(status) + "; pass --model NAME");
    }
    if (served->empty())
      throw ConfigError("--url " + e.base + ": no model listed; pass --model NAME");
    return served->front();
  }
  // Every request would be refused (HTTP 404): say so before sending any.
  if (served && !served->empty() &&
      std::find(served->begin(), served->end(), requested) == served->end()) {
    throw ConfigError("--model " + requested + ": the server at " + e.base +
                      " does not serve it (GET /v1/models lists " + name_list(*served) + ")");
  }
  return requested;
}

// The largest adapter id the requests of workload `section` (a mix's parts included) can carry
// (workload.lora.adapters: ids 1 .. adapters); 0 without LoRA.
std::int32_t max_adapter_id(const ConfigNode& section) {
  if (!section.is_map()) return 0;
  std::int32_t most = 0;
  if (const std::optional<LoraWorkloadOptions> o = parse_lora_workload_options(section)) {
    most = o->adapters;
  }
  if (section.has("type") && section.at("type").is_scalar() &&
      section.at("type").as_string() == "mix" && section.has("parts") &&
      section.at("parts").is_sequence()) {
    for (const ConfigNode& part : section.at("parts").elements()) {
      if (const std::optional<ConfigNode> w =
              part.is_map() ? part.find("workload") : std::nullopt) {
        most = std::max(most, max_adapter_id(*w));
      }
    }
  }
  return most;
}

// Every adapter name the workload can send is one the server lists (when it lists any): a name
// it does not serve would have every request under it refused (HTTP 404) mid-run.
void check_adapters_served(const Endpoint& e, const std::vector<LoraModule>& modules,
                           std::int32_t adapters,
                           const std::optional<std::vector<std::string>>& served) {
  if (!served || served->empty()) return;
  for (std::int32_t id = 1; id <= adapters; ++id) {
    const std::string name = lora_model_name(modules, static_cast<std::uint32_t>(id));
    if (std::find(served->begin(), served->end(), name) != served->end()) continue;
    throw ConfigError("--lora-modules: the workload sends adapter " + std::to_string(id) +
                      " (of workload.lora.adapters " + std::to_string(adapters) + ") as '" + name +
                      "', which the server at " + e.base +
                      " does not serve (GET /v1/models lists " + name_list(*served) +
                      "); pass --lora-modules NAME=" + std::to_string(id) +
                      " with the name the server was started with");
  }
}

// The server's board energy counter, servelab:gpu_energy_joules_total on GET /metrics (`engine
// serve --device cuda` where NVML answers; docs/serving.md): the sum over its series (one per
// GPU), or nullopt when the server has no /metrics, no such counter (vLLM, a CPU engine) or an
// unreadable value. A sample line is NAME[{LABELS}] VALUE [TIMESTAMP] (Prometheus' text format).
std::optional<double> server_joules(const Endpoint& e) {
  const Answer a = get(e, "/metrics");
  if (a.status != 200) return std::nullopt;
  const std::string_view name = "servelab:gpu_energy_joules_total";
  std::istringstream in(a.body);
  std::optional<double> total;
  for (std::string line; std::getline(in, line);) {
    if (line.compare(0, name.size(), name) != 0 || line.size() == name.size()) continue;
    std::size_t at = name.size();
    if (line[at] == '{') {
      at = line.find('}', at);
      if (at == std::string::npos) return std::nullopt;
      ++at;
    }
    if (at >= line.size() || line[at] != ' ') continue;  // another metric with this prefix
    const std::size_t from = line.find_first_not_of(' ', at);
    if (from == std::string::npos) return std::nullopt;
    const std::string value = line.substr(from, line.find(' ', from) - from);
    char* end = nullptr;
    const double j = std::strtod(value.c_str(), &end);
    if (end == value.c_str() || *end != '\0' || !std::isfinite(j) || j < 0) return std::nullopt;
    total = total.value_or(0.0) + j;
  }
  return total;
}

struct Outcome {
  RequestRecord record;
  std::vector<TimeNs> gaps;
  TimeNs client_wait_ns = 0;  // how long it waited in the client for a free connection
  // Asked for with return_token_ids (a dependent workload's request): the ids of its first
  // choice, and whether the server sent any `token_ids` at all.
  std::vector<std::int32_t> reply;
  bool reply_ids = false;
};

// How late after its arrival a request may be sent and still count as sent on time: the
// dispatcher's sleep and a worker's wake-up (a thread's start, under a sanitizer too).
constexpr TimeNs kDispatchJitterNs = 10 * kNsPerMs;

// A request as the dispatcher hands it to the workers. `released_ns`: when it could be sent at
// the earliest (its arrival; a session's turn is handed over when its parent's stream has ended,
// which may be after its arrival, the parent's last chunk plus the think time). `connection_free`:
// a worker (a connection) was idle when it was handed over, so whatever passes before it is sent
// is the dispatcher's and the worker's scheduling, never a wait for a free connection (on a
// loaded machine a wake-up may take longer than kDispatchJitterNs).
struct Handover {
  TimeNs released_ns = 0;
  bool connection_free = false;
};

// The bench's clock: wall time since `start` on the workload's time axis (its first arrival at
// `start`), so that requests.csv's times and the run's duration are the wall clock's.
struct BenchClock {
  Clock::time_point start;
  TimeNs first_arrival = 0;
  TimeNs at(Clock::time_point t) const {
    return first_arrival + std::chrono::duration_cast<std::chrono::nanoseconds>(t - start).count();
  }
};

// ": MESSAGE" from an error body: OpenAI's {"error": {"message": ...}} or {"error": "..."},
// vLLM's older {"object": "error", "message": ...}, else the body's text itself; on one line,
// "" for an empty body.
std::string error_message(const std::string& body) {
  const json j = json_too_deep(body) ? json() : json::parse(body, nullptr, false);
  if (j.is_object()) {
    const json* m = nullptr;
    if (j.contains("error") && j["error"].is_object() && j["error"].contains("message")) {
      m = &j["error"]["message"];
    } else if (j.contains("error")) {
      m = &j["error"];
    } else if (j.contains("message")) {
      m = &j["message"];
    }
    if (m != nullptr && m->is_string()) return ": " + one_line(m->get_ref<const std::string&>());
    if (m != nullptr) return ": " + one_line(m->dump());
  }
  std::string_view text = body;
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text.empty() ? "" : ": " + one_line(text);
}

// One streamed request; times relative to `send`. The whole answer must come within `timeout`
// (a server that trickles bytes or keep-alive comments forever is given up), and an interrupt
// (SIGINT/SIGTERM) gives it up at the next bytes (run_bench also shuts the socket of a silent
// one). Never throws for what the server sends: that becomes the request's reason. `token_ids`:
// ask for the output's ids (vLLM's return_token_ids) and keep the first choice's in the reply.
// `handover`: when the dispatcher could send it at the earliest and whether a connection was free
// then (see Handover).
Outcome send_one(httplib::Client& client, const Endpoint& e, const std::string& model,
                 const std::vector<LoraModule>& lora_modules, const RequestSpec& spec,
                 std::int32_t vocab_size, std::chrono::duration<double> timeout,
                 const BenchClock& clock, bool token_ids, const Handover& handover) {
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
  if (spec.n > 1) {
    body["n"] = spec.n;
    // vLLM refuses n > 1 with greedy sampling; ignore_eos and max_tokens fix every length, so
    // what is drawn does not matter (a workload's own sampling below replaces this).
    body["temperature"] = 1.0;
  }
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
  if (token_ids) body["return_token_ids"] = true;
  Outcome o;
  RequestRecord& r = o.record;
  r.id = spec.id;
  r.lora_id = spec.lora_id;
  r.request_class = spec.request_class;
  r.arrival_ns = spec.arrival_ns;
  r.prompt_tokens = spec.prompt_len;
  std::string buffer;       // the stream's bytes not yet split into lines
  std::size_t scanned = 0;  // buffer[0, scanned) holds no '\n'
  std::string error_body;   // the first kErrorBodyBytes of the answer, for an error status
  std::optional<Clock::time_point> first, last;
  std::vector<std::optional<Clock::time_point>> last_of(static_cast<std::size_t>(spec.n));
  std::int32_t chunks = 0;
  std::optional<std::int64_t> usage_tokens;
  bool done = false;
  std::string stream_error, finish_reason;
  const Clock::time_point send = Clock::now();
  const Clock::time_point deadline = send + std::chrono::duration_cast<Clock::duration>(timeout);
  httplib::Request req;
  req.method = "POST";
  req.path = e.path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  // One "data:" line of the stream; false stops reading (stream_error says why).
  const auto take_line = [&](std::string_view line, Clock::time_point now) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.rfind("data:", 0) != 0) return true;  // comments (": ping"), event:, id:
    std::string_view payload = line.substr(5);
    if (!payload.empty() && payload[0] == ' ') payload.remove_prefix(1);
    if (payload == "[DONE]") {
      done = true;
      return true;
    }
    if (json_too_deep(payload)) {
      stream_error = "stream chunk nested too deep";
      return false;
    }
    const json chunk = json::parse(payload, nullptr, /*allow_exceptions=*/false);
    if (chunk.is_discarded()) {
      stream_error = "malformed stream chunk: " + one_line(payload);
      return false;
    }
    if (!chunk.is_object()) return true;
    if (chunk.contains("error")) {
      const std::string m = error_message(std::string(payload));
      stream_error = "error in stream" + m;
      return true;
    }
    if (chunk.contains("choices") && chunk["choices"].is_array()) {
      for (const json& choice : chunk["choices"]) {
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
          finish_reason = one_line(choice["finish_reason"].get_ref<const std::string&>());
        }
        if (token_ids && index == 0 && choice.is_object() && choice.contains("token_ids") &&
            !choice["token_ids"].is_null()) {
          const json& ids = choice["token_ids"];
          const bool valid =
              ids.is_array() && std::all_of(ids.begin(), ids.end(), [&](const json& t) {
                return t.is_number_unsigned() &&
                       t.get<std::uint64_t>() < static_cast<std::uint64_t>(vocab_size);
              });
          if (!valid) {
            stream_error = "token_ids " + one_line(ids.dump()) +
                           " is not a list of token ids below the "
                           "model's vocabulary size " +
                           std::to_string(vocab_size);
            return false;
          }
          for (const json& t : ids) o.reply.push_back(t.get<std::int32_t>());
          o.reply_ids = true;
        }
      }
    }
    if (chunk.contains("usage") && chunk["usage"].is_object() &&
        chunk["usage"].contains("completion_tokens")) {
      // A count of the tokens asked for: at most max_tokens for each of the n choices.
      const json& c = chunk["usage"]["completion_tokens"];
      const std::int64_t most = std::int64_t{spec.max_output_tokens} * spec.n;
      if (!c.is_number_integer() || c.get<std::int64_t>() < 0 || c.get<std::int64_t>() > most) {
        stream_error = "usage.completion_tokens " + one_line(c.dump()) +
                       " is not a token count in [0, " + std::to_string(most) + "] (max_tokens " +
                       std::to_string(spec.max_output_tokens) +
                       (spec.n > 1 ? " x n " + std::to_string(spec.n) : std::string()) + ")";
        return false;
      }
      usage_tokens = c.get<std::int64_t>();
    }
    return true;
  };
  req.content_receiver = [&](const char* data, std::size_t len, std::uint64_t, std::uint64_t) {
    const Clock::time_point now = Clock::now();
    if (interrupt_signal() != 0) {
      stream_error = "interrupted";
      return false;
    }
    if (now > deadline) {
      stream_error =
          format_text("no complete answer within the --timeout of %g s", timeout.count());
      return false;
    }
    if (error_body.size() < kErrorBodyBytes) {
      error_body.append(data, std::min(len, kErrorBodyBytes - error_body.size()));
    }
    if (done) return true;  // anything after [DONE] is no part of the answer
    buffer.append(data, len);
    // Server-sent events: "data: ..." lines, events separated by blank lines. Lines are taken
    // from the front (one erase per read, a scan of each byte once).
    std::size_t from = 0;
    for (std::size_t nl = buffer.find('\n', scanned); nl != std::string::npos;
         nl = buffer.find('\n', from)) {
      const bool more = take_line(std::string_view(buffer).substr(from, nl - from), now);
      from = nl + 1;
      if (!more) return false;
      if (done) break;
    }
    buffer.erase(0, from);
    scanned = buffer.size();
    if (buffer.size() > kMaxAnswerBytes) {
      stream_error = "a stream line longer than 16 MiB";
      return false;
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  bool sent = false;
  try {
    sent = client.send(req, res, err);
  } catch (const std::exception& x) {  // the client library's own failures
    stream_error = one_line(x.what());
  }
  // Latencies count from the send, as vLLM's benchmark_serving (a request that waited in the
  // client for a free connection arrives, for the server, when it is sent); every time is the
  // wall clock's, so the run's duration is (it was the arrival plus each request's latency, so
  // time spent waiting in the client vanished and throughput read five times too high).
  // A send within kDispatchJitterNs of its arrival keeps the workload's arrival (the dispatcher's
  // sleep is that precise; requests.csv then has the simulator's arrival times).
  o.client_wait_ns =
      handover.connection_free
          ? 0
          : std::max<TimeNs>(0, clock.at(send) - std::max(spec.arrival_ns, handover.released_ns));
  if (o.client_wait_ns <= kDispatchJitterNs) o.client_wait_ns = 0;
  r.arrival_ns = spec.arrival_ns + o.client_wait_ns;
  const auto rel = [&](Clock::time_point t) { return r.arrival_ns + clock.at(t) - clock.at(send); };
  // Why a stream that the client stopped or that broke did not finish: what the receiver found,
  // else the transport's error, else what was missing.
  const std::string transport = err == httplib::Error::Success || err == httplib::Error::Canceled
                                    ? std::string()
                                    : " (" + httplib::to_string(err) + ")";
  if (!stream_error.empty() && (stream_error == "interrupted" || res.status <= 0)) {
    r.status = RequestStatus::kAborted;
    r.reason = stream_error;
  } else if (!sent && res.status <= 0) {
    r.status = RequestStatus::kAborted;
    r.reason =
        err == httplib::Error::Read
            ? format_text("the server sent nothing for the --timeout of %g s", timeout.count())
            : "HTTP request failed (" + httplib::to_string(err) + ")";
  } else if (res.status >= 400 && res.status < 500) {
    r.status = RequestStatus::kRejected;
    r.reason = "HTTP " + std::to_string(res.status) + error_message(error_body);
  } else if (res.status != 200) {
    r.status = RequestStatus::kAborted;
    r.reason = "HTTP " + std::to_string(res.status) + error_message(error_body);
  } else if (!stream_error.empty()) {
    r.status = RequestStatus::kAborted;
    r.reason = stream_error;
  } else if (!done || !first) {
    r.status = RequestStatus::kAborted;
    const std::string content_type = res.get_header_value("Content-Type");
    r.reason = !done && content_type.rfind("text/event-stream", 0) != 0
                   ? "the answer is no event stream (Content-Type '" + one_line(content_type) +
                         "')" + transport
               : !done ? "stream ended without [DONE]" + transport
                       : "stream ended without a chunk of choices";
  } else {
    r.status = RequestStatus::kFinished;
    r.reason = finish_reason;
  }
  r.output_tokens = static_cast<std::int32_t>(usage_tokens.value_or(chunks));
  r.samples = spec.n;
  if (first) r.first_token_ns = rel(*first);
  if (r.status == RequestStatus::kFinished) r.finish_ns = rel(*last);
  if (r.status != RequestStatus::kFinished) o.gaps.clear();
  return o;
}

}  // namespace

BenchOutput run_bench(const ExperimentConfig& config, const BenchOptions& options) {
  if (options.max_concurrency < 1) throw ConfigError("--max-concurrency: expected at least 1");
  if (!(options.timeout_s >= 0.001 && options.timeout_s <= 1e6)) {
    throw ConfigError("--timeout: expected seconds in [0.001, 1e6]");
  }
  const Endpoint endpoint = parse_url(options.url);
  // cpp-httplib sends without MSG_NOSIGNAL: a server that hung up must not kill the client.
  std::signal(SIGPIPE, SIG_IGN);
  const ModelConfig model_config = load_model(config.model, default_catalog_dir());
  std::unique_ptr<Workload> workload =
      limit_workload(make_workload(config.workload_section(), config.seed, config.base_dir),
                     config.max_requests, config.max_duration_ns, config.file);
  // Sessions: a turn is sent when the turns it follows were answered (plus its think time), and
  // its prompt quotes their replies as the server sampled them (serving/quoted_replies.h).
  const bool dependent = workload->dependent();
  QuotedReplies replies(model_config.vocab_size);
  std::int64_t unquoted = 0;  // replies finished without token ids to quote
  RunOutput out;
  out.backend = "bench";
  out.workload = workload->describe();
  const std::string final_dir =
      options.out_dir.empty() ? "out/" + config.name + "-bench" : options.out_dir;
  check_out_dir(final_dir);
  refuse_inputs_inside(config, final_dir);
  int models_status = 0;
  const std::optional<std::vector<std::string>> served = served_models(endpoint, models_status);
  const std::string model = choose_model(endpoint, options.model, served, models_status);
  const std::vector<LoraModule> lora_modules =
      parse_lora_modules(options.lora_modules, config.scheduler.lora, model);
  check_adapters_served(endpoint, lora_modules, max_adapter_id(config.workload_section()), served);

  StagedDir stage(final_dir);
  out.out_dir = stage.temp_path();
  Recorder recorder(config.slo, config.outputs.steps_csv ? out.out_dir + "/steps.csv" : "", "");
  if (!config.request_classes.empty()) recorder.set_request_classes(config.request_classes);

  std::mutex mu;
  std::condition_variable cv;
  std::condition_variable answered;  // a worker finished a request (dependent workloads wait)
  // Sent by the dispatcher, waiting for a worker: each request and its hand-over.
  std::deque<std::pair<RequestSpec, Handover>> ready;
  std::vector<Outcome> outcomes;
  bool closed = false;
  std::atomic<std::int64_t> sent{0}, finished{0}, failed{0};
  std::vector<std::thread> workers;
  // One client a worker, made here so that an interrupt can shut their sockets (stop() is the
  // client's one thread-safe call): a request waiting on a silent server ends at once.
  std::vector<std::unique_ptr<httplib::Client>> clients;
  std::atomic<int> busy{0};  // workers inside send_one
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
  const auto cancel_requests = [&] {
    // A worker may open its socket just after a stop(): stop again until none is sending.
    while (busy.load() > 0) {
      for (const auto& c : clients) c->stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  // Whatever leaves this function (an exception while starting the workers or reading the
  // workload included) stops and joins the workers first: a joinable std::thread destroyed
  // would end the process with std::terminate.
  struct JoinWorkers {
    const decltype(stop_workers)& stop;
    ~JoinWorkers() { stop(); }
  } join_workers{stop_workers};
  const std::chrono::duration<double> timeout(options.timeout_s);
  const auto timeout_us = static_cast<std::int64_t>(options.timeout_s * 1e6);
  // The workload's first request and the clock, set before the first request is handed over
  // (the hand-over, under `mu`, orders the write before every worker's read).
  std::optional<RequestSpec> next = workload->next();
  BenchClock clock{Clock::now(), next ? next->arrival_ns : 0};
  // Workers (each with its client and keep-alive connection) start one a request, up to
  // --max-concurrency: a run of 6 requests starts 6 threads, not the 40,000 asked for.
  const auto add_worker = [&] {
    auto& client = *clients.emplace_back(std::make_unique<httplib::Client>(endpoint.base));
    client.set_connection_timeout(10);
    client.set_read_timeout(static_cast<time_t>(timeout_us / 1000000),
                            static_cast<time_t>(timeout_us % 1000000));
    client.set_write_timeout(30);
    client.set_keep_alive(true);
    // cpp-httplib writes a POST's headers and body apart: on a reused connection Nagle held the
    // body for the server's delayed ACK, 40 ms that counted as the server's latency (vLLM's
    // client, aiohttp, sets TCP_NODELAY too).
    client.set_tcp_nodelay(true);
    httplib::Client* own = &client;
    workers.emplace_back([&, own] {
      while (true) {
        RequestSpec spec;
        Handover handover;
        {
          std::unique_lock lock(mu);
          cv.wait(lock, [&] { return closed || !ready.empty(); });
          if (ready.empty()) return;
          spec = std::move(ready.front().first);
          handover = ready.front().second;
          ready.pop_front();
          ++busy;
        }
        Outcome o;
        try {
          o = send_one(*own, endpoint, model, lora_modules, spec, model_config.vocab_size, timeout,
                       clock, dependent, handover);
        } catch (const std::exception& x) {  // e.g. out of memory: this request fails, not all
          o.record.id = spec.id;
          o.record.arrival_ns = spec.arrival_ns;
          o.record.prompt_tokens = spec.prompt_len;
          o.record.samples = spec.n;
          o.record.status = RequestStatus::kAborted;
          o.record.reason = one_line(x.what());
        }
        {
          std::lock_guard lock(mu);
          const bool ok = o.record.status == RequestStatus::kFinished;
          if (dependent) {
            // Its reply is kept before the turns it releases can be sent; a request that failed
            // releases them too (at the moment it failed), as in the simulator.
            if (ok && o.reply_ids) {
              replies.keep(spec.id, std::move(o.reply));
            } else if (ok) {
              ++unquoted;
            }
            workload->on_finish(spec.id, ok ? o.record.finish_ns : clock.at(Clock::now()));
          }
          (ok ? finished : failed)++;  // under the lock: the dispatcher reads both with on_finish's
          outcomes.push_back(std::move(o));
          --busy;
        }
        answered.notify_all();
      }
    });
  };

  // Under `mu`, before a request joins `ready`: whether a worker is idle with nothing waiting
  // for it (one just added counts: it picks the request up once started).
  const auto connection_free = [&] {
    return static_cast<std::int64_t>(workers.size()) - busy.load() -
               static_cast<std::int64_t>(ready.size()) >
           0;
  };
  // A worker more, up to --max-concurrency, when every worker has a request already.
  const auto add_worker_if_all_busy = [&] {
    if (static_cast<std::int64_t>(workers.size()) < options.max_concurrency &&
        static_cast<std::int64_t>(workers.size()) <= sent.load()) {
      add_worker();
    }
  };

  // The server's board energy over the run, when it reports one (read before the first request
  // and after the last answer).
  const std::optional<double> joules_before = server_joules(endpoint);
  // Dispatch at the arrival times.
  const TimeNs first_arrival = clock.first_arrival;
  TimeNs last_arrival = first_arrival;
  clock.start = Clock::now();
  const Clock::time_point start = clock.start;
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
    // A dependent workload: the next request known now (released by the answers so far), sent
    // at its arrival; a worker's answer may release an earlier one meanwhile.
    while (dependent) {
      throw_if_interrupted();
      report(false);
      std::unique_lock lock(mu);
      if (!next) {
        const std::optional<TimeNs> at = workload->next_arrival();
        if (!at) {
          if (workload->exhausted()) break;
          if (finished + failed == sent) {
            throw std::logic_error(
                "sim bench: the workload holds requests that nothing in flight "
                "releases");
          }
          answered.wait_for(lock, std::chrono::milliseconds(100));
          continue;
        }
        const auto due = start + std::chrono::nanoseconds(*at - first_arrival);
        if (Clock::now() < due) {
          answered.wait_until(lock, std::min(due, Clock::now() + std::chrono::milliseconds(100)));
          continue;
        }
        next = workload->next();
        if (!next)
          throw std::logic_error("sim bench: the workload announced an arrival it did not yield");
      }
      replies.quote(*next);
      last_arrival = std::max(last_arrival, next->arrival_ns);
      add_worker_if_all_busy();
      const TimeNs released = std::max(next->arrival_ns, clock.at(Clock::now()));
      ready.emplace_back(std::move(*next), Handover{released, connection_free()});
      next.reset();
      ++sent;
      lock.unlock();
      cv.notify_one();
    }
    while (next) {
      throw_if_interrupted();
      const auto due = start + std::chrono::nanoseconds(next->arrival_ns - first_arrival);
      if (Clock::now() < due) {
        std::this_thread::sleep_until(std::min(due, Clock::now() + std::chrono::milliseconds(100)));
        report(false);
        continue;
      }
      last_arrival = next->arrival_ns;
      add_worker_if_all_busy();
      {
        std::lock_guard lock(mu);
        const TimeNs arrival = next->arrival_ns;
        ready.emplace_back(std::move(*next), Handover{arrival, connection_free()});
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
    cancel_requests();
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
  std::int64_t client_waits = 0;
  TimeNs client_wait_max_ns = 0;
  for (const Outcome& o : outcomes) {
    if (first_failure.empty() && o.record.status != RequestStatus::kFinished) {
      first_failure = "request " + std::to_string(o.record.id) + ": " + o.record.reason;
    }
    recorder.add_measured(o.record, o.gaps);
    end = std::max({end, o.record.finish_ns, o.record.first_token_ns});
    // Past the dispatch jitter: a wait for a free connection.
    if (o.client_wait_ns > 0) {
      ++client_waits;
      client_wait_max_ns = std::max(client_wait_max_ns, o.client_wait_ns);
    }
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
  return {std::move(out), std::move(first_failure), client_waits, ns_to_s(client_wait_max_ns),
          unquoted};
}

int bench_command(const std::vector<std::string>& args) {
  BenchOptions options;
  std::string timeout_text;
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
        app.add_option("--timeout", timeout_text,
                       "seconds a request's whole answer may take (default 600); a request "
                       "over it is aborted, with that reason")
            ->type_name("S");
      },
      "Replay the experiment's workload against an OpenAI-compatible server (/v1/completions, "
      "streaming) at its arrival times, measure TTFT, ITL, TPOT and E2E as vLLM's "
      "benchmark_serving does, and write summary.json, requests.csv, steps.csv (header only) "
      "and config.yaml to the run folder (default out/<experiment name>-bench/), for `sim "
      "validate SIM_DIR BENCH_DIR`.");
  if (options.url.empty()) throw UsageError("sim bench: --url URL is required");
  // A client sees no steps, scheduled requests, events or blocks: the flags would be ignored.
  for (const auto& [given, flag] : {std::pair{a.record_schedule, "--record-schedule"},
                                    std::pair{a.record_events, "--record-events"},
                                    std::pair{a.record_blocks, "--record-blocks"}}) {
    if (given) {
      throw UsageError(std::string("sim bench: ") + flag +
                       ": a client cannot see the server's schedule, events or KV blocks (the "
                       "server's own run records them: engine run); drop it");
    }
  }
  if (!timeout_text.empty()) {
    char* end = nullptr;
    options.timeout_s = std::strtod(timeout_text.c_str(), &end);
    if (end == timeout_text.c_str() || *end != '\0' || !(options.timeout_s >= 0.001) ||
        !(options.timeout_s <= 1e6)) {
      throw UsageError("sim bench: --timeout: expected seconds in [0.001, 1e6], got '" +
                       printable(timeout_text) + "'");
    }
  }
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
  if (bench.client_waits > 0) {
    std::fprintf(stderr,
                 "sim bench: warning: %lld requests waited in the client for a free connection "
                 "(up to %.3f s; --max-concurrency %d): their latencies count from when they were "
                 "sent, as vLLM's benchmark's do, so the server saw a lighter load than the "
                 "workload's\n",
                 static_cast<long long>(bench.client_waits), bench.client_wait_max_s,
                 options.max_concurrency);
  }
  if (bench.unquoted_replies > 0) {
    std::fprintf(stderr,
                 "sim bench: warning: %lld replies came without token ids (the server does not "
                 "answer vLLM's return_token_ids): the turns after them quote other tokens than "
                 "the model sampled, so the server's prefix cache cannot hit past the quoted "
                 "replies as the simulator's does\n",
                 static_cast<long long>(bench.unquoted_replies));
  }
  if (run.summary.num_requests > 0 && run.summary.completed == 0) {
    std::fprintf(stderr, "sim bench: error: no request finished (%s); wrote %s\n",
                 printable(bench.first_failure).c_str(), run.out_dir.c_str());
    return 1;
  }
  return 0;
}

}  // namespace servelab
