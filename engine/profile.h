// engine profile: times the executor over a designed grid of step shapes, for calibrating the
// simulator's cost model (`sim calibrate`, sim/calibration.h; docs/validation.md).
//
// Each shape is a StepPlan built directly against the executor (no scheduler): entries with
// disjoint block tables over a pool sized for the largest shape, plus swap and copy block
// moves. The grid is run in `rounds` passes; in each, every shape runs `warmup` times untimed,
// then its share of the `reps` timed repetitions back to back (as consecutive steps of a run
// do, so caches are as warm as in a run; interleaving single repetitions measured small decode
// steps twice as slow, cold). Spreading a shape over rounds keeps one moment's load on a shared
// machine from deciding its median. The file records each shape's median, minimum and maximum
// over all rounds, and the features the cost model uses.
//
// Families (full grid; --quick keeps a few points of each):
//   prefill        one prompt of n tokens from position 0, sampling
//   prefill_batch  k prompts of n tokens each
//   chunk          one chunk of n tokens after p cached tokens, not sampling
//   decode         B sequences decoding one token at context c
//   mixed          B decodes at context c plus one prompt of n tokens
//   swap           k blocks swapped out and k swapped in, beside 4 decodes at context 64
//   copy           k copy-on-write block copies, beside 4 decodes at context 64
//   lora           with --lora-rank R only: B decodes at context 256 spread over L adapters of
//                  rank R (round robin), and prompts of n tokens under one adapter; the file
//                  then has the LoRA columns (serving/calibration_profile.h) and `# lora_rank: R`
//
// The model is stored as it would be served: its KV cache dtype and weight quantization are the
// model file's (kv_cache_dtype, quantization), or the options' when given (vLLM's
// --kv-cache-dtype and --quantization), exactly as `engine run` would store them on that device
// (the CPU executor keeps fp32 storage and rounds K/V to the dtype; the CUDA executor stores bf16
// or fp8 and refuses quantized weights). The header records both (`# kv_cache_dtype:` the format
// the executor ran, e.g. fp32, bf16, fp8_e4m3; `# quantization:`), and a calibration from it
// prices only runs that store their model the same way (check_profile_storage).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace servelab {

struct ProfileOptions {
  std::string model;           // catalogue name, YAML file or Hugging Face config.json path
  std::string device = "cpu";  // "cuda" is refused (ConfigError): no CUDA executor in this build
  std::string out;             // the CSV to write (atomically: temp file + rename)
  // Optional checkpoint; random weights from `seed` otherwise (on CUDA made on the device, as
  // `engine run` makes them; the header's `# weights:` line says which).
  std::string weights;
  int reps = 9;
  int warmup = 2;  // per round
  int rounds = 3;
  bool quick = false;  // a small grid (tests, smoke runs)
  bool force = false;  // --force: replace an existing `out` (never the weights or model file)
  std::int32_t block_size = 16;
  std::int32_t max_tokens = 2048;  // largest step (tokens, context) in the grid; capped by the
                                   // model's max_position_embeddings
  std::uint64_t seed = 0;
  // > 0: add the `lora` family, its adapters of this rank (1..512; the executor runs with LoRA on,
  // adapters generated from `seed`), so `sim calibrate` fits the LoRA terms.
  std::int32_t lora_rank = 0;
  // Non-empty: replace the model file's model.kv_cache_dtype (one of kKvCacheDtypes) or
  // model.quantization (one of kQuantizations) for this profile.
  std::string kv_cache_dtype;
  std::string quantization;
};

struct ProfileEntry {
  std::int32_t first_token = 0;
  std::int32_t num_tokens = 1;
  bool is_prefill = true;
  bool samples = true;
  std::uint32_t lora_id = 0;  // > 0: the entry runs under this adapter (the `lora` family)
};

struct ProfileShape {
  std::string family;
  std::vector<ProfileEntry> entries;
  std::int32_t swap_blocks = 0;  // swapped out and the same number swapped in
  std::int32_t copy_blocks = 0;
};

// The grid for steps of at most max_tokens tokens and context. Up to 2,048 the full grid is the
// 102 shapes the shipped CPU profile was measured with; above, it grows to GPU sizes (prefill to
// 8,192, contexts to 8,192, decode steps to 262,144 KV tokens: 152 shapes at 8,192).
// With `lora` the `lora` family is added.
std::vector<ProfileShape> profile_grid(bool quick, std::int32_t max_tokens, bool lora = false);

// What run_profile did: the number of shapes profiled and the device they ran on, as the
// header's `device` line names it ("cpu: NAME (N hardware threads)", or the GPU's name, compute
// capability and SM count).
struct ProfileRun {
  std::size_t shapes = 0;
  std::string device;
  double setup_s = 0;  // from the call to the first shape: the weights, the executor, the plans
};

// Runs the grid and writes options.out. `progress` (may be null) gets a line per shape
// round. Throws ConfigError for bad options, an unavailable device or an unknown model,
// std::runtime_error when the file cannot be written.
ProfileRun run_profile(const ProfileOptions& options, std::FILE* progress);

// "0.1.0 (git 9bf2efc)": the project version and, when known at configure time, git describe.
std::string engine_version();
// The profile header's `device` line for the CPU: "cpu: NAME (N hardware threads)" with
// this_machine("cpu")'s name and thread count (serving/machine.h; $SERVELAB_MACHINE_NAME
// replaces the name). The header's machine_kind/machine_name/machine_threads lines record the
// same machine for `sim calibrate` (for --device cuda: the GPU's name).
std::string cpu_device_name();

// The NVIDIA driver version in the text of /proc/driver/nvidia/version: the first token after
// "Kernel Module" that is a dotted number ("NVRM version: NVIDIA UNIX x86_64 Kernel Module
// 580.65.06 ..." and, for the open kernel module, "... Open Kernel Module for x86_64 580.159.04
// Release Build ..."); "unknown" when no line has one.
std::string parse_nvidia_driver_version(const std::string& text);

}  // namespace servelab
