#include "engine/cpu_executor.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <numeric>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>

#include "core/kv_offload_tiers.h"
#include "core/stop_conditions.h"
#include "engine/logprobs.h"
#include "engine/ngram_proposer.h"
#include "engine/plan_check.h"
#include "engine/sample_stream.h"
#include "kernels/sampling_ref.h"

namespace servelab {

RowMatrix rms_norm(const RowMatrix& x, const Eigen::VectorXf& weight, double eps) {
  RowMatrix out(x.rows(), x.cols());
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    const float ms = x.row(r).squaredNorm() / static_cast<float>(x.cols());
    const float inv = 1.0f / std::sqrt(ms + static_cast<float>(eps));
    out.row(r) = (x.row(r) * inv).cwiseProduct(weight.transpose());
  }
  return out;
}

void apply_rope(float* row, std::int32_t num_heads, std::int32_t head_dim,
                const std::vector<double>& inv_freq, std::int64_t position) {
  const std::int32_t half = head_dim / 2;
  for (std::int32_t j = 0; j < half; ++j) {
    const double angle = static_cast<double>(position) * inv_freq[j];
    const float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
    for (std::int32_t h = 0; h < num_heads; ++h) {
      float* x = row + std::int64_t{h} * head_dim;
      const float x1 = x[j], x2 = x[j + half];
      x[j] = x1 * c - x2 * s;
      x[j + half] = x2 * c + x1 * s;
    }
  }
}

void keep_freed_memory_mapped() {
#if defined(__GLIBC__)
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, kHeapAllocationMaxBytes);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  });
#endif
}

CpuExecutor::CpuExecutor(const LlamaWeights& weights, const CpuExecutorOptions& options)
    : weights_(weights), options_(options), inv_freq_(rope_inv_freq(weights.config)) {
  keep_freed_memory_mapped();
  if (options.block_size < 1 || options.num_blocks < 1 || options.num_host_blocks < 0 ||
      options.num_tier_slots < 0) {
    throw std::invalid_argument(
        "CpuExecutor: block_size and num_blocks must be >= 1, "
        "num_host_blocks and num_tier_slots >= 0");
  }
  if (options.sampling.temperature < 0 || !(options.sampling.top_p > 0) ||
      options.sampling.top_p > 1) {
    throw std::invalid_argument("CpuExecutor: temperature must be >= 0 and top_p in (0, 1]");
  }
  if (!(options.k_scale > 0 && std::isfinite(options.k_scale) && options.v_scale > 0 &&
        std::isfinite(options.v_scale))) {
    throw std::invalid_argument("CpuExecutor: k_scale and v_scale must be finite and positive");
  }
  if (options.speculative.enabled() && options.speculative.method != SpecMethod::kNgram) {
    throw std::invalid_argument(
        std::string("CpuExecutor: speculative decoding runs method ngram only, not ") +
        to_string(options.speculative.method));
  }
  const ModelConfig& m = weights.config.model;
  fp8_kv_ = options.kv_format == kernels::FloatFormat::kFp8E4m3 ||
            options.kv_format == kernels::FloatFormat::kFp8E5m2;
  k_scales_.assign(m.num_layers, fp8_kv_ ? options.k_scale : 1.0f);
  v_scales_.assign(m.num_layers, fp8_kv_ ? options.v_scale : 1.0f);
  scales_set_.assign(m.num_layers, !(fp8_kv_ && options.compute_kv_scales));
  block_floats_ = static_cast<std::size_t>(options.block_size) * m.kv_size();
  const std::size_t layers = static_cast<std::size_t>(m.num_layers);
  k_cache_.assign(layers * options.num_blocks * block_floats_, 0.0f);
  v_cache_.assign(k_cache_.size(), 0.0f);
  k_host_.assign(layers * options.num_host_blocks * block_floats_, 0.0f);
  v_host_.assign(k_host_.size(), 0.0f);
  k_tier_.assign(layers * options.num_tier_slots * block_floats_, 0.0f);
  v_tier_.assign(k_tier_.size(), 0.0f);
}

std::size_t CpuExecutor::block_offset(std::int32_t num_blocks, std::int32_t layer,
                                      std::int32_t block) const {
  return (static_cast<std::size_t>(layer) * num_blocks + block) * block_floats_;
}

std::span<const float> CpuExecutor::key_block(std::int32_t layer, std::int32_t block) const {
  return {k_cache_.data() + block_offset(options_.num_blocks, layer, block), block_floats_};
}
std::span<const float> CpuExecutor::value_block(std::int32_t layer, std::int32_t block) const {
  return {v_cache_.data() + block_offset(options_.num_blocks, layer, block), block_floats_};
}
std::span<const float> CpuExecutor::host_key_block(std::int32_t layer, std::int32_t block) const {
  return {k_host_.data() + block_offset(options_.num_host_blocks, layer, block), block_floats_};
}
std::span<const float> CpuExecutor::host_value_block(std::int32_t layer, std::int32_t block) const {
  return {v_host_.data() + block_offset(options_.num_host_blocks, layer, block), block_floats_};
}
std::span<const float> CpuExecutor::tier_key_block(std::int32_t layer, std::int32_t slot) const {
  return {k_tier_.data() + block_offset(options_.num_tier_slots, layer, slot), block_floats_};
}
std::span<float> CpuExecutor::mutable_key_block(std::int32_t layer, std::int32_t block) {
  return {k_cache_.data() + block_offset(options_.num_blocks, layer, block), block_floats_};
}
std::span<float> CpuExecutor::mutable_value_block(std::int32_t layer, std::int32_t block) {
  return {v_cache_.data() + block_offset(options_.num_blocks, layer, block), block_floats_};
}

const LoraAdapter& CpuExecutor::lora_adapter(std::uint32_t id, std::int32_t rank) {
  auto it = lora_adapters_.find(id);
  if (it == lora_adapters_.end()) {
    // Past the bound: drop the least recently used adapter this step does not run (a plan running
    // more adapters than the bound keeps them all until a later step).
    const auto cap = static_cast<std::size_t>(options_.max_cached_loras);
    if (cap > 0 && lora_adapters_.size() >= cap) {
      auto oldest = lora_adapters_.end();
      for (auto a = lora_adapters_.begin(); a != lora_adapters_.end(); ++a) {
        if (a->second.last_step < lora_step_ &&
            (oldest == lora_adapters_.end() || a->second.last_step < oldest->second.last_step)) {
          oldest = a;
        }
      }
      if (oldest != lora_adapters_.end()) lora_adapters_.erase(oldest);
    }
    it = lora_adapters_
             .emplace(id, CachedLora{make_lora_adapter(weights_.config.model, options_.lora_seed,
                                                       id, rank)})
             .first;
    lora_ranks_.emplace(id, rank);
  }
  it->second.last_step = lora_step_;
  return it->second.adapter;
}

void CpuExecutor::validate(const StepPlan& plan) const {
  PlanLimits limits;
  limits.num_blocks = options_.num_blocks;
  limits.num_host_blocks = options_.num_host_blocks;
  limits.block_size = options_.block_size;
  check_plan(plan, limits, "CpuExecutor");
  check_tier_moves(plan, options_.num_blocks, options_.num_tier_slots, "CpuExecutor");
  check_lora_entries(
      plan, options_.enable_lora,
      [&](std::uint32_t id) {
        const auto it = lora_ranks_.find(id);
        return it == lora_ranks_.end() ? 0 : it->second;
      },
      "CpuExecutor");
}

void CpuExecutor::move_blocks(const StepPlan& plan) {
  const std::int32_t layers = weights_.config.model.num_layers;
  auto copy = [&](const std::vector<float>& src_k, const std::vector<float>& src_v,
                  std::int32_t src_blocks, BlockId src, std::vector<float>& dst_k,
                  std::vector<float>& dst_v, std::int32_t dst_blocks, BlockId dst) {
    for (std::int32_t l = 0; l < layers; ++l) {
      const std::size_t s = block_offset(src_blocks, l, src), d = block_offset(dst_blocks, l, dst);
      std::copy_n(src_k.begin() + s, block_floats_, dst_k.begin() + d);
      std::copy_n(src_v.begin() + s, block_floats_, dst_v.begin() + d);
    }
  };
  const std::int32_t nd = options_.num_blocks, nh = options_.num_host_blocks;
  for (const BlockMove& m : plan.swap_out) {
    copy(k_cache_, v_cache_, nd, m.src, k_host_, v_host_, nh, m.dst);
  }
  if (!plan.tier_stores.empty() || !plan.tier_loads.empty()) {
    // In the scheduler's order (TierLoad::stores_before): the loads of one allocation read their
    // slots before that allocation's stores and write their blocks after them.
    const auto t0 = std::chrono::steady_clock::now();
    const std::int32_t nt = options_.num_tier_slots;
    const std::size_t per_load = 2 * static_cast<std::size_t>(layers) * block_floats_;
    std::size_t stored = 0;
    auto store_until = [&](std::size_t n) {
      for (; stored < n; ++stored) {
        const TierStore& st = plan.tier_stores[stored];
        copy(k_cache_, v_cache_, nd, st.src, k_tier_, v_tier_, nt, st.dst_slot);
      }
    };
    std::vector<float> staged;
    const std::size_t nl = plan.tier_loads.size();
    for (std::size_t i = 0; i < nl;) {
      const auto group = static_cast<std::size_t>(plan.tier_loads[i].stores_before);
      std::size_t j = i;
      while (j < nl && static_cast<std::size_t>(plan.tier_loads[j].stores_before) == group) ++j;
      store_until(group);
      staged.resize((j - i) * per_load);
      for (std::size_t k = i; k < j; ++k) {
        float* out = staged.data() + (k - i) * per_load;
        for (std::int32_t l = 0; l < layers; ++l) {
          const std::size_t src = block_offset(nt, l, plan.tier_loads[k].src);
          std::copy_n(k_tier_.begin() + src, block_floats_, out + 2 * l * block_floats_);
          std::copy_n(v_tier_.begin() + src, block_floats_, out + (2 * l + 1) * block_floats_);
        }
      }
      store_until(j < nl ? static_cast<std::size_t>(plan.tier_loads[j].stores_before)
                         : plan.tier_stores.size());
      for (std::size_t k = i; k < j; ++k) {
        const float* in = staged.data() + (k - i) * per_load;
        for (std::int32_t l = 0; l < layers; ++l) {
          const std::size_t dst = block_offset(nd, l, plan.tier_loads[k].dst);
          std::copy_n(in + 2 * l * block_floats_, block_floats_, k_cache_.begin() + dst);
          std::copy_n(in + (2 * l + 1) * block_floats_, block_floats_, v_cache_.begin() + dst);
        }
      }
      i = j;
    }
    store_until(plan.tier_stores.size());
    tier_copy_ns_ +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count();
  }
  for (const BlockMove& m : plan.swap_in) {
    copy(k_host_, v_host_, nh, m.src, k_cache_, v_cache_, nd, m.dst);
  }
  for (const BlockMove& m : plan.copies) {
    copy(k_cache_, v_cache_, nd, m.src, k_cache_, v_cache_, nd, m.dst);
  }
}

StepResult CpuExecutor::execute(const StepPlan& plan) {
  const auto start = std::chrono::steady_clock::now();
  validate(plan);
  // Async scheduling: an entry that starts at the previous step's token (StepPlan::pipelined).
  // Found before any state changes, so a plan that does not follow the last one is refused whole.
  const std::vector<std::uint8_t> takes_previous = previous_.takers(plan, "CpuExecutor");
  move_blocks(plan);

  const ModelConfig& m = weights_.config.model;
  const std::int32_t bs = options_.block_size;
  const std::int32_t kv_heads = m.num_kv_heads, heads = m.num_heads, hd = m.head_dim;
  const std::int32_t group = heads / kv_heads;
  const std::int64_t kv_size = m.kv_size();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  // Token values and positions of the whole step, entries back to back.
  std::vector<std::int32_t> tokens, positions;
  std::vector<std::int64_t> row_begin;  // first row of each entry
  for (std::size_t i = 0; i < plan.requests.size(); ++i) {
    const ScheduledRequest& e = plan.requests[i];
    row_begin.push_back(static_cast<std::int64_t>(tokens.size()));
    const auto known = e.spec->prompt_len + static_cast<std::int32_t>(e.output_tokens.size());
    for (std::int32_t p = e.first_token; p < e.context_len(); ++p) {
      std::int32_t value;
      if (p < e.spec->prompt_len) {
        value = prompt_token_value(*e.spec, p, m.vocab_size);
      } else if (p < known) {
        value = e.output_tokens[p - e.spec->prompt_len];
      } else if (takes_previous[i] != 0) {
        value = previous_.token(e.id);
      } else {
        value = plan.draft_tokens[i][static_cast<std::size_t>(p - known)];
      }
      tokens.push_back(value);
      positions.push_back(p);
    }
  }
  const auto T = static_cast<Eigen::Index>(tokens.size());
  // LoRA: the rows of each entry under an adapter (empty without LoRA: the loop below adds
  // nothing to the base model's projections).
  struct LoraRows {
    Eigen::Index begin, count;
    const LoraAdapter* adapter;
  };
  std::vector<LoraRows> lora_rows;
  ++lora_step_;
  for (std::size_t i = 0; i < plan.requests.size(); ++i) {
    const ScheduledRequest& e = plan.requests[i];
    if (e.spec->lora_id == 0) continue;
    lora_rows.push_back(
        {row_begin[i], e.num_tokens, &lora_adapter(e.spec->lora_id, e.spec->lora_rank)});
  }
  // out += scaling * (in A^T) B^T of projection t, for each adapter's rows (Punica's shrink and
  // expand over segments).
  const auto add_lora = [&](const RowMatrix& in, RowMatrix& out, std::int32_t layer, LoraTarget t) {
    for (const LoraRows& r : lora_rows) {
      const LoraAdapter::Pair& p =
          r.adapter->layers[static_cast<std::size_t>(layer)][static_cast<std::size_t>(t)];
      const RowMatrix shrunk = in.middleRows(r.begin, r.count) * p.a.transpose();
      out.middleRows(r.begin, r.count).noalias() += r.adapter->scaling * (shrunk * p.b.transpose());
    }
  };
  RowMatrix x(T, m.hidden_size);
  for (Eigen::Index t = 0; t < T; ++t) x.row(t) = weights_.embed_tokens.row(tokens[t]);

  RowMatrix attn(T, m.q_size());
  std::vector<float> scores;
  for (std::int32_t layer = 0; layer < m.num_layers; ++layer) {
    const LlamaLayerWeights& w = weights_.layers[layer];
    const RowMatrix h = rms_norm(x, w.input_layernorm, m.rms_norm_eps);
    RowMatrix q = h * w.q_proj.transpose();
    RowMatrix k = h * w.k_proj.transpose();
    RowMatrix v = h * w.v_proj.transpose();
    if (m.qkv_bias) {
      q.rowwise() += w.q_bias.transpose();
      k.rowwise() += w.k_bias.transpose();
      v.rowwise() += w.v_bias.transpose();
    }
    if (!lora_rows.empty()) {
      add_lora(h, q, layer, LoraTarget::kQ);
      add_lora(h, k, layer, LoraTarget::kK);
      add_lora(h, v, layer, LoraTarget::kV);
    }
    for (Eigen::Index t = 0; t < T; ++t) {
      apply_rope(q.row(t).data(), heads, hd, inv_freq_, positions[t]);
      apply_rope(k.row(t).data(), kv_heads, hd, inv_freq_, positions[t]);
    }
    // Every entry's K/V goes into the cache before any entry attends (see the header), in
    // the KV cache's format.
    const kernels::FloatFormat fmt = options_.kv_format;
    if (!scales_set_[layer] && T > 0) {
      // Per-tensor scales from this first step: the largest magnitude maps to the format's max.
      const float top = kernels::format_max(fmt);
      const float k_amax = k.cwiseAbs().maxCoeff(), v_amax = v.cwiseAbs().maxCoeff();
      k_scales_[layer] = k_amax > 0 && std::isfinite(k_amax) ? k_amax / top : 1.0f;
      v_scales_[layer] = v_amax > 0 && std::isfinite(v_amax) ? v_amax / top : 1.0f;
      scales_set_[layer] = true;
    }
    const float k_scale = k_scales_[layer], v_scale = v_scales_[layer];
    auto store = [fmt](const float* src, std::int64_t n, float scale, float* dst) {
      if (fmt == kernels::FloatFormat::kFp32) {
        std::copy_n(src, n, dst);
        return;
      }
      // vLLM's KV-write kernel: fp8 gets x / scale (scale 1 for bf16 and fp16).
      for (std::int64_t i = 0; i < n; ++i) dst[i] = kernels::round_to_format(src[i] / scale, fmt);
    };
    float* kc = k_cache_.data();
    float* vc = v_cache_.data();
    for (std::size_t i = 0; i < plan.requests.size(); ++i) {
      const ScheduledRequest& e = plan.requests[i];
      for (std::int32_t j = 0; j < e.num_tokens; ++j) {
        const std::int32_t p = e.first_token + j;
        const std::size_t off = block_offset(options_.num_blocks, layer, e.block_table[p / bs]) +
                                static_cast<std::size_t>(p % bs) * kv_size;
        store(k.row(row_begin[i] + j).data(), kv_size, k_scale, kc + off);
        store(v.row(row_begin[i] + j).data(), kv_size, v_scale, vc + off);
      }
    }
    // fp8 with a scale other than 1: attention reads dequantized copies (stored * scale).
    const bool dequantize = fp8_kv_ && (k_scale != 1.0f || v_scale != 1.0f);
    std::vector<float> k_deq, v_deq;
    // Attention, one entry at a time, reading keys and values through the block table.
    for (std::size_t i = 0; i < plan.requests.size(); ++i) {
      const ScheduledRequest& e = plan.requests[i];
      const std::int32_t ctx = e.context_len();
      std::vector<const float*> k_slot(ctx), v_slot(ctx);  // where each position's K/V lives
      if (dequantize) {
        k_deq.resize(static_cast<std::size_t>(ctx) * kv_size);
        v_deq.resize(k_deq.size());
      }
      for (std::int32_t p = 0; p < ctx; ++p) {
        const std::size_t off = block_offset(options_.num_blocks, layer, e.block_table[p / bs]) +
                                static_cast<std::size_t>(p % bs) * kv_size;
        k_slot[p] = kc + off;
        v_slot[p] = vc + off;
        if (dequantize) {
          float* kd = k_deq.data() + std::int64_t{p} * kv_size;
          float* vd = v_deq.data() + std::int64_t{p} * kv_size;
          for (std::int64_t c = 0; c < kv_size; ++c) {
            kd[c] = k_slot[p][c] * k_scale;
            vd[c] = v_slot[p][c] * v_scale;
          }
          k_slot[p] = kd;
          v_slot[p] = vd;
        }
      }
      for (std::int32_t j = 0; j < e.num_tokens; ++j) {
        const Eigen::Index row = row_begin[i] + j;
        const std::int32_t pos = e.first_token + j;
        for (std::int32_t head = 0; head < heads; ++head) {
          const std::int64_t kv_off = std::int64_t{head / group} * hd;
          const Eigen::Map<const Eigen::VectorXf> qv(q.row(row).data() + std::int64_t{head} * hd,
                                                     hd);
          scores.resize(pos + 1);
          float mx = -std::numeric_limits<float>::infinity();
          for (std::int32_t p = 0; p <= pos; ++p) {
            scores[p] = qv.dot(Eigen::Map<const Eigen::VectorXf>(k_slot[p] + kv_off, hd)) * scale;
            mx = std::max(mx, scores[p]);
          }
          float denom = 0;
          for (float& s : scores) {
            s = std::exp(s - mx);
            denom += s;
          }
          Eigen::Map<Eigen::VectorXf> out(attn.row(row).data() + std::int64_t{head} * hd, hd);
          out.setZero();
          for (std::int32_t p = 0; p <= pos; ++p) {
            out += (scores[p] / denom) * Eigen::Map<const Eigen::VectorXf>(v_slot[p] + kv_off, hd);
          }
        }
      }
    }
    x += attn * w.o_proj.transpose();
    if (!lora_rows.empty()) add_lora(attn, x, layer, LoraTarget::kO);
    const RowMatrix h2 = rms_norm(x, w.post_attention_layernorm, m.rms_norm_eps);
    RowMatrix gate = h2 * w.gate_proj.transpose();
    RowMatrix up = h2 * w.up_proj.transpose();
    if (!lora_rows.empty()) {
      add_lora(h2, gate, layer, LoraTarget::kGate);
      add_lora(h2, up, layer, LoraTarget::kUp);
    }
    // SwiGLU: silu(gate) * up, silu(g) = g / (1 + e^-g).
    const RowMatrix act =
        (gate.array() / (1.0f + (-gate.array()).exp())).cwiseProduct(up.array()).matrix();
    x += act * w.down_proj.transpose();
    if (!lora_rows.empty()) add_lora(act, x, layer, LoraTarget::kDown);
  }

  StepResult result;
  result.sampled_tokens.assign(plan.requests.size(), -1);
  last_logits_.assign(plan.requests.size(), Eigen::VectorXf());
  const bool speculative = options_.speculative.enabled();
  if (plan.num_draft_tokens > 0) result.num_accepted.assign(plan.requests.size(), 0);
  if (speculative) result.num_proposed.assign(plan.requests.size(), 0);
  std::vector<std::int32_t> history;
  // The logits output index `index` of entry `e` samples from: the request's logit_bias and
  // repetition, frequency and presence penalties over the tokens its sequence has seen before
  // that index (engine/sample_stream.h), then -infinity for the tokens outside its
  // allowed_token_ids or its structured output's grammar, the last tokens of the bad words its
  // outputs end with the rest of, and, before min_tokens, EOS and the stop token ids (vLLM's
  // logits processors; row_bans).
  prompt_sets_.retain(plan);
  Eigen::VectorXf masked;
  const auto allowed = [&](const ScheduledRequest& e, std::size_t index,
                           const Eigen::VectorXf& logits) -> const Eigen::VectorXf& {
    const RequestSampling* own = e.spec->sampling.get();
    const bool adjusts = own != nullptr && own->adjusts_logits();
    if (e.spec->stop == nullptr && !adjusts && (own == nullptr || !own->masks_logits())) {
      return logits;
    }
    const auto i = static_cast<std::size_t>(&e - plan.requests.data());
    const std::optional<std::int32_t> previous =
        takes_previous[i] != 0 ? std::optional(previous_.token(e.id)) : std::nullopt;
    const std::vector<std::int32_t> banned = row_bans(e, index, previous, plan.drafts_of(i));
    const bool keeps_some = own != nullptr && !own->allowed_token_ids.empty();
    const std::shared_ptr<const TokenMask> grammar =
        row_constraint(e, e.id, index, previous, plan.drafts_of(i));
    if (banned.empty() && !adjusts && !keeps_some && grammar == nullptr) return logits;
    masked = logits;
    if (keeps_some || grammar != nullptr) {  // the CUDA executor's mask (a grammar needs `own`)
      const TokenMask keep = row_keep_mask(own->allowed_token_ids, grammar.get(),
                                           static_cast<std::int32_t>(logits.size()));
      for (Eigen::Index t = 0; t < masked.size(); ++t) {
        if (!token_allowed(keep, static_cast<std::int32_t>(t))) {
          masked[t] = -std::numeric_limits<float>::infinity();
        }
      }
    }
    if (adjusts) {
      for (const LogitAdjustment& a : row_adjustments(e, index, previous, plan.drafts_of(i),
                                                      prompt_sets_.of(e, m.vocab_size))) {
        if (a.token >= 0 && a.token < masked.size())
          masked[a.token] = adjust_logit(masked[a.token], a);
      }
    }
    for (const std::int32_t t : banned) {
      if (t >= 0 && t < masked.size()) masked[t] = -std::numeric_limits<float>::infinity();
    }
    return masked;
  };
  const auto sample_at = [&](const ScheduledRequest& e, std::size_t index,
                             const Eigen::VectorXf& logits) {
    return sample(*e.spec, e.id, index, allowed(e, index, logits));
  };
  for (std::size_t i = 0; i < plan.requests.size(); ++i) {
    const ScheduledRequest& e = plan.requests[i];
    if (!e.samples) continue;
    const std::span<const std::int32_t> drafts = plan.drafts_of(i);
    const auto d = static_cast<std::int32_t>(drafts.size());
    // Outputs before this step's first sample: one more when the entry starts at the previous
    // step's token (async scheduling).
    const std::size_t outs = e.output_tokens.size() + takes_previous[i];
    // Verification: position j of the verify entry (row first + j) samples output index
    // outputs + j; the drafts are accepted while they equal what was sampled before them.
    std::int32_t accepted = 0;
    for (; accepted < d; ++accepted) {
      const RowMatrix row = x.row(row_begin[i] + e.num_tokens - 1 - d + accepted);
      const RowMatrix normed = rms_norm(row, weights_.norm, m.rms_norm_eps);
      const Eigen::VectorXf logits = weights_.head() * normed.row(0).transpose();
      if (sample_at(e, outs + accepted, logits) != drafts[accepted]) break;
    }
    if (d > 0) result.num_accepted[i] = accepted;
    const RowMatrix last = x.row(row_begin[i] + e.num_tokens - 1 - d + accepted);
    const RowMatrix normed = rms_norm(last, weights_.norm, m.rms_norm_eps);
    last_logits_[i] = weights_.head() * normed.row(0).transpose();
    result.sampled_tokens[i] = sample_at(e, outs + accepted, last_logits_[i]);
    if (speculative) {
      result.num_proposed[i] = propose_after_step(
          e, drafts.first(static_cast<std::size_t>(accepted)), result.sampled_tokens[i],
          m.vocab_size, options_.speculative, history, result.proposed_tokens);
    }
    // Log probabilities under the raw logits (engine/logprobs.h), where asked.
    const std::span<const float> raw(last_logits_[i].data(),
                                     static_cast<std::size_t>(last_logits_[i].size()));
    if (e.spec->logprobs >= 0 && d == 0) {
      result.logprobs.resize(plan.requests.size());
      result.logprobs[i] = token_logprobs(raw, result.sampled_tokens[i], e.spec->logprobs);
    }
    for (std::int32_t k = 1; k < e.num_samples; ++k) {
      result.fork_tokens.push_back(sample(*e.spec, sample_request_id(e.id, k),
                                          e.output_tokens.size(),
                                          allowed(e, e.output_tokens.size(), last_logits_[i])));
      if (e.spec->logprobs >= 0) {
        result.fork_logprobs.resize(result.fork_tokens.size());
        result.fork_logprobs.back() =
            token_logprobs(raw, result.fork_tokens.back(), e.spec->logprobs);
      }
    }
  }
  if (!result.fork_logprobs.empty()) result.fork_logprobs.resize(result.fork_tokens.size());
  // Prompt log probabilities: row j of an entry that asked predicts prompt position
  // first_token + j + 1 (core/step_plan.h prompt_logprob_rows), under its raw logits.
  for (std::size_t i = 0; i < plan.requests.size(); ++i) {
    const ScheduledRequest& e = plan.requests[i];
    const std::int32_t rows = prompt_logprob_rows(e);
    if (rows == 0) continue;
    PromptLogprobs& out = result.prompt_logprobs.emplace_back();
    out.entry = i;
    out.first_position = e.first_token + 1;
    const RowMatrix normed =
        rms_norm(x.middleRows(row_begin[i], rows), weights_.norm, m.rms_norm_eps);
    const RowMatrix logits = normed * weights_.head().transpose();
    for (std::int32_t j = 0; j < rows; ++j) {
      const std::int32_t target = prompt_token_value(*e.spec, out.first_position + j, m.vocab_size);
      out.values.push_back(token_logprobs(
          std::span<const float>(logits.row(j).data(), static_cast<std::size_t>(logits.cols())),
          target, e.spec->prompt_logprobs));
    }
  }
  previous_.record(plan, result);
  result.duration_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  return result;
}

std::int32_t CpuExecutor::sample(const RequestSpec& spec, RequestId id, std::uint64_t index,
                                 const Eigen::VectorXf& logits) const {
  const RowSampling row = row_sampling(options_.sampling, spec, id, index);
  if (row.temperature == 0) {
    Eigen::Index best = 0;
    logits.maxCoeff(&best);  // first maximum: the lowest token id on exact ties
    return static_cast<std::int32_t>(best);
  }
  // The one reference sampler (kernels/sampling_ref.h).
  return kernels::sample_reference(std::span<const float>(logits.data(), logits.size()),
                                   row.temperature, {row.top_p, row.top_k, row.min_p}, row.u);
}

}  // namespace servelab
