// RooflineCostModel: step time from FLOPs over peak and bytes over bandwidth, per operator.
//
// Per layer, each of the four GEMM launches (fused QKV, O, fused gate/up, down) and the LM head
// is priced by OperatorTime::gemm; a mixture of experts replaces the MLP's two with the router,
// the shared expert's launches and two grouped launches over the routed experts, which read the
// weights of experts_touched(tokens) experts (moe_layer_gemm_seconds); (compute and memory time
// combined, plus a per-launch time), the elementwise launches (two fused residual-add + RMSNorm,
// RoPE, SiLU-mul, and the embedding gather) by OperatorTime::elementwise; attention is
//   max(FLOPs / (peak_flops * attention_efficiency), bytes / (hbm_bandwidth * memory_efficiency));
// plus, when hardware.block_indirection_s > 0, that time per KV block each entry's attention
// visits per layer (ceil(context / block_size) blocks: smaller blocks, more lookups);
// the step adds swap (bytes over the host link), copy-on-write copies (bytes over HBM) and host
// time (a fixed part per step and a part per sampled sequence). Every formula, with a worked
// example, is in docs/cost-model.md.
//
// Model parallelism (ParallelConfig, serving/parallel_config.h): with tensor parallelism every
// operator is priced on one GPU's shard of the model (tensor_shard: its heads, KV heads,
// intermediate width and vocabulary rows), and each layer adds two all-reduces of the step's
// hidden states (after attention and after the MLP) and the embedding one more; with expert
// parallelism (parallel.expert) a mixture of experts' routed launches are instead those of the
// busiest GPU of the group, whole experts at their full width (busiest_expert_load). With pipeline
// parallelism the batch is cut into micro-batches (each count divided by microbatches, rounded
// up); stage s takes t_s = its layers' share of the per-layer time, plus the embedding (first
// stage), the LM head (last stage) and the send to the next stage; the step takes
//   sum_s t_s + (microbatches - 1) * max_s t_s          (GPipe: Huang et al., 2019)
// plus swap, copy-on-write and host time. LoRA adapters (lora_rank > 0) add, per layer, a shrink
// and an expand launch for each of the four projections over the tokens under an adapter, each
// reading the step's distinct adapters' weights once (Punica's SGMV; lora_seconds). On one GPU (the
// default) none of this applies and the step costs what it always did.
//
// The GEMM and elementwise time depends on the step's token count only, and the LM head's on the
// sampled sequences only: both are tabulated (up to kTableTokens and kTableSeqs; larger steps
// are computed directly), each entry the first time a step reads it (sim/memo_table.h), so
// step_time() is a pass over the plan's totals, two table reads and a few multiplications; it
// allocates nothing. Its results do not depend on what was read before; the object is safe to
// share between threads (the tables' entries are atomics).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "serving/hardware_config.h"
#include "serving/model_config.h"
#include "serving/parallel_config.h"
#include "sim/cost_model.h"
#include "sim/memo_table.h"
#include "sim/operator_time.h"

namespace servelab {

class RooflineCostModel final : public CostModel {
 public:
  // Throws ConfigError when model or hardware fail validate() (hardware.tensor_parallel must be
  // 1), block_size < 1, the model does not split over parallel.tensor GPUs, or its expert
  // parallelism is one apply_expert_parallel refuses.
  // `lora_rank` > 0: LoRA is on (serving.lora) and every adapter is priced at this rank (vLLM's
  // max_lora_rank: its kernels run over adapters padded to it); 0: no LoRA term.
  RooflineCostModel(ModelConfig model, HardwareConfig hardware, std::int32_t block_size,
                    ParallelConfig parallel = {}, std::int32_t lora_rank = 0);

  TimeNs step_time(const StepPlan& plan) const override;
  TimeNs swap_time(std::int64_t num_blocks) const override;
  std::string_view name() const override { return "roofline"; }

  // Seconds per operator; step_time(plan) == seconds_to_ns(breakdown(plan).total()). The
  // features overload charges block indirection for features.prefill_blocks / decode_blocks
  // (StepFeatures::add_kv_blocks; the plan overload fills them when the charge is nonzero).
  StepCostBreakdown breakdown(const StepPlan& plan) const override;
  StepCostBreakdown breakdown(const StepFeatures& features) const;

  const ModelConfig& model() const { return model_; }
  // One GPU's shard of the model (the model itself when parallel.tensor == 1).
  const ModelConfig& shard() const { return shard_; }
  const HardwareConfig& hardware() const { return hardware_; }
  const ParallelConfig& parallel() const { return parallel_; }
  std::int32_t block_size() const { return block_size_; }
  // K and V of block_size tokens that one GPU holds (all layers on one GPU; the largest stage's
  // share under model parallelism): what one GPU swaps or copies per block, in parallel with the
  // others.
  std::int64_t block_bytes() const { return block_bytes_; }

  // Seconds of all layers' GEMMs and elementwise kernels of one GPU's shard for a step of
  // `tokens` tokens, and of the LM head for `seqs` sampled sequences (what the tables hold).
  double gemm_seconds(std::int64_t tokens) const;
  double elementwise_seconds(std::int64_t tokens) const;
  double lm_head_seconds(std::int64_t seqs) const;
  // Mixture of experts: the expected number of distinct experts (of each layer) that a step of
  // `tokens` tokens is routed to, each token choosing expert e with probability q_e
  // (serving/expert_routing.h) independently of the others: sum_e 1 - (1 - q_e)^tokens, which
  // is E (1 - (1 - k/E)^tokens) for a uniform router. k for one token, E in the limit; 0 for a
  // dense model. Whose weights a step reads (docs/cost-model.md, "Mixture of experts").
  double experts_touched(std::int64_t tokens) const;
  // Expert parallelism (parallel.expert): the routed experts' rows (token, expert pairs) and
  // distinct experts of the busiest GPU of a tensor-parallel group in a step of `tokens`
  // tokens: on each GPU r the expected rows tokens * sum q_e and experts sum_e 1 - (1 -
  // q_e)^tokens over its experts (its expert copies, q_e shared among an expert's copies, with
  // redundant experts), each plus z_n standard deviations (z_n: the expected largest
  // of n standard normals, n = parallel.tensor; the experts capped at the GPU's), the GPU whose
  // two grouped launches take longest. Without expert parallelism every GPU has all tokens x
  // experts_per_token rows and experts_touched(tokens) experts (each 1/tensor of its width).
  struct ExpertLoad {
    double rows = 0;
    double experts = 0;
  };
  ExpertLoad busiest_expert_load(std::int64_t tokens) const;
  // Seconds of the LoRA shrink and expand launches of all layers of the shard for `tokens`
  // tokens under `loras` distinct adapters (docs/cost-model.md "LoRA adapters"); 0 when tokens
  // is 0 or LoRA is off. Adds the launches' FLOPs and bytes to *flops and *bytes when given.
  double lora_seconds(std::int64_t tokens, std::int64_t loras, double* flops = nullptr,
                      double* bytes = nullptr) const;
  std::int32_t lora_rank() const { return lora_rank_; }
  // Seconds to bring one adapter of rank `rank` into a LoRA slot, as vLLM copies it from its CPU
  // cache: one GPU's share of it (serving/kv_capacity.h lora_slot_bytes of the shard and the
  // largest stage's layers; the GPUs copy in parallel) over the host link at
  // host_link_bandwidth x host_link_efficiency (docs/cost-model.md "LoRA adapters").
  double lora_load_seconds(std::int32_t rank) const;

  // Weight quantization (model.quantization = awq, vLLM's legacy kernel; awq_marlin has none of
  // these): the fused kernel's tile of tokens, the operations to dequantize one int4 weight
  // (unpack, subtract the zero point, scale, convert), and the token count from which the matrix
  // is dequantized once and multiplied densely (vLLM's AWQ layer switches at 256 tokens).
  static constexpr double kAwqTileTokens = 16;
  static constexpr double kAwqDequantOps = 4;
  static constexpr double kAwqDenseTokens = 256;

  static constexpr std::int64_t kTableTokens = 16384;
  static constexpr std::int64_t kTableSeqs = 4096;

 private:
  // The step on one GPU's shard, all layers, no communication.
  StepCostBreakdown shard_breakdown(const StepFeatures& features) const;
  StepCostBreakdown parallel_breakdown(const StepFeatures& features) const;
  // Host time: the per-step and per-sampled-sequence overheads, 0 for a step that does nothing.
  double host_seconds(const StepFeatures& f) const {
    const bool empty =
        f.num_tokens == 0 && f.swap_out_blocks == 0 && f.swap_in_blocks == 0 && f.copy_blocks == 0;
    return empty ? 0.0
                 : hardware_.step_overhead_s +
                       hardware_.sequence_overhead_s * static_cast<double>(f.num_sampled);
  }
  // All four GEMM launches of one layer of the shard, weights stored as model.quantization.
  double quantized_gemm_seconds(double tokens, const double (&shapes)[4][2]) const;
  // The compute part of a launch whose weights are stored as model.quantization: at the FP8
  // rate under W8A8, at the dtype's otherwise.
  double quantized_compute(double rows, double out, double in) const {
    return w8a8_ ? op_.gemm_compute_fp8(rows, out, in) : op_.gemm_compute(rows, out, in);
  }
  // experts_touched, gemm_seconds, elementwise_seconds (by tokens) and lm_head_seconds (by
  // sampled rows), through their tables (computed directly past a table's end).
  double touched_at(std::int64_t t) const {
    return experts_touched_table_.get(t, [this](std::int64_t x) { return experts_touched(x); });
  }
  double gemm_at(std::int64_t t) const {
    return gemm_table_.get(t, [this](std::int64_t x) { return gemm_seconds(x); });
  }
  double elementwise_at(std::int64_t t) const {
    return elementwise_table_.get(t, [this](std::int64_t x) { return elementwise_seconds(x); });
  }
  double lm_head_at(std::int64_t rows) const {
    return lm_head_table_.get(rows, [this](std::int64_t x) { return lm_head_seconds(x); });
  }
  // All GEMM launches of one layer of a mixture-of-experts shard.
  double moe_layer_gemm_seconds(double tokens) const;
  // The two grouped launches of the routed experts (gate/up, down) over `rows` rows reading
  // `experts` experts of width `inter`, as (compute, memory) seconds each.
  struct LaunchParts {
    double compute, memory;
  };
  void routed_launches(double rows, double experts, double inter, LaunchParts (&out)[2]) const;
  // Their time as moe_layer_gemm_seconds combines launches.
  double routed_seconds(const LaunchParts (&parts)[2]) const;

  ModelConfig model_;
  ModelConfig shard_;
  HardwareConfig hardware_;
  ParallelConfig parallel_;
  std::int32_t block_size_;
  std::int64_t block_bytes_;
  std::int32_t lora_rank_;

  OperatorTime op_;
  // model.quantization fp8 on a GPU with FP8 tensor cores: the quantized launches multiply at
  // the FP8 rate (W8A8). fp8_inputs_: and, in a dense model, read their inputs in one byte,
  // quantized by the kernels before them (docs/cost-model.md); a mixture of experts keeps its
  // activations in dtype (fused_moe quantizes its input in a launch of its own, about the bytes
  // saved).
  bool w8a8_ = false;
  bool fp8_inputs_ = false;
  // gemm_seconds + elementwise_seconds by token count, lm_head_seconds by sequences;
  // experts_touched by token count (a mixture of experts only: a skewed router's is a sum over
  // every expert).
  MemoTable gemm_table_, elementwise_table_, lm_head_table_, experts_touched_table_;

  // Seconds per FLOP or per byte at the effective rates.
  double s_per_attention_flop_;
  double s_per_hbm_byte_;
  double s_per_host_byte_;
  // Block-table indirection per KV block visited, all layers of the shard (0: not charged).
  double s_per_block_;

  // Work per unit, folded from the model's shape.
  double gemm_flops_per_token_;  // 2 * active linear params * layers
  double gemm_weight_bytes_;     // linear weights of all layers as stored (read once a
                                 // step), the routed experts' excepted
  double expert_weight_bytes_;   // one routed expert of every layer (0: dense)
  // The legacy AWQ kernel from kAwqDenseTokens tokens on: the dequantized matrices written in
  // dtype and read again by the dense GEMM, all layers (0 for any other storage).
  double awq_dense_bytes_ = 0;
  // Routing (serving/expert_routing.h): log(1 - q_e) per expert (-inf where q_e = 1), whether
  // the router is uniform (the closed form applies), and under expert parallelism each GPU's
  // expert copies, the sums of q and q (1 - q) over them, and z_n.
  std::vector<double> expert_log_miss_;
  bool uniform_routing_ = true;
  // Under expert parallelism, log(1 - q) of each expert copy on each GPU.
  std::vector<std::vector<double>> rank_copy_log_miss_;
  std::vector<double> rank_q_, rank_q_var_;
  double imbalance_z_ = 0;
  double gemm_act_bytes_per_token_;     // GEMM inputs read and outputs written per token
  double elementwise_bytes_per_token_;  // norms, residual adds, RoPE, SiLU-mul, embedding
  double attention_flops_per_pair_;     // 4 * head_dim * num_heads * layers
  double kv_bytes_per_token_;           // 2 * layers * kv_heads * head_dim * KV dtype bytes
  double qo_bytes_per_token_;           // Q read and O written by attention, all layers
  double lm_head_flops_per_seq_;        // 2 * hidden * vocab
  double lm_head_weight_bytes_;         // hidden * vocab * dtype bytes
  double lm_head_act_bytes_per_seq_;    // hidden read + vocab logits written
};

}  // namespace servelab
