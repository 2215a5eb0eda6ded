// ExperimentConfig: one experiment file, validated, with --set overrides applied.
//
// Sections (reference: docs/experiments.md):
//   name, description, seed        what the run is called and its single source of randomness
//   model, hardware                catalogue names (experiments/catalog/) or a config.json path
//   serving                        block size, budgets, max_model_len, memory and swap sizing,
//                                  multi-step scheduling, the front end's cost
//   policies                       plugins (with parameters) for batch formation, queue order,
//                                  preemption, prefix caching, allocation and overload control
//                                  (admission, length_cap)
//   workload                       passed to make_workload() (traces/workload.h)
//   slo                            latency objectives for goodput
//   outputs                        which files a run writes
//   cost_model                     roofline (default) or a calibrated cost.yaml
//   cluster                        pools of replicas behind a router, prefill/decode roles (absent:
//                                  one replica of `model` on `hardware`, as always)
//   prefix_cache, kv_offload       pinned prefixes; KV offload tiers
//   (serving/memory_tiers_config.h) parallel, topology             tensor/pipeline parallelism of
//   the replica and the GPUs' links
//                                  (serving/parallel_config.h)
// Every key is checked; errors are ConfigError naming file:line and the key path.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/scheduler_config.h"
#include "core/time.h"
#include "policies/registry.h"
#include "serving/calibration_profile.h"
#include "serving/config_node.h"
#include "serving/frontend.h"
#include "serving/hardware_config.h"
#include "serving/memory_tiers_config.h"
#include "serving/model_config.h"
#include "serving/parallel_config.h"
#include "serving/recorder.h"

namespace servelab {

// One plugin per kind, with its parameters (policies/registry.h; `sim policies` lists them).
struct PolicyChoice {
  PolicySpec batch = default_policy_spec(PolicyKind::kBatch, "vllm");
  PolicySpec queue = default_policy_spec(PolicyKind::kQueue, "fcfs");
  PolicySpec preemption = default_policy_spec(PolicyKind::kPreemption, "recompute");
  PolicySpec prefix_cache = default_policy_spec(PolicyKind::kPrefixCache, "hash");
  PolicySpec allocation = default_policy_spec(PolicyKind::kAllocation, "paged");
  // Overload control; written to config.yaml only when not the default.
  PolicySpec admission = default_policy_spec(PolicyKind::kAdmission, "admit-all");
  PolicySpec length_cap = default_policy_spec(PolicyKind::kLengthCap, "off");
};

struct OutputOptions {
  bool requests_csv = true;
  bool steps_csv = true;
  bool record_schedule = false;
  bool record_events = false;  // events.csv (sim only): preemptions, finishes, rejections
  bool record_blocks = false;  // blocks.csv (sim only): which request held which block, when
};

// Which cost model the simulator uses (`cost_model:`): the roofline from the catalogues, or a
// calibrated profile (`sim calibrate`'s cost.yaml; sim/calibrated_cost_model.h).
struct CostModelChoice {
  std::string type = "roofline";                // "roofline" or "calibrated"
  std::string file;                             // calibrated: the cost.yaml, resolved
  std::optional<CalibratedProfile> calibrated;  // loaded and validated with the experiment
  // Roofline only: the serving stack's host time (step_overhead_us, sequence_overhead_us),
  // replacing the hardware entry's values when set. Host time belongs to the software (vLLM
  // version, CPU) more than to the GPU, so a replay of a given deployment states it here.
  std::optional<double> step_overhead_us;
  std::optional<double> sequence_overhead_us;
  // Roofline only: attention's time per KV block visited per layer, in ns (block_indirection_s
  // of serving/hardware_config.h), replacing the hardware entry's value when set. A property of
  // the attention kernel (software) as much as of the GPU.
  std::optional<double> block_indirection_ns;
  // `hw` with the host times and block indirection above applied (unchanged when none is set).
  HardwareConfig with_host_time(HardwareConfig hw) const {
    if (step_overhead_us) hw.step_overhead_s = *step_overhead_us * 1e-6;
    if (sequence_overhead_us) hw.sequence_overhead_s = *sequence_overhead_us * 1e-6;
    if (block_indirection_ns) hw.block_indirection_s = *block_indirection_ns * 1e-9;
    return hw;
  }
};

// What a replica of a cluster does with a request: everything (unified), the prompt and the
// first token only (prefill; its KV then travels to a decode replica), or the rest (decode).
enum class ReplicaRole : std::uint8_t { kUnified, kPrefill, kDecode };
const char* to_string(ReplicaRole role);

// One pool of identical replicas (`cluster.pools[i]`).
struct PoolConfig {
  std::string name;      // unique in the cluster; default "pool<i>"
  std::string model;     // catalogue name or config.json path (default: the experiment's)
  std::string hardware;  // catalogue name (default: the experiment's)
  std::int32_t count = 1;
  ReplicaRole role = ReplicaRole::kUnified;
  // The pool's `parallel:` and `topology:` (the same keys as an experiment's top level): each
  // replica runs on its own copy of the topology (default: nodes of the pool's hardware), from
  // GPU 0, unless the cluster has a topology of its own (ClusterConfig::topology; the pool then
  // has none). Checked against the pool's model and topology when the experiment loads.
  ParallelChoice parallel;
  std::int32_t num_gpus() const { return parallel.tensor * parallel.pipeline; }
  std::string location;  // "FILE:LINE:COL" of the pool, for errors found later
};

// The KV transfers of a prefill/decode cluster (`cluster.kv_transfer`). Without cluster.topology
// every replica has one port (or, with `links: per_pair`, every pair a link;
// serving/direct_kv_links.h); a transfer takes latency + bytes / bandwidth at the slower of its
// two ports, and the transfers through one port's direction are serialised (or shared). Bandwidth
// 0 means each replica's host links (hardware host_link_bandwidth * host_link_efficiency times
// its GPUs: the KV goes through host memory, as without RDMA or NVLink between the GPUs).
struct KvTransferConfig {
  double bandwidth_gb_s = 0;  // GB/s (1e9 bytes); 0: from the hardware catalogue
  double latency_us = 10;     // per transfer
  // Layer by layer as each prefill step computes it (serving/kv_transfer.h), not after the
  // whole prefill.
  bool layerwise = false;
  // How transfers that overlap on a link use it: kQueue, one after another in the order their
  // prefills ended (the booked models of serving/direct_kv_links.h, topology_kv_transfer.h); kFair,
  // at once, each link's bandwidth shared max-min fairly (sim/shared_kv_transfer.h). kFair is
  // refused with layerwise.
  enum class Sharing { kQueue, kFair } sharing = Sharing::kQueue;
  // Without cluster.topology, how the replicas' machines are linked (serving/direct_kv_links.h):
  // kPerReplica, one port per replica that all its transfers share; kPerPair, a link per
  // (source, destination) pair. Refused with cluster.topology (whose links carry the KV).
  enum class Links { kPerReplica, kPerPair } links = Links::kPerReplica;
};

// `cluster:` (docs/experiments.md). Absent (set == false): one replica of the experiment's model
// on its hardware, no router, the outputs of a single-replica run.
struct ClusterConfig {
  bool set = false;
  std::vector<PoolConfig> pools;
  PolicySpec router = default_policy_spec(PolicyKind::kRouter, "round_robin");
  // The router for decode replicas (P/D); default: the same plugin as `router`.
  std::optional<PolicySpec> decode_router;
  KvTransferConfig kv_transfer;
  bool kv_transfer_set = false;
  // `cluster.topology`: one topology for the whole cluster (the experiment hardware's ports for
  // links given no bandwidth). Replicas take its GPUs pool by pool in file order, each its
  // tensor x pipeline GPUs from the next free one; their collectives and the P/D KV transfers
  // (serving/topology_kv_transfer.h) are priced over it. Unset: every replica on a machine of
  // its own (its pool's topology) and P/D transfers over their ports (kv_transfer.links).
  std::optional<ConfigNode> topology;

  std::int32_t num_replicas() const;
  // GPUs of all replicas: each pool's count x tensor x pipeline, summed.
  std::int64_t num_gpus() const;
  bool disaggregated() const;  // some pool has role prefill or decode
  // With a cluster topology: the first GPU of every replica, in cluster order (replicas placed
  // one after another, pool by pool). Without one: all 0.
  std::vector<std::int32_t> first_gpus() const;
};

inline constexpr std::int64_t kDefaultMaxRequests = 100'000'000;
inline constexpr std::int64_t kDefaultMaxDurationS = 365LL * 24 * 3600;  // one year

struct ExperimentConfig {
  std::string file;      // path as given
  std::string base_dir;  // the file's directory, for relative data paths
  std::string name;
  std::string description;
  std::uint64_t seed = 0;
  std::string model;     // catalogue name or config.json path
  std::string hardware;  // catalogue name
  // `model:` as a mapping {name, kv_cache_dtype, quantization}: how the model is stored when
  // served (ModelConfig's fields of the same names); unset keeps the catalogue entry's.
  std::optional<std::string> kv_cache_dtype;
  std::optional<std::string> quantization;
  // Where model.quantization was set ("FILE:LINE:COL: key 'model.quantization'", or "--set ..."),
  // for the errors found against the model (AWQ on a mixture of experts or misaligned widths).
  std::string quantization_where;
  // `model.router_skew` (ModelConfig::router_skew) and where it was set ("FILE:LINE:COL: key
  // 'model.router_skew'"), for the error when the model turns out to be dense.
  std::optional<double> router_skew;
  std::string router_skew_where;
  SchedulerConfig scheduler;
  // Where serving.num_scheduler_steps was set ("FILE:LINE:COL" or "--set ..."; "" when absent),
  // for errors about it found after parsing (a driver or formation that cannot do multi-step).
  std::string num_scheduler_steps_location;
  // Where serving.speculative_config was set ("FILE:LINE:COL"; "" when absent), for errors found
  // after parsing (a driver that cannot run it).
  std::string speculative_location;
  // Where serving.max_model_len was set ("FILE:LINE:COL" or "--set ..."; "" when absent), for
  // errors found against the model after parsing (more positions than it has).
  std::string max_model_len_location;
  // Where serving.lora was set ("FILE:LINE:COL"; "" when absent), for errors found after parsing
  // (a driver that cannot run LoRA adapters).
  std::string lora_location;
  // Where serving.async_scheduling was set to true ("FILE:LINE:COL"; "" otherwise), for errors
  // found after parsing (a combination vLLM refuses, a driver that cannot run it).
  std::string async_scheduling_location;
  FrontendConfig frontend;  // serving.frontend: per-request front-end time (default: none)
  double gpu_memory_utilization = 0.9;
  std::optional<std::int64_t> num_gpu_blocks;
  std::optional<double> activation_reserve_gb;  // GiB; estimated from the model when unset
  double swap_space_gb = 4.0;                   // GiB of host memory for swapped blocks
  PolicyChoice policies;
  SloConfig slo;
  // The workload's request classes (a `type: mix` workload's parts, traces/mix_workload.h), in
  // part order; empty for every other workload.
  std::vector<std::string> request_classes;
  OutputOptions outputs;
  CostModelChoice cost_model;
  ClusterConfig cluster;
  ParallelChoice parallel;  // `parallel:` and `topology:` (default: one GPU)
  // The GPUs the experiment serves on: the cluster's (ClusterConfig::num_gpus) when it has one,
  // else tensor x pipeline.
  std::int64_t num_gpus() const;
  // `prefix_cache:` (pinned prefixes) and `kv_offload:` (serving/memory_tiers_config.h).
  PrefixCacheSection prefix_cache;
  KvOffloadConfig kv_offload;
  // `limits:` guards against runs that would fill the disk or never end (docs/experiments.md):
  // at most max_requests requests, none arriving later than max_duration_ns after time 0.
  std::int64_t max_requests = kDefaultMaxRequests;
  TimeNs max_duration_ns = kDefaultMaxDurationS * kNsPerS;
  bool limits_set = false;  // a `limits:` section was given (then config.yaml shows it)
  YAML::Node root;  // the whole document after overrides (its workload section is read later)

  ConfigNode workload_section() const;
};

// The experiment's storage choices (kv_cache_dtype, quantization) and router skew applied to
// `model` (the experiment's model, or a cluster pool's). Throws ConfigError naming the line of
// 'model.quantization' for AWQ on a mixture of experts (not modelled) or on widths that are not
// multiples of its group (awq_alignment_problem), and of 'model.router_skew' when the model is
// dense.
void apply_model_storage(const ExperimentConfig& config, ModelConfig& model);

// The TTFT objective of each request class of the experiment (index: RequestSpec::request_class;
// one entry, class 0, for a workload without classes), in nanoseconds: slo.classes.NAME.ttft_ms,
// else slo.ttft_ms, else kNoTtftTarget. What deadline queue orders (edf) rank by
// (scheduler_config_with_policies, serving/replica.h, hands it to the queue).
std::vector<TimeNs> ttft_targets_ns(const ExperimentConfig& config);

// The model and the hardware the run serves on, as summary.json's run.model / run.hardware and
// the printed summary name them: the experiment's, or for a cluster its pools' (each distinct one
// once, in pool order, joined by " + "; the top-level keys are only the pools' defaults).
std::string served_model(const ExperimentConfig& config);
std::string served_hardware(const ExperimentConfig& config);

// The experiment file `path` names: itself, or, relative and not in the current folder, the file
// of that path in the ServeLab home (so `experiments/burst.yaml` works from any folder). Throws
// ConfigError naming both places when neither holds it.
std::string resolve_experiment_file(const std::string& path);

// Loads and validates `path` (resolve_experiment_file), applying `overrides` ("a.b=value") first
// and `seed` if given. Throws ConfigError on any problem.
ExperimentConfig load_experiment(const std::string& path, const std::vector<std::string>& overrides,
                                 std::optional<std::uint64_t> seed = std::nullopt);

// The same for an experiment given as YAML text (the Python module's dicts): `name` stands for
// the file in messages, relative data paths resolve against `base_dir`, and `default_name`
// names the experiment when the text has no `name:`.
ExperimentConfig load_experiment_text(const std::string& text, const std::string& name,
                                      const std::string& base_dir, const std::string& default_name,
                                      const std::vector<std::string>& overrides,
                                      std::optional<std::uint64_t> seed = std::nullopt);

// The resolved configuration as YAML text: every section with defaults filled in, followed by
// `derived` facts (`extra`, e.g. the KV block count the run used).
std::string resolved_config_yaml(const ExperimentConfig& config,
                                 const std::vector<std::pair<std::string, std::string>>& extra);

}  // namespace servelab
