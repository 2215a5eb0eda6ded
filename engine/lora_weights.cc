#include "engine/lora_weights.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <tuple>

#include "core/rng.h"

namespace servelab {

namespace {

const char* const kTargetNames[kNumLoraTargets] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                   "gate_proj", "up_proj", "down_proj"};

// (out, in) of projection `t` of `m`.
std::pair<std::int64_t, std::int64_t> shape(const ModelConfig& m, int t) {
  const std::int64_t h = m.hidden_size, q = m.q_size(), kv = m.kv_size(),
                     inter = m.intermediate_size;
  switch (static_cast<LoraTarget>(t)) {
    case LoraTarget::kQ:
      return {q, h};
    case LoraTarget::kK:
    case LoraTarget::kV:
      return {kv, h};
    case LoraTarget::kO:
      return {h, q};
    case LoraTarget::kGate:
    case LoraTarget::kUp:
      return {inter, h};
    case LoraTarget::kDown:
      return {h, inter};
  }
  return {0, 0};
}

void fill(RowMatrix& x, std::int64_t rows, std::int64_t cols,
          const kernels::CounterNormal& params) {
  x.resize(rows, cols);
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    x.data()[i] = kernels::counter_normal(params, static_cast<std::uint64_t>(i));
  }
}

RowMatrix& projection(LlamaLayerWeights& w, int t) {
  RowMatrix* const p[kNumLoraTargets] = {&w.q_proj,    &w.k_proj,  &w.v_proj,   &w.o_proj,
                                         &w.gate_proj, &w.up_proj, &w.down_proj};
  return *p[t];
}

}  // namespace

float lora_scaling(std::int32_t rank) { return static_cast<float>(kLoraAlpha / rank); }

LoraPairDraw lora_pair_draw(const ModelConfig& model, std::uint64_t seed, std::uint32_t id,
                            std::int32_t rank, std::int32_t layer, LoraTarget target) {
  if (id < 1 || rank < 1) {
    throw std::invalid_argument("make_lora_adapter: id and rank must be >= 1");
  }
  const int t = static_cast<int>(target);
  const double b_scale = 0.5 / (static_cast<double>(lora_scaling(rank)) * std::sqrt(double(rank)));
  const std::uint64_t adapter_key = mix64(mix64(seed ^ name_hash("lora_adapter")) ^ id);
  const std::string name = "layers." + std::to_string(layer) + "." + kTargetNames[t];
  const std::uint64_t key = mix64(adapter_key ^ name_hash(name));
  LoraPairDraw d;
  std::tie(d.out, d.in) = shape(model, t);
  d.a = kernels::counter_normal_params(mix64(key ^ 0xa), 0.0, 1.0 / std::sqrt(double(d.in)));
  d.b = kernels::counter_normal_params(mix64(key ^ 0xb), 0.0, b_scale);
  return d;
}

LoraAdapter make_lora_adapter(const ModelConfig& model, std::uint64_t seed, std::uint32_t id,
                              std::int32_t rank) {
  if (id < 1 || rank < 1) {
    throw std::invalid_argument("make_lora_adapter: id and rank must be >= 1");
  }
  LoraAdapter a;
  a.id = id;
  a.rank = rank;
  a.scaling = lora_scaling(rank);
  a.layers.resize(static_cast<std::size_t>(model.num_layers));
  for (std::int32_t l = 0; l < model.num_layers; ++l) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const LoraPairDraw d = lora_pair_draw(model, seed, id, rank, l, static_cast<LoraTarget>(t));
      LoraAdapter::Pair& p = a.layers[static_cast<std::size_t>(l)][static_cast<std::size_t>(t)];
      fill(p.a, rank, d.in, d.a);
      fill(p.b, d.out, rank, d.b);
    }
  }
  return a;
}

LlamaWeights merge_lora(const LlamaWeights& base, const LoraAdapter& adapter) {
  const ModelConfig& m = base.config.model;
  if (adapter.layers.size() != static_cast<std::size_t>(m.num_layers)) {
    throw std::invalid_argument("merge_lora: the adapter was made for another model");
  }
  LlamaWeights merged = base;
  for (std::int32_t l = 0; l < m.num_layers; ++l) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const LoraAdapter::Pair& p =
          adapter.layers[static_cast<std::size_t>(l)][static_cast<std::size_t>(t)];
      RowMatrix& w = projection(merged.layers[static_cast<std::size_t>(l)], t);
      if (w.rows() != p.b.rows() || w.cols() != p.a.cols()) {
        throw std::invalid_argument("merge_lora: the adapter was made for another model");
      }
      w += adapter.scaling * (p.b * p.a);
    }
  }
  return merged;
}

}  // namespace servelab
