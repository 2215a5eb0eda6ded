#include "engine/engine_driver.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include "core/block_hash.h"
#include "core/stop_conditions.h"
#include "engine/cpu_executor.h"
#include "engine/engine_cluster.h"
#include "engine/engine_loop.h"
#include "engine/gemm_lt_file.h"
#include "engine/gpu_switches.h"
#include "engine/idle_wait.h"
#include "engine/nvml_energy.h"
#include "engine/run_support.h"
#include "engine/warm_up.h"
#include "engine/weight_quantization.h"
#include "serving/config_node.h"
#include "serving/frontend.h"
#include "serving/interrupt.h"
#include "serving/kv_capacity.h"
#include "serving/machine.h"
#include "serving/memory_tiers_config.h"
#include "serving/run_stage.h"
#if SERVELAB_HAVE_CUDA
#include "engine/cuda_executor.h"
#include "kernels/attention.h"
#include "kernels/device.h"
#endif
#include "engine/llama_weights.h"
#include "serving/model_config.h"
#include "serving/replica.h"
#include "serving/workload_feedback.h"
#include "traces/workload.h"

namespace servelab {

namespace {

using Clock = std::chrono::steady_clock;

// The longest an idle engine sleeps before looking again; bounds the lateness of an arrival
// released by a dependent workload while the engine sleeps.
constexpr TimeNs kMaxIdleSleepNs = 100'000'000;

// `engine run`'s work: the experiment's arrivals in wall-clock time, through the front end
// (serving.frontend) when it is enabled; SIGINT/SIGTERM unwind the run (the staged folder is
// removed). An idle engine sleeps until the next arrival or ready time, at most
// kMaxIdleSleepNs at a time.
class ExperimentSource : public WorkSource {
 public:
  ExperimentSource(ArrivalFeed& arrivals, const FrontendConfig& frontend, Recorder& recorder,
                   const WallClock& clock, SimulationTotals& totals, bool progress)
      : arrivals_(arrivals),
        frontend_on_(frontend.enabled()),
        frontend_(frontend),
        recorder_(recorder),
        clock_(clock),
        totals_(totals),
        progress_(progress),
        last_progress_(clock.start()) {}
  ~ExperimentSource() override {
    if (progress_) std::fputs("\r\033[K", stderr);
  }

  void admit(TimeNs now, Scheduler& scheduler) override {
    throw_if_interrupted();
    for (std::optional<TimeNs> t = arrivals_.peek(); t && *t <= now; t = arrivals_.peek()) {
      if (frontend_on_) {
        frontend_.push(arrivals_.take());
      } else {
        scheduler.add_request(arrivals_.take(), now);
      }
      ++totals_.num_arrivals;
      totals_.end_ns = std::max(totals_.end_ns, now);
    }
    for (std::optional<TimeNs> t = frontend_.next_ready(); t && *t <= now;
         t = frontend_.next_ready()) {
      RequestSpec spec = frontend_.pop();
      if (recorder_.records_events()) recorder_.on_ready(spec.id, spec.arrival_ns, now);
      scheduler.add_request(std::move(spec), now);
    }
  }

  bool wait_for_work(TimeNs /*now*/, const Scheduler& /*scheduler*/) override {
    std::optional<TimeNs> next = arrivals_.peek();
    if (const std::optional<TimeNs> ready = frontend_.next_ready()) {
      next = next ? std::min(*next, *ready) : *ready;
    }
    if (!next) return false;
    // To the arrival itself, not the 100-200 us past it a plain sleep overshoots by.
    wait_until(clock_, std::min(*next, clock_.now() + kMaxIdleSleepNs));
    return true;
  }

  void after_step(TimeNs /*end*/) override {
    if (progress_ && Clock::now() - last_progress_ > std::chrono::milliseconds(1000)) {
      last_progress_ = Clock::now();
      std::fprintf(stderr, "\r  %lld requests arrived, %lld steps, wall %.1f s   ",
                   static_cast<long long>(totals_.num_arrivals),
                   static_cast<long long>(totals_.num_steps),
                   std::chrono::duration<double>(last_progress_ - clock_.start()).count());
      std::fflush(stderr);
    }
  }

 private:
  ArrivalFeed& arrivals_;
  const bool frontend_on_;
  FrontEnd frontend_;
  Recorder& recorder_;
  const WallClock& clock_;
  SimulationTotals& totals_;
  const bool progress_;
  Clock::time_point last_progress_;
};

// --device cuda needs a CUDA build and a usable device; says which is missing. A malformed
// environment switch (engine/gpu_switches.h) is reported first, with or without a GPU.
void require_cuda_device() {
  cuda_switches_from_env();
#if SERVELAB_HAVE_CUDA
  std::string reason;
  if (!kernels::cuda_device_available(&reason)) {
    throw ConfigError("--device cuda: no usable CUDA device (" + reason + "); use --device cpu");
  }
#else
  throw ConfigError(
      "--device cuda: this build has no CUDA support (configured without nvcc or with "
      "SERVELAB_ENABLE_CUDA=OFF); use --device cpu");
#endif
}

std::string gib(std::int64_t bytes) { return format_gib(bytes); }

}  // namespace

std::optional<std::int64_t> mem_available_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return std::nullopt;
  char line[256];
  std::optional<std::int64_t> out;
  while (std::fgets(line, sizeof line, f)) {
    long long kib = 0;
    if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) {
      out = static_cast<std::int64_t>(kib) * 1024;
      break;
    }
  }
  std::fclose(f);
  return out;
}

CpuMemoryEstimate estimate_cpu_engine_memory(const ExperimentConfig& config,
                                             const ModelConfig& model, std::int64_t num_gpu_blocks,
                                             std::int64_t num_cpu_blocks,
                                             std::int64_t block_bytes) {
  CpuMemoryEstimate e;
  e.weights = model.num_params() * static_cast<std::int64_t>(sizeof(float));
  e.kv = num_gpu_blocks * block_bytes;
  e.swap = num_cpu_blocks * block_bytes;
  // One step's buffers: per token, the hidden state, q/k/v, attention output and the MLP's
  // gate/up; per sequence, the logits; per token and head, one row of attention scores.
  const std::int64_t tokens = config.scheduler.max_num_batched_tokens;
  const std::int64_t per_token = 4 * std::int64_t{model.hidden_size} + model.q_size() +
                                 2 * model.kv_size() + 3 * std::int64_t{model.intermediate_size};
  e.activations =
      static_cast<std::int64_t>(sizeof(float)) *
      (tokens * per_token + std::int64_t{config.scheduler.max_num_seqs} * model.vocab_size +
       tokens * model.num_heads);
  return e;
}

kernels::FloatFormat kv_float_format(const ModelConfig& model) {
  const std::string k = model.kv_dtype();
  if (k == "bf16") return kernels::FloatFormat::kBf16;
  if (k == "fp16") return kernels::FloatFormat::kFp16;
  if (k == "fp8_e4m3") return kernels::FloatFormat::kFp8E4m3;
  if (k == "fp8_e5m2") return kernels::FloatFormat::kFp8E5m2;
  return kernels::FloatFormat::kFp32;
}

kernels::FloatFormat cuda_kv_float_format(const ModelConfig& model) {
  return model.kv_cache_dtype == "auto" ? kernels::FloatFormat::kBf16 : kv_float_format(model);
}

std::string cuda_kv_dtype_refusal(const ModelConfig& model) {
  const kernels::FloatFormat f = cuda_kv_float_format(model);
  if (f == kernels::FloatFormat::kBf16 || f == kernels::FloatFormat::kFp8E4m3 ||
      f == kernels::FloatFormat::kFp8E5m2) {
    return "";
  }
  return "the CUDA executor stores KV in bf16 or fp8 (fp8, fp8_e4m3, fp8_e5m2), not " +
         model.kv_dtype() + "; use one of those (or auto), or --device cpu";
}

std::string cuda_model_refusal(const ModelConfig& model) {
  if (model.head_dim != 64 && model.head_dim != 128) {
    return "--device cuda: the CUDA kernels support head_dim 64 and 128; model " + model.name +
           " has " + std::to_string(model.head_dim) + "; use --device cpu";
  }
  if (model.hidden_size % 8 != 0 || model.intermediate_size % 8 != 0) {
    return "--device cuda: the CUDA kernels need hidden_size and intermediate_size multiples of "
           "8; model " +
           model.name + " has " + std::to_string(model.hidden_size) + " and " +
           std::to_string(model.intermediate_size) + "; use --device cpu";
  }
  return "";
}

std::int64_t engine_block_bytes(const ModelConfig& model, std::int32_t block_size) {
  return 2 * std::int64_t{model.num_layers} * block_size * model.kv_size() *
         static_cast<std::int64_t>(sizeof(float));
}

namespace {

void check_device_name(const EngineOptions& options) {
  if (options.device != "cpu" && options.device != "cuda") {
    throw ConfigError("--device: expected cpu or cuda, got '" + options.device + "'");
  }
}

// load_engine's body for `num_replicas` replicas of the experiment's model (a cluster's are
// checked by load_engine_cluster first).
EngineInstance load_replicas(const ExperimentConfig& config, const EngineOptions& options,
                             std::int32_t num_replicas);

}  // namespace

EngineInstance load_engine(const ExperimentConfig& config, const EngineOptions& options) {
  check_device_name(options);
  // One replica, one executor: `engine run` drives a cluster (run_engine -> load_engine_cluster);
  // `engine serve` one replica.
  if (config.cluster.set) {
    throw ConfigError(config.cluster.pools.front().location +
                      ": key 'cluster': engine serve drives one replica; run a cluster with "
                      "engine run (CPU replicas) or sim run, or remove the section");
  }
  EngineInstance engine = load_replicas(config, options, 1);
  // The board's energy (docs/metrics.md "Energy and utilization"): CUDA with NVML only.
#if SERVELAB_HAVE_CUDA
  if (options.device == "cuda") {
    engine.board_meter = std::make_unique<NvmlEnergy>(kernels::device_info().pci_bus_id);
    if (!engine.board_meter->available()) engine.board_meter.reset();
  }
#endif
  return engine;
}

EngineInstance load_engine_cluster(const ExperimentConfig& config, const EngineOptions& options) {
  check_device_name(options);
  const ClusterConfig& cl = config.cluster;
  if (!cl.set) throw std::logic_error("load_engine_cluster: the experiment has no cluster");
  const std::string& where = cl.pools.front().location;
  if (options.device != "cpu") {
    throw ConfigError(where + ": key 'cluster': --device " + options.device +
                      ": an engine cluster runs CPU replicas only (one executor per thread); use "
                      "--device cpu, or sim run");
  }
  if (config.scheduler.speculative.enabled()) {
    throw ConfigError(config.speculative_location +
                      ": key 'serving.speculative_config': speculative decoding is not wired "
                      "into cluster runs yet (run one replica)");
  }
  for (std::size_t i = 0; i < cl.pools.size(); ++i) {
    const PoolConfig& p = cl.pools[i];
    const std::string key = "cluster.pools[" + std::to_string(i) + "]";
    if (p.role != ReplicaRole::kUnified) {
      throw ConfigError(p.location + ": key '" + key + ".role' (pool '" + p.name + "'): role " +
                        to_string(p.role) +
                        ": the engine runs unified pools only (prefill/decode disaggregation "
                        "would copy KV blocks between replicas, which the engine does not do "
                        "yet); use role unified, or sim run");
    }
    if (p.num_gpus() > 1) {
      throw ConfigError(p.location + ": key '" + key + ".parallel' (pool '" + p.name +
                        "'): the engine runs a model on one device, so tensor " +
                        std::to_string(p.parallel.tensor) + " x pipeline " +
                        std::to_string(p.parallel.pipeline) +
                        " can only be simulated (sim run); use 1 and 1 for engine run");
    }
    if (p.model != config.model) {
      throw ConfigError(p.location + ": key '" + key + ".model' (pool '" + p.name +
                        "'): the engine's replicas share one model's weights, the "
                        "experiment's (" +
                        config.model + "), not " + p.model +
                        "; remove the pool's model, or sim run");
    }
  }
  return load_replicas(config, options, cl.num_replicas());
}

namespace {

EngineInstance load_replicas(const ExperimentConfig& config, const EngineOptions& options,
                             std::int32_t num_replicas) {
  // The executors run one forward pass per plan; rounds of several exist only in the simulator.
  if (config.scheduler.num_scheduler_steps > 1) {
    throw ConfigError(config.num_scheduler_steps_location +
                      ": key 'serving.num_scheduler_steps': the engine runs every plan as one "
                      "forward pass, so multi-step scheduling (" +
                      std::to_string(config.scheduler.num_scheduler_steps) +
                      " steps) can only be simulated (sim run); use 1 for engine run");
  }
  // The CPU executor proposes n-grams and verifies them; draft models and EAGLE heads are
  // simulated only.
  if (config.scheduler.speculative.enabled() &&
      config.scheduler.speculative.method != SpecMethod::kNgram) {
    throw ConfigError(config.speculative_location +
                      ": key 'serving.speculative_config.method': the engine runs method ngram "
                      "only (it has no draft model or EAGLE head), so " +
                      to_string(config.scheduler.speculative.method) +
                      " can only be simulated (sim run)");
  }
  // The executors run a model on one device; model parallelism exists only in the simulator.
  if (config.parallel.set && config.parallel.tensor * config.parallel.pipeline > 1) {
    throw ConfigError(config.parallel.where +
                      ": the engine runs a model on one device, so tensor " +
                      std::to_string(config.parallel.tensor) + " x pipeline " +
                      std::to_string(config.parallel.pipeline) +
                      " can only be simulated (sim run); use tensor 1, pipeline 1 for engine run");
  }
  // Pinned prefixes and the host offload tier run on both executors; the disk tier and the
  // idle-session offload are simulated only.
  if (config.kv_offload.disk) {
    throw ConfigError(config.kv_offload.disk->location +
                      ": the engine has a host offload tier only; the disk tier is simulated "
                      "only (sim run); remove kv_offload.disk for engine run");
  }
  if (config.kv_offload.idle_offload_s > 0) {
    throw ConfigError(config.kv_offload.idle_location +
                      ": idle-session offload is simulated only (sim run); remove it for "
                      "engine run");
  }
  // CUDA: bf16 blocks; without serving.num_gpu_blocks the executor sizes the cache from free
  // device memory and serving.gpu_memory_utilization (--kv-memory-gb is for the CPU engine).
  const bool cuda = options.device == "cuda";
  // Quantized weights: the CPU executor multiplies by them as stored
  // (engine/weight_quantization.h); the CUDA executor runs bf16 weights only. Checked before the
  // device when the experiment states it, and again once a catalogue entry could have.
  auto refuse_cuda_quantization = [&](const std::string& quantization) {
    if (!cuda || quantization == "none") return;
    throw ConfigError(config.file + ": key 'model.quantization': the CUDA executor runs bf16 " +
                      "weights, so '" + quantization +
                      "' runs on the CPU executor (--device cpu) or in the simulator (sim run)");
  };
  refuse_cuda_quantization(config.quantization.value_or("none"));
  // (Checked before the device, so the message is the same with and without CUDA.)
  if (cuda) require_cuda_device();
  // A calibrated cost model in the experiment was measured on some machine; the engine's
  // measurements are comparable with it only on the same device.
  std::string gpu_name;
#if SERVELAB_HAVE_CUDA
  if (cuda) gpu_name = kernels::device_info().name;
#endif
  const MachineRecord machine = this_machine(options.device, gpu_name);
  if (config.cost_model.calibrated && config.cost_model.calibrated->machine) {
    const CalibratedProfile& p = *config.cost_model.calibrated;
    warn_if_calibrated_elsewhere(p.file, p.machine, machine, CalibrationUse::kEngine);
  }
  EngineInstance out;
  out.hardware = machine.kind + ": " + machine.name;
  out.llama = load_llama_config(config.model, default_catalog_dir());
  apply_model_storage(config, out.llama.model);
  const LlamaConfig& llama = out.llama;
  const ModelConfig& model = llama.model;
  model.validate();
  refuse_cuda_quantization(model.quantization);
  [[maybe_unused]] const kernels::FloatFormat cuda_kv = cuda_kv_float_format(model);
  if (const std::string why = cuda ? cuda_kv_dtype_refusal(model) : ""; !why.empty()) {
    throw ConfigError(config.file + ": key 'model.kv_cache_dtype': " + why);
  }
  if (config.scheduler.max_model_len > model.max_position_embeddings) {
    throw ConfigError(
        (config.max_model_len_location.empty() ? config.file : config.max_model_len_location) +
        ": key 'serving.max_model_len': expected at most the model's " +
        "max_position_embeddings (" + std::to_string(model.max_position_embeddings) + "), got " +
        std::to_string(config.scheduler.max_model_len));
  }
  if (llama.sliding_window > 0 && config.scheduler.max_model_len > llama.sliding_window) {
    throw ConfigError(
        (config.max_model_len_location.empty() ? config.file : config.max_model_len_location) +
        ": key 'serving.max_model_len': " + model.name + " attends within a sliding window of " +
        std::to_string(llama.sliding_window) +
        " tokens (config.json sliding_window) and the engine computes full "
        "attention, the same only up to that length: expected at most " +
        std::to_string(llama.sliding_window) + ", got " +
        std::to_string(config.scheduler.max_model_len));
  }
  const std::int32_t block_size = config.scheduler.block_size;
  out.block_bytes = engine_block_bytes(model, block_size);
#if SERVELAB_HAVE_CUDA
  if (cuda) out.block_bytes = cuda_block_bytes(model, block_size, cuda_kv);
#endif
  if (const std::string why = cuda ? cuda_model_refusal(model) : ""; !why.empty()) {
    throw ConfigError(why);
  }
  const bool sized_by_device = cuda && !config.num_gpu_blocks;
  if (config.num_gpu_blocks) {
    out.num_gpu_blocks = *config.num_gpu_blocks;
  } else if (sized_by_device) {
    out.num_gpu_blocks = 2;  // placeholder for the checks below; the executor decides
  } else {
    // Bounded before the conversion: a double past int64 range is undefined behaviour.
    if (!(options.kv_memory_gib > 0) || options.kv_memory_gib > 1e6) {
      throw ConfigError("--kv-memory-gb: expected a size in GiB in (0, 1e6]");
    }
    out.num_gpu_blocks =
        static_cast<std::int64_t>(options.kv_memory_gib * (1LL << 30)) / out.block_bytes;
  }
  if (out.num_gpu_blocks < 2) {
    throw ConfigError(config.file + ": the KV budget holds " + std::to_string(out.num_gpu_blocks) +
                      " blocks of " + std::to_string(out.block_bytes) +
                      " bytes; the engine needs at least 2");
  }
  if (out.num_gpu_blocks > (1LL << 30)) {
    throw ConfigError(config.file + ": " + std::to_string(out.num_gpu_blocks) +
                      " KV blocks is more than ServeLab supports (2^30)");
  }

  // Swap space only when the preemption policy can swap: the host arrays are allocated in full.
  std::int64_t& num_cpu_blocks = out.num_cpu_blocks;
  if (config.scheduler.preemption != nullptr && config.scheduler.preemption->uses_host_memory()) {
    num_cpu_blocks = std::min<std::int64_t>(
        static_cast<std::int64_t>(config.swap_space_gb * (1LL << 30)) / out.block_bytes, 1LL << 30);
  }

  if (!cuda) {
    // Refuse before allocating: a run that cannot fit ends in std::bad_alloc (or the OOM
    // killer) after a long load otherwise.
    // The offload host tier is host memory like the swap space (counted with it).
    const std::int64_t tier_blocks =
        config.kv_offload.set ? offload_tier_blocks(config.kv_offload.host, out.block_bytes) : 0;
    CpuMemoryEstimate need = estimate_cpu_engine_memory(
        config, model, out.num_gpu_blocks, num_cpu_blocks + tier_blocks, out.block_bytes);
    // A cluster's replicas share the weights; each has its own blocks and activations.
    need.kv *= num_replicas;
    need.swap *= num_replicas;
    need.activations *= num_replicas;
    const std::optional<std::int64_t> avail = mem_available_bytes();
    if (avail && need.total() > *avail) {
      throw ConfigError(
          config.file + ": the CPU engine needs about " + gib(need.total()) + " (weights " +
          gib(need.weights) + " fp32, KV cache " + gib(need.kv) +
          (tier_blocks > 0 ? ", swap space and offload tier " : ", swap space ") + gib(need.swap) +
          ", activations " + gib(need.activations) + ") but only " + gib(*avail) +
          " is available (MemAvailable); lower --kv-memory-gb, "
          "serving.num_gpu_blocks, serving.swap_space_gb" +
          (tier_blocks > 0 ? " or kv_offload.host" : "") + ", or use a smaller model");
    }
  }
  // Weights before the KV cache: a bad checkpoint fails before gigabytes are allocated. The CUDA
  // executor generates random weights on the device itself (no fp32 host copy: 32 GB for an 8B
  // model), so host weights exist only for a checkpoint or the CPU executor.
  const bool device_random = cuda && options.weights.empty();
  std::unique_ptr<LlamaWeights>& weights = out.weights;
  if (!options.weights.empty()) {
    weights = std::make_unique<LlamaWeights>(load_checkpoint(llama, options.weights));
  } else if (!device_random) {
    weights = std::make_unique<LlamaWeights>(LlamaWeights::random(llama, config.seed));
  }
  if (weights) {
    try {
      quantize_weights(*weights, model.quantization);
    } catch (const ConfigError& e) {
      throw ConfigError(config.file + ": key 'model.quantization': " + e.what());
    }
  }
  std::unique_ptr<Backend>& executor = out.executor;
  // The offload host tier's slots live with the executor (pinned host memory for CUDA).
  std::int32_t tier_slots = 0;
  if (config.kv_offload.set) {
    out.offload = make_offload_tiers(config.kv_offload, out.block_bytes, /*host_slots=*/true);
    tier_slots = static_cast<std::int32_t>(
        std::min<std::int64_t>(out.offload->capacity(kHostTier), INT32_MAX));
  }
  if (cuda) {
#if SERVELAB_HAVE_CUDA
    CudaExecutorOptions cuda_options;
    cuda_options.block_size = block_size;
    cuda_options.num_blocks = sized_by_device ? 0 : static_cast<std::int32_t>(out.num_gpu_blocks);
    cuda_options.gpu_memory_utilization = config.gpu_memory_utilization;
    cuda_options.num_host_blocks = static_cast<std::int32_t>(num_cpu_blocks);
    cuda_options.num_tier_slots = tier_slots;
    cuda_options.max_num_tokens = config.scheduler.max_num_batched_tokens;
    cuda_options.max_num_seqs = config.scheduler.max_num_seqs;
    cuda_options.max_model_len = config.scheduler.max_model_len;
    cuda_options.sampling.seed = config.seed;
    cuda_options.kv_format = cuda_kv;  // fp8: per-tensor scales 1, as the CPU engine's
    cuda_options.speculative = config.scheduler.speculative;
    cuda_options.enable_lora = config.scheduler.lora.enabled();
    cuda_options.max_loras = config.scheduler.lora.max_loras;
    cuda_options.max_lora_rank = config.scheduler.lora.max_lora_rank;
    cuda_options.lora_seed = config.seed;
    apply_cuda_switches(cuda_switches_from_env(), cuda_options);
    load_gemm_lt_file(cuda_options.gemm_kernel);  // before the executor's first GEMM
    if (const std::string refusal = cuda_kv_kernels_refusal(cuda_kv, cuda_options.decode_kernel,
                                                            cuda_prefill_kernel(cuda_options));
        !refusal.empty()) {
      throw ConfigError(config.file + ": key 'model.kv_cache_dtype': " + refusal);
    }
    const kernels::PrefillKernel prefill = cuda_prefill_kernel(cuda_options);
    if (const std::string why = cuda_prefill_refusal(prefill, model.num_heads / model.num_kv_heads,
                                                     kernels::prefill_kernel_built(prefill));
        !why.empty()) {
      throw ConfigError(why);
    }
    auto cuda_executor = device_random
                             ? std::make_unique<CudaExecutor>(llama, config.seed, cuda_options)
                             : std::make_unique<CudaExecutor>(*weights, cuda_options);
    out.num_gpu_blocks = cuda_executor->num_blocks();
    executor = std::move(cuda_executor);
#endif
  } else {
    CpuExecutorOptions exec_options;
    exec_options.block_size = block_size;
    exec_options.num_blocks = static_cast<std::int32_t>(out.num_gpu_blocks);
    exec_options.sampling.seed = config.seed;
    exec_options.num_host_blocks = static_cast<std::int32_t>(num_cpu_blocks);
    exec_options.kv_format = kv_float_format(model);
    exec_options.speculative = config.scheduler.speculative;
    exec_options.num_tier_slots = tier_slots;
    exec_options.enable_lora = config.scheduler.lora.enabled();
    exec_options.lora_seed = config.seed;
    exec_options.max_cached_loras = config.scheduler.lora.max_loras;
    executor = std::make_unique<CpuExecutor>(*weights, exec_options);
    for (std::int32_t i = 1; i < num_replicas; ++i) {
      out.more_executors.push_back(std::make_unique<CpuExecutor>(*weights, exec_options));
    }
  }

  return out;
}

}  // namespace

LlamaWeights load_checkpoint(const LlamaConfig& llama, const std::string& path) {
  try {
    return LlamaWeights::load(llama, path);
  } catch (const ConfigError&) {
    throw;
  } catch (const std::runtime_error& e) {  // std::filesystem::filesystem_error included
    throw ConfigError(e.what());
  }
}

KvCacheOptions engine_kv_cache_options(const ExperimentConfig& config, EngineInstance& engine) {
  KvCacheOptions o = kv_cache_options_for(config);
  o.offload = engine.offload.get();
  return o;
}

double prefill_pinned_prefixes(const ExperimentConfig& config, EngineInstance& engine,
                               KvCacheManager& kv) {
  if (config.prefix_cache.pinned.empty()) return 0;
  // Token ids the experiment gives must be the model's: the executor embeds them by row.
  const std::int64_t vocab = engine.llama.model.vocab_size;
  for (const PinnedPrefixConfig& p : config.prefix_cache.pinned) {
    for (const std::int32_t t : p.tokens) {
      if (t >= vocab) {
        throw ConfigError(p.location + ": token id " + std::to_string(t) +
                          " is not in the model's vocabulary (ids 0 .. " +
                          std::to_string(vocab - 1) + ")");
      }
    }
  }
  const std::vector<RequestSpec> specs = pin_prefixes(config.prefix_cache, config.seed, kv);
  const std::int32_t bs = kv.block_size();
  const auto start = Clock::now();
  for (const RequestSpec& spec : specs) {
    // The pinned blocks: the full blocks of the prompt, found by their hashes.
    const std::int32_t full = std::min(spec.prompt_len, config.scheduler.max_model_len) / bs;
    if (full == 0) continue;
    std::vector<BlockId> table;
    BlockHash parent = kNoneHash;
    for (std::int32_t i = 0; i < full; ++i) {
      parent = hash_block(parent, spec, i, bs);
      const std::optional<BlockId> b = kv.pool().lookup(parent);
      if (!b) throw std::logic_error("prefill_pinned_prefixes: a pinned block is not cached");
      table.push_back(*b);
    }
    StepPlan plan;
    ScheduledRequest e;
    e.spec = &spec;
    e.first_token = 0;
    e.num_tokens = full * bs;
    e.is_prefill = true;
    e.samples = false;
    e.block_table = table;
    plan.requests.push_back(e);
    plan.num_prefill_tokens = e.num_tokens;
    engine.executor->execute(plan);
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

namespace {

// The linear layers' kernel of the engine's CUDA executor (kCublas when it has none).
kernels::GemmKernel cuda_gemm_kernel(const EngineInstance& engine) {
#if SERVELAB_HAVE_CUDA
  if (const auto* gpu = dynamic_cast<const CudaExecutor*>(engine.executor.get())) {
    return gpu->options().gemm_kernel;
  }
#endif
  (void)engine;
  return kernels::GemmKernel::kCublas;
}

}  // namespace

double warm_up_engine(const ExperimentConfig& config, const EngineOptions& options,
                      EngineInstance& engine) {
  if (options.device != "cuda") return 0;
  const SchedulerConfig& sc = config.scheduler;
  const WarmUpPlans plans({.max_num_batched_tokens = sc.max_num_batched_tokens,
                           .max_model_len = sc.max_model_len,
                           .max_num_seqs = sc.max_num_seqs,
                           .num_blocks = engine.num_gpu_blocks,
                           .block_size = sc.block_size,
                           .lora_rank = sc.lora.enabled() ? sc.lora.max_lora_rank : 0});
  const double seconds = run_warm_up(*engine.executor, plans);
  save_gemm_lt_file(cuda_gemm_kernel(engine));  // the decode buckets' shapes are decided now
  return seconds;
}

RunOutput run_engine(const ExperimentConfig& config, const EngineOptions& options) {
  if (config.cluster.set) return run_engine_cluster(config, options);
  EngineInstance engine = load_engine(config, options);
  warm_up_engine(config, options, engine);
  RunOutput out;
  out.backend = "engine-" + options.device;
  out.num_gpu_blocks = engine.num_gpu_blocks;
  out.block_bytes = engine.block_bytes;
  const ModelConfig& model = engine.llama.model;
  std::unique_ptr<Workload> workload = make_engine_workload(config, model);
  out.workload = workload->describe();
  // Written under a temporary sibling, moved into place when the run completed.
  RunStage run_stage(config, {.out_dir = options.out_dir, .default_suffix = "-engine"});
  out.out_dir = run_stage.dir();
  Recorder& recorder = run_stage.recorder();
  TokenCapture capture(recorder, options.write_tokens);
  ReplyTokens replies(capture, model.vocab_size, workload->dependent());
  WorkloadFeedback feedback(*workload, replies);
  Replica replica(scheduler_config_with_policies(config),
                  static_cast<std::int32_t>(out.num_gpu_blocks), *engine.executor, &feedback,
                  engine_kv_cache_options(config, engine),
                  static_cast<std::int32_t>(engine.num_cpu_blocks));
  Scheduler& scheduler = replica.scheduler();
  const double pinned_prefill_s = prefill_pinned_prefixes(config, engine, replica.kv());

  // The board's energy over the run (load_engine's meter: CUDA with NVML).
  const NvmlEnergy* meter = engine.board_meter.get();
  ArrivalFeed arrivals(*workload, &replies);
  SimulationTotals& totals = out.totals;
  totals.first_arrival_ns = arrivals.peek().value_or(0);
  const WallClock clock(totals.first_arrival_ns);
  ExperimentSource source(arrivals, config.frontend, recorder, clock, totals, options.progress);
  const std::optional<std::uint64_t> energy_start =
      meter ? meter->millijoules() : std::optional<std::uint64_t>();
#if SERVELAB_HAVE_CUDA
  const auto* cuda_exec = dynamic_cast<const CudaExecutor*>(engine.executor.get());
  const CudaGraphStats graphs_start = cuda_exec ? cuda_exec->graph_stats() : CudaGraphStats{};
  const std::int64_t packed_start = cuda_exec ? cuda_exec->packed_prefill_steps() : 0;
#endif
  run_engine_loop(
      replica, source, clock,
      [&](const StepPlan& plan, TimeNs start, TimeNs duration, const StepSnapshot& snap) {
        recorder.on_step(plan, start, duration, snap);
      },
      totals, options.before_step);
  const std::optional<std::uint64_t> energy_end =
      meter ? meter->millijoules() : std::optional<std::uint64_t>();
  if (scheduler.has_unfinished()) {
    throw std::logic_error("engine run ended with unfinished requests (" +
                           std::to_string(scheduler.num_waiting()) + " waiting, " +
                           std::to_string(scheduler.num_running()) + " running)");
  }
  if (workload->dependent() && !workload->exhausted()) {
    throw ConfigError(workload->describe() +
                      ": some requests were never released (their dependencies never finished)");
  }
  recorder.finalize(totals.first_arrival_ns, totals.end_ns, replica.kv().stats());
  out.summary = recorder.summary();
  out.summary.skipped_trace_rows = workload->skipped_rows();
  if (const std::optional<std::uint64_t> mj = NvmlEnergy::advance(energy_start, energy_end)) {
    out.summary.measured_joules = static_cast<double>(*mj) * 1e-3;
  }
  if (!config.prefix_cache.pinned.empty()) {
    out.summary.pinned_blocks = replica.kv().num_pinned_blocks();
    out.summary.pinned_prefill_s = pinned_prefill_s;
  }
  if (engine.offload) {
    // The load time is the executor's measured copy time, stores included.
    std::int64_t copy_ns = 0;
    if (const auto* cpu = dynamic_cast<const CpuExecutor*>(engine.executor.get())) {
      copy_ns = cpu->tier_copy_ns();
    }
#if SERVELAB_HAVE_CUDA
    if (const auto* gpu = dynamic_cast<const CudaExecutor*>(engine.executor.get())) {
      copy_ns = gpu->tier_copy_ns();
    }
#endif
    fill_offload_summary(*engine.offload, replica.kv().stats(), static_cast<double>(copy_ns) * 1e-9,
                         out.summary);
  }
  if (config.scheduler.speculative.enabled()) add_spec_decode(out.summary, scheduler.counters());
#if SERVELAB_HAVE_CUDA
  if (cuda_exec != nullptr) {
    const CudaGraphStats end = cuda_exec->graph_stats();
    out.summary.cuda_graphs = RunSummary::CudaGraphCounts{
        end.captures - graphs_start.captures, end.replays - graphs_start.replays,
        end.padded_eager - graphs_start.padded_eager, end.eager_steps - graphs_start.eager_steps};
    out.summary.prefill_packing = RunSummary::PrefillPacking{
        cuda_exec->prefill_launch().packs(), cuda_exec->packed_prefill_steps() - packed_start};
    if (kernels::gemm_kernel_tunes(cuda_exec->options().gemm_kernel)) {
      std::vector<RunSummary::GemmLtShape>& lt = out.summary.gemm_lt.emplace();
      for (const kernels::LtChoice& c : cuda_exec->gemm_lt_choices()) {
        lt.push_back({c.shape.tokens, c.shape.in, c.shape.out, c.shape.out_f32, c.shape.accumulate,
                      c.tuned, c.candidates, c.chosen, c.split_k, c.first_us, c.chosen_us,
                      c.shape.swiglu, kernels::tuned_kernel_name(c.kernel), c.skinny_splits,
                      c.cublas_us, c.skinny_us});
      }
    }
  }
#endif
  save_gemm_lt_file(cuda_gemm_kernel(engine));
  finish_engine_run(
      config,
      {out.backend, model.name, engine.hardware, false,
       engine_options_record(config, options.device, options.kv_memory_gib, options.weights)},
      capture, options.write_tokens, run_stage, out);
  return out;
}

}  // namespace servelab
