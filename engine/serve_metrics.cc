#include "engine/serve_metrics.h"

#include <algorithm>
#include <charconv>
#include <cstdio>

namespace servelab {

namespace {

// vLLM v1's bucket bounds (seconds).
std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> itl_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> e2e_buckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

// The shortest text that reads back as v, with ".0" on whole numbers: how Prometheus' Python
// client (and so vLLM) writes bucket bounds, so le="1.0" label matchers work unchanged.
std::string number(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, ec == std::errc() ? end : buf);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

}  // namespace

PromHistogram::PromHistogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void PromHistogram::observe(double value) {
  // Prometheus buckets are "less than or equal to" their bound.
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);
  ++counts_[static_cast<std::size_t>(it - bounds_.begin())];
  sum_ += value;
  ++count_;
}

void PromHistogram::render(std::string& out, const std::string& name,
                           const std::string& labels) const {
  std::int64_t cumulative = 0;
  for (std::size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? number(bounds_[i]) : "+Inf";
    out += name + "_bucket{" + labels + ",le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_sum{" + labels + "} " + number(sum_) + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

// A Prometheus label value as the text format writes it: backslash, double quote and line feed
// escaped (a served model or adapter name may hold them; unescaped, one breaks the whole scrape).
static std::string label_value(const std::string& v) {
  std::string out;
  for (const char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

ServeMetrics::ServeMetrics(std::string model_name)
    : labels_("model_name=\"" + label_value(model_name) + "\""),
      ttft_(ttft_buckets()),
      itl_(itl_buckets()),
      e2e_(e2e_buckets()) {}

void ServeMetrics::on_admitted(std::int32_t prompt_tokens) {
  std::lock_guard lock(mu_);
  prompt_tokens_ += prompt_tokens;
}

void ServeMetrics::on_token(TimeNs prev_token_ns, TimeNs now, TimeNs arrival_ns) {
  std::lock_guard lock(mu_);
  ++generation_tokens_;
  if (prev_token_ns < 0) {
    ttft_.observe(ns_to_s(now - arrival_ns));
  } else if (prev_token_ns != now) {
    // One gap per step: a step's further tokens (accepted drafts) come at the same time.
    itl_.observe(ns_to_s(now - prev_token_ns));
  }
}

void ServeMetrics::on_fork_token() {
  std::lock_guard lock(mu_);
  ++generation_tokens_;
}

void ServeMetrics::on_preempt() {
  std::lock_guard lock(mu_);
  ++preemptions_;
}

void ServeMetrics::on_finish(bool finished, TimeNs arrival_ns, TimeNs now, bool stopped) {
  std::lock_guard lock(mu_);
  if (finished) {
    ++(stopped ? success_stop_ : success_length_);
  } else {
    ++success_abort_;
  }
  e2e_.observe(ns_to_s(now - arrival_ns));
}

void ServeMetrics::set_external_tier(bool on) {
  std::lock_guard lock(mu_);
  external_tier_ = on;
}

void ServeMetrics::set_report_overload(bool on) {
  std::lock_guard lock(mu_);
  report_overload_ = on;
}

void ServeMetrics::on_shed() {
  std::lock_guard lock(mu_);
  ++shed_;
}

void ServeMetrics::on_capped() {
  std::lock_guard lock(mu_);
  ++capped_;
}

void ServeMetrics::set_state(std::int64_t running, std::int64_t waiting, double kv_usage,
                             const PrefixCacheStats& prefix) {
  std::lock_guard lock(mu_);
  running_ = running;
  waiting_ = waiting;
  kv_usage_ = kv_usage;
  // vLLM's counters and its logged window leave out the lookups by resumed (previously
  // preempted) requests (PrefixCacheStats.record(..., preempted) keeps those apart).
  // Its prefix-cache hits are the device pool's; a KV connector's (here the offload tier's) are
  // its "external" counters, asked for the tokens the pool did not hold (vLLM's scheduler:
  // num_tokens - num_new_local_computed_tokens), and only where there is a connector.
  prefix_queries_ = prefix.queried_tokens;
  prefix_hits_ = prefix.hit_tokens - prefix.external_hit_tokens;
  external_queries_ = external_tier_ ? prefix_queries_ - prefix_hits_ : 0;
  external_hits_ = prefix.external_hit_tokens;
  // The lookups since the previous call (one step's, or an admission's) enter the window.
  const PrefixCacheStats& was = last_prefix_;
  recent_.observe(prefix.lookups - was.lookups, prefix_queries_ - was.queried_tokens,
                  prefix_hits_ - (was.hit_tokens - was.external_hit_tokens),
                  prefix.resets != was.resets);
  last_prefix_ = prefix;
}

void ServeMetrics::recount_length_as_stop() {
  std::lock_guard lock(mu_);
  --success_length_;
  ++success_stop_;
}

void ServeMetrics::set_spec_decode(const SchedulerCounters& c) {
  std::lock_guard lock(mu_);
  spec_decode_ = true;
  spec_.num_drafts = c.num_drafts;
  spec_.num_draft_tokens = c.num_draft_tokens;
  spec_.num_accepted_tokens = c.num_accepted_tokens;
  spec_.num_accepted_tokens_per_pos = c.num_accepted_tokens_per_pos;
}

namespace {

// Sorted, each name once, joined by commas.
std::string name_list(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

}  // namespace

void ServeMetrics::set_lora(std::int32_t max_loras, std::vector<std::string> running,
                            std::vector<std::string> waiting, double now_s) {
  std::string r = name_list(std::move(running)), w = name_list(std::move(waiting));
  std::lock_guard lock(mu_);
  lora_ = true;
  max_loras_ = max_loras;
  lora_running_ = std::move(r);
  lora_waiting_ = std::move(w);
  lora_time_s_ = now_s;
}

void ServeMetrics::set_board_energy(const NvmlEnergy* meter) {
  const std::optional<std::uint64_t> now = meter ? meter->millijoules() : std::nullopt;
  std::lock_guard lock(mu_);
  board_meter_ = now ? meter : nullptr;
  board_start_mj_ = now.value_or(0);
}

std::string ServeMetrics::render() const {
  std::lock_guard lock(mu_);
  std::string out;
  const std::string l = "{" + labels_ + "}";
  auto scalar = [&](const char* name, const char* type, const char* help, const std::string& v) {
    header(out, name, type, help);
    out += std::string(name) + l + " " + v + "\n";
  };
  scalar("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
         std::to_string(running_));
  scalar("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
         std::to_string(waiting_));
  scalar("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
         number(kv_usage_));
  scalar("vllm:gpu_cache_usage_perc", "gauge",
         "KV-cache usage. 1 means 100 percent usage (older name of vllm:kv_cache_usage_perc).",
         number(kv_usage_));
  scalar("vllm:prefix_cache_queries_total", "counter",
         "Prefix cache queries, in terms of number of queried tokens.",
         std::to_string(prefix_queries_));
  scalar("vllm:prefix_cache_hits_total", "counter",
         "Prefix cache hits, in terms of number of cached tokens.", std::to_string(prefix_hits_));
  scalar("vllm:external_prefix_cache_queries_total", "counter",
         "External prefix cache queries from KV connector cross-instance cache sharing, in terms "
         "of number of queried tokens (here: the KV offload tier).",
         std::to_string(external_queries_));
  scalar("vllm:external_prefix_cache_hits_total", "counter",
         "External prefix cache hits from KV connector cross-instance cache sharing, in terms of "
         "number of cached tokens (here: the KV offload tier).",
         std::to_string(external_hits_));
  scalar("servelab:prefix_cache_hit_rate_recent", "gauge",
         "Prefix cache hit rate over the most recent 1000 requests' lookups (vLLM's logged rate).",
         number(recent_.hit_rate()));
  scalar("vllm:num_preemptions_total", "counter", "Cumulative number of preemptions.",
         std::to_string(preemptions_));
  scalar("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
         std::to_string(prompt_tokens_));
  scalar("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
         std::to_string(generation_tokens_));
  header(out, "vllm:request_success_total", "counter", "Count of finished requests.");
  out += "vllm:request_success_total{" + labels_ + ",finished_reason=\"stop\"} " +
         std::to_string(success_stop_) + "\n";
  out += "vllm:request_success_total{" + labels_ + ",finished_reason=\"length\"} " +
         std::to_string(success_length_) + "\n";
  out += "vllm:request_success_total{" + labels_ + ",finished_reason=\"abort\"} " +
         std::to_string(success_abort_) + "\n";
  if (report_overload_) {
    scalar("servelab:requests_shed_total", "counter",
           "Requests the admission policy refused at arrival (answered 429).",
           std::to_string(shed_));
    scalar("servelab:requests_capped_total", "counter",
           "Requests whose max_tokens a length cap lowered (counted when they end).",
           std::to_string(capped_));
  }
  header(out, "vllm:time_to_first_token_seconds", "histogram",
         "Histogram of time to first token in seconds.");
  ttft_.render(out, "vllm:time_to_first_token_seconds", labels_);
  header(out, "vllm:inter_token_latency_seconds", "histogram",
         "Histogram of inter-token latency in seconds.");
  itl_.render(out, "vllm:inter_token_latency_seconds", labels_);
  header(out, "vllm:time_per_output_token_seconds", "histogram",
         "Histogram of time per output token in seconds (older name of "
         "vllm:inter_token_latency_seconds).");
  itl_.render(out, "vllm:time_per_output_token_seconds", labels_);
  header(out, "vllm:e2e_request_latency_seconds", "histogram",
         "Histogram of end to end request latency in seconds.");
  e2e_.render(out, "vllm:e2e_request_latency_seconds", labels_);
  if (spec_decode_) {
    scalar("vllm:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.",
           std::to_string(spec_.num_drafts));
    scalar("vllm:spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.",
           std::to_string(spec_.num_draft_tokens));
    scalar("vllm:spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.",
           std::to_string(spec_.num_accepted_tokens));
    header(out, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
           "Accepted tokens per draft position.");
    for (std::size_t i = 0; i < spec_.num_accepted_tokens_per_pos.size(); ++i) {
      out += "vllm:spec_decode_num_accepted_tokens_per_pos_total{" + labels_ + ",position=\"" +
             std::to_string(i) + "\"} " + std::to_string(spec_.num_accepted_tokens_per_pos[i]) +
             "\n";
    }
  }
  if (board_meter_ != nullptr) {
    // A failed read leaves the line out for this scrape; the counter never goes backwards.
    const std::optional<std::uint64_t> mj = board_meter_->millijoules();
    if (mj && *mj >= board_start_mj_) {
      scalar("servelab:gpu_energy_joules_total", "counter",
             "Energy the GPU board drew since the server started, in joules (NVML).",
             number(static_cast<double>(*mj - board_start_mj_) * 1e-3));
    }
  }
  if (lora_) {
    // vLLM's labels (no model_name), in its order.
    header(out, "vllm:lora_requests_info", "gauge", "Running stats on lora requests.");
    out += "vllm:lora_requests_info{max_lora=\"" + std::to_string(max_loras_) +
           "\",waiting_lora_adapters=\"" + label_value(lora_waiting_) +
           "\",running_lora_adapters=\"" + label_value(lora_running_) + "\"} " +
           number(lora_time_s_) + "\n";
  }
  return out;
}

}  // namespace servelab
