#include "engine/lora_weights.h"

#include <cmath>
#include <stdexcept>
#include <string>

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

void fill(RowMatrix& x, std::int64_t rows, std::int64_t cols, std::uint64_t key, double scale) {
  x.resize(rows, cols);
  const kernels::CounterNormal params = kernels::counter_normal_params(key, 0.0, scale);
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

LoraAdapter make_lora_adapter(const ModelConfig& model, std::uint64_t seed, std::uint32_t id,
                              std::int32_t rank) {
  if (id < 1 || rank < 1) {
    throw std::invalid_argument("make_lora_adapter: id and rank must be >= 1");
  }
  LoraAdapter a;
  a.id = id;
  a.rank = rank;
  a.scaling = static_cast<float>(kLoraAlpha / rank);
  const double b_scale = 0.5 / (static_cast<double>(a.scaling) * std::sqrt(double(rank)));
  a.layers.resize(static_cast<std::size_t>(model.num_layers));
  const std::uint64_t adapter_key = mix64(mix64(seed ^ name_hash("lora_adapter")) ^ id);
  for (std::int32_t l = 0; l < model.num_layers; ++l) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const auto [out, in] = shape(model, t);
      const std::string name = "layers." + std::to_string(l) + "." + kTargetNames[t];
      const std::uint64_t key = mix64(adapter_key ^ name_hash(name));
      LoraAdapter::Pair& p = a.layers[static_cast<std::size_t>(l)][static_cast<std::size_t>(t)];
      fill(p.a, rank, in, mix64(key ^ 0xa), 1.0 / std::sqrt(double(in)));
      fill(p.b, out, rank, mix64(key ^ 0xb), b_scale);
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
