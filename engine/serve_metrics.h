// ServeMetrics: what `engine serve` exposes on /metrics, in the Prometheus text format with
// vLLM's metric names, meanings, buckets and `model_name` label (vLLM v1, vllm/v1/metrics; see
// docs/serving.md for the list). The loop thread records (request events, the state after each
// step); HTTP threads render; a mutex separates them.
//
// Gauges: vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc (the
// fraction of usable KV blocks held, 0..1; also under its older name vllm:gpu_cache_usage_perc).
// Counters (tokens): vllm:prompt_tokens_total and vllm:generation_tokens_total (of finished and
// aborted requests' prompts, counted at their first token as vLLM, and every sampled token),
// vllm:prefix_cache_queries_total and vllm:prefix_cache_hits_total (prefix-cache lookups in tokens,
// resumed requests' left out as vLLM leaves them out), vllm:external_prefix_cache_queries_total and
// vllm:external_prefix_cache_hits_total (a KV offload tier as vLLM's KV connector: the tokens the
// GPU pool did not hold and those of them found in the tier; 0 without a tier),
// vllm:num_preemptions_total, vllm:request_success_total{finished_reason="stop"|"length"|"abort"}.
// Histograms (seconds): vllm:time_to_first_token_seconds (first token - arrival at the server),
// vllm:inter_token_latency_seconds (the gap between a request's consecutive steps that gave it
// tokens: one per step, as vLLM's IterationStats, however many tokens speculative decoding
// accepted in it; also under
// the older name vllm:time_per_output_token_seconds), vllm:e2e_request_latency_seconds
// (finish - arrival, of every request counted by vllm:request_success_total, aborted ones too, as
// vLLM observes it for each finished request whatever its reason).
// ServeLab's own gauge: servelab:prefix_cache_hit_rate_recent, the hit rate over the most recent
// 1000 requests' prefix-cache lookups (core/prefix_hit_window.h: what vLLM logs as "Prefix cache
// hit rate"; emptied by POST /reset_prefix_cache), next to the cumulative counters above.
// Overload control (only when the experiment chose an admission or length_cap plugin, so other
// servers' /metrics stay as they were): servelab:requests_shed_total (requests the admission
// policy refused, answered 429) and servelab:requests_capped_total (requests whose max_tokens a
// length cap lowered, counted when they finish or are aborted).
// Speculative decoding (serving.speculative_config; absent otherwise): vLLM's counters
// vllm:spec_decode_num_drafts_total, vllm:spec_decode_num_draft_tokens_total,
// vllm:spec_decode_num_accepted_tokens_total and
// vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"} (docs/metrics.md).
// LoRA (serving.lora; absent otherwise): vllm:lora_requests_info (set_lora).
// The GPU board's energy (`--device cuda` where NVML answers; absent otherwise):
// servelab:gpu_energy_joules_total, joules the board drew since the server started, read from
// NVML's counter (engine/nvml_energy.h) at each scrape (set_board_energy).
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/kv_cache_manager.h"
#include "core/prefix_hit_window.h"
#include "core/scheduler.h"
#include "core/time.h"
#include "engine/nvml_energy.h"

namespace servelab {

// A Prometheus histogram with fixed upper bounds (cumulative buckets plus +Inf, sum, count).
class PromHistogram {
 public:
  explicit PromHistogram(std::vector<double> bounds);
  void observe(double value);
  // Appends the _bucket, _sum and _count lines of `name` with `labels` ("k=\"v\"").
  void render(std::string& out, const std::string& name, const std::string& labels) const;
  std::int64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<std::int64_t> counts_;  // per bucket, not cumulative; last: above every bound
  double sum_ = 0;
  std::int64_t count_ = 0;
};

class ServeMetrics {
 public:
  explicit ServeMetrics(std::string model_name);

  // Loop thread.
  void on_admitted(std::int32_t prompt_tokens);
  void on_token(TimeNs prev_token_ns, TimeNs now, TimeNs arrival_ns);
  // The first token of a forked sample (parallel sampling): a generated token, with neither a
  // time to first token (its request's was sample 0's) nor an inter-token latency.
  void on_fork_token();
  void on_preempt();
  // finished: true for a request that finished (at max_tokens, or by a stop condition when
  // `stopped`), false for an abort.
  void on_finish(bool finished, TimeNs arrival_ns, TimeNs now, bool stopped = false);
  // Any thread: a request counted finished at max_tokens ended at a stop string found after its
  // end reached the loop (engine/stop_strings.h): moves it to finished_reason "stop".
  void recount_length_as_stop();
  void set_state(std::int64_t running, std::int64_t waiting, double kv_usage,
                 const PrefixCacheStats& prefix);
  // Overload control: render the shed and capped counters (before serving starts).
  void set_report_overload(bool on);
  // A KV offload tier serves the engine (before serving starts): it is vLLM's KV connector, so
  // the external counters count (without one they stay 0, as vLLM's without a connector).
  void set_external_tier(bool on);
  void on_shed();
  void on_capped();
  // The scheduler's spec-decode counters (core/scheduler.h); once called, /metrics shows them.
  void set_spec_decode(const SchedulerCounters& counters);
  // LoRA (serving.lora; absent otherwise): vLLM's vllm:lora_requests_info gauge, labels
  // max_lora, waiting_lora_adapters and running_lora_adapters (the adapters' model names of the
  // waiting and running requests, comma-separated, sorted, each once), its value the Unix time
  // of the update (`now_s`), as vLLM sets it.
  void set_lora(std::int32_t max_loras, std::vector<std::string> running,
                std::vector<std::string> waiting, double now_s);

  // The board's energy counter (null: none), read now as the zero of
  // servelab:gpu_energy_joules_total and again at every render. `meter` outlives this object.
  void set_board_energy(const NvmlEnergy* meter);

  // Any thread: the whole exposition text.
  std::string render() const;

 private:
  mutable std::mutex mu_;
  std::string labels_;
  std::int64_t running_ = 0, waiting_ = 0;
  double kv_usage_ = 0;
  std::int64_t prompt_tokens_ = 0, generation_tokens_ = 0, preemptions_ = 0;
  std::int64_t prefix_queries_ = 0, prefix_hits_ = 0;
  // vLLM's external (KV connector) counters, here the KV offload tier's: the tokens each lookup
  // left to the tier (queried - found in the GPU pool) and those found there.
  std::int64_t external_queries_ = 0, external_hits_ = 0;
  bool external_tier_ = false;
  PrefixCacheStats last_prefix_;  // the stats at the previous set_state (window deltas)
  PrefixHitWindow recent_;
  std::int64_t success_length_ = 0, success_abort_ = 0, success_stop_ = 0;
  bool report_overload_ = false;
  std::int64_t shed_ = 0, capped_ = 0;
  PromHistogram ttft_, itl_, e2e_;
  bool spec_decode_ = false;
  SchedulerCounters spec_;  // the spec-decode fields only
  bool lora_ = false;
  std::int32_t max_loras_ = 0;
  std::string lora_running_, lora_waiting_;  // comma-separated names
  double lora_time_s_ = 0;
  const NvmlEnergy* board_meter_ = nullptr;
  std::uint64_t board_start_mj_ = 0;
};

}  // namespace servelab
