#include "sim/roofline_cost_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "serving/config_node.h"
#include "serving/expert_routing.h"
#include "serving/kv_capacity.h"

namespace servelab {

namespace {

// One operator on the roofline: limited by compute or by memory traffic, whichever is slower.
inline double roofline(double flops, double s_per_flop, double bytes, double s_per_byte) {
  return std::max(flops * s_per_flop, bytes * s_per_byte);
}

// hidden, q, kv and intermediate widths and the element size, as doubles.
struct Widths {
  double h, q, kv, inter, d;
};
Widths widths(const ModelConfig& m) {
  return {static_cast<double>(m.hidden_size), static_cast<double>(m.q_size()),
          static_cast<double>(m.kv_size()), static_cast<double>(m.intermediate_size),
          static_cast<double>(m.dtype_bytes)};
}

// Bytes one token reads and writes in one layer's GEMM launches: fused QKV (reads h, writes
// q + 2kv), O (reads q, writes h), and the MLP: dense, fused gate/up (reads h, writes 2 inter)
// and down (reads inter, writes h); a mixture of experts, the router (reads h, writes the
// experts' logits), those two for each of the token's experts, and for the shared expert, with
// its gate (reads h, writes 1). In the model's dtype, except a dense model's inputs under W8A8
// (`fp8_inputs`: quantized to one byte by the launch before, RooflineCostModel::fp8_inputs_).
double gemm_act_bytes_per_token(const ModelConfig& m, bool fp8_inputs) {
  const auto [h, q, kv, inter, d] = widths(m);
  const double attention = 2 * h + 2 * q + 2 * kv;
  if (!m.is_moe() && fp8_inputs) {
    return (2 * h + q + inter) + (q + 2 * kv + 2 * h + 2 * inter) * d;
  }
  if (!m.is_moe()) return (attention + 2 * h + 3 * inter) * d;
  const double shared = m.shared_expert_intermediate_size;
  return (attention + h + m.num_experts + m.experts_per_token * (2 * h + 3 * inter) +
          (shared > 0 ? 3 * h + 3 * shared + 1 : 0)) *
         d;
}

// Bytes one token's elementwise launches move in one layer: two fused residual-add + RMSNorm
// (read x and residual, write both: 4h each), the q/k norm when the model has one (2q + 2kv), RoPE
// in place on q and k (2q + 2kv), SiLU-mul (reads 2 inter, writes inter per expert the token
// uses); in a mixture of experts the routing (reads the logits, writes experts_per_token ids
// and fp32 weights), the weighted sum of the experts' outputs (reads one h per expert, writes h)
// and, with a shared expert, its sigmoid-gated add (reads two h and the gate, writes h). Under
// W8A8 (`fp8_inputs`, dense models) the two norms and SiLU-mul write their outputs in one byte
// (vLLM fuses the quantization into them) and one more launch quantizes the attention output
// for O (reads q in dtype, writes q bytes).
double elementwise_bytes_per_token(const ModelConfig& m, bool fp8_inputs) {
  const auto [h, q, kv, inter, d] = widths(m);
  double bytes = (8 * h + 2 * (q + kv) * (m.qk_norm ? 2 : 1) +
                  3 * static_cast<double>(m.mlp_width_per_token())) *
                 d;
  if (fp8_inputs) {
    bytes -= (2 * h + static_cast<double>(m.mlp_width_per_token())) * (d - 1);
    bytes += q * (d + 1);
  }
  if (m.is_moe()) {
    bytes += m.num_experts * d + 8.0 * m.experts_per_token + (m.experts_per_token + 1) * h * d +
             (m.shared_expert_intermediate_size > 0 ? 3 * h * d + d : 0);
  }
  return bytes;
}

}  // namespace

RooflineCostModel::RooflineCostModel(ModelConfig model, HardwareConfig hardware,
                                     std::int32_t block_size, ParallelConfig parallel,
                                     std::int32_t lora_rank)
    : model_((model.validate(), std::move(model))),
      shard_(tensor_shard(model_, parallel.tensor)),
      hardware_((hardware.validate(), std::move(hardware))),
      parallel_(parallel),
      block_size_(block_size),
      lora_rank_(lora_rank),
      op_(hardware_, model_.dtype) {
  if (lora_rank_ < 0) {
    throw ConfigError("lora_rank must be >= 0, got " + std::to_string(lora_rank_));
  }
  if (lora_rank_ > 0 && model_.is_moe()) {
    throw ConfigError("serving.lora: LoRA on a mixture of experts (model " + model_.name +
                      ", num_experts " + std::to_string(model_.num_experts) + ") is not modelled");
  }
  if (parallel_.expert) {
    // The checks resolve_parallel made, for a ParallelConfig built in code.
    ParallelChoice choice;
    choice.tensor = parallel_.tensor;
    choice.expert = true;
    choice.expert_placement = parallel_.expert_placement;
    choice.redundant_experts = parallel_.redundant_experts;
    choice.expert_where = "parallel.expert";
    choice.redundant_where = "parallel.redundant_experts";
    ParallelConfig checked;
    apply_expert_parallel(choice, model_, checked);
  }
  if (block_size_ < 1) {
    throw ConfigError("block_size must be at least 1, got " + std::to_string(block_size_));
  }
  if (parallel_.pipeline < 1 || parallel_.pipeline > model_.num_layers ||
      parallel_.microbatches < 1) {
    throw ConfigError("parallel: pipeline must be in [1, layers] and microbatches at least 1");
  }
  // Every operator below is one GPU's: the shard's widths (the model's own on one GPU).
  const ModelConfig& m = shard_;
  const HardwareConfig& hw = hardware_;
  const double layers = m.num_layers;
  const double d = m.dtype_bytes;
  const double peak = hw.peak_flops_for(m.dtype);
  w8a8_ = m.quantization == "fp8" && hw.has_fp8_tensor_cores();
  fp8_inputs_ = w8a8_ && !m.is_moe();

  block_bytes_ = m.kv_bytes_per_token() * block_size_;
  if (parallel_.pipeline > 1) {
    // The largest stage's layers (the first stages take the remainder).
    block_bytes_ = block_bytes_ / m.num_layers * stage_layers(m.num_layers, parallel_.pipeline, 0);
  }

  s_per_attention_flop_ = 1.0 / (peak * hw.attention_flops_efficiency);
  s_per_hbm_byte_ = 1.0 / (hw.hbm_bandwidth * hw.memory_bandwidth_efficiency);
  s_per_host_byte_ = 1.0 / (hw.host_link_bandwidth * hw.host_link_efficiency);
  s_per_block_ = hw.block_indirection_s * layers;

  // Every token multiplies by the active weights (all of them in a dense model).
  gemm_flops_per_token_ = 2.0 * static_cast<double>(m.active_linear_params_per_layer()) * layers;
  // Weights as stored (model.quantization; linear * dtype bytes without it), read once a step;
  // a mixture of experts reads its routed experts only as far as the step's tokens touch them.
  expert_weight_bytes_ = static_cast<double>(m.expert_weight_bytes()) * layers;
  gemm_weight_bytes_ = static_cast<double>(m.linear_weight_bytes_per_layer()) * layers -
                       expert_weight_bytes_ * m.num_experts;
  gemm_act_bytes_per_token_ = gemm_act_bytes_per_token(m, fp8_inputs_) * layers;
  if (m.quantization == "awq") {
    awq_dense_bytes_ = 2.0 * static_cast<double>(m.active_linear_params_per_layer()) * d * layers;
  }
  // Per layer, as vLLM's kernels do it (elementwise_bytes_per_token), plus the embedding gather
  // (reads and writes h once per token).
  const double h = m.hidden_size;
  elementwise_bytes_per_token_ = elementwise_bytes_per_token(m, fp8_inputs_) * layers + 2.0 * h * d;
  // QK^T and PV: a multiply-add (2 FLOPs) per head_dim element each, per head, per pair.
  attention_flops_per_pair_ = 4.0 * m.head_dim * m.num_heads * layers;
  kv_bytes_per_token_ = static_cast<double>(m.kv_bytes_per_token());
  qo_bytes_per_token_ = 2.0 * static_cast<double>(m.q_size()) * d * layers;
  lm_head_flops_per_seq_ = 2.0 * h * m.vocab_size;
  lm_head_weight_bytes_ = h * m.vocab_size * d;
  lm_head_act_bytes_per_seq_ = (h + m.vocab_size) * d;

  if (m.is_moe()) {
    const std::vector<double> q = expert_selection_probabilities(m);
    uniform_routing_ = m.router_skew == 0;
    for (double qe : q) expert_log_miss_.push_back(std::log1p(-qe));
    if (parallel_.expert && parallel_.tensor > 1) {
      for (const auto& copies : place_expert_copies(q, parallel_.tensor, parallel_.expert_placement,
                                                    parallel_.redundant_experts)) {
        double sum = 0, var = 0;
        std::vector<double> log_miss;
        for (const ExpertCopy& c : copies) {
          sum += c.q;
          var += c.q * (1 - c.q);
          log_miss.push_back(std::log1p(-c.q));
        }
        rank_q_.push_back(sum);
        rank_q_var_.push_back(var);
        rank_copy_log_miss_.push_back(std::move(log_miss));
      }
      imbalance_z_ = expected_max_standard_normal(parallel_.tensor);
    }
  }

  // Filled as steps read them (sim/memo_table.h): a run reads a fraction of the token counts.
  if (m.is_moe()) experts_touched_table_ = MemoTable(kTableTokens + 1);
  gemm_table_ = MemoTable(kTableTokens + 1);
  elementwise_table_ = MemoTable(kTableTokens + 1);
  lm_head_table_ = MemoTable(kTableSeqs + 1);
}

double RooflineCostModel::gemm_seconds(std::int64_t tokens) const {
  if (tokens <= 0) return 0;
  const ModelConfig& m = shard_;
  const double t = static_cast<double>(tokens);
  const auto [h, q, kv, inter, d] = widths(m);
  // vLLM's launches per layer: fused QKV, O, fused gate/up, down.
  const double shapes[4][2] = {{q + 2 * kv, h}, {h, q}, {2 * inter, h}, {h, inter}};
  if (m.is_moe()) return moe_layer_gemm_seconds(t) * m.num_layers;
  if (m.quantization != "none") return quantized_gemm_seconds(t, shapes) * m.num_layers;
  if (op_.classic_gemm()) {
    // The classic roofline prices the layer's GEMMs as one operator: max(all FLOPs / rate, all
    // bytes / bandwidth).
    double compute = 0, memory = 0;
    for (const auto& s : shapes) {
      compute += op_.gemm_compute(t, s[0], s[1]);
      memory += op_.gemm_memory(t, s[0], s[1], d);
    }
    return std::max(compute, memory) * m.num_layers;
  }
  double layer = 0;
  for (const auto& s : shapes) layer += op_.gemm(t, s[0], s[1], d);
  return layer * m.num_layers;
}

// One layer's four launches with quantized weights (docs/cost-model.md, "Weight quantization").
// Each launch reads its weights as stored and its activations in dtype. The legacy AWQ kernel
// (`awq`) below kAwqDenseTokens tokens unpacks and scales every int4 weight on the CUDA cores
// once per kAwqTileTokens-token tile (kAwqDequantOps operations each, at the FP32 rate); from
// kAwqDenseTokens on it first writes the matrix out in dtype (one memory-bound launch) and
// multiplies it densely. `awq_marlin` (W4A16) widens the int4 weights in registers inside a
// tensor-core GEMM: it reads the packed bytes and multiplies at the dtype's rate. FP8 weights:
// one byte each; on a GPU with FP8 tensor cores (W8A8) the inputs are read in one byte and the
// product runs at the FP8 rate, otherwise (W8A16, Marlin's FP8 kernel) the GEMM reads its
// inputs and multiplies at the dtype's rate.
double RooflineCostModel::quantized_gemm_seconds(double t, const double (&shapes)[4][2]) const {
  const ModelConfig& m = shard_;
  const double d = m.dtype_bytes;
  const bool awq = m.quantization == "awq";  // the legacy kernel; awq_marlin prices as W4A16
  double compute = 0, memory = 0, layer = 0;
  for (const auto& s : shapes) {
    const double n = s[0], k = s[1];
    const double weights = static_cast<double>(quantized_matrix_bytes(
        static_cast<std::int64_t>(k), static_cast<std::int64_t>(n), m.quantization, m.dtype_bytes));
    double c = quantized_compute(t, n, k);
    double mem = fp8_inputs_ ? op_.gemm_bytes_time(weights + t * k + t * n * d)
                             : op_.gemm_bytes_time(weights + t * (n + k) * d);
    double extra = 0;  // a separate dequantization launch
    if (awq && t >= kAwqDenseTokens) {
      extra = op_.gemm_from_parts(0, op_.gemm_bytes_time(weights + n * k * d));
      mem = op_.gemm_memory(t, n, k, d);
    } else if (awq) {
      c += std::ceil(t / kAwqTileTokens) * n * k * kAwqDequantOps / hardware_.peak_flops_fp32;
    }
    compute += c;
    memory += mem;
    layer += op_.gemm_from_parts(c, mem) + extra;
  }
  // The classic roofline prices the layer's GEMMs as one operator (as gemm_seconds does).
  if (op_.classic_gemm() && !(awq && t >= kAwqDenseTokens)) return std::max(compute, memory);
  return layer;
}

double RooflineCostModel::experts_touched(std::int64_t tokens) const {
  if (!shard_.is_moe() || tokens <= 0) return 0;
  const double t = static_cast<double>(tokens);
  if (uniform_routing_) {
    const double e = shard_.num_experts;
    return e * -std::expm1(t * std::log1p(-static_cast<double>(shard_.experts_per_token) / e));
  }
  double touched = 0;
  for (double log_miss : expert_log_miss_) touched -= std::expm1(t * log_miss);
  return touched;
}

RooflineCostModel::ExpertLoad RooflineCostModel::busiest_expert_load(std::int64_t tokens) const {
  if (!shard_.is_moe() || tokens <= 0) return {};
  const double t = static_cast<double>(tokens);
  if (rank_copy_log_miss_.empty()) return {t * shard_.experts_per_token, touched_at(tokens)};
  const double inter = model_.intermediate_size;
  ExpertLoad busiest;
  double slowest = -1;
  for (std::size_t r = 0; r < rank_copy_log_miss_.size(); ++r) {
    double touched = 0, var = 0;
    for (double log_miss : rank_copy_log_miss_[r]) {
      const double u = -std::expm1(t * log_miss);
      touched += u;
      var += u * (1 - u);
    }
    const ExpertLoad load{t * rank_q_[r] + imbalance_z_ * std::sqrt(t * rank_q_var_[r]),
                          std::min(static_cast<double>(rank_copy_log_miss_[r].size()),
                                   touched + imbalance_z_ * std::sqrt(var))};
    LaunchParts parts[2];
    routed_launches(load.rows, load.experts, inter, parts);
    const double seconds = routed_seconds(parts);
    if (seconds > slowest) {
      slowest = seconds;
      busiest = load;
    }
  }
  return busiest;
}

void RooflineCostModel::routed_launches(double rows, double experts, double inter,
                                        LaunchParts (&out)[2]) const {
  const ModelConfig& m = shard_;
  const double h = m.hidden_size, d = m.dtype_bytes;
  auto stored = [&](double in, double out_width) {
    return static_cast<double>(quantized_matrix_bytes(static_cast<std::int64_t>(in),
                                                      static_cast<std::int64_t>(out_width),
                                                      m.quantization, m.dtype_bytes));
  };
  // gate/up: rows x (h -> 2 inter); down: rows x (inter -> h).
  out[0] = {quantized_compute(rows, 2 * inter, h),
            op_.gemm_bytes_time(experts * 2 * stored(h, inter) + rows * (2 * inter + h) * d)};
  out[1] = {quantized_compute(rows, h, inter),
            op_.gemm_bytes_time(experts * stored(inter, h) + rows * (h + inter) * d)};
}

double RooflineCostModel::routed_seconds(const LaunchParts (&parts)[2]) const {
  if (op_.classic_gemm()) {
    return std::max(parts[0].compute + parts[1].compute, parts[0].memory + parts[1].memory);
  }
  return op_.gemm_from_parts(parts[0].compute, parts[0].memory) +
         op_.gemm_from_parts(parts[1].compute, parts[1].memory);
}

// One layer's GEMM launches in a mixture of experts (docs/cost-model.md, "Mixture of experts"):
// fused QKV and O, the router, the shared expert's gate/up, down and gate when it has one, and
// the two grouped launches of the routed experts (vLLM's fused_moe: gate/up, then down), each
// over tokens x experts_per_token rows and reading the weights of the experts_touched() experts
// the step's tokens are routed to; under expert parallelism, the busiest GPU's rows and experts
// at their whole width (busiest_expert_load). Weights as stored (model.quantization: none or
// fp8), the router and the shared expert's gate in dtype.
double RooflineCostModel::moe_layer_gemm_seconds(double t) const {
  const ModelConfig& m = shard_;
  // Plain variables, not a structured binding: the lambdas below capture them, which clang
  // before 16 refuses for bindings.
  const double h = m.hidden_size, q = static_cast<double>(m.q_size()),
               kv = static_cast<double>(m.kv_size()), d = m.dtype_bytes;
  // QKV, O, the router, a shared expert's three (gate/up, down, its gate) and the routed two.
  LaunchParts launches[8];
  int n = 0;
  // rows x (in -> out), reading `weights` bytes of weights (stored as model.quantization when
  // `quantized`, in dtype otherwise).
  auto launch = [&](double rows, double out, double in, double weights, bool quantized) {
    launches[n++] = {quantized ? quantized_compute(rows, out, in) : op_.gemm_compute(rows, out, in),
                     op_.gemm_bytes_time(weights + rows * (out + in) * d)};
  };
  auto stored = [&](double in, double out) {
    return static_cast<double>(quantized_matrix_bytes(static_cast<std::int64_t>(in),
                                                      static_cast<std::int64_t>(out),
                                                      m.quantization, m.dtype_bytes));
  };
  launch(t, q + 2 * kv, h, stored(h, q) + 2 * stored(h, kv), true);
  launch(t, h, q, stored(q, h), true);
  launch(t, m.num_experts, h, h * m.num_experts * d, false);
  const double shared = m.shared_expert_intermediate_size;
  if (shared > 0) {
    launch(t, 2 * shared, h, 2 * stored(h, shared), true);
    launch(t, h, shared, stored(shared, h), true);
    launch(t, 1, h, h * d, false);
  }
  // The routed experts: the shard's width on every GPU, or whole experts on the busiest GPU
  // under expert parallelism.
  const ExpertLoad load = busiest_expert_load(static_cast<std::int64_t>(t));
  LaunchParts routed[2];
  routed_launches(load.rows, load.experts,
                  rank_copy_log_miss_.empty() ? m.intermediate_size : model_.intermediate_size,
                  routed);
  launches[n++] = routed[0];
  launches[n++] = routed[1];
  double compute = 0, memory = 0, layer = 0;
  for (int i = 0; i < n; ++i) {
    compute += launches[i].compute;
    memory += launches[i].memory;
    layer += op_.gemm_from_parts(launches[i].compute, launches[i].memory);
  }
  // The classic roofline prices the layer's GEMMs as one operator (as gemm_seconds does).
  return op_.classic_gemm() ? std::max(compute, memory) : layer;
}

double RooflineCostModel::elementwise_seconds(std::int64_t tokens) const {
  if (tokens <= 0) return 0;
  const ModelConfig& m = shard_;
  const double t = static_cast<double>(tokens);
  const auto [h, q, kv, inter, d] = widths(m);
  // Per layer (elementwise_bytes_per_token): two fused residual-add + RMSNorm, the q/k norm,
  // RoPE, SiLU-mul, and a mixture of experts' routing, weighted sum and shared-expert add;
  // then the embedding gather once (reads and writes h).
  const double mlp = static_cast<double>(m.mlp_width_per_token());
  double layer = op_.elementwise(t * 2 * (q + kv) * d, ElementwiseKind::kRope);
  if (fp8_inputs_) {
    // W8A8: the norms and SiLU-mul write one byte per output (quantization fused in), and a
    // per-token quantization of the attention output (a row reduction, as a norm) feeds O.
    layer += 2 * op_.elementwise(t * (3 * d + 1) * h, ElementwiseKind::kNorm) +
             op_.elementwise(t * (2 * d + 1) * mlp, ElementwiseKind::kActivation) +
             op_.elementwise(t * (d + 1) * q, ElementwiseKind::kNorm);
  } else {
    layer += 2 * op_.elementwise(t * 4 * h * d, ElementwiseKind::kNorm) +
             op_.elementwise(t * 3 * mlp * d, ElementwiseKind::kActivation);
  }
  if (m.qk_norm) layer += op_.elementwise(t * 2 * (q + kv) * d, ElementwiseKind::kNorm);
  if (m.is_moe()) {
    const double k = m.experts_per_token;
    layer += op_.elementwise(t * (m.num_experts * d + 8 * k), ElementwiseKind::kResidual) +
             op_.elementwise(t * (k + 1) * h * d, ElementwiseKind::kResidual);
    if (m.shared_expert_intermediate_size > 0) {
      layer += op_.elementwise(t * (3 * h * d + d), ElementwiseKind::kResidual);
    }
  }
  return layer * m.num_layers + op_.elementwise(t * 2 * h * d, ElementwiseKind::kResidual);
}

double RooflineCostModel::lm_head_seconds(std::int64_t seqs) const {
  return op_.gemm(static_cast<double>(seqs), shard_.vocab_size, shard_.hidden_size,
                  shard_.dtype_bytes);
}

double RooflineCostModel::lora_load_seconds(std::int32_t rank) const {
  const std::int64_t layers = stage_layers(model_.num_layers, parallel_.pipeline, 0);
  return static_cast<double>(lora_slot_bytes(shard_, layers, rank)) * s_per_host_byte_;
}

double RooflineCostModel::lora_seconds(std::int64_t tokens, std::int64_t loras, double* flops,
                                       double* bytes) const {
  if (tokens <= 0 || lora_rank_ == 0) return 0;
  const ModelConfig& m = shard_;
  const double t = static_cast<double>(tokens);
  const double l = static_cast<double>(std::max<std::int64_t>(loras, 1));
  const double r = lora_rank_;
  const auto [h, q, kv, inter, d] = widths(m);
  // vLLM's LoRA layers per decoder layer: (slices, sum of slice inputs, sum of slice outputs) of
  // the fused QKV (q, k, v slices, each reading the hidden state), O, fused gate/up and down.
  const double modules[4][3] = {
      {3, 3 * h, q + 2 * kv}, {1, q, h}, {2, 2 * h, 2 * inter}, {1, inter, h}};
  double layer = 0, layer_flops = 0, layer_bytes = 0;
  for (const auto& mod : modules) {
    const double slices = mod[0], in = mod[1], out = mod[2];
    // Shrink: x (t x in) times every adapter's A (r x in) per slice -> t x (r * slices); reads
    // the inputs, the distinct adapters' A once, writes the rank-r buffer.
    const double shrink_bytes = (l * r * in + t * in + t * r * slices) * d;
    // Expand: the buffer times B (out x r) per slice, added into the projection's output (read
    // and written).
    const double expand_bytes = (l * r * out + t * r * slices + 2 * t * out) * d;
    layer += op_.gemm_from_parts(op_.gemm_compute(t, r, in), op_.gemm_bytes_time(shrink_bytes)) +
             op_.gemm_from_parts(op_.gemm_compute(t, out, r), op_.gemm_bytes_time(expand_bytes));
    layer_flops += 2 * t * r * (in + out);
    layer_bytes += shrink_bytes + expand_bytes;
  }
  const double layers = m.num_layers;
  if (flops != nullptr) *flops += layer_flops * layers;
  if (bytes != nullptr) *bytes += layer_bytes * layers;
  return layer * layers;
}

StepCostBreakdown RooflineCostModel::breakdown(const StepFeatures& f) const {
  return parallel_.is_default() ? shard_breakdown(f) : parallel_breakdown(f);
}

StepCostBreakdown RooflineCostModel::parallel_breakdown(const StepFeatures& f) const {
  const std::int32_t pp = parallel_.pipeline;
  // Micro-batches: never more than the step has tokens; each count divided, rounded up.
  const std::int64_t mb =
      std::max<std::int64_t>(1, std::min<std::int64_t>(parallel_.microbatches, f.num_tokens));
  auto part = [mb](std::int64_t x) { return (x + mb - 1) / mb; };
  StepFeatures one_f;
  one_f.num_tokens = part(f.num_tokens);
  one_f.prefill_tokens = part(f.prefill_tokens);
  one_f.prefill_pairs = part(f.prefill_pairs);
  one_f.prefill_context_tokens = part(f.prefill_context_tokens);
  one_f.decode_tokens = part(f.decode_tokens);
  one_f.decode_pairs = part(f.decode_pairs);
  one_f.decode_context_tokens = part(f.decode_context_tokens);
  one_f.num_sampled = part(f.num_sampled);
  one_f.prefill_blocks = part(f.prefill_blocks);
  one_f.decode_blocks = part(f.decode_blocks);
  one_f.draft_tokens = part(f.draft_tokens);
  one_f.prompt_logprob_rows = part(f.prompt_logprob_rows);
  one_f.lora_tokens = part(f.lora_tokens);
  one_f.num_loras = f.num_loras;
  // One micro-batch through all layers of one GPU's shard.
  const StepCostBreakdown one = shard_breakdown(one_f);
  const ModelConfig& m = shard_;
  const double layers = m.num_layers;
  const double t = static_cast<double>(one_f.num_tokens);
  // Hidden states of the micro-batch: what every all-reduce and stage send moves.
  const double hidden_bytes = t * m.hidden_size * m.dtype_bytes;
  const double all_reduce = parallel_.tp_all_reduce.seconds(hidden_bytes);
  // A stage hands the next its hidden states and the residual (vLLM's IntermediateTensors).
  const double send = parallel_.stage_send.seconds(2 * hidden_bytes);
  const double embedding =
      op_.elementwise(t * 2 * m.hidden_size * m.dtype_bytes, ElementwiseKind::kResidual);
  const double per_layer = (one.gemm + (one.elementwise - embedding) + one.prefill_attention +
                            one.decode_attention + one.lora) /
                               layers +
                           2 * all_reduce;
  double slowest = 0;
  for (std::int32_t s = 0; s < pp; ++s) {
    double stage = stage_layers(m.num_layers, pp, s) * per_layer;
    if (s == 0) stage += embedding + all_reduce;
    if (s == pp - 1) stage += one.lm_head;
    if (s + 1 < pp) stage += send;
    slowest = std::max(slowest, stage);
  }
  StepCostBreakdown b;
  b.gemm = one.gemm;
  b.elementwise = one.elementwise;
  b.prefill_attention = one.prefill_attention;
  b.decode_attention = one.decode_attention;
  b.lm_head = one.lm_head;
  b.lora = one.lora;
  b.communication = (2 * layers + 1) * all_reduce + (pp - 1) * send;
  b.pipeline = static_cast<double>(mb - 1) * slowest;
  const double scale = static_cast<double>(mb) * parallel_.tensor;
  b.flops = one.flops * scale;
  b.bytes = one.bytes * scale;
  // Block moves and host time: as on one GPU, with each GPU moving its share in parallel.
  StepFeatures moves;
  moves.swap_out_blocks = f.swap_out_blocks;
  moves.swap_in_blocks = f.swap_in_blocks;
  moves.copy_blocks = f.copy_blocks;
  const StepCostBreakdown mv = shard_breakdown(moves);
  b.swap = mv.swap;
  b.copy = mv.copy;
  b.bytes += mv.bytes * static_cast<double>(parallel_.num_gpus());
  b.overhead = host_seconds(f);
  return b;
}

StepCostBreakdown RooflineCostModel::shard_breakdown(const StepFeatures& f) const {
  StepCostBreakdown b;
  if (f.num_tokens > 0) {
    const double t = static_cast<double>(f.num_tokens);
    const double flops = gemm_flops_per_token_ * t;
    double bytes = gemm_weight_bytes_ + gemm_act_bytes_per_token_ * t;
    if (t >= kAwqDenseTokens) bytes += awq_dense_bytes_;
    if (expert_weight_bytes_ > 0) {
      bytes += touched_at(f.num_tokens) * expert_weight_bytes_;
    }
    b.gemm = gemm_at(f.num_tokens);
    // Elementwise kernels do a few FLOPs per byte: memory-bound at any token count.
    const double ew_bytes = elementwise_bytes_per_token_ * t;
    b.elementwise = elementwise_at(f.num_tokens);
    b.flops += flops;
    b.bytes += bytes + ew_bytes;
  }
  // Attention of one kind: FLOPs by pairs; bytes = KV read of the context, KV written for the
  // new tokens, Q read and O written.
  auto attention = [&](std::int64_t tokens, std::int64_t pairs, std::int64_t context) {
    if (tokens == 0) return 0.0;
    const double flops = attention_flops_per_pair_ * static_cast<double>(pairs);
    const double bytes = kv_bytes_per_token_ * static_cast<double>(context + tokens) +
                         qo_bytes_per_token_ * static_cast<double>(tokens);
    b.flops += flops;
    b.bytes += bytes;
    return roofline(flops, s_per_attention_flop_, bytes, s_per_hbm_byte_);
  };
  b.prefill_attention = attention(f.prefill_tokens, f.prefill_pairs, f.prefill_context_tokens);
  b.decode_attention = attention(f.decode_tokens, f.decode_pairs, f.decode_context_tokens);
  // Block-table indirection: a latency per KV block visited per layer, on top of the roofline
  // (the lookups and gathers stall the kernel; they add no FLOPs or bytes worth counting).
  if (s_per_block_ > 0) {
    b.prefill_attention += static_cast<double>(f.prefill_blocks) * s_per_block_;
    b.decode_attention += static_cast<double>(f.decode_blocks) * s_per_block_;
  }
  // Logits for every sampled sequence, for every draft token a verify pass checks and for every
  // prompt row whose log probabilities were asked for.
  if (const std::int64_t rows = f.num_sampled + f.draft_tokens + f.prompt_logprob_rows; rows > 0) {
    const double s = static_cast<double>(rows);
    const double flops = lm_head_flops_per_seq_ * s;
    const double bytes = lm_head_weight_bytes_ + lm_head_act_bytes_per_seq_ * s;
    b.lm_head = lm_head_at(rows);
    b.flops += flops;
    b.bytes += bytes;
  }
  if (f.lora_tokens > 0) [[unlikely]] {
    b.lora = lora_seconds(f.lora_tokens, f.num_loras, &b.flops, &b.bytes);
  }
  const double bb = static_cast<double>(block_bytes_);
  b.swap = static_cast<double>(f.swap_out_blocks + f.swap_in_blocks) * bb * s_per_host_byte_;
  // A copy reads and writes each block in device memory.
  const double copy_bytes = 2.0 * static_cast<double>(f.copy_blocks) * bb;
  b.copy = copy_bytes * s_per_hbm_byte_;
  b.bytes += copy_bytes;
  b.overhead = host_seconds(f);
  return b;
}

StepCostBreakdown RooflineCostModel::breakdown(const StepPlan& plan) const {
  StepFeatures f = StepFeatures::from_plan(plan);
  if (s_per_block_ > 0) f.add_kv_blocks(plan, block_size_);
  return breakdown(f);
}

TimeNs RooflineCostModel::step_time(const StepPlan& plan) const {
  return seconds_to_ns(breakdown(plan).total());
}

TimeNs RooflineCostModel::swap_time(std::int64_t num_blocks) const {
  return seconds_to_ns(static_cast<double>(num_blocks) * static_cast<double>(block_bytes_) *
                       s_per_host_byte_);
}

}  // namespace servelab
