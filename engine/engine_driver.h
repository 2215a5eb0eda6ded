// run_engine(): one experiment executed for real — the `engine run` command's body and the
// engine's counterpart of run_simulation() (sim/run.h).
//
// The same experiment file, workload, Scheduler, KV manager and Recorder as the simulator; the
// differences are the backend (CpuExecutor on model weights) and the clock. Arrivals are
// replayed in wall-clock time: engine time is the workload's first arrival plus the steady_clock
// time since the run started, so a trace that starts at t0 starts at once. Each loop iteration
// adds every request whose arrival time has passed, forms a plan at `now`, executes it and
// completes it at the measured end time (scheduling overhead included in the step). An idle
// engine sleeps until the next arrival (in slices of at most 100 ms). With a front end
// (serving.frontend) a request reaches the scheduler at its ready time instead of its arrival,
// as in the simulator. Multi-step scheduling (serving.num_scheduler_steps > 1) is refused
// (ConfigError): the executors run one forward pass per plan. Dependent workloads
// (sessions) hear of finished requests through WorkloadFeedback, as in the simulator.
//
// KV capacity: serving.num_gpu_blocks when set, else kv_memory_gib of fp32 K+V divided by the
// bytes of one block (2 * layers * block_size * kv_heads * head_dim * 4). The executor allocates
// exactly that many blocks and the run reports that number (summary.json run.num_gpu_blocks,
// config.yaml derived.num_gpu_blocks), so `sim run EXP --set serving.num_gpu_blocks=N`
// simulates the same capacity.
// Swap space (preemption swap or auto): serving.swap_space_gb of fp32 host blocks of the same
// size, allocated in full by the executor.
// Pinned prefixes and the KV offload host tier (CPU executor): pinned prompts are computed by a
// real prefill step before the run and held for it; kv_offload.host is a host store of that
// many fp32 blocks ({gib} over the engine's block bytes), and every block the pool evicts is
// copied into it, and a prefix hit there copied back, in the step's plan (StepPlan::tier_stores
// and tier_loads). The disk tier and kv_offload.idle_offload_s are simulated only (ConfigError).
//
// An experiment with a `cluster:` section runs on CPU replicas, one thread each, behind the
// simulator's router (run_engine_cluster, engine/engine_cluster.h).
//
// With all arrivals at the same time the scheduler sees the same sequence of events as in the
// simulator (requests stop at their output length, block hashes ignore token values), so
// schedule.csv is byte-identical to `sim run`'s; with arrivals spread in time it is not.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/kv_cache_manager.h"
#include "core/kv_offload_tiers.h"
#include "engine/llama_weights.h"
#include "engine/nvml_energy.h"
#include "kernels/float_formats.h"
#include "serving/experiment.h"
#include "serving/model_config.h"
#include "serving/run_folder.h"

namespace servelab {

struct EngineOptions {
  std::string out_dir;         // empty: out/<experiment name>-engine
  std::string device = "cpu";  // "cpu"; "cuda" is refused (ConfigError): no CUDA executor yet
  std::string weights;         // safetensors file or directory; empty: random weights from the seed
  double kv_memory_gib = 1.0;  // KV budget when serving.num_gpu_blocks is unset
  bool write_tokens = false;   // also write tokens.jsonl: {"id": N, "tokens": [...]} per request
  bool progress = false;       // progress line on stderr
  // As RunOptions::before_step (sim/run.h): called with the scheduler and every plan before the
  // executor runs it; an exception from it stops the run. Empty: none.
  std::function<void(const Scheduler& scheduler, const StepPlan& plan)> before_step;
};

// When the experiment has a calibrated cost model whose file records a machine other than the
// device this run executes on (kind and name; serving/machine.h), prints one warning line on
// stderr (once per file and process) before running.
// Throws ConfigError for bad input (a malformed or non-finite checkpoint included), an
// unavailable device, an I/O failure, or a CPU run whose estimated memory
// (estimate_cpu_engine_memory) exceeds MemAvailable; Interrupted on SIGINT/SIGTERM. Output folder
// rules as for run_simulation (staged, replaced only when the run completed).
RunOutput run_engine(const ExperimentConfig& config, const EngineOptions& options);

// What run_engine and `engine serve` build before their loop: the model, the KV capacity and
// the executor that owns the KV blocks.
struct EngineInstance {
  LlamaConfig llama;
  std::int64_t num_gpu_blocks = 0;  // what the executor allocated
  std::int64_t num_cpu_blocks = 0;  // swap blocks (preemption swap or auto), else 0
  std::int64_t block_bytes = 0;     // of one block across all layers
  // The device the steps run on, for summary.json's run.hardware: "cpu: <model name>" or
  // "cuda: <GPU name>" (serving/machine.h this_machine).
  std::string hardware;
  std::unique_ptr<LlamaWeights> weights;  // host weights (null for device-random CUDA ones)
  std::unique_ptr<Backend> executor;      // uses *weights: destroyed first (member order)
  // load_engine_cluster: the executors of replicas 1.. (replica 0's is `executor`), each with its
  // own KV blocks over the same *weights. Empty for one replica.
  std::vector<std::unique_ptr<Backend>> more_executors;
  // The KV offload host tier (kv_offload:, CPU executor only): tiers with host slots whose KV
  // the executor's tier store holds (CpuExecutorOptions::num_tier_slots); null without.
  std::unique_ptr<KvOffloadTiers> offload;
  // The board's energy counter (load_engine with --device cuda where NVML answers; null
  // otherwise): `engine run` records the run's joules, `engine serve` exposes them on /metrics.
  std::unique_ptr<NvmlEnergy> board_meter;
};
// Checks the experiment against the engine (device, multi-step, max_model_len, KV budget, host
// memory) and loads weights and the executor, as described above; throws as run_engine does.
// Warns (stderr) about a calibration measured elsewhere.
EngineInstance load_engine(const ExperimentConfig& config, const EngineOptions& options);
// The same for the experiment's `cluster:` section (engine/engine_cluster.h): one CPU executor
// per replica (each pool's count), all over one copy of the weights; the KV capacity applies to
// each replica. Throws ConfigError, naming the pool's FILE:LINE:COL and key, for what the engine
// cannot run: --device cuda, a prefill or decode pool, tensor or pipeline parallelism, a pool of
// another model than the experiment's, speculative decoding. REQUIRES: config.cluster.set.
EngineInstance load_engine_cluster(const ExperimentConfig& config, const EngineOptions& options);

// LlamaWeights::load, where a checkpoint that cannot be used is the user's input: every
// std::runtime_error of loading it (a malformed file, a shape the config does not match, a path
// the file system refuses) becomes a ConfigError (exit code 2). `engine run`, `serve`, `profile`.
LlamaWeights load_checkpoint(const LlamaConfig& llama, const std::string& path);

// The replica's KV options for `engine`: kv_cache_options_for(config) plus its offload tier.
KvCacheOptions engine_kv_cache_options(const ExperimentConfig& config, EngineInstance& engine);

// Pinned prefixes (prefix_cache.pinned) on the engine: pins them in `kv` (pin_prefixes, same
// errors) and computes their KV for real, one prefill step per prefix on the engine's executor
// over the pinned blocks (their full blocks; the KV is then exact, and held for the run).
// Returns the wall seconds those steps took (0 without pinned prefixes).
double prefill_pinned_prefixes(const ExperimentConfig& config, EngineInstance& engine,
                               KvCacheManager& kv);

// Before a --device cuda run or server takes its first request (engine/warm_up.h): runs the
// warm-up plans for the experiment's scheduler limits over the executor's KV blocks, and returns
// the wall seconds they took. 0 on the CPU, where nothing initialises lazily (its runs are
// unchanged). Call it before prefill_pinned_prefixes: the warm-up overwrites KV blocks.
double warm_up_engine(const ExperimentConfig& config, const EngineOptions& options,
                      EngineInstance& engine);

// The CPU executor's KV format for model.kv_dtype() (fp32 for an fp32 model's "auto").
kernels::FloatFormat kv_float_format(const ModelConfig& model);
// The CUDA executor's KV format for the model: bf16 for kv_cache_dtype auto (the executor
// computes in bf16 whatever the model's dtype), kv_float_format otherwise (bf16, fp8_e4m3 and
// fp8_e5m2 are what it stores; load_engine refuses the rest).
kernels::FloatFormat cuda_kv_float_format(const ModelConfig& model);
// "" when the CUDA executor stores the model's KV dtype (bf16, fp8_e4m3, fp8_e5m2, or auto);
// otherwise why not and what to use, for a ConfigError on the caller's key or option.
std::string cuda_kv_dtype_refusal(const ModelConfig& model);
// "" when the CUDA kernels take the model's shape (head_dim 64 or 128; hidden_size and
// intermediate_size multiples of 8, for their 16-byte loads); otherwise why not, naming the model,
// and what to use (--device cpu), for a ConfigError: `engine run`, `engine serve` and `engine
// profile` refuse such a model before any weights are made.
std::string cuda_model_refusal(const ModelConfig& model);

// Bytes of fp32 K and V of one block across all layers (the CPU executor keeps fp32 storage
// whatever the KV dtype; engine/cpu_executor.h).
std::int64_t engine_block_bytes(const ModelConfig& model, std::int32_t block_size);

// What the CPU engine allocates, in bytes: fp32 weights, the KV blocks, the host swap blocks and
// one step's activations (a rough estimate: hidden states, projections, MLP, logits, scores).
struct CpuMemoryEstimate {
  std::int64_t weights = 0, kv = 0, swap = 0, activations = 0;
  std::int64_t total() const { return weights + kv + swap + activations; }
};
CpuMemoryEstimate estimate_cpu_engine_memory(const ExperimentConfig& config,
                                             const ModelConfig& model, std::int64_t num_gpu_blocks,
                                             std::int64_t num_cpu_blocks, std::int64_t block_bytes);

// MemAvailable of /proc/meminfo in bytes (nullopt where there is none).
std::optional<std::int64_t> mem_available_bytes();

}  // namespace servelab
