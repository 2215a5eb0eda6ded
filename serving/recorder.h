// Recorder: the per-request and per-step facts of a run, and the files they become.
//
// Both backends fill it the same way: the Scheduler reports request events through the
// SchedulerObserver hooks; the driver (simulator or engine loop) calls on_step() once per
// executed step. Every metric has one definition (docs/metrics.md), computed in summary().
// Output files (write_* / the streaming files) have fixed column order and exact integer-based
// time formatting, so the same run gives byte-identical files.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/kv_cache_manager.h"
#include "core/lora_slots.h"
#include "core/metrics.h"
#include "core/scheduler.h"
#include "core/scheduler_observer.h"
#include "core/step_plan.h"

namespace servelab {

// Latency targets (ms); an unset one is not checked.
struct SloTargets {
  std::optional<double> ttft_ms;
  std::optional<double> tpot_ms;
  std::optional<double> e2e_ms;
};

// The `slo:` section: targets for every request, and per request class (`slo.classes`, keyed by
// the class names of a `type: mix` workload) targets that replace them key by key for that
// class's requests (a key a class does not name keeps the run-wide target).
struct SloConfig : SloTargets {
  std::map<std::string, SloTargets> classes;
};

// The targets a request of class `class_name` is held to.
SloTargets slo_for_class(const SloConfig& slo, const std::string& class_name);

// Pool and queue state while a step runs (taken right after the plan is formed).
struct StepSnapshot {
  std::int32_t kv_blocks_used = 0;
  std::int32_t kv_blocks_free = 0;
  std::int32_t kv_blocks_cached = 0;  // free blocks still holding a cached hash
  std::int32_t num_usable_blocks = 0;
  std::int32_t waiting = 0;
  std::int32_t running = 0;
  // Slot accounting over the device tables of live requests (KvCacheManager; fill with
  // fill_kv_slot_stats): token slots held, slots holding computed KV, and held blocks holding no
  // KV at all (a contiguous reservation's unused part).
  std::int64_t kv_slots_held = 0;
  std::int64_t kv_slots_filled = 0;
  std::int64_t kv_blocks_reserved_unused = 0;
  // The manager's page churn so far (KvCacheManager::churn); the recorder writes each step's
  // difference from the replica's previous snapshot.
  KvChurn churn;
};

// Copies the manager's O(1) slot and churn counters into the snapshot.
inline void fill_kv_slot_stats(const KvCacheManager& kv, StepSnapshot& s) {
  s.kv_slots_held = kv.num_held_slots();
  s.kv_slots_filled = kv.num_kv_slots();
  s.kv_blocks_reserved_unused = kv.num_reserved_unused_blocks();
  s.churn = kv.churn();
}

struct RequestRecord {
  RequestId id = 0;
  TimeNs arrival_ns = 0, first_scheduled_ns = -1, first_token_ns = -1, finish_ns = -1;
  std::int32_t prompt_tokens = 0, output_tokens = 0, cached_tokens = 0, preemptions = 0;
  std::int32_t samples = 1;  // parallel samples (output_tokens is their sum)
  std::int64_t recomputed_tokens = 0;
  RequestStatus status = RequestStatus::kWaiting;
  std::string reason;
  bool capped = false;        // a length cap lowered its max_output_tokens (core/length_cap.h)
  std::uint32_t lora_id = 0;  // the LoRA adapter it ran under (0: the base model)
  std::uint32_t request_class = 0;  // RequestSpec::request_class
};

// One request class's share of a run (Recorder::set_request_classes): the run-wide definitions
// (docs/metrics.md) over the class's requests only; durations and rates over the run's duration.
struct ClassSummary {
  std::string name;
  std::int64_t num_requests = 0, completed = 0, rejected = 0, aborted = 0, shed = 0;
  std::int64_t input_tokens = 0, output_tokens = 0;
  double requests_per_s = 0, output_tokens_per_s = 0;
  DistributionSummary ttft_ms, tpot_ms, e2e_ms, queueing_ms;
  // The gaps between the class's requests' consecutive tokens (the run's ITL, per class).
  DistributionSummary itl_ms;
  double goodput_requests_per_s = 0, slo_attainment = 0;
  std::int64_t preemptions = 0, recomputed_tokens = 0;
};

struct RunSummary {
  std::int64_t num_requests = 0, completed = 0, rejected = 0, aborted = 0;
  // Overload control: requests shed at arrival (status shed; not in completed, rejected or
  // aborted) and requests whose max_output_tokens a length cap lowered (whatever their end).
  // summary.json and the printed summary show them when report_overload is set (the driver sets
  // it when the experiment chose an admission or length_cap plugin: fill_overload_flag).
  std::int64_t shed = 0, capped = 0;
  bool report_overload = false;
  std::int64_t skipped_trace_rows = 0;  // malformed trace rows skipped (`lenient: true`); set by
                                        // the driver, which knows the workload
  double duration_s = 0;
  double requests_per_s = 0, input_tokens_per_s = 0, output_tokens_per_s = 0;
  std::int64_t input_tokens = 0, output_tokens = 0;
  DistributionSummary ttft_ms, tpot_ms, itl_ms, e2e_ms, queueing_ms;
  double goodput_requests_per_s = 0;
  double slo_attainment = 0;
  // The GPUs the run served on (ExperimentConfig::num_gpus: a cluster's all, a replica's tensor x
  // pipeline), filled in by write_run_outputs (serving/run_folder.h); 0 when unknown (`sim bench`
  // against a server). Goodput per GPU is goodput_requests_per_s / gpus (docs/metrics.md).
  std::int64_t gpus = 0;
  double goodput_per_gpu() const {
    return gpus > 0 ? goodput_requests_per_s / static_cast<double>(gpus) : 0.0;
  }
  std::int64_t num_steps = 0;
  std::int64_t preemptions = 0, recomputed_tokens = 0;
  // vLLM's prefix-cache counters: every lookup counts, and a waiting request is looked up again
  // at each step that cannot admit it, so the rate also measures how often admission was tried.
  std::int64_t prefix_queried_tokens = 0, prefix_hit_tokens = 0;
  double prefix_hit_rate = 0;  // the device pool's hits (with KV offload, the tiers' apart:)
  double prefix_external_hit_rate = 0;  // the offload tiers' hits over the same lookups
  // Of those, the lookups by resumed (previously preempted) requests, which vLLM's own counters
  // keep apart (its logged hit rate leaves them out): theirs is (hit - these) / (queried - these).
  std::int64_t prefix_preempted_queried_tokens = 0, prefix_preempted_hit_tokens = 0;
  // Per request instead: the completed requests' prompt tokens found cached at their first
  // admission (requests.csv's cached_tokens), and that over their prompt tokens (input_tokens).
  // Comparable across admission rules and queue orders, which retry lookups differently.
  std::int64_t prompt_cached_tokens = 0;
  double prompt_hit_rate = 0;
  std::int64_t cow_copies = 0, blocks_saved_by_sharing = 0;  // parallel sampling
  double kv_usage_mean = 0, kv_usage_max = 0;
  std::int64_t swapped_out_blocks = 0, swapped_in_blocks = 0;
  // Time-weighted over steps: held blocks holding no KV, and the fraction of held token slots
  // not holding computed KV (0 in a step that holds none).
  double kv_reserved_unused_blocks_mean = 0, kv_internal_fragmentation_mean = 0;
  // Time-weighted over steps: held token slots not holding computed KV, in tokens (the
  // fragmentation above as an amount: what a larger block size wastes).
  double kv_unused_slots_mean = 0;
  // Mean duration of an executed step (a multi-step round counts once), ms.
  double step_ms_mean = 0;
  // Mean over steps of the requests scheduled in a step, and that mean over the batch slots
  // (serving.max_num_seqs; filled in by the driver, which knows it: 0 when unknown).
  double batch_seqs_mean = 0, slot_efficiency = 0;
  // Pinned prefixes (`prefix_cache.pinned`; -1: none configured): blocks the cache holds, and
  // the time their prefill takes before the run (not on its timeline). Filled in by the driver.
  std::int64_t pinned_blocks = -1;
  double pinned_prefill_s = 0;
  // KV offload (`kv_offload`; empty when not configured), per tier (host, then disk), and the
  // device-side hit tokens (prefix_hit_tokens minus the tiers'). Filled in by the driver.
  struct OffloadTier {
    std::string name;
    std::int64_t capacity_blocks = 0, stored_blocks = 0, loaded_blocks = 0, evicted_blocks = 0;
    std::int64_t hit_tokens = 0;
  };
  std::vector<OffloadTier> offload_tiers;
  std::int64_t offload_dropped_blocks = 0;
  double offload_load_s = 0;
  // Idle-session offload (kv_offload.idle_offload_s; 0: not configured): sessions and blocks
  // stored down to the host tier, and the host-link time those stores take (overlapped).
  double idle_offload_s = 0;
  std::int64_t idle_offloaded_sessions = 0, idle_offloaded_blocks = 0;
  double idle_store_s = 0;
  // Page churn: blocks over the run (the sums of steps.csv's columns) and per second of
  // duration_s.
  KvChurn churn;
  double allocations_per_s = 0, frees_per_s = 0, evictions_per_s = 0, offloads_per_s = 0;
  // Speculative decoding (serving.speculative_config; absent when speculation is off): vLLM's
  // spec-decode counters over the run (docs/metrics.md "Speculative decoding"), filled in by the
  // driver with add_spec_decode() (once per replica in a cluster run).
  struct SpecDecode {
    std::int64_t num_drafts = 0, num_draft_tokens = 0, num_accepted_tokens = 0;
    std::vector<std::int64_t> num_accepted_tokens_per_pos;
  };
  std::optional<SpecDecode> spec_decode;
  // CUDA engine runs (absent elsewhere): the executor's CUDA-graph counters over the run, its
  // warm-up excluded (docs/metrics.md "CUDA graphs"): decode graphs captured (each capture costs
  // a step several milliseconds), steps run by a graph launch, extra eager passes before a new
  // bucket's capture, and the steps run without a graph. Filled in by the driver.
  struct CudaGraphCounts {
    std::int64_t captures = 0, replays = 0, padded_eager_steps = 0, eager_steps = 0;
  };
  std::optional<CudaGraphCounts> cuda_graphs;
  // CUDA engine runs with SERVELAB_CUDA_GEMM=lt or auto (absent elsewhere): each linear-layer
  // shape the executor ran through the tuned choice, with what the process chose for it
  // (kernels/gemm_lt.h LtChoice: cuBLASLt's candidates offered, the fastest one's index, its
  // split-K, the median microseconds of the heuristic's first candidate and of the fastest while
  // tuning; tuned false when first met during a graph capture; with auto, whether the shape is
  // the SwiGLU down projection, the kernel that runs it (lt, cublas, skinny), the skinny kernel's
  // split count and cuBLAS's and the skinny kernel's best medians). Filled in by the driver
  // (docs/metrics.md "cuBLASLt choices").
  struct GemmLtShape {
    std::int32_t tokens = 0, in = 0, out = 0;
    bool out_f32 = true, accumulate = false, tuned = false;
    std::int32_t candidates = 0, chosen = -1, split_k = 1;
    double first_us = 0, chosen_us = 0;
    bool swiglu = false;
    std::string kernel = "lt";
    std::int32_t skinny_splits = 0;
    double cublas_us = 0, skinny_us = 0;
  };
  std::optional<std::vector<GemmLtShape>> gemm_lt;
  // CUDA engine runs (absent elsewhere): whether the executor packs the heads of short prefill
  // launches (CudaExecutor::prefill_launch().packs()) and the run's steps whose prefill attention
  // ran packed, its warm-up excluded (docs/metrics.md "Prefill head packing"). Filled in by the
  // driver.
  struct PrefillPacking {
    bool enabled = false;
    std::int64_t packed_steps = 0;
  };
  std::optional<PrefillPacking> prefill_packing;
  // LoRA (serving.lora; summary.json's `lora` object when report_lora, which the driver sets:
  // fill_lora_report): requests per adapter (all requests of the run; base-model ones under 0),
  // the mean over executed steps of the distinct adapters a step ran (StepPlan::num_loras), the
  // tokens computed under an adapter, and the adapters loaded into one of max_loras slots
  // (Recorder::track_lora_slots).
  bool report_lora = false;
  std::int32_t max_loras = 0;
  std::map<std::uint32_t, std::int64_t> requests_by_adapter;
  double adapters_per_step_mean = 0;
  std::int64_t lora_tokens = 0;
  std::int64_t adapter_loads = 0;
  // Request classes (Recorder::set_request_classes; empty without): summary.json's `classes`.
  std::vector<ClassSummary> classes;
  // Work, utilization and energy of the GPUs (docs/metrics.md, "Energy and utilization"):
  // filled in by the simulator's drivers (sim/power_model.h), absent from engine and `sim bench`
  // runs. Sums over replicas: GPU-seconds busy (each replica's GPUs x the time its steps ran),
  // the steps' FLOPs and device-memory bytes, and the peaks x busy time they are measured
  // against. `energy` only when every replica's hardware entry has `power:`: the steps' joules,
  // and the joules of the GPUs idling between steps (idle watts x (duration_s - busy time)).
  struct Work {
    double gpu_busy_s = 0, gpu_s = 0;  // gpu_s: GPUs x duration_s
    double flops = 0, bytes = 0;
    double peak_flops_s = 0, peak_bytes = 0;  // sums of peak FLOP/s (B/s) x busy seconds
    bool energy = false;
    double busy_joules = 0, idle_joules = 0;
  };
  std::optional<Work> work;
  // An engine run's energy as the board's counter measured it over the run (CUDA with NVML:
  // engine/nvml_energy.h); unset otherwise. Not split into busy and idle.
  std::optional<double> measured_joules;
  bool has_energy() const { return measured_joules.has_value() || (work && work->energy); }
  // The run's joules (measured, or busy + idle; 0 without energy), per output token of the
  // completed requests, and per second of duration_s (0 when there is nothing to divide by).
  double joules() const {
    if (measured_joules) return *measured_joules;
    return work && work->energy ? work->busy_joules + work->idle_joules : 0.0;
  }
  double joules_per_output_token() const {
    return output_tokens > 0 ? joules() / static_cast<double>(output_tokens) : 0.0;
  }
  double average_power_w() const { return duration_s > 0 ? joules() / duration_s : 0.0; }
  // Busy GPU time over GPU time, FLOPs over peak FLOPs while busy (MFU), bytes over peak bytes
  // while busy (MBU); 0 without work.
  double busy_fraction() const {
    return work && work->gpu_s > 0 ? work->gpu_busy_s / work->gpu_s : 0.0;
  }
  double mfu() const {
    return work && work->peak_flops_s > 0 ? work->flops / work->peak_flops_s : 0.0;
  }
  double mbu() const { return work && work->peak_bytes > 0 ? work->bytes / work->peak_bytes : 0.0; }
};

// Adds `c`'s spec-decode counters to s.spec_decode (creating it). Drivers call it when the
// experiment configures speculative decoding.
void add_spec_decode(RunSummary& s, const SchedulerCounters& c);

class Recorder : public SchedulerObserver {
 public:
  // Streaming outputs: when `steps_path` / `schedule_path` are non-empty, one CSV row per step
  // (per scheduled request) is written there as the run goes. Throws std::runtime_error when a
  // file cannot be opened. `replica_column`: steps.csv and schedule.csv get a `replica` column
  // after `step` (a cluster run: step numbers count per replica).
  Recorder(SloConfig slo, const std::string& steps_path, const std::string& schedule_path,
           bool replica_column = false);
  ~Recorder() override;
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  void on_reject(const Request& req, TimeNs now) override;
  void on_token(const Request& req, TimeNs prev_token_ns, TimeNs now) override;
  // Runs of equal gaps (every request that also had a token in the previous step) go into the
  // ITL histogram as one update.
  void on_step_tokens(std::span<const Request* const> requests,
                      std::span<const TimeNs> prev_token_ns, TimeNs now) override;
  void on_preempt(const Request& req, TimeNs now) override;
  void on_finish(const Request& req, TimeNs now) override;
  // Closes the sample's blocks.csv intervals (its group's on_finish comes with the last one).
  void on_sample_end(const Request& sample, TimeNs now) override;

  // One executed step: its plan, start time, duration and the state it ran in. A multi-step
  // round (plan.num_steps N > 1) is one step: one steps.csv row whose decode_tokens and one
  // schedule.csv row per entry whose num_tokens count all N passes.
  void on_step(const StepPlan& plan, TimeNs start, TimeNs duration, const StepSnapshot& snap,
               std::uint32_t replica = 0);

  // LoRA slots (core/lora_slots.h): from now on each replica's steps place their adapters
  // (step_adapters) in a table of `max_loras` slots, and RunSummary::adapter_loads counts the
  // placements that were not resident: how often an engine with vLLM's slots brings an adapter
  // in (the simulator prices each, sim/sim_backend.h). REQUIRES: max_loras >= 1.
  void track_lora_slots(std::int32_t max_loras);

  // Request classes (a `type: mix` workload): `names[k]` is class k (RequestSpec::request_class).
  // From then on requests.csv ends with a `class` column, RunSummary::classes splits the
  // request metrics by class, and each request's SLO is its class's (slo_for_class). Call
  // before the first event. REQUIRES: names non-empty.
  void set_request_classes(std::vector<std::string> names);

  // Cluster events (events.csv, when recorded): request `id` was routed to `replica` at `now`
  // (`stage` "route" for an arrival, "route_decode" for a prefilled request); its KV (`bytes`)
  // left `src` for `dst`: booked at `now` (the prefill's end), its first piece ready at `ready`
  // (`now`, or earlier for a layer-wise transfer), on the link from `begin`, arrived at `finish`
  // (one `transfer` row at `now`, detail "src->dst bytes=B wait_ms=W transfer_ms=T", W = begin -
  // ready, T = finish - begin).
  void on_route(RequestId id, std::uint32_t replica, TimeNs now, const char* stage);
  void on_transfer(RequestId id, std::uint32_t src, std::uint32_t dst, std::int64_t bytes,
                   TimeNs now, TimeNs ready, TimeNs begin, TimeNs finish);

  // Request `id`, which arrived at `arrival`, left the front end (serving.frontend) and reached
  // the scheduler at `now`: an events.csv row `ready` with the front-end time in ms as detail.
  // Drivers call it only when the front end is enabled.
  void on_ready(RequestId id, TimeNs arrival, TimeNs now);

  // A request measured by a client (`sim bench`) rather than reported by a scheduler: its record
  // (first_scheduled_ns -1; cached_tokens, preemptions and recomputed_tokens unknown) and the
  // gaps between its streamed chunks (ITL). Once called, requests.csv leaves the columns a client
  // cannot know empty: first_scheduled_s, cached_tokens, preemptions, recomputed_tokens,
  // queueing_ms.
  void add_measured(const RequestRecord& record, std::span<const TimeNs> token_gaps);
  // Closes the run: first arrival and end time, plus the counters only the core knows.
  // REQUIRES: called once, after the last step.
  void finalize(TimeNs first_arrival, TimeNs end, const PrefixCacheStats& prefix);

  const std::vector<RequestRecord>& requests() const { return records_; }
  // REQUIRES: finalize() was called.
  RunSummary summary() const;

  // Writes requests.csv (rows sorted by request id) to `path`.
  void write_requests_csv(const std::string& path) const;

  // Optional recordings, off unless asked (docs/metrics.md); call before the first event.
  // events.csv: one row per rejection, preemption (recompute or swap), abort and finish.
  // blocks.csv: one row per interval during which a request held a device block (a block shared
  // through the prefix cache gives one row per holder). Throws std::runtime_error when a file
  // cannot be opened.
  void record_events(const std::string& path);
  void record_blocks(const std::string& path);
  bool records_events() const { return events_ != nullptr; }
  bool records_blocks() const { return blocks_ != nullptr; }

 private:
  RequestRecord make_record(const Request& req) const;
  // `count` gaps of `gap` ns between tokens of requests of `request_class`: into the run's ITL
  // histogram and, when the run has classes, the class's.
  void add_gaps(std::uint32_t request_class, TimeNs gap, std::int64_t count);
  void event(const Request& req, TimeNs now, const char* what, const std::string& detail);
  // blocks.csv: closes every interval `id` has open, at `now`, on whichever replica holds them.
  void release_blocks(RequestId id, TimeNs now);

  struct HeldBlock {
    BlockId block;
    TimeNs since;
  };

  SloConfig slo_;
  std::vector<std::string> class_names_;  // set_request_classes (empty: no classes)
  std::vector<SloTargets> class_slo_;     // per class: slo_for_class
  std::vector<RequestRecord> records_;
  LogHistogram itl_ns_;
  std::vector<LogHistogram> class_itl_ns_;  // per class (set_request_classes)
  std::int64_t num_steps_ = 0;
  std::int64_t preemptions_ = 0;
  long double usage_time_ = 0;  // sum of usage * duration
  TimeNs busy_time_ = 0;
  double usage_max_ = 0;
  long double reserved_unused_time_ = 0;  // sum of reserved-unused blocks * duration
  long double fragmentation_time_ = 0;    // sum of unused-slot fraction * duration
  long double unused_slots_time_ = 0;     // sum of unused slots * duration
  std::int64_t swapped_out_ = 0, swapped_in_ = 0;
  KvChurn churn_;                    // sums of the per-step differences
  std::vector<KvChurn> last_churn_;  // each replica's previous snapshot
  TimeNs first_arrival_ = 0, end_ = 0;
  PrefixCacheStats prefix_;
  bool finalized_ = false;
  bool measured_ = false;                                               // add_measured() was called
  std::string steps_path_, schedule_path_, events_path_, blocks_path_;  // for write errors
  std::FILE* steps_ = nullptr;
  std::FILE* schedule_ = nullptr;
  std::int64_t scheduled_seqs_ = 0;                 // sum over steps of plan entries
  std::int64_t step_loras_ = 0;                     // sum over steps of plan.num_loras
  std::int64_t lora_tokens_ = 0;                    // sum over steps of plan.num_lora_tokens
  std::int32_t lora_slots_ = 0;                     // track_lora_slots' max_loras (0: not tracked)
  std::map<std::uint32_t, LoraSlots> lora_tables_;  // per replica
  std::vector<std::uint32_t> step_adapters_;        // scratch
  std::vector<LoraSlots::Placement> placed_;        // scratch
  std::FILE* events_ = nullptr;
  std::FILE* blocks_ = nullptr;
  // blocks.csv: a request's open intervals, by position, on the one replica that holds them (a
  // P/D request's prefill replica until its first step on the decode replica, which closes them
  // at the end of its last step there: when the prefill replica freed them).
  struct HeldBlocks {
    std::uint32_t replica = 0;
    TimeNs last_end = 0;  // the end of the request's last step on `replica`
    std::vector<HeldBlock> blocks;
  };
  std::map<RequestId, HeldBlocks> held_;
  // One blocks.csv row (with the replica after the request in a cluster run).
  void write_block_row(RequestId id, std::uint32_t replica, std::size_t position,
                       const HeldBlock& held, TimeNs end);
  bool replica_column_ = false;
};

// Writes summary.json for `s` (keys and units as in docs/metrics.md), with `meta` (experiment
// name, backend, seed...) as the first object, and `cluster_json` (a JSON object's text, when
// not empty) as a last `cluster` object. Throws std::runtime_error on I/O failure.
void write_summary_json(const std::string& path, const RunSummary& s,
                        const std::vector<std::pair<std::string, std::string>>& meta,
                        const std::string& cluster_json = "");

// Exact decimal renderings of integer nanoseconds: seconds with 9 decimals, ms with 6.
std::string format_seconds(TimeNs t);
std::string format_ms(TimeNs t);

}  // namespace servelab
