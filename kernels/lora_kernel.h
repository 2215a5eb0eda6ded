// How the CUDA executor applies LoRA deltas, and the packed layout of an adapter on the device
// (plain C++, in servelab_kernels_host; the kernels are kernels/lora.h).
//
// An adapter of rank r adapts seven projections per layer (in engine/lora_weights.h LoraTarget's
// order: q, k, v, o, gate, up, down); projection t reads in[t] values and writes out[t]. On the
// device an adapter is one bf16 allocation: for layer l and target t, A_t [r][in_t] (row-major)
// starts at element r * (l * layer_units() + unit_offset(t)) and B_t [out_t][r] (row-major, already
// multiplied by the adapter's scaling) follows it at + r * in_t. Every offset is a multiple of 8
// elements when every dimension is, so each A and B row starts 16-byte aligned for any rank.
//
// LoraKernel chooses how the deltas of a step are computed:
//   kGather (default): the rows of segments of at most kLoraGatherMaxRows consecutive rows under
//     one adapter (decode rows, short chunks) go through the gather kernels, two launches per
//     group of projections that share an input whatever the number of adapters (Punica's BGMV);
//     longer segments (prefill chunks) take two cuBLAS GEMMs each, where the weights are reused
//     across rows; a decode-only step sends every row to the gather kernels (its rows never
//     share weights, and it can then be a CUDA graph);
//   kCublas: two cuBLAS GEMMs per segment for every segment (the first form).
// The engine takes the choice from $SERVELAB_CUDA_LORA (docs/gpu-todo.md).
#pragma once

#include <cstdint>
#include <string_view>

#include "kernels/host_device.h"

namespace servelab::kernels {

enum class LoraKernel { kGather, kCublas };

inline constexpr const char* kLoraKernelEnv = "SERVELAB_CUDA_LORA";
// A segment longer than this takes cuBLAS under kGather.
inline constexpr std::int32_t kLoraGatherMaxRows = 64;
// The largest rank the gather kernels take (their expand stages a row's shrink in shared memory).
inline constexpr std::int32_t kLoraMaxGatherRank = 256;
inline constexpr int kLoraTargets = 7;
// The most targets one gather launch takes: a group sharing an input (q, k, v).
inline constexpr int kLoraMaxGroupTargets = 3;

// "gather" or "cublas".
const char* lora_kernel_name(LoraKernel kernel);
// The kernel named `text` (exactly "gather" or "cublas"). Throws std::invalid_argument
// "<what>: expected one of gather, cublas, got '<text>'" otherwise (empty included).
LoraKernel parse_lora_kernel(std::string_view text, std::string_view what);
// $SERVELAB_CUDA_LORA parsed by parse_lora_kernel when it is set, `fallback` when it is not.
LoraKernel lora_kernel_from_env(LoraKernel fallback);

// The seven projections' dimensions and the packed layout above.
struct LoraShape {
  std::int32_t in[kLoraTargets] = {};
  std::int32_t out[kLoraTargets] = {};

  // Elements per unit of rank of one layer: sum over t of in[t] + out[t].
  SERVELAB_HOST_DEVICE std::int64_t layer_units() const { return unit_offset(kLoraTargets); }
  // Elements per unit of rank before target t inside a layer.
  SERVELAB_HOST_DEVICE std::int64_t unit_offset(int t) const {
    std::int64_t u = 0;
    for (int i = 0; i < t; ++i) u += std::int64_t{in[i]} + out[i];
    return u;
  }
  // Element offset of A_t of layer l in an adapter of rank r; B_t is at a_offset + r * in[t].
  SERVELAB_HOST_DEVICE std::int64_t a_offset(std::int32_t rank, std::int32_t layer, int t) const {
    return std::int64_t{rank} * (std::int64_t{layer} * layer_units() + unit_offset(t));
  }
  SERVELAB_HOST_DEVICE std::int64_t b_offset(std::int32_t rank, std::int32_t layer, int t) const {
    return a_offset(rank, layer, t) + std::int64_t{rank} * in[t];
  }
  // Elements of a whole adapter of rank r over `layers` layers.
  std::int64_t elements(std::int32_t rank, std::int32_t layers) const {
    return std::int64_t{rank} * layers * layer_units();
  }
};

// True when the gather kernels take every projection of `shape`: each dimension a positive
// multiple of 8 (their 16-byte accesses). Otherwise the deltas go through cuBLAS.
bool lora_gather_fits(const LoraShape& shape);

// A Llama-family model's shape: q, k, v read `hidden` and write q_size, kv_size, kv_size; o reads
// q_size and writes hidden; gate and up read hidden and write intermediate; down the reverse.
LoraShape llama_lora_shape(std::int32_t hidden, std::int32_t q_size, std::int32_t kv_size,
                           std::int32_t intermediate);

}  // namespace servelab::kernels
