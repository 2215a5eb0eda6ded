// LoraAdapter: the weights of one LoRA adapter for a Llama-family model, and merging them into the
// base weights (the dense model the adapter stands for).
//
// An adapter of rank r holds, for each decoder layer and each of the seven projections vLLM
// applies LoRA to (q, k, v, o, gate, up, down: its QKV, O, gate/up and down LoRA layers), a pair
// A [r, in] and B [out, r]; the projection of X [tokens, in] becomes
//   X W^T + scaling * (X A^T) B^T,    scaling = lora_alpha / r     (PEFT's and vLLM's convention)
// which is X (W + scaling B A)^T: merge_lora() builds that dense model. The CPU executor applies
// the unmerged form per token, each entry's rows with its own adapter (Punica's segmented
// shrink/expand), so one batch mixes adapters and the base model.
//
// make_lora_adapter() draws the weights deterministically from (seed, adapter id): A ~ N(0, 1/in)
// (so X A^T keeps the input's scale) and B ~ N(0, 0.25 / (scaling^2 r)) (so the adapter moves each
// projection output by about half a standard deviation: adapters visibly change what a model
// generates, as trained ones do; PEFT's zero-initialised B would make every adapter the base
// model). lora_alpha is kLoraAlpha.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "engine/llama_weights.h"
#include "kernels/counter_normal.h"

namespace servelab {

// The projections an adapter adapts, in this order.
enum class LoraTarget : std::uint8_t { kQ, kK, kV, kO, kGate, kUp, kDown };
inline constexpr int kNumLoraTargets = 7;
inline constexpr double kLoraAlpha = 16.0;

struct LoraAdapter {
  std::uint32_t id = 0;
  std::int32_t rank = 0;
  float scaling = 0;  // kLoraAlpha / rank
  struct Pair {
    RowMatrix a;  // [rank, in]
    RowMatrix b;  // [out, rank]
  };
  // layers[l][target]
  std::vector<std::array<Pair, kNumLoraTargets>> layers;
};

// The adapter `id` of rank `rank` for `model` under `seed`. REQUIRES: id >= 1, rank >= 1 (else
// std::invalid_argument).
LoraAdapter make_lora_adapter(const ModelConfig& model, std::uint64_t seed, std::uint32_t id,
                              std::int32_t rank);

// How make_lora_adapter draws the pair of (layer, target): element i of A [rank, in] (row-major)
// is counter_normal(a, i) and element i of B [out, rank] is counter_normal(b, i)
// (kernels/counter_normal.h), so a device can generate the same adapter (the CUDA executor does,
// with kernels::fill_counter_normal). Same requirements as make_lora_adapter.
struct LoraPairDraw {
  kernels::CounterNormal a, b;
  std::int64_t in = 0, out = 0;
};
LoraPairDraw lora_pair_draw(const ModelConfig& model, std::uint64_t seed, std::uint32_t id,
                            std::int32_t rank, std::int32_t layer, LoraTarget target);
// kLoraAlpha / rank in fp32, as LoraAdapter::scaling.
float lora_scaling(std::int32_t rank);

// `base` with every adapted projection replaced by W + scaling * B A (biases, norms, embeddings
// unchanged). REQUIRES: the adapter was made for base's model (std::invalid_argument otherwise).
LlamaWeights merge_lora(const LlamaWeights& base, const LoraAdapter& adapter);

}  // namespace servelab
