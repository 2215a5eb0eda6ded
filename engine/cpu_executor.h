// CpuExecutor: the reference engine backend. Runs StepPlans on the CPU in fp32 (Eigen) with a
// paged KV cache, exactly as the GPU executor must: same block tables, same copy and swap
// semantics, same sampling streams.
//
// KV cache: one K and one V array per executor, each [layer][block][slot][kv_head][head_dim]
// fp32, num_blocks device blocks per layer; swap space is a host store of num_host_blocks blocks
// in the same layout (host block ids index it); the KV offload host tier (kv_offload.host,
// core/kv_offload_tiers.h with host slots) is another host store of num_tier_slots blocks
// (host slots index it).
//
// execute(plan):
//   1. block moves, in this order: swap_out (device -> host), the offload tier's stores (device
//      -> tier slot) and loads (tier slot -> device) interleaved as TierLoad::stores_before says
//      (the loads of one allocation read their slots before its stores and write after them),
//      swap_in (host -> device), copies (device -> device, copy-on-write). Each move copies the
//      block in every layer. swap_out runs first because a device block it vacates may be the
//      destination of a swap_in or a copy in the same plan; a store reads a block evicted while
//      the plan was formed, before a load, swap_in or copy of the same plan reuses it.
//   2. the forward pass over all tokens of all entries as one batch: embeddings, then per layer
//      RMSNorm, Q/K/V projections (+ biases), RoPE (rotate-half) at each token's absolute
//      position, the step's K/V written into the entries' blocks (block_table[pos / block_size],
//      slot pos % block_size) for ALL entries before any attention (so an entry may read a
//      block another entry of the same step wrote: same-step prefix sharing, as in vLLM v1),
//      causal attention of each token over positions [0, pos] read through the block table,
//      output projection, residual, RMSNorm, SwiGLU MLP, residual.
//   3. for each entry with samples = true: final norm and LM head on its last token, the
//      request's logit_bias and penalties (core/sampling_params.h), then a draw (greedy by
//      default; the request's own temperature, top_p, top_k, min_p and seed when it has them)
//      from a stream derived from (seed, request id, output index) (engine/sample_stream.h),
//      so batching and scheduling never change what a request samples. An entry with
//      num_samples = n > 1 (parallel sampling, the step before a fork) draws n tokens from the
//      same logits, sample k with the stream of sample_request_id(id, k) (sample 0 is the
//      request's own): the first token of each sample, in fork_tokens for k >= 1.
//   4. speculative decoding (options.speculative, method ngram): a verify entry (d draft tokens,
//      plan.draft_tokens) samples at each of its 1 + d positions in turn, from the stream of the
//      output index that position produces, exactly as single steps would; a draft is accepted
//      while it equals the token sampled before it, so the first mismatch (or the bonus token
//      after d accepted drafts) is the entry's sampled token and num_accepted says how many
//      drafts came before: the tokens are those of a run without speculation, for any
//      temperature. Then every entry that sampled gets an n-gram proposal (engine/
//      ngram_proposer.h) over its prompt, outputs, accepted drafts and new token.
// KV cache dtype (CpuExecutorOptions::kv_format, from model.kv_cache_dtype): the cache keeps
// fp32 storage, but every K and V element written holds exactly a value of the format, obtained
// as a GPU KV-write kernel obtains it (kernels/float_formats.h: round to nearest even; fp8
// saturates at its largest finite value). bf16 and fp16 store round(x). fp8 (e4m3, e5m2) stores
// fp8(x / scale) with vLLM's per-tensor scales (k_scale for K, v_scale for V, one pair per
// layer; 1.0 unless given or computed), so the cache holds unscaled fp8 values (what
// key_block() returns), and attention dequantizes what it reads: value = stored * scale. With
// compute_kv_scales, each layer's scales are set from the first step that writes K/V in it:
// scale = max |x| / the format's largest finite value (vLLM's --calculate-kv-scales also computes
// them once, on the first forward pass, but as max|k| / 200 and max|v| / 100, leaving headroom:
// docs/engine.md). fp32 (the default) stores x unchanged.
// LoRA (options.enable_lora; engine/lora_weights.h): an entry whose request runs under adapter a
// (spec->lora_id = a > 0) adds scaling * (X A^T) B^T of adapter a to each of its rows' q, k, v,
// o, gate, up and down projections, the unmerged form of a dense model with W + scaling B A; the
// other entries of the same batch are untouched (base model or their own adapters). Adapters are
// built on first use from (lora_seed, id, spec->lora_rank) and kept, at most max_cached_loras of
// them (0: no bound): past that, the least recently used adapter that the step does not run is
// dropped, and built again (the same values) when a later step needs it, as a GPU loads an
// adapter into one of its max_loras slots.
// Token values: a prompt position p takes prompt_token_value(spec, p) (a literal prompt's own
// value, else token_value(token_identity(spec, p))); position p >= prompt_len takes
// output_tokens[p - prompt_len], and past the known tokens a verify entry's draft tokens. Async
// scheduling (StepPlan::pipelined): an entry that starts one past its known tokens takes the
// token the executor's previous plan sampled for that request (vLLM's model runner keeps the
// previous step's sampled ids on the device for the same purpose) and samples the output after
// it; execute() refuses the whole plan (std::invalid_argument) when the previous plan sampled no
// token for such an entry.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/sampling_params.h"
#include "core/speculative_config.h"
#include "engine/llama_weights.h"
#include "engine/lora_weights.h"
#include "engine/previous_tokens.h"
#include "engine/sample_stream.h"
#include "kernels/float_formats.h"

namespace servelab {

struct CpuExecutorOptions {
  std::int32_t block_size = 16;
  std::int32_t num_blocks = 0;       // device KV blocks per layer
  std::int32_t num_host_blocks = 0;  // swap space
  std::int32_t num_tier_slots = 0;   // KV offload host tier (0: none)
  SamplingParams sampling;
  // The KV cache's element type and, for fp8, the per-tensor scales (see the file comment).
  kernels::FloatFormat kv_format = kernels::FloatFormat::kFp32;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  bool compute_kv_scales = false;
  // Speculative decoding: method ngram proposes and verifies (see the file comment); kNone off.
  SpeculativeConfig speculative;
  // LoRA adapters (see the file comment): entries whose request has a lora_id run under adapter
  // make_lora_adapter(model, lora_seed, lora_id, lora_rank). Off: such an entry is an error.
  bool enable_lora = false;
  std::uint64_t lora_seed = 0;
  std::int32_t max_cached_loras =
      0;  // adapters kept built (0: all); the engine: serving.lora.max_loras
};

// A step's activations are Eigen temporaries, allocated afresh every step (megabytes for a
// prefill). glibc serves allocations above its mmap threshold (128 KiB at first) with fresh
// mappings and gives a freed heap top back to the OS past its trim threshold, so every step
// page-faulted its activations in again: a 384-token prefill of the tiny model took 12.2 ms in
// `engine run` against 7.0 in `engine profile`, whose back-to-back repetitions reuse the pages.
// The first CpuExecutor therefore has the process keep freed memory mapped (heap allocations up
// to kHeapAllocationMaxBytes, no trimming below 1 GiB), so that a step costs what the profile
// measures. Process-wide and idempotent; nothing where the C library is not glibc.
inline constexpr int kHeapAllocationMaxBytes = 32 << 20;  // glibc's largest mmap threshold
void keep_freed_memory_mapped();

class CpuExecutor : public Backend {
 public:
  // `weights` must outlive the executor. Throws std::invalid_argument when block_size < 1,
  // num_blocks < 1, num_host_blocks < 0, num_tier_slots < 0, temperature < 0 or top_p outside (0,
  // 1], a KV scale that is not finite and positive, or a speculative method other than ngram is on.
  CpuExecutor(const LlamaWeights& weights, const CpuExecutorOptions& options);
  CpuExecutor(const CpuExecutor&) = delete;
  CpuExecutor& operator=(const CpuExecutor&) = delete;

  std::string_view name() const override { return "cpu"; }
  // See the file comment. Throws std::invalid_argument (before changing any state) when a block
  // id or tier slot is out of range, a block table is too short for its entry's tokens, an entry
  // lacks the output tokens its positions need, or an entry runs under a LoRA adapter while LoRA
  // is off, with a rank below 1, or with a rank other than the one its adapter was built with.
  StepResult execute(const StepPlan& plan) override;

  // The logits of the last execute(), one vector per plan entry (vocab_size values for entries
  // that sampled, empty for the others).
  const std::vector<Eigen::VectorXf>& last_logits() const { return last_logits_; }

  // Raw KV contents of one block of one layer: block_size * kv_heads * head_dim floats laid out
  // [slot][kv_head][head_dim]. REQUIRES: layer and block in range.
  std::span<const float> key_block(std::int32_t layer, std::int32_t block) const;
  std::span<const float> value_block(std::int32_t layer, std::int32_t block) const;
  std::span<const float> host_key_block(std::int32_t layer, std::int32_t block) const;
  std::span<const float> host_value_block(std::int32_t layer, std::int32_t block) const;
  // The KV offload host tier's slot `slot` of one layer (same layout).
  std::span<const float> tier_key_block(std::int32_t layer, std::int32_t slot) const;
  // Wall time spent copying blocks to and from the offload tier (stores and loads) so far.
  std::int64_t tier_copy_ns() const { return tier_copy_ns_; }
  // Mutable access for tests that plant contents before a copy or swap.
  std::span<float> mutable_key_block(std::int32_t layer, std::int32_t block);
  std::span<float> mutable_value_block(std::int32_t layer, std::int32_t block);

  // Layer `layer`'s scales (the options' until compute_kv_scales has set them).
  float k_scale(std::int32_t layer) const { return k_scales_[layer]; }
  float v_scale(std::int32_t layer) const { return v_scales_[layer]; }

  const CpuExecutorOptions& options() const { return options_; }
  const LlamaWeights& weights() const { return weights_; }

 private:
  std::size_t block_offset(std::int32_t num_blocks, std::int32_t layer, std::int32_t block) const;
  void validate(const StepPlan& plan) const;
  void move_blocks(const StepPlan& plan);
  // Draws output `index` of sequence `id` (of request `spec`) from `logits`.
  std::int32_t sample(const RequestSpec& spec, RequestId id, std::uint64_t index,
                      const Eigen::VectorXf& logits) const;

  const LlamaWeights& weights_;
  CpuExecutorOptions options_;
  std::vector<double> inv_freq_;
  std::size_t block_floats_ = 0;          // floats per block per layer
  std::vector<float> k_cache_, v_cache_;  // device
  std::vector<float> k_host_, v_host_;    // swap space
  std::vector<float> k_tier_, v_tier_;    // KV offload host tier
  std::int64_t tier_copy_ns_ = 0;
  std::vector<Eigen::VectorXf> last_logits_;
  // Async scheduling: the token each entry of the last plan sampled (engine/previous_tokens.h).
  PreviousTokens previous_;
  PromptTokenSets prompt_sets_;  // the repetition penalty's prompt tokens
  bool fp8_kv_ = false;
  std::vector<float> k_scales_, v_scales_;  // per layer (fp8 only; 1 otherwise)
  std::vector<bool> scales_set_;            // per layer, with compute_kv_scales
  // LoRA adapters by id, built on first use, with the step that last ran each (for dropping the
  // least recently used past max_cached_loras), and every adapter's rank (its id keeps it).
  struct CachedLora {
    LoraAdapter adapter;
    std::int64_t last_step = 0;
  };
  std::map<std::uint32_t, CachedLora> lora_adapters_;
  std::map<std::uint32_t, std::int32_t> lora_ranks_;
  std::int64_t lora_step_ = 0;
  const LoraAdapter& lora_adapter(std::uint32_t id, std::int32_t rank);
};

// RMSNorm of each row of x (Hugging Face LlamaRMSNorm in fp32): x * rsqrt(mean(x^2) + eps) * w.
RowMatrix rms_norm(const RowMatrix& x, const Eigen::VectorXf& weight, double eps);

// Applies rotate-half RoPE in place to `row` (num_heads * head_dim values) at `position`.
void apply_rope(float* row, std::int32_t num_heads, std::int32_t head_dim,
                const std::vector<double>& inv_freq, std::int64_t position);

}  // namespace servelab
