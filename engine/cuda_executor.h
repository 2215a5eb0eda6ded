// CudaExecutor: the GPU engine backend. Runs StepPlans exactly as CpuExecutor does (same plan
// semantics, same block ids, same sampling streams) with bf16 weights and activations, a bf16 or
// fp8 KV cache (options.kv_format) and fp32 accumulation: cuBLAS for the projections, kernels/ for
// everything else. Compiled only when the build has CUDA (SERVELAB_HAVE_CUDA); see docs/engine.md.
//
// Device state:
//   - weights (uploaded from LlamaWeights, or generated on the device from a seed) in bf16, with
//   q/k/v packed into one [q + 2 kv, hidden] matrix and gate/up into one
//     [2 * intermediate, hidden] matrix (one GEMM each); norm weights and q/k/v biases in fp32;
//   - the KV cache: ONE allocation of num_blocks() blocks in the block-major layout of
//     kernels/kv_layout.h ([block][layer][K|V][slot][kv_head][head_dim]), so a block move is one
//     contiguous copy; swap space and the KV offload host tier (num_tier_slots; plans' tier
//     stores and loads, core/step_plan.h) are pinned, device-mapped host memory in the same
//     layout. With
//     kv_format fp8 (e4m3 or e5m2) an element is one byte holding fp8(x / scale) with the
//     per-tensor k_scale / v_scale (CpuExecutor's fp8 contract, engine/cpu_executor.h, without
//     compute_kv_scales: the scales are the options'); the attention kernels widen the codes to
//     bf16 exactly and apply the scales (kernels/attention.h PagedKv);
//   - the residual stream in fp32, activation buffers sized for max_num_tokens (grown on
//     demand), a RoPE cos/sin table for max_model_len positions.
//
// execute(plan): block moves in CpuExecutor's order (swap_out; the offload tier's stores and
// loads interleaved as TierLoad::stores_before says, a load staged through a device buffer so
// that it reads its slot before the stores after it and writes its block after them; swap_in;
// copies), each phase one batched copy_blocks launch (split where a destination repeats), then the
// forward pass over all tokens of the step: embedding; per layer RMSNorm, QKV GEMM, then one kernel
// for bias + RoPE + the KV write of ALL entries (kernels/rope.h qkv_rope_kv_write; or, with
// fused_qkv_rope = false, the unfused qkv_rope + kv_write through bf16 scratch rows), attention
// (decode kernel for one-token entries, prefill kernel for the rest, both reading K/V through the
// block tables), O GEMM accumulated into the residual, RMSNorm, gate/up GEMM, SiLU-mul, down GEMM
// accumulated into the residual; then for sampling entries the final norm, LM head and sampling
// (each request's logit_bias and penalties first, kernels::adjust_logits, and the tokens
// min_tokens keeps out masked: core/stop_conditions.h suppressed_tokens, as CpuExecutor; a step
// with a request that has its own sampling parameters samples each row with its own temperature,
// top_p, top_k and min_p, kernels::sample_rows). The step's metadata goes to the device in one
// copy; one synchronisation at the end (the sampled tokens are needed on the host). duration_ns is
// the wall time of the call.
//
// Speculative decoding (options.speculative, method ngram): as CpuExecutor (engine/
// cpu_executor.h item 4), with the verification batched: a verify entry's d draft tokens are its
// positions after the known tokens, the final norm and LM head run on all of its 1 + d rows and
// every row is sampled at once, each from the stream of the output index it produces (masked as
// min_tokens says at that index); then on the host a draft is accepted while it equals the token
// sampled at the position before it, and the first mismatch (or the bonus token) is the entry's
// token. Rows after the first mismatch are sampled and discarded. Each entry that sampled gets
// CpuExecutor's n-gram proposal (propose_after_step, engine/ngram_proposer.h). Verify steps are
// not decode-only, so they run eagerly.
// LoRA (options.enable_lora): as CpuExecutor (engine/cpu_executor.h), each entry under adapter
// a adds scaling * (X A^T) B^T of a to its rows of the q, k, v, o, gate, up and down projections.
// Adapters are make_lora_adapter's, generated on the device from its draws (lora_pair_draw;
// read_lora shows them) in bf16 into one of max_loras slots of max_lora_rank, allocated before
// the KV cache is sized (as vLLM's; core/lora_slots.h: a step's adapters are placed before it
// runs, an absent one into a free slot or the least recently used one's; kernels/lora_kernel.h
// LoraShape packs it at its own rank, B pre-scaled). The deltas are added after the
// base projection onto a column slice of the fused QKV or gate/up output, or into the residual
// for o and down. With options.lora_kernel kGather (default) the rows of short segments (at most
// kLoraGatherMaxRows consecutive rows under one adapter: decode rows, short chunks) go through the
// gather kernels (kernels/lora.h: a shrink and an expand per group of projections sharing an
// input, whatever the number of adapters, i.e. 8 launches a layer), and each longer segment takes
// two cuBLAS GEMMs per projection (shrink, then expand with beta 1); kCublas sends every segment
// to cuBLAS. An adapted step computes silu_mul into `act` for down's delta instead of the skinny
// kernel's fused SwiGLU. A decode-only step sends every adapted row to the gather kernels under
// kGather and takes the graph path like any decode step (graphs keyed by DecodeGraphKey::lora:
// one row-table entry per bucket row, rank 0 for unadapted and padding rows, so the batch's
// adapters and ranks are inputs of the graph, not part of it); under kCublas it runs eagerly.
// Async scheduling (StepPlan::pipelined): as CpuExecutor, a one-token decode that starts one past
// its request's known tokens takes the token the previous plan sampled for it
// (engine/previous_tokens.h; here from the host copy execute() already waits for), and a plan
// whose such entry has no previous token is refused whole.
// CUDA graphs (cuda_graphs, default on): a decode-only step (every entry one token, no prefill)
// of B <= max_num_seqs sequences runs its embedding and layers as one replayed graph, captured
// per DecodeGraphKey (kernels/decode_graph_plan.h: the batch-size bucket >= B, the block-table
// width (at least graph_table_bytes' worth for an unsplit batch) and the split-K plan), with the
// inputs padded to the bucket (padding rows write no KV) and copied into fixed device buffers
// before the launch. The first step of a key runs eagerly (padded; it also warms cuBLAS up), is
// captured, then replayed. Block moves and the final norm, LM head and sampling stay eager; mixed
// and prefill steps are all eager. cuBLAS gets a fixed 32 MiB workspace (in both modes) so that
// capture is legal. Graph replay computes exactly the padded eager pass (pad_decode_steps), bit for
// bit; the unpadded eager pass can differ in the last bits where cuBLAS picks another kernel for
// the other row count. A capture that fails disables graphs for the executor (one message on
// stderr) and the step's result comes from the eager pass.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/backend.h"
#include "core/prefill_launch.h"
#include "core/speculative_config.h"
#include "engine/cpu_executor.h"
#include "engine/llama_weights.h"
#include "engine/lora_weights.h"
#include "engine/previous_tokens.h"
#include "kernels/attention_plan.h"
#include "kernels/decode_graph_plan.h"
#include "kernels/float_formats.h"
#include "kernels/gemm_kernel.h"
#include "kernels/gemm_lt.h"
#include "kernels/lora_kernel.h"
#include "kernels/prefill_kernel.h"

namespace servelab {

struct CudaExecutorOptions {
  std::int32_t block_size = 16;
  std::int32_t num_blocks = 0;          // device KV blocks; 0: as many as memory allows
  double gpu_memory_utilization = 0.9;  // fraction of device memory the process may hold
  std::int32_t num_host_blocks = 0;     // pinned swap space
  std::int32_t num_tier_slots = 0;      // KV offload host tier, pinned (0: none)
  std::int32_t max_num_tokens = 8192;   // tokens per step the buffers are sized for
  std::int32_t max_num_seqs = 256;      // sampled rows per step the buffers are sized for
  std::int32_t max_model_len = 8192;    // longest context (RoPE table rows)
  SamplingParams sampling;
  bool keep_logits = false;  // copy each step's logits back (tests, hf_compare); a token a
                             // request may not draw yet (min_tokens) is -inf there
  // The attention kernels: the new ones by default, the earlier ones kept to fall back to without
  // rebuilding (environment: SERVELAB_CUDA_DECODE, SERVELAB_CUDA_PREFILL, engine/gpu_switches.h).
  kernels::DecodeKernel decode_kernel = kernels::kDefaultDecodeKernel;  // attention_plan.h
  // Unset: kernels::default_prefill_kernel(kv_format) (wgmma over bf16 where built, else fa2).
  std::optional<kernels::PrefillKernel> prefill_kernel;  // prefill_kernel.h
  // Head packing: a prefill launch whose every entry has at most 16 queries (a short chunk after
  // a cached prefix, a speculative verify entry) runs the fa2_gqa kernel (4 query heads of one
  // GQA group a CTA, K/V read once for them; kernels/prefill_kernel.h) instead of
  // prefill_kernel, where the model's GQA group is a multiple of 4 (core/prefill_launch.h
  // prefill_launch_shape). Environment: SERVELAB_CUDA_PREFILL_PACK (engine/gpu_switches.h).
  bool prefill_pack_heads = true;
  // The linear layers of small steps: cuBLAS, the skinny kernel (at most 32 tokens), cuBLASLt
  // with an algorithm timed per shape for token counts equal to a decode graph bucket, or (auto)
  // for those counts the fastest of the three timed per shape (kernels/gemm_lt.h: timed on a
  // shape's first eager pass, which the warm-up's decode steps are; its flush and scratch
  // buffers, about twice the L2, are allocated before the KV cache is sized: inside
  // gpu_memory_utilization's budget).
  // Environment: SERVELAB_CUDA_GEMM (kernels/gemm_kernel.h). Other steps always run cuBLAS.
  kernels::GemmKernel gemm_kernel = kernels::GemmKernel::kCublas;
  // Programmatic dependent launch of the decode-step kernels other than cuBLAS's (norms, RoPE and
  // KV write, SiLU, decode attention, the skinny GEMM; kernels/programmatic_launch.h): each may
  // be scheduled while the one before it drains. The same bits either way (environment:
  // SERVELAB_CUDA_PDL).
  bool programmatic_launch = false;
  // Decode-only steps as CUDA graphs per batch-size bucket (environment: SERVELAB_CUDA_GRAPHS,
  // engine/gpu_switches.h).
  bool cuda_graphs = true;
  // With cuda_graphs off: run decode-only steps eagerly with exactly the padded launches a
  // graph would replay (tests compare the two bit for bit). No effect with cuda_graphs on.
  bool pad_decode_steps = false;
  // Block-table bytes a decode graph step may stage (kernels/decode_graph_plan.h
  // decode_graph_min_table_width): a bucket's unsplit graphs are captured with at least the
  // widest table that fits, so contexts growing within it never re-capture. 0: the width follows
  // the contexts (the smallest power of two of blocks).
  std::int64_t graph_table_bytes = kernels::kDecodeGraphTableBytes;
  // Bias + RoPE + KV write in one kernel; false: the unfused qkv_rope + kv_write pair through
  // bf16 scratch rows (environment: SERVELAB_CUDA_FUSED_QKV).
  bool fused_qkv_rope = true;
  // The KV cache's element format: kBf16, kFp8E4m3 or kFp8E5m2 (fp8: one byte an element, so a
  // block takes half the bytes and about twice the blocks fit; needs the pipelined decode kernel
  // and an fa2 prefill kernel, fa2 or fa2_128: cuda_kv_kernels_refusal in gpu_switches.h), with
  // vLLM's per-tensor scales (fp8 only).
  kernels::FloatFormat kv_format = kernels::FloatFormat::kBf16;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  // LoRA (as CpuExecutorOptions): entries whose request runs under adapter a > 0 add its
  // deltas; adapters are made from (lora_seed, a, rank) when a step places them in a slot.
  bool enable_lora = false;
  std::uint64_t lora_seed = 0;
  // vLLM's LoRA limits (serving.lora): max_loras adapter slots of max_lora_rank elements are
  // allocated with the weights, before the KV cache takes what is left (core/lora_slots.h); a
  // step under more adapters, or an adapter of a higher rank, is refused. With enable_lora only.
  std::int32_t max_loras = 1;
  std::int32_t max_lora_rank = 16;
  // How the deltas are computed: the gather kernels for short segments (default) or cuBLAS GEMMs
  // per segment (environment: SERVELAB_CUDA_LORA; kernels/lora_kernel.h).
  kernels::LoraKernel lora_kernel = kernels::LoraKernel::kGather;
  // Speculative decoding: method ngram only (as CpuExecutor). Sampled-row buffers are sized for
  // max_num_seqs x (1 + num_speculative_tokens) rows (at most max_num_tokens).
  SpeculativeConfig speculative;
};

// Counters of the CUDA-graph path since construction (tests, benchmarks).
struct CudaGraphStats {
  std::int64_t captures = 0;       // graphs captured and instantiated
  std::int64_t replays = 0;        // graph launches (the first launch after a capture counts)
  std::int64_t padded_eager = 0;   // padded decode passes run eagerly (warm-ups, pad_decode_steps)
  std::int64_t eager_steps = 0;    // forward passes outside the graph path (prefill, mixed, large)
  std::int32_t cached_graphs = 0;  // graphs held now
  // Graphs held at most (least recently used evicted past it): room for a plain and a LoRA
  // graph of every bucket, what the warm-up captures, and 48 more.
  std::int32_t graph_capacity = 0;
  bool disabled = false;  // a capture failed: graphs are off for this executor
};

class CudaExecutor : public Backend {
 public:
  // Uploads the weights (converted to bf16; norms and biases stay fp32), allocates buffers,
  // then the KV cache (options.num_blocks, or the blocks fitting in total *
  // gpu_memory_utilization minus what the process holds) and swap space. `weights` is not
  // referenced after the constructor returns.
  // Throws std::invalid_argument for bad options (as CpuExecutor, plus head_dim not 64/128,
  // unsupported shapes, a kv_format the cache does not take, fp8 with a fallback attention
  // kernel) and std::runtime_error for CUDA errors or when fewer than 2 blocks fit.
  CudaExecutor(const LlamaWeights& weights, const CudaExecutorOptions& options);
  // The same with LlamaWeights::random(config, seed) generated directly on the device, one
  // kernel launch per tensor (kernels/random_fill.h): no fp32 host copy is ever made, and every
  // weight equals the host one rounded to bf16 (fp32 norms and biases: equal). Additionally
  // throws ConfigError when config.model.validate() does.
  CudaExecutor(const LlamaConfig& config, std::uint64_t seed, const CudaExecutorOptions& options);
  ~CudaExecutor() override;
  CudaExecutor(const CudaExecutor&) = delete;
  CudaExecutor& operator=(const CudaExecutor&) = delete;

  std::string_view name() const override { return "cuda"; }
  // Throws std::invalid_argument for a malformed plan (before changing any state), exactly the
  // plans CpuExecutor refuses, and std::runtime_error on a CUDA error.
  StepResult execute(const StepPlan& plan) override;

  std::int32_t num_blocks() const;
  std::int64_t block_bytes() const;            // K+V of one block across all layers, in kv_format
  const CudaExecutorOptions& options() const;  // prefill_kernel set (cuda_prefill_kernel)
  CudaGraphStats graph_stats() const;
  // With gemm_kernel kCublasLt or kAuto: the shapes this executor ran through the tuned choice
  // and what the process chose for each (kernels/gemm_lt.h); empty otherwise.
  std::vector<kernels::LtChoice> gemm_lt_choices() const;
  // Adapters generated into a LoRA slot so far (each placement that was not resident; 0 without
  // LoRA): with max_loras at least the adapters in use, each is generated once.
  std::int64_t lora_loads() const;
  // With keep_logits: the last execute()'s logits per plan entry (empty for non-sampling ones).
  const std::vector<std::vector<float>>& last_logits() const;
  // Tests: the device copy of weight `name` (a tensor_names() name), widened to float (bf16
  // matrices; fp32 norm weights and biases as they are). Throws std::out_of_range for a name
  // the model does not have.
  std::vector<float> read_weight(const std::string& name) const;
  // Tests: adapter `id`'s A [rank][in] (b false) or scaled B [out][rank] (b true) of (layer,
  // target) on the device, widened to float. Throws std::out_of_range for an adapter in no slot
  // (never placed, or evicted since) or a layer the model does not have.
  std::vector<float> read_lora(std::uint32_t id, std::int32_t layer, LoraTarget target,
                               bool b) const;
  // Tests: one layer's K or V plane of a device (or, host = true, swap-space) block as stored
  // (bf16: 2 bytes an element, little-endian; fp8: 1), [slot][kv_head][head_dim].
  std::vector<std::uint8_t> read_block(bool host, std::int32_t layer, bool value,
                                       std::int32_t block) const;
  // Tests: the same for slot `slot` of the KV offload host tier.
  std::vector<std::uint8_t> read_tier_slot(std::int32_t layer, bool value, std::int32_t slot) const;
  // Wall time spent on the offload tier's stores and loads so far (each step with tier moves
  // waits for them: the figure is the copies' own time).
  std::int64_t tier_copy_ns() const;
  // How this executor cuts prefill attention into CTAs (the configured kernel's tiles and
  // resident slots, and head packing when it applies): what `engine profile` records for the
  // calibrated cost model (`# prefill_launch:`).
  const PrefillLaunch& prefill_launch() const;
  // Steps whose prefill attention ran packed (prefill_pack_heads) so far.
  std::int64_t packed_prefill_steps() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The prefill kernel an executor with `options` runs: options.prefill_kernel, or
// kernels::default_prefill_kernel(options.kv_format) when unset.
kernels::PrefillKernel cuda_prefill_kernel(const CudaExecutorOptions& options);

// The bytes of one block across all layers (K and V) with elements in `kv_format` (bf16 or fp8,
// kernels/kv_layout.h kv_elem_bytes): what the CUDA engine reports as block_bytes.
std::int64_t cuda_block_bytes(const ModelConfig& model, std::int32_t block_size,
                              kernels::FloatFormat kv_format);

}  // namespace servelab
