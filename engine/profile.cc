#include "engine/profile.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <deque>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "core/lora_config.h"
#include "core/request.h"
#include "core/step_plan.h"
#include "core/strings.h"
#include "engine/cpu_executor.h"
#include "engine/engine_driver.h"
#include "engine/gemm_lt_file.h"
#include "engine/gpu_switches.h"
#include "engine/llama_weights.h"
#include "engine/nvml_energy.h"
#include "engine/weight_quantization.h"
#include "kernels/float_formats.h"
#include "serving/calibration_profile.h"
#include "serving/config_node.h"
#include "serving/interrupt.h"
#include "serving/kv_capacity.h"
#include "serving/machine.h"
#include "serving/model_config.h"
#include "serving/output_file.h"
#if SERVELAB_HAVE_CUDA
#include "engine/cuda_executor.h"
#include "kernels/attention.h"
#include "kernels/device.h"
#endif

#ifndef SERVELAB_VERSION
#define SERVELAB_VERSION "unknown"
#endif
#include "servelab_git_describe.h"  // SERVELAB_GIT_DESCRIBE, the tree at build time

namespace servelab {

namespace {

std::int32_t blocks_for(std::int32_t tokens, std::int32_t block_size) {
  return (tokens + block_size - 1) / block_size;
}

// Blocks a shape needs on the device and on the host.
std::pair<std::int64_t, std::int64_t> shape_blocks(const ProfileShape& s, std::int32_t bs) {
  std::int64_t device = 0;
  for (const ProfileEntry& e : s.entries) device += blocks_for(e.first_token + e.num_tokens, bs);
  device += 2 * s.swap_blocks + 2 * s.copy_blocks;
  return {device, 2 * std::int64_t{s.swap_blocks}};
}

// One shape made concrete: its plan and everything the plan's spans point into.
struct BuiltShape {
  const ProfileShape* shape = nullptr;
  std::deque<RequestSpec> specs;
  std::deque<std::vector<BlockId>> tables;
  StepPlan plan;
  std::vector<std::int64_t> durations_ns;
  // Board energy (CUDA with NVML): millijoules over `energy_ns` of back-to-back steps.
  std::uint64_t energy_mj = 0;
  std::int64_t energy_ns = 0;
};

// Power is read over at least this much of back-to-back steps per shape, after its timed
// repetitions of the last round (which it does not change): NVML's counter moves in steps of
// milliseconds and a few decode steps are too short to see. About 15 s for the full grid.
constexpr std::chrono::milliseconds kPowerWindow{100};

void build(BuiltShape& b, const ProfileShape& s, std::int32_t bs, std::uint64_t seed,
           std::int32_t lora_rank, RequestId& next_id) {
  b.shape = &s;
  BlockId next_block = 1;  // block 0 is the pool's null block: never used
  std::vector<std::uint32_t> adapters;
  for (const ProfileEntry& e : s.entries) {
    const RequestId id = next_id++;
    const std::int32_t len = e.first_token + e.num_tokens;
    b.specs.push_back(make_request(
        id, 0, {PromptSegment{unique_content_id(seed, id), 0, static_cast<std::uint32_t>(len)}},
        1));
    if (e.lora_id != 0) {
      b.specs.back().lora_id = e.lora_id;
      b.specs.back().lora_rank = lora_rank;
      b.plan.num_lora_tokens += e.num_tokens;
      if (std::find(adapters.begin(), adapters.end(), e.lora_id) == adapters.end()) {
        adapters.push_back(e.lora_id);
      }
    }
    std::vector<BlockId>& table = b.tables.emplace_back();
    for (std::int32_t k = 0; k < blocks_for(len, bs); ++k) table.push_back(next_block++);
    ScheduledRequest r;
    r.id = id;
    r.spec = &b.specs.back();
    r.first_token = e.first_token;
    r.num_tokens = e.num_tokens;
    r.is_prefill = e.is_prefill;
    r.samples = e.samples;
    r.block_table = table;
    b.plan.requests.push_back(r);
    (e.is_prefill ? b.plan.num_prefill_tokens : b.plan.num_decode_tokens) += e.num_tokens;
  }
  b.plan.num_loras = static_cast<std::int32_t>(adapters.size());
  for (std::int32_t k = 0; k < s.swap_blocks; ++k) {
    b.plan.swap_out.push_back({next_block++, k});
  }
  for (std::int32_t k = 0; k < s.swap_blocks; ++k) {
    b.plan.swap_in.push_back({s.swap_blocks + k, next_block++});
  }
  for (std::int32_t k = 0; k < s.copy_blocks; ++k) {
    const BlockId src = next_block++;
    b.plan.copies.push_back({src, next_block++});
  }
}

// Power of `b`'s step: back-to-back steps for at least kPowerWindow, the board's energy counter
// read before and after (a failed or wrapped read adds nothing).
void measure_power(const NvmlEnergy& meter, Backend& exec, BuiltShape& b) {
  const auto start = std::chrono::steady_clock::now();
  const std::optional<std::uint64_t> before = meter.millijoules();
  do {
    exec.execute(b.plan);
  } while (std::chrono::steady_clock::now() - start < kPowerWindow);
  const std::optional<std::uint64_t> after = meter.millijoules();
  const auto elapsed = std::chrono::steady_clock::now() - start;
  const std::optional<std::uint64_t> mj = NvmlEnergy::advance(before, after);
  if (!mj) return;
  b.energy_mj += *mj;
  b.energy_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count();
}

std::int64_t median(std::vector<std::int64_t> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2] + 1) / 2;
}

#if SERVELAB_HAVE_CUDA
// The NVIDIA kernel driver's version from /proc/driver/nvidia/version; "unknown" where that file
// is missing (a container without it) or says something else.
std::string nvidia_driver_version() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_nvidia_driver_version(text.str());
}
#endif

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

std::string parse_nvidia_driver_version(const std::string& text) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const std::string key = "Kernel Module";
    const std::size_t at = line.find(key);
    if (at == std::string::npos) continue;
    std::istringstream rest(line.substr(at + key.size()));
    std::string word;
    while (rest >> word) {
      const bool dotted = std::isdigit(static_cast<unsigned char>(word.front())) &&
                          word.find('.') != std::string::npos &&
                          word.find_first_not_of("0123456789.") == std::string::npos;
      if (dotted) return word;
    }
  }
  return "unknown";
}

std::string engine_version() {
  std::string v = SERVELAB_VERSION;
  const std::string git = SERVELAB_GIT_DESCRIBE;
  if (!git.empty()) v += " (git " + git + ")";
  return v;
}

std::string cpu_device_name() {
  const MachineRecord m = this_machine("cpu");
  return "cpu: " + m.name + " (" + std::to_string(m.threads) + " hardware threads)";
}

std::vector<ProfileShape> profile_grid(bool quick, std::int32_t max_tokens, bool lora) {
  std::vector<ProfileShape> g;
  const std::int32_t m = max_tokens;
  // Above 2,048 tokens the full grid grows to the sizes a GPU serves (the workloads of
  // experiments/validation/gpu batch up to 8,192 tokens over contexts up to 8,192); up to 2,048
  // it is the grid the shipped CPU profile was measured with, shape for shape.
  const bool large = !quick && m > 2048;
  auto prompt = [](std::int32_t n) { return ProfileEntry{0, n, true, true}; };
  auto decode = [](std::int32_t c) { return ProfileEntry{c - 1, 1, false, true}; };
  auto add = [&](std::string family, std::vector<ProfileEntry> entries, std::int32_t swap = 0,
                 std::int32_t copy = 0) {
    g.push_back({std::move(family), std::move(entries), swap, copy});
  };
  using Sizes = std::vector<std::int32_t>;
  auto with = [](Sizes base, bool more, const Sizes& extra) {
    if (more) base.insert(base.end(), extra.begin(), extra.end());
    return base;
  };
  const Sizes prefill_n =
      quick ? Sizes{8, 64, 256}
            : with({1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 768, 1024, 1536, 2048}, large,
                   {3072, 4096, 6144, 8192});
  for (std::int32_t n : prefill_n) {
    if (n <= m) add("prefill", {prompt(n)});
  }
  for (std::int32_t k : quick ? Sizes{4} : Sizes{2, 4, 8, 16}) {
    for (std::int32_t n : quick ? Sizes{32} : with({16, 64, 256}, large, {1024})) {
      if (k * n <= m) add("prefill_batch", std::vector<ProfileEntry>(k, prompt(n)));
    }
  }
  for (std::int32_t n : quick ? Sizes{64} : with({16, 64, 256}, large, {1024})) {
    for (std::int32_t p : quick ? Sizes{256} : with({128, 512, 1024, 1536}, large, {3072, 6144})) {
      if (p + n <= m) add("chunk", {ProfileEntry{p, n, true, false}});
    }
  }
  // Decode steps read at most this many KV tokens (x 128 KiB for Llama-3-8B in bf16: 32 GiB).
  const std::int64_t max_decode_kv = large ? 262144 : 131072;
  for (std::int32_t b : quick ? Sizes{1, 8, 32} : Sizes{1, 2, 4, 8, 16, 32, 64, 128, 256}) {
    for (std::int32_t c :
         quick ? Sizes{32, 256} : with({16, 64, 256, 1024, 2048}, large, {4096, 8192})) {
      if (c <= m && std::int64_t{b} * c <= max_decode_kv) {
        add("decode", std::vector<ProfileEntry>(b, decode(c)));
      }
    }
  }
  for (std::int32_t b : quick ? Sizes{8} : Sizes{4, 16, 64}) {
    for (std::int32_t c : quick ? Sizes{128} : with({128, 1024}, large, {4096})) {
      for (std::int32_t n : quick ? Sizes{64} : with({32, 256}, large, {2048})) {
        if (c > m || n > m) continue;
        std::vector<ProfileEntry> e(b, decode(c));
        e.push_back(prompt(n));
        add("mixed", std::move(e));
      }
    }
  }
  const std::int32_t small_ctx = std::min<std::int32_t>(64, m);
  for (std::int32_t k : quick ? Sizes{4, 32} : Sizes{1, 4, 16, 64, 256}) {
    add("swap", std::vector<ProfileEntry>(4, decode(small_ctx)), k, 0);
    add("copy", std::vector<ProfileEntry>(4, decode(small_ctx)), 0, k);
  }
  if (lora) {
    // Decode batches over 1 to 16 adapters (the token and the per-adapter terms apart), and
    // prompts under one adapter (the token term at GEMM sizes).
    const std::int32_t ctx = std::min<std::int32_t>(256, m);
    for (std::int32_t b : quick ? Sizes{8, 32} : Sizes{1, 8, 32, 128}) {
      for (std::int32_t l : quick ? Sizes{1, 8} : Sizes{1, 4, 16}) {
        if (l > b) continue;
        std::vector<ProfileEntry> e(b, decode(ctx));
        for (std::int32_t i = 0; i < b; ++i) e[i].lora_id = static_cast<std::uint32_t>(1 + i % l);
        add("lora", std::move(e));
      }
    }
    for (std::int32_t n : quick ? Sizes{64} : Sizes{64, 512, 2048}) {
      if (n > m) continue;
      ProfileEntry e = prompt(n);
      e.lora_id = 1;
      add("lora", {e});
    }
  }
  return g;
}

ProfileRun run_profile(const ProfileOptions& o, std::FILE* progress) {
  const auto setup_start = std::chrono::steady_clock::now();
  if (o.device != "cpu" && o.device != "cuda") {
    throw ConfigError("--device: expected cpu or cuda, got '" + o.device + "'");
  }
  if (o.model.empty()) throw ConfigError("engine profile: --model is required");
  if (o.out.empty()) throw ConfigError("engine profile: -o FILE is required");
  if (o.reps < 1 || o.warmup < 0 || o.rounds < 1) {
    throw ConfigError("--reps and --rounds must be >= 1 and --warmup >= 0");
  }
  if (o.block_size < 1 || o.block_size > 256) throw ConfigError("--block-size: expected 1..256");
  // The machine the header records (serving/machine.h); a bad $SERVELAB_MACHINE_NAME fails here,
  // before the weights are made. CUDA: the GPU's name, filled in with the executor below.
  MachineRecord machine = this_machine(o.device);
  LlamaConfig llama = load_llama_config(o.model, default_catalog_dir());
  // The model as it would be served: the options replace the model file's storage keys.
  if (!o.kv_cache_dtype.empty()) llama.model.kv_cache_dtype = o.kv_cache_dtype;
  if (!o.quantization.empty()) llama.model.quantization = o.quantization;
  const ModelConfig& model = llama.model;
  model.validate();
  const kernels::FloatFormat kv_format =
      o.device == "cuda" ? cuda_kv_float_format(model) : kv_float_format(model);
  if (o.device == "cuda") {
    if (model.quantization != "none") {
      throw ConfigError("engine profile: quantization '" + model.quantization +
                        "' (--quantization or the model file): the CUDA executor runs bf16 "
                        "weights; profile quantized weights on --device cpu");
    }
    if (const std::string why = cuda_kv_dtype_refusal(model); !why.empty()) {
      throw ConfigError("engine profile: kv_cache_dtype (--kv-cache-dtype or the model file): " +
                        why);
    }
    if (const std::string why = cuda_model_refusal(model); !why.empty()) {
      throw ConfigError("engine profile: " + why);
    }
  }
  // The device after the model (so a refusal above reads the same with and without a GPU).
#if SERVELAB_HAVE_CUDA
  if (o.device == "cuda") {
    std::string why;
    if (!kernels::cuda_device_available(&why))
      throw ConfigError("--device cuda: no usable GPU: " + why);
  }
#else
  if (o.device == "cuda") {
    throw ConfigError(
        "--device cuda: this build has no CUDA executor; engine profile runs on "
        "--device cpu");
  }
#endif
  // The model's length, compared in 64 bits (a config.json may give more than int32 holds).
  const auto max_tokens = static_cast<std::int32_t>(
      std::min<std::int64_t>(o.max_tokens, model.max_position_embeddings));
  if (o.max_tokens < 16) throw ConfigError("--max-tokens: expected at least 16");
  if (max_tokens < 16) {
    throw ConfigError("engine profile: model " + model.name + " has max_position_embeddings " +
                      std::to_string(model.max_position_embeddings) +
                      ", fewer than the 16 tokens the smallest profile shapes take");
  }
  if (o.lora_rank < 0 || o.lora_rank > kMaxLoraRank) {
    throw ConfigError("--lora-rank: expected an integer in [1, " + std::to_string(kMaxLoraRank) +
                      "] (0: no LoRA shapes), got " + std::to_string(o.lora_rank));
  }
  const std::vector<ProfileShape> grid = profile_grid(o.quick, max_tokens, o.lora_rank > 0);
  std::int32_t max_adapters = 1;  // distinct adapters of one shape, at most
  for (const ProfileShape& s : grid) {
    std::uint32_t top = 0;
    for (const ProfileEntry& e : s.entries) top = std::max(top, e.lora_id);
    max_adapters = std::max(max_adapters, static_cast<std::int32_t>(top));
  }

  std::int64_t device_blocks = 2, host_blocks = 0;
  for (const ProfileShape& s : grid) {
    const auto [d, h] = shape_blocks(s, o.block_size);
    device_blocks = std::max(device_blocks, d + 1);
    host_blocks = std::max(host_blocks, h);
  }
  // Host weights exist only for a checkpoint or the CPU executor: the CUDA executor generates
  // random weights on the device itself, as `engine run` does (no 32 GB fp32 host copy of an 8B
  // model to fill, convert and upload before the first shape; each weight equals the host one
  // rounded to bf16, so the steps are those of the same model).
  const bool device_random = o.device == "cuda" && o.weights.empty();
  // Refuse before allocating, as `engine run` does: the fp32 host weights and, on the CPU, the
  // KV blocks of the largest shape; an 8B model's 32 GB ended in the OOM killer or
  // std::bad_alloc on a small machine.
  {
    const std::int64_t weight_bytes =
        device_random ? 0 : model.num_params() * static_cast<std::int64_t>(sizeof(float));
    const std::int64_t kv_bytes =
        o.device == "cpu" ? (device_blocks + host_blocks) * engine_block_bytes(model, o.block_size)
                          : 0;
    const std::optional<std::int64_t> avail = mem_available_bytes();
    if (avail && weight_bytes + kv_bytes > *avail) {
      const auto gib = format_gib;
      throw ConfigError("engine profile: model " + model.name + " needs about " +
                        gib(weight_bytes + kv_bytes) + " of host memory (fp32 weights " +
                        gib(weight_bytes) + ", KV blocks " + gib(kv_bytes) + ") but only " +
                        gib(*avail) +
                        " is available (MemAvailable); profile a smaller model here, or on a "
                        "machine with more memory");
    }
  }
  std::optional<LlamaWeights> weights;
  if (!device_random) {
    weights.emplace(o.weights.empty() ? LlamaWeights::random(llama, o.seed)
                                      : load_checkpoint(llama, o.weights));
    try {
      quantize_weights(*weights, model.quantization);
    } catch (const ConfigError& e) {
      throw ConfigError("engine profile: quantization: " + std::string(e.what()));
    }
  }
  // The header's `# weights:` line (a control character in a checkpoint's path would break the
  // line, so it reads '?').
  std::string weights_path = o.weights;
  for (char& c : weights_path) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  const std::string weights_line =
      !o.weights.empty() ? "checkpoint " + weights_path
      : device_random
          ? "random (seed " + std::to_string(o.seed) + "), generated on the device in bf16"
          : "random (seed " + std::to_string(o.seed) + "), fp32 on the host";
  // The executor and what the header says of it. The CUDA one's buffers are sized for the
  // largest shape of the grid.
  std::unique_ptr<Backend> exec;
  std::string device_name = cpu_device_name(), executor = "CpuExecutor fp32 (Eigen)";
  std::string driver;                 // the GPU driver's version (CUDA only)
  std::string prefill_launch;         // the prefill attention launch's figures (CUDA only)
  std::unique_ptr<NvmlEnergy> meter;  // CUDA with NVML: the board's energy counter
  // The linear layers' kernel (CUDA only): with lt, SERVELAB_CUDA_GEMM_LT_FILE is read before the
  // shapes run and written after (engine/gemm_lt_file.h).
  kernels::GemmKernel gemm_kernel = kernels::GemmKernel::kCublas;
  std::int64_t block_bytes = engine_block_bytes(model, o.block_size);
  if (o.device == "cpu") {
    CpuExecutorOptions eo;
    eo.block_size = o.block_size;
    eo.num_blocks = static_cast<std::int32_t>(device_blocks);
    eo.num_host_blocks = static_cast<std::int32_t>(host_blocks);
    eo.enable_lora = o.lora_rank > 0;
    eo.lora_seed = o.seed;
    eo.kv_format = kv_format;
    exec = std::make_unique<CpuExecutor>(*weights, eo);
  }
#if SERVELAB_HAVE_CUDA
  if (o.device == "cuda") {
    CudaExecutorOptions co;
    co.block_size = o.block_size;
    co.num_blocks = static_cast<std::int32_t>(device_blocks);
    co.num_host_blocks = static_cast<std::int32_t>(host_blocks);
    co.max_num_tokens = 0;
    co.max_num_seqs = 1;
    co.max_model_len = max_tokens + 1;
    for (const ProfileShape& s : grid) {
      std::int32_t tokens = 0;
      for (const ProfileEntry& e : s.entries) {
        tokens += e.num_tokens;
        co.max_model_len = std::max(co.max_model_len, e.first_token + e.num_tokens + 1);
      }
      co.max_num_tokens = std::max(co.max_num_tokens, tokens);
      co.max_num_seqs = std::max(co.max_num_seqs, static_cast<std::int32_t>(s.entries.size()));
    }
    co.enable_lora = o.lora_rank > 0;
    co.lora_seed = o.seed;
    co.max_loras = max_adapters;
    co.max_lora_rank = std::max(1, o.lora_rank);
    co.kv_format = kv_format;  // fp8: per-tensor scales 1, as `engine run`'s
    apply_cuda_switches(cuda_switches_from_env(), co);
    gemm_kernel = co.gemm_kernel;
    load_gemm_lt_file(gemm_kernel);
    if (const std::string refusal =
            cuda_kv_kernels_refusal(kv_format, co.decode_kernel, cuda_prefill_kernel(co));
        !refusal.empty()) {
      throw ConfigError("engine profile: kv_cache_dtype (--kv-cache-dtype or the model file): " +
                        refusal);
    }
    const kernels::PrefillKernel prefill = cuda_prefill_kernel(co);
    if (const std::string why = cuda_prefill_refusal(prefill, model.num_heads / model.num_kv_heads,
                                                     kernels::prefill_kernel_built(prefill));
        !why.empty()) {
      throw ConfigError("engine profile: " + why);
    }
    auto cuda = device_random ? std::make_unique<CudaExecutor>(llama, o.seed, co)
                              : std::make_unique<CudaExecutor>(*weights, co);
    const kernels::DeviceInfo info = kernels::device_info();
    device_name = info.name + " (sm_" + std::to_string(info.major) + std::to_string(info.minor) +
                  ", " + std::to_string(info.sm_count) + " SMs)";
    machine = this_machine("cuda", info.name);
    executor = "CudaExecutor bf16 (cuBLAS + ServeLab kernels)";
    driver = "NVIDIA " + nvidia_driver_version();
    meter = std::make_unique<NvmlEnergy>(info.pci_bus_id);
    if (!meter->available()) {
      if (progress) {
        std::fprintf(progress, "  engine profile: no power readings (%s)\n", meter->why().c_str());
      }
      meter.reset();
    }
    // How the executor cuts prefill attention into CTAs (core/prefill_launch.h), for the
    // calibrated cost model's critical-path terms (sim/calibration.h).
    const PrefillLaunch& l = cuda->prefill_launch();
    prefill_launch = "query_heads=" + std::to_string(l.query_heads) +
                     " tile_rows=" + std::to_string(l.tile_rows) +
                     " max_ctas=" + std::to_string(l.max_ctas) +
                     " min_split_tokens=" + std::to_string(l.min_split_tokens) +
                     " merge_rows=" + std::to_string(l.merge_rows);
    if (l.packs()) {
      prefill_launch += " packed_heads=" + std::to_string(l.packed_heads) +
                        " packed_rows=" + std::to_string(l.packed_rows) +
                        " packed_max_ctas=" + std::to_string(l.packed_max_ctas);
    }
    block_bytes = cuda->block_bytes();
    exec = std::move(cuda);
  }
#endif
  std::deque<BuiltShape> built;
  RequestId next_id = 0;
  for (const ProfileShape& s : grid) {
    build(built.emplace_back(), s, o.block_size, o.seed, o.lora_rank, next_id);
  }

  const double setup_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - setup_start).count();
  // Shape by shape, warm-up then repetitions back to back: consecutive engine steps have
  // similar shapes, so the weights and KV blocks are as warm in cache as they are in a run. The
  // repetitions are split over `rounds` passes over the grid, so that a shape's median is not
  // one moment's load on a shared machine.
  const int rounds = std::min(o.rounds, o.reps);
  for (int round = 0; round < rounds; ++round) {
    const int reps = o.reps / rounds + (round < o.reps % rounds ? 1 : 0);
    std::size_t done = 0;
    for (BuiltShape& b : built) {
      if (progress) {
        std::fprintf(progress, "\r  engine profile: round %d/%d, shape %zu/%zu (%s)   ", round + 1,
                     rounds, ++done, built.size(), b.shape->family.c_str());
        std::fflush(progress);
      }
      throw_if_interrupted();
      for (int w = 0; w < o.warmup; ++w) exec->execute(b.plan);
      for (int r = 0; r < reps; ++r) b.durations_ns.push_back(exec->execute(b.plan).duration_ns);
      if (meter && round == rounds - 1) measure_power(*meter, *exec, b);
    }
  }
  if (progress) std::fputs("\r\033[K", progress);

  std::ostringstream out;
  out << "# ServeLab engine profile (`engine profile`; format in docs/validation.md)\n";
  out << "# format_version: 1\n";
  out << "# model: " << model.name << "\n";
  out << "# device: " << device_name << "\n";
  if (!driver.empty()) out << "# driver: " << driver << "\n";
  out << "# machine_kind: " << machine.kind << "\n";
  out << "# machine_name: " << machine.name << "\n";
  out << "# machine_threads: " << machine.threads << "\n";
  out << "# date_utc: " << utc_now() << "\n";
  out << "# engine_version: " << engine_version() << "\n";
  out << "# executor: " << executor << "\n";
  out << "# block_size: " << o.block_size << "\n";
  out << "# block_bytes: " << block_bytes << "\n";
  out << "# kv_cache_dtype: " << kernels::format_name(kv_format) << "\n";
  out << "# quantization: " << model.quantization << "\n";
  out << "# weights: " << weights_line << "\n";
  out << "# reps: " << o.reps << "\n";
  out << "# warmup: " << o.warmup << " per round\n";
  out << "# rounds: " << std::min(o.rounds, o.reps) << "\n";
  out << "# grid: " << (o.quick ? "quick" : "full") << ", max_tokens " << max_tokens << "\n";
  if (!prefill_launch.empty()) out << "# prefill_launch: " << prefill_launch << "\n";
  const bool lora = o.lora_rank > 0;
  if (lora) out << "# lora_rank: " << o.lora_rank << "\n";
  if (meter) {
    out << "# power: NVML board energy over at least " << kPowerWindow.count()
        << " ms of back-to-back steps per shape, after the last round (power_w: mean watts; "
           "power_ms: the time measured)\n";
  }
  std::vector<std::string> cols = profile_columns();
  if (lora) {
    cols.insert(cols.end(), profile_lora_columns().begin(), profile_lora_columns().end());
  }
  if (meter) {
    cols.insert(cols.end(), profile_power_columns().begin(), profile_power_columns().end());
  }
  for (std::size_t i = 0; i < cols.size(); ++i) out << (i ? "," : "") << cols[i];
  out << "\n";
  for (const BuiltShape& b : built) {
    const CalibrationFeatures f = CalibrationFeatures::from_plan(b.plan);
    const StepFeatures& s = f.step;
    const auto [mn, mx] = std::minmax_element(b.durations_ns.begin(), b.durations_ns.end());
    out << b.shape->family << "," << s.num_tokens << "," << s.prefill_tokens << ","
        << s.prefill_pairs << "," << s.prefill_context_tokens << "," << s.decode_tokens << ","
        << s.decode_pairs << "," << s.decode_context_tokens << "," << s.num_sampled << ","
        << f.num_entries << "," << s.swap_out_blocks << "," << s.swap_in_blocks << ","
        << s.copy_blocks << "," << b.durations_ns.size() << "," << median(b.durations_ns) << ","
        << *mn << "," << *mx;
    if (lora) out << "," << s.lora_tokens << "," << s.num_loras;
    if (meter) {
      // A shape whose readings all failed has no power: an empty field.
      out << ",";
      if (b.energy_ns > 0) {
        out << format_text("%.1f", static_cast<double>(b.energy_mj) * 1e-3 /
                                       (static_cast<double>(b.energy_ns) * 1e-9));
      }
      out << "," << format_text("%.1f", static_cast<double>(b.energy_ns) * 1e-6);
    }
    out << "\n";
  }
  write_file_atomically(o.out, out.str());
  save_gemm_lt_file(gemm_kernel);
  return {built.size(), device_name, setup_s};
}

}  // namespace servelab
