#include "engine/cuda_executor.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "core/lora_config.h"
#include "core/lora_slots.h"
#include "core/stop_conditions.h"
#include "engine/gpu_switches.h"
#include "engine/logprobs.h"
#include "engine/lora_weights.h"
#include "engine/ngram_proposer.h"
#include "engine/plan_check.h"
#include "engine/safetensors.h"
#include "engine/sample_stream.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/cache_ops.h"
#include "kernels/cuda_graph.h"
#include "kernels/decode_graph_plan.h"
#include "kernels/device.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/kv_layout.h"
#include "kernels/lora.h"
#include "kernels/norm.h"
#include "kernels/programmatic_launch.h"
#include "kernels/random_fill.h"
#include "kernels/rope.h"
#include "kernels/rope_table.h"
#include "kernels/sampling.h"

namespace servelab {

namespace k = kernels;
using k::Bf16;
using k::DeviceBuffer;

namespace {

// graph_lora_gather's bytes for `bucket` rows at the gather kernels' largest rank.
std::size_t graph_lora_gather_bytes(std::int32_t bucket) {
  return static_cast<std::size_t>(bucket) * kernels::kLoraMaxGroupTargets *
         static_cast<std::size_t>(kernels::kLoraMaxGatherRank) * sizeof(float);
}

// Appends typed arrays to one host byte buffer (16-byte aligned each) so that a step's metadata
// reaches the device in one copy; offsets index the device copy.
class Staging {
 public:
  template <typename T>
  std::size_t add(const std::vector<T>& v) {
    const std::size_t off = (bytes_.size() + 15) / 16 * 16;
    bytes_.resize(off + v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(bytes_.data() + off, v.data(), v.size() * sizeof(T));
    return off;
  }
  const std::vector<unsigned char>& bytes() const { return bytes_; }
  void clear() { bytes_.clear(); }

 private:
  std::vector<unsigned char> bytes_;
};

// n host floats to bf16 device memory at dst, through a bounded staging buffer.
void upload_bf16(Bf16* dst, const float* src, std::int64_t n) {
  constexpr std::int64_t kChunk = std::int64_t{1} << 24;
  std::vector<Bf16> tmp(static_cast<std::size_t>(std::min(n, kChunk)));
  for (std::int64_t b = 0; b < n; b += kChunk) {
    const std::int64_t m = std::min(kChunk, n - b);
    for (std::int64_t i = 0; i < m; ++i) tmp[i] = float_to_bf16(src[b + i]);
    k::copy_to_device(dst + b, tmp.data(), static_cast<std::size_t>(m) * sizeof(Bf16));
  }
}

DeviceBuffer upload_f32(const float* data, std::size_t n) {
  DeviceBuffer buf(n * sizeof(float));
  k::copy_to_device(buf.get(), data, n * sizeof(float));
  return buf;
}

// The offload tier's moves as copy_blocks launches, in CpuExecutor's order (TierLoad::
// stores_before): per group of loads with the same stores_before, the stores before it, the
// group's slots into staging blocks 0.., the stores up to the next group, then the staging
// blocks into the loads' device blocks; last, the remaining stores. A phase is split where a
// destination repeats (copy_blocks runs its pairs in parallel).
enum class KvPlace { kDevice = 0, kTier = 1, kStaging = 2 };
struct TierPhase {
  KvPlace from, to;
  std::vector<k::BlockPair> pairs;
};
struct TierPhases {
  std::vector<TierPhase> phases;
  std::int64_t staged_blocks = 0;  // the most staging blocks a group needs
};

TierPhases tier_phases(const StepPlan& plan) {
  TierPhases out;
  auto add = [&](KvPlace from, KvPlace to, const std::vector<k::BlockPair>& pairs) {
    std::vector<k::BlockPair> run;
    std::set<std::int64_t> dsts;
    for (const k::BlockPair& p : pairs) {
      if (!dsts.insert(p.dst).second) {
        out.phases.push_back({from, to, std::move(run)});
        run.clear();
        dsts = {p.dst};
      }
      run.push_back(p);
    }
    if (!run.empty()) out.phases.push_back({from, to, std::move(run)});
  };
  std::size_t stored = 0;
  auto stores_until = [&](std::size_t n) {
    std::vector<k::BlockPair> v;
    for (; stored < n; ++stored) {
      v.push_back({plan.tier_stores[stored].src, plan.tier_stores[stored].dst_slot});
    }
    add(KvPlace::kDevice, KvPlace::kTier, v);
  };
  const std::vector<TierLoad>& loads = plan.tier_loads;
  for (std::size_t i = 0; i < loads.size();) {
    const auto group = static_cast<std::size_t>(loads[i].stores_before);
    std::size_t j = i;
    while (j < loads.size() && static_cast<std::size_t>(loads[j].stores_before) == group) ++j;
    stores_until(group);
    std::vector<k::BlockPair> in, out_pairs;
    for (std::size_t q = i; q < j; ++q) {
      in.push_back({loads[q].src, static_cast<std::int64_t>(q - i)});
      out_pairs.push_back({static_cast<std::int64_t>(q - i), loads[q].dst});
    }
    add(KvPlace::kTier, KvPlace::kStaging, in);
    stores_until(j < loads.size() ? static_cast<std::size_t>(loads[j].stores_before)
                                  : plan.tier_stores.size());
    add(KvPlace::kStaging, KvPlace::kDevice, out_pairs);
    out.staged_blocks = std::max<std::int64_t>(out.staged_blocks, static_cast<std::int64_t>(j - i));
    i = j;
  }
  stores_until(plan.tier_stores.size());
  return out;
}

}  // namespace

k::PrefillKernel cuda_prefill_kernel(const CudaExecutorOptions& options) {
  return options.prefill_kernel.value_or(k::default_prefill_kernel(options.kv_format));
}

std::int64_t cuda_block_bytes(const ModelConfig& model, std::int32_t block_size,
                              kernels::FloatFormat kv_format) {
  return 2 * std::int64_t{model.num_layers} * block_size * model.kv_size() *
         k::kv_elem_bytes(kv_format);
}

struct CudaExecutor::Impl {
  struct Layer {
    DeviceBuffer qkv, qkv_bias, o, gate_up, down, in_norm, post_norm;
  };
  // Where a weight lives on the device (read_weight).
  struct WeightRef {
    const void* data;
    std::int64_t size;
    bool bf16;
  };

  LlamaConfig config;
  CudaExecutorOptions options;
  k::KvCacheLayout layout;
  // Members are destroyed in reverse order of declaration: everything declared below `stream`
  // (the cuBLAS handle, which Gemm::linear binds to it, and every buffer work on it may still
  // use) goes first, then the stream, whose destruction waits for that work. Keep it first.
  k::OwnedStream stream;
  DeviceBuffer cublas_workspace;  // fixed, so that GEMMs can be captured (Gemm::set_workspace)
  std::unique_ptr<k::Gemm> gemm;
  std::vector<Layer> layers;
  DeviceBuffer embed, lm_head, final_norm, cos_sin;
  std::map<std::string, WeightRef> weight_refs;
  std::int32_t rope_rows = 0;
  std::int32_t decode_ctas_per_seq = 1, decode_max_ctas = 1;
  // How prefill attention launches are cut into CTAs (core/prefill_launch.h): the configured
  // kernel's tiles and resident slots, and the head packing of short launches (kFa2Gqa).
  PrefillLaunch prefill_launch;
  std::int64_t packed_prefill_steps = 0;
  // Activations, sized for `cap_tokens` tokens and `cap_rows` sampled rows.
  std::int32_t cap_tokens = 0, cap_rows = 0;
  DeviceBuffer residual, hbuf, qkv, q, kk, vv, attn, gate_up, act, final_h, logits, prob, sampled;
  // Split-K decode partials: of eager steps (workspace), and of decode graphs (graph_workspace,
  // which a graph bakes in: only graph steps grow it, so an eager step never invalidates the
  // captured graphs).
  DeviceBuffer meta, workspace, graph_workspace;
  DeviceBuffer prefill_workspace;  // split-KV prefill partials (never in a graph)
  DeviceBuffer kv_cache, host_cache;
  // The KV offload host tier (pinned) and the device blocks a tier load is staged through.
  DeviceBuffer tier_cache, tier_staging;
  std::int64_t tier_copy_ns = 0;
  PreviousTokens previous;      // async scheduling: what the last plan sampled
  PromptTokenSets prompt_sets;  // the repetition penalty's prompt tokens (engine/sample_stream.h)
  std::vector<std::vector<float>> last_logits;
  Staging staging;
  // CUDA-graph decode steps: the bucket sizes, the padded inputs' device copy (graph_meta, sized
  // once for the largest bucket and the widest table: growing it would drop every graph), the
  // graphs by key with their last use (least recently used evicted past max_graphs()), and
  // buffers_generation, bumped whenever a buffer a graph may reference is reallocated.
  static constexpr std::size_t kMinGraphs = 48;
  // Room for every bucket's plain and LoRA graph (what the warm-up captures: 70 at
  // max_num_seqs 256) and as many split or wider-table keys as kMinGraphs allows beyond that, so
  // that the warm-up's graphs are not evicted by its own later captures.
  std::size_t max_graphs() const { return 2 * buckets.size() + kMinGraphs; }
  struct GraphEntry {
    k::CudaGraph graph;
    std::uint64_t last_used = 0;
  };
  std::vector<std::int32_t> buckets;
  DeviceBuffer graph_meta;
  Staging graph_staging;
  std::map<k::DecodeGraphKey, GraphEntry> graphs;
  std::uint64_t buffers_generation = 0, graph_clock = 0;
  // (bucket, split, lora) triples whose kernels and cuBLAS shapes have run eagerly once: a later
  // capture of the same triple (another table width or partition) needs no eager pass before it.
  std::set<std::tuple<std::int32_t, bool, bool>> warmed;
  CudaGraphStats stats;

  Impl(const LlamaConfig& c, const CudaExecutorOptions& o) : config(c), options(o) {}

  void init(const LlamaWeights* host, std::uint64_t seed);
  void load_weights(const LlamaWeights* host, std::uint64_t seed);

  const ModelConfig& model() const { return config.model; }

  // One layer's K or V plane of block `block` of `cache` (the device cache, swap space or the
  // offload tier: one layout), as stored.
  std::vector<std::uint8_t> read_plane(const DeviceBuffer& cache, std::int64_t block,
                                       std::int32_t layer, bool value) const {
    const std::int64_t n = layout.plane_elems() * layout.elem_bytes;
    const std::int64_t off =
        layout.offset(block, layer, value ? 1 : 0, 0, 0, 0) * layout.elem_bytes;
    std::vector<std::uint8_t> out(static_cast<std::size_t>(n));
    k::synchronize(stream.get());
    k::copy_async(out.data(), cache.as<const std::uint8_t>() + off, n, stream.get());
    k::synchronize(stream.get());
    return out;
  }

  void ensure_capacity(std::int32_t tokens, std::int32_t rows) {
    const ModelConfig& m = model();
    if (tokens > cap_tokens) {
      cap_tokens = std::max(tokens, cap_tokens);
      const std::size_t t = static_cast<std::size_t>(cap_tokens);
      const std::size_t qkv_w = static_cast<std::size_t>(m.q_size() + 2 * m.kv_size());
      k::synchronize(stream.get());
      ++buffers_generation;
      residual = DeviceBuffer(t * m.hidden_size * sizeof(float));
      hbuf = DeviceBuffer(t * m.hidden_size * sizeof(Bf16));
      qkv = DeviceBuffer(t * qkv_w * sizeof(float));
      q = DeviceBuffer(t * m.q_size() * sizeof(Bf16));
      if (!options.fused_qkv_rope) {  // scratch rows of the unfused qkv_rope + kv_write
        kk = DeviceBuffer(t * m.kv_size() * sizeof(Bf16));
        vv = DeviceBuffer(t * m.kv_size() * sizeof(Bf16));
      }
      attn = DeviceBuffer(t * m.q_size() * sizeof(Bf16));
      gate_up = DeviceBuffer(t * 2 * m.intermediate_size * sizeof(Bf16));
      act = DeviceBuffer(t * m.intermediate_size * sizeof(Bf16));
    }
    if (rows > cap_rows) {
      cap_rows = std::max(rows, cap_rows);
      const std::size_t r = static_cast<std::size_t>(cap_rows);
      k::synchronize(stream.get());
      final_h = DeviceBuffer(r * m.hidden_size * sizeof(Bf16));
      logits = DeviceBuffer(r * m.vocab_size * sizeof(float));
      if (options.sampling.temperature > 0) prob = DeviceBuffer(r * m.vocab_size * sizeof(float));
      sampled = DeviceBuffer(r * sizeof(std::int32_t));
    }
  }

  // Grows `buf` to at least `bytes`. A buffer a decode graph may reference (graph_visible)
  // invalidates every captured graph when it moves; the eager step metadata (meta) does not.
  void ensure_bytes(DeviceBuffer& buf, std::size_t bytes, bool graph_visible = true) {
    if (buf.bytes() >= bytes) return;
    k::synchronize(stream.get());
    if (graph_visible) ++buffers_generation;
    buf = DeviceBuffer(std::max(bytes, buf.bytes() * 2));
  }

  // LoRA adapters on the device: options.max_loras slots of max_lora_rank, one bf16 allocation
  // made before the KV cache is sized (core/lora_slots.h). An adapter is generated into its slot
  // from make_lora_adapter's draws (CpuExecutor's weights) when a step places it there: A
  // [rank][in] and scaling * B [out][rank] per layer and target, packed at its own rank where
  // lora_shape puts them (kernels/lora_kernel.h).
  std::optional<LoraSlots> lora_slots;
  DeviceBuffer lora_slot_memory;
  std::int64_t lora_slot_elements = 0;  // one slot: lora_shape.elements(max_lora_rank, layers)
  std::map<std::uint32_t, std::int32_t> lora_ranks;  // every adapter placed so far: its rank
  const Bf16* lora_slot(std::int32_t slot) const {
    return lora_slot_memory.as<Bf16>() + slot * lora_slot_elements;
  }
  k::LoraShape lora_shape;      // the model's projections (constructor)
  bool lora_gather_ok = false;  // k::lora_gather_fits(lora_shape)
  DeviceBuffer lora_tmp;        // a cuBLAS shrink's output, [rows][rank] bf16 (never in a graph)
  // The gather shrink's output, [rows][3][max rank] fp32: of eager steps (lora_gather), and of
  // decode graphs (graph_lora_gather, sized for the largest bucket at construction, so that the
  // warm-up's adapted graphs of the smaller buckets stay valid).
  DeviceBuffer lora_gather, graph_lora_gather;
  // A step's LoRA work: the segments that take cuBLAS GEMMs, and the rows the gather kernels take
  // (kernels/lora.h; device memory, the step's metadata).
  struct LoraStep {
    std::vector<k::LoraSegment> segments;
    const k::LoraRow* rows = nullptr;
    std::int32_t num_rows = 0, max_rank = 0;  // max_rank: the gather rows' largest
    float* gather_tmp = nullptr;              // lora_gather or graph_lora_gather
    bool empty() const { return segments.empty() && num_rows == 0; }
  };
  // Generates adapter `id` of rank `rank` into `slot` (stream-ordered).
  void load_lora(std::int32_t slot, std::uint32_t id, std::int32_t rank);
  // For the num_targets consecutive targets from `first` in layer `l` (a group reading `in` and
  // writing consecutive column slices of `out` from column 0): out[row][...] += scaling *
  // (in A^T) B^T for every adapted row: two cuBLAS GEMMs per segment and target (shrink into
  // lora_tmp, expand with beta 1), then the gather kernels' shrink and expand over lora.rows.
  // `in` and `out` are row-strided (ld_in, ld_out elements).
  void apply_lora(const LoraStep& lora, std::int32_t l, LoraTarget first, std::int32_t num_targets,
                  const Bf16* in, std::int32_t ld_in, void* out, k::Gemm::Out out_type,
                  std::int32_t ld_out);

  // Device pointers and sizes of one forward pass (embedding and layers) over `num_tokens`
  // tokens: the eager step's metadata, or a decode graph's padded inputs.
  struct ForwardArgs {
    std::int32_t num_tokens = 0;
    const std::int32_t* tokens = nullptr;
    const std::int32_t* positions = nullptr;
    const std::int64_t* slots = nullptr;
    std::int32_t width = 1;  // block-table stride
    std::int32_t D = 0;      // decode sequences
    const std::int32_t *d_rows = nullptr, *d_ctx = nullptr, *d_tab = nullptr;
    k::DecodeSplitPlan dplan;
    float* d_workspace = nullptr;  // dplan's partials when split (workspace or graph_workspace)
    std::int32_t d_max_ctx = 0;
    std::int32_t P = 0;  // prefill sequences
    const std::int32_t *p_beg = nullptr, *p_num = nullptr, *p_first = nullptr, *p_tab = nullptr;
    const k::PrefillTile* tiles = nullptr;
    std::int32_t num_tiles = 0;
    k::PrefillKernel p_kernel = k::PrefillKernel::kFa2;  // the launch's kernel
    k::PrefillSplitPlan psplit;      // split-KV prefill (kernels of k::prefill_splits_keys)
    std::int64_t p_longest = 0;      // the largest first position + queries of the step
    const LoraStep* lora = nullptr;  // null or empty: no adapter
  };
  // Enqueues embedding and every layer on `stream`; nothing else (no allocation, no copy, no
  // synchronisation), so that it can be captured.
  void forward_layers(const ForwardArgs& f);
  // The widest block table a decode graph is captured with (max_model_len's blocks).
  std::int32_t max_table_width() const {
    return (rope_rows + options.block_size - 1) / options.block_size;
  }
  // graph_workspace's bytes for a split graph of `bucket` rows and max_splits at table_width, or
  // any other of that width: the largest bucket that can split (bucket x decode_ctas_per_seq <
  // decode_max_ctas) at decode_graph_max_splits, so that it grows (and drops every graph) when
  // the width does, not with each bucket or plan.
  std::size_t graph_workspace_bytes(std::int32_t table_width, std::int32_t bucket,
                                    std::int32_t max_splits) const {
    std::int32_t rows = bucket;
    for (std::int32_t b : buckets) {
      if (std::int64_t{b} * decode_ctas_per_seq < decode_max_ctas) rows = std::max(rows, b);
    }
    const std::int32_t splits =
        std::max(max_splits, k::decode_graph_max_splits(table_width, options.block_size));
    return static_cast<std::size_t>(
               k::decode_workspace_floats(rows, model().num_heads, model().head_dim, splits)) *
           sizeof(float);
  }
  // Stages a padded decode step in graph_staging in the layout graph_meta holds (each array
  // 16-byte aligned) and returns the arrays' offsets. lora_rows: one entry per bucket row (the
  // LoRA gather kernels' table; rank 0 where a row has no adapter), always staged so that
  // graph_meta's layout is the same with and without adapters.
  struct GraphInputOffsets {
    std::size_t tokens, positions, slots, q_rows, context_lens, block_tables, lora_rows;
  };
  GraphInputOffsets stage_graph_inputs(const k::PaddedDecodeInputs& in,
                                       const std::vector<k::LoraRow>& lora_rows) {
    graph_staging.clear();
    GraphInputOffsets o{};
    o.tokens = graph_staging.add(in.tokens);
    o.positions = graph_staging.add(in.positions);
    o.slots = graph_staging.add(in.slots);
    o.q_rows = graph_staging.add(in.q_rows);
    o.context_lens = graph_staging.add(in.context_lens);
    o.block_tables = graph_staging.add(in.block_tables);
    o.lora_rows = graph_staging.add(lora_rows);
    return o;
  }
  // The decode-only step of `in` (already padded to `key.bucket` and copied to graph_meta at
  // the offsets `f` points to): replays key's graph, capturing it first when it is new.
  void run_decode_graph(const k::DecodeGraphKey& key, const ForwardArgs& f);
};

CudaExecutor::CudaExecutor(const LlamaWeights& weights, const CudaExecutorOptions& options)
    : impl_(std::make_unique<Impl>(weights.config, options)) {
  impl_->init(&weights, 0);
}

CudaExecutor::CudaExecutor(const LlamaConfig& config, std::uint64_t seed,
                           const CudaExecutorOptions& options)
    : impl_(std::make_unique<Impl>(config, options)) {
  config.model.validate();
  impl_->init(nullptr, seed);
}

void CudaExecutor::Impl::load_weights(const LlamaWeights* host, std::uint64_t seed) {
  const ModelConfig& m = model();
  // Tensor `name` ([rows, cols], cols = 0 for a vector) at dst: from the host weights, or
  // generated in place exactly as LlamaWeights::random would (one launch).
  auto put = [&](const std::string& name, const float* host_data, std::int64_t rows,
                 std::int64_t cols, void* dst, bool bf16) {
    const std::int64_t n = rows * std::max<std::int64_t>(cols, 1);
    if (host != nullptr) {
      if (bf16) {
        upload_bf16(static_cast<Bf16*>(dst), host_data, n);
      } else {
        k::copy_to_device(dst, host_data, static_cast<std::size_t>(n) * sizeof(float));
      }
    } else {
      const k::CounterNormal p = random_tensor_params(m, seed, name, cols);
      if (bf16) {
        k::fill_counter_normal(static_cast<Bf16*>(dst), n, p, stream.get());
      } else {
        k::fill_counter_normal(static_cast<float*>(dst), n, p, stream.get());
      }
    }
    weight_refs[name] = {dst, n, bf16};
  };
  auto bf16_buffer = [](std::int64_t n) {
    return DeviceBuffer(static_cast<std::size_t>(n) * sizeof(Bf16));
  };
  auto f32_buffer = [](std::int64_t n) {
    return DeviceBuffer(static_cast<std::size_t>(n) * sizeof(float));
  };
  const std::int64_t H = m.hidden_size, V = m.vocab_size, Q = m.q_size(), KV = m.kv_size(),
                     I = m.intermediate_size;

  embed = bf16_buffer(V * H);
  put("model.embed_tokens.weight", host ? host->embed_tokens.data() : nullptr, V, H, embed.get(),
      true);
  if (!m.tie_word_embeddings) {
    lm_head = bf16_buffer(V * H);
    put("lm_head.weight", host ? host->lm_head.data() : nullptr, V, H, lm_head.get(), true);
  }
  final_norm = f32_buffer(H);
  put("model.norm.weight", host ? host->norm.data() : nullptr, H, 0, final_norm.get(), false);
  for (std::int32_t i = 0; i < m.num_layers; ++i) {
    const LlamaLayerWeights* w = host != nullptr ? &host->layers[i] : nullptr;
    auto hd = [&](auto member) -> const float* { return w ? (w->*member).data() : nullptr; };
    const std::string p = "model.layers." + std::to_string(i) + ".";
    Layer l;
    // q, k, v stacked row blocks: one [Q + 2 KV, H] matrix, one GEMM.
    l.qkv = bf16_buffer((Q + 2 * KV) * H);
    Bf16* qkv_w = l.qkv.as<Bf16>();
    put(p + "self_attn.q_proj.weight", hd(&LlamaLayerWeights::q_proj), Q, H, qkv_w, true);
    put(p + "self_attn.k_proj.weight", hd(&LlamaLayerWeights::k_proj), KV, H, qkv_w + Q * H, true);
    put(p + "self_attn.v_proj.weight", hd(&LlamaLayerWeights::v_proj), KV, H, qkv_w + (Q + KV) * H,
        true);
    if (m.qkv_bias) {
      l.qkv_bias = f32_buffer(Q + 2 * KV);
      float* b = l.qkv_bias.as<float>();
      put(p + "self_attn.q_proj.bias", hd(&LlamaLayerWeights::q_bias), Q, 0, b, false);
      put(p + "self_attn.k_proj.bias", hd(&LlamaLayerWeights::k_bias), KV, 0, b + Q, false);
      put(p + "self_attn.v_proj.bias", hd(&LlamaLayerWeights::v_bias), KV, 0, b + Q + KV, false);
    }
    l.o = bf16_buffer(H * Q);
    put(p + "self_attn.o_proj.weight", hd(&LlamaLayerWeights::o_proj), H, Q, l.o.get(), true);
    // gate and up stacked: one [2 I, H] matrix.
    l.gate_up = bf16_buffer(2 * I * H);
    put(p + "mlp.gate_proj.weight", hd(&LlamaLayerWeights::gate_proj), I, H, l.gate_up.get(), true);
    put(p + "mlp.up_proj.weight", hd(&LlamaLayerWeights::up_proj), I, H,
        l.gate_up.as<Bf16>() + I * H, true);
    l.down = bf16_buffer(H * I);
    put(p + "mlp.down_proj.weight", hd(&LlamaLayerWeights::down_proj), H, I, l.down.get(), true);
    l.in_norm = f32_buffer(H);
    put(p + "input_layernorm.weight", hd(&LlamaLayerWeights::input_layernorm), H, 0,
        l.in_norm.get(), false);
    l.post_norm = f32_buffer(H);
    put(p + "post_attention_layernorm.weight", hd(&LlamaLayerWeights::post_attention_layernorm), H,
        0, l.post_norm.get(), false);
    layers.push_back(std::move(l));
  }
  k::synchronize(stream.get());
}

void CudaExecutor::Impl::init(const LlamaWeights* host, std::uint64_t seed) {
  Impl& s = *this;
  const ModelConfig& m = config.model;
  options.prefill_kernel = cuda_prefill_kernel(options);
  if (options.block_size < 1 || options.num_blocks < 0 || options.num_host_blocks < 0 ||
      options.num_tier_slots < 0 || options.max_num_tokens < 1 || options.max_num_seqs < 1 ||
      options.max_model_len < 1 || options.graph_table_bytes < 0) {
    throw std::invalid_argument(
        "CudaExecutor: block_size, max_num_tokens, max_num_seqs and max_model_len must be >= 1, "
        "num_blocks, num_host_blocks, num_tier_slots and graph_table_bytes >= 0");
  }
  if (!(options.gpu_memory_utilization > 0) || options.gpu_memory_utilization > 1) {
    throw std::invalid_argument("CudaExecutor: gpu_memory_utilization must be in (0, 1]");
  }
  if (options.enable_lora && (options.max_loras < 1 || options.max_lora_rank < 1 ||
                              options.max_lora_rank > kMaxLoraRank)) {
    throw std::invalid_argument(
        "CudaExecutor: with LoRA, max_loras must be >= 1 and max_lora_rank "
        "in [1, " +
        std::to_string(kMaxLoraRank) + "]");
  }
  if (options.sampling.temperature < 0 || !(options.sampling.top_p > 0) ||
      options.sampling.top_p > 1) {
    throw std::invalid_argument("CudaExecutor: temperature must be >= 0 and top_p in (0, 1]");
  }
  if (options.speculative.enabled() && options.speculative.method != SpecMethod::kNgram) {
    throw std::invalid_argument(
        std::string("CudaExecutor: speculative decoding runs method ngram only, not ") +
        to_string(options.speculative.method));
  }
  if (m.head_dim != 64 && m.head_dim != 128) {
    throw std::invalid_argument("CudaExecutor: head_dim must be 64 or 128, got " +
                                std::to_string(m.head_dim));
  }
  if (m.num_kv_heads < 1 || m.num_heads % m.num_kv_heads != 0 || m.hidden_size % 8 != 0 ||
      m.intermediate_size % 8 != 0) {
    throw std::invalid_argument(
        "CudaExecutor: num_kv_heads must divide num_heads, hidden and intermediate sizes must be "
        "multiples of 8");
  }
  k::check_kv_format(options.kv_format, options.k_scale, options.v_scale, "CudaExecutor");
  if (const std::string refusal = cuda_kv_kernels_refusal(options.kv_format, options.decode_kernel,
                                                          *options.prefill_kernel);
      !refusal.empty()) {
    throw std::invalid_argument("CudaExecutor: " + refusal);
  }
  if (!k::prefill_kernel_built(*options.prefill_kernel)) {
    throw std::invalid_argument(std::string("CudaExecutor: the ") +
                                k::prefill_kernel_name(*options.prefill_kernel) +
                                " prefill kernel is not in this build (it needs sm_90a: cmake "
                                "-DSERVELAB_CUDA_SM90A=ON)");
  }
  if (const std::int32_t heads = k::prefill_heads_per_cta(*options.prefill_kernel);
      (m.num_heads / m.num_kv_heads) % heads != 0) {
    throw std::invalid_argument(std::string("CudaExecutor: the ") +
                                k::prefill_kernel_name(*options.prefill_kernel) +
                                " prefill kernel packs " + std::to_string(heads) +
                                " query heads of a GQA group per CTA, and this model's group has " +
                                std::to_string(m.num_heads / m.num_kv_heads));
  }
  std::string reason;
  if (!k::cuda_device_available(&reason)) {
    throw std::runtime_error("CudaExecutor: no usable CUDA device: " + reason);
  }
  s.layout = {m.num_layers, options.block_size, m.num_kv_heads, m.head_dim,
              k::kv_elem_bytes(options.kv_format)};
  s.stream = k::OwnedStream::create();
  s.cublas_workspace = DeviceBuffer(k::Gemm::kRecommendedWorkspaceBytes);
  s.gemm = std::make_unique<k::Gemm>();
  s.gemm->set_workspace(s.cublas_workspace.get(), s.cublas_workspace.bytes());
  s.gemm->set_kernel(s.options.gemm_kernel);
  s.buckets = k::decode_graph_buckets(options.max_num_seqs);
  // cuBLASLt (kCublasLt) and auto time the shapes of the decode steps graphs replay, on their
  // first eager pass (the warm-up's, before any measured step); other steps keep cuBLAS. Their
  // timing buffers come out of the memory the KV cache is sized from: the L2 flush, and a scratch
  // output for the residual's projections (o_proj, down_proj: the largest bucket x hidden fp32).
  s.gemm->set_lt_tokens(s.buckets);
  s.gemm->reserve_tuning(static_cast<std::size_t>(s.buckets.back()) *
                         static_cast<std::size_t>(m.hidden_size) * sizeof(float));
  s.lora_shape = k::llama_lora_shape(m.hidden_size, static_cast<std::int32_t>(m.q_size()),
                                     static_cast<std::int32_t>(m.kv_size()), m.intermediate_size);
  s.lora_gather_ok = k::lora_gather_fits(s.lora_shape);
  s.load_weights(host, seed);
  if (options.enable_lora) {
    // The adapter slots, with the weights and before the KV cache is sized (as vLLM's).
    s.lora_slots.emplace(options.max_loras);
    s.lora_slot_elements = s.lora_shape.elements(options.max_lora_rank, m.num_layers);
    s.lora_slot_memory =
        DeviceBuffer(static_cast<std::size_t>(options.max_loras) *
                     static_cast<std::size_t>(s.lora_slot_elements) * sizeof(Bf16));
  }
  s.rope_rows = static_cast<std::int32_t>(
      std::min<std::int64_t>(m.max_position_embeddings, options.max_model_len));
  const std::vector<float> table = k::rope_cos_sin_table(rope_inv_freq(s.config), s.rope_rows);
  s.cos_sin = upload_f32(table.data(), table.size());
  // graph_meta holds the largest padded decode step (the largest bucket, the widest table).
  s.stage_graph_inputs(
      k::pad_decode_inputs({}, {}, {}, {}, {}, 0, s.buckets.back(), s.max_table_width(), 0),
      std::vector<k::LoraRow>(static_cast<std::size_t>(s.buckets.back())));
  s.graph_meta = DeviceBuffer(s.graph_staging.bytes().size() + 16);
  if (options.enable_lora)
    s.graph_lora_gather = DeviceBuffer(graph_lora_gather_bytes(s.buckets.back()));
  s.decode_ctas_per_seq =
      k::decode_ctas_per_seq(s.options.decode_kernel, m.num_heads, m.num_kv_heads);
  s.decode_max_ctas = k::decode_max_resident_ctas(s.options.decode_kernel, m.head_dim, m.num_heads,
                                                  m.num_kv_heads, options.kv_format);
  {
    const k::PrefillKernel pk = *s.options.prefill_kernel;
    PrefillLaunch& l = s.prefill_launch;
    l.query_heads = m.num_heads;
    l.tile_rows = k::prefill_tile_rows(pk);
    l.max_ctas = k::prefill_max_resident_ctas(m.head_dim, pk);
    l.min_split_tokens = k::prefill_splits_keys(pk) ? kPrefillMinSplitTokens : 0;
    l.merge_rows = k::kPrefillMergeRows;
    const k::PrefillKernel packed = k::PrefillKernel::kFa2Gqa;
    if (s.options.prefill_pack_heads && pk != packed &&
        (m.num_heads / m.num_kv_heads) % k::prefill_heads_per_cta(packed) == 0) {
      l.packed_heads = k::prefill_heads_per_cta(packed);
      l.packed_rows = k::prefill_tile_rows(packed);
      l.packed_max_ctas = k::prefill_max_resident_ctas(m.head_dim, packed);
    }
  }

  // Activations before the KV cache, so the cache gets what is really left.
  // A verify entry samples 1 + k rows.
  const std::int64_t rows =
      std::int64_t{options.max_num_seqs} *
      (1 + (options.speculative.enabled() ? options.speculative.num_speculative_tokens : 0));
  s.ensure_capacity(options.max_num_tokens,
                    static_cast<std::int32_t>(std::min<std::int64_t>(
                        rows, std::max(options.max_num_seqs, options.max_num_tokens))));
  k::synchronize(s.stream.get());

  std::int64_t blocks = options.num_blocks;
  if (blocks == 0) {
    const k::DeviceInfo info = k::device_info();
    blocks = k::kv_blocks_for_memory(info.total_bytes, info.free_bytes,
                                     options.gpu_memory_utilization, s.layout.block_bytes());
    blocks = std::min<std::int64_t>(blocks, std::int64_t{1} << 30);
    if (blocks < 2) {
      throw std::runtime_error(
          "CudaExecutor: the KV cache gets " + std::to_string(blocks) + " blocks of " +
          std::to_string(s.layout.block_bytes()) + " bytes within gpu_memory_utilization " +
          std::to_string(options.gpu_memory_utilization) + " (" +
          std::to_string(info.free_bytes >> 20) + " MiB free of " +
          std::to_string(info.total_bytes >> 20) + "); the engine needs at least 2");
    }
  }
  s.options.num_blocks = static_cast<std::int32_t>(blocks);
  s.kv_cache = DeviceBuffer(static_cast<std::size_t>(blocks * s.layout.block_bytes()));
  if (options.num_host_blocks > 0) {
    s.host_cache =
        DeviceBuffer(static_cast<std::size_t>(options.num_host_blocks * s.layout.block_bytes()),
                     DeviceBuffer::Kind::kPinnedHost);
  }
  if (options.num_tier_slots > 0) {
    s.tier_cache =
        DeviceBuffer(static_cast<std::size_t>(options.num_tier_slots * s.layout.block_bytes()),
                     DeviceBuffer::Kind::kPinnedHost);
  }
}

CudaExecutor::~CudaExecutor() = default;

std::int32_t CudaExecutor::num_blocks() const { return impl_->options.num_blocks; }
std::int64_t CudaExecutor::block_bytes() const { return impl_->layout.block_bytes(); }
const CudaExecutorOptions& CudaExecutor::options() const { return impl_->options; }
std::int64_t CudaExecutor::lora_loads() const {
  return impl_->lora_slots ? impl_->lora_slots->loads() : 0;
}

std::vector<k::LtChoice> CudaExecutor::gemm_lt_choices() const { return impl_->gemm->lt_choices(); }
CudaGraphStats CudaExecutor::graph_stats() const {
  CudaGraphStats st = impl_->stats;
  st.cached_graphs = static_cast<std::int32_t>(impl_->graphs.size());
  st.graph_capacity = static_cast<std::int32_t>(impl_->max_graphs());
  return st;
}
const std::vector<std::vector<float>>& CudaExecutor::last_logits() const {
  return impl_->last_logits;
}

std::vector<float> CudaExecutor::read_weight(const std::string& name) const {
  const Impl& s = *impl_;
  const auto it = s.weight_refs.find(name);
  if (it == s.weight_refs.end()) {
    throw std::out_of_range("CudaExecutor::read_weight: no weight '" + name + "'");
  }
  const Impl::WeightRef& w = it->second;
  const auto n = static_cast<std::size_t>(w.size);
  std::vector<float> out(n);
  k::synchronize(s.stream.get());
  if (w.bf16) {
    std::vector<Bf16> bits(n);
    k::copy_to_host(bits.data(), w.data, n * sizeof(Bf16));
    for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_float(bits[i]);
  } else {
    k::copy_to_host(out.data(), w.data, n * sizeof(float));
  }
  return out;
}

std::vector<float> CudaExecutor::read_lora(std::uint32_t id, std::int32_t layer, LoraTarget target,
                                           bool b) const {
  const Impl& s = *impl_;
  const std::int32_t slot = s.lora_slots ? s.lora_slots->slot_of(id) : -1;
  if (slot < 0 || layer < 0 || layer >= s.model().num_layers) {
    throw std::out_of_range("CudaExecutor::read_lora: adapter " + std::to_string(id) +
                            " is not on the device, or no layer " + std::to_string(layer));
  }
  const int t = static_cast<int>(target);
  const std::int32_t r = s.lora_ranks.at(id);
  const std::int64_t n = std::int64_t{r} * (b ? s.lora_shape.out[t] : s.lora_shape.in[t]);
  const std::int64_t off =
      b ? s.lora_shape.b_offset(r, layer, t) : s.lora_shape.a_offset(r, layer, t);
  std::vector<Bf16> bits(static_cast<std::size_t>(n));
  k::synchronize(s.stream.get());
  k::copy_to_host(bits.data(), s.lora_slot(slot) + off, static_cast<std::size_t>(n) * sizeof(Bf16));
  std::vector<float> out(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_float(bits[i]);
  return out;
}

std::int64_t CudaExecutor::tier_copy_ns() const { return impl_->tier_copy_ns; }
const PrefillLaunch& CudaExecutor::prefill_launch() const { return impl_->prefill_launch; }
std::int64_t CudaExecutor::packed_prefill_steps() const { return impl_->packed_prefill_steps; }

std::vector<std::uint8_t> CudaExecutor::read_tier_slot(std::int32_t layer, bool value,
                                                       std::int32_t slot) const {
  return impl_->read_plane(impl_->tier_cache, slot, layer, value);
}

std::vector<std::uint8_t> CudaExecutor::read_block(bool host, std::int32_t layer, bool value,
                                                   std::int32_t block) const {
  return impl_->read_plane(host ? impl_->host_cache : impl_->kv_cache, block, layer, value);
}

void CudaExecutor::Impl::forward_layers(const ForwardArgs& f) {
  const ModelConfig& m = model();
  const std::int32_t bs = options.block_size;
  const std::int32_t T = f.num_tokens, D = f.D, P = f.P, width = f.width;
  const std::int32_t H = m.hidden_size, Q = static_cast<std::int32_t>(m.q_size()),
                     KV = static_cast<std::int32_t>(m.kv_size()), I = m.intermediate_size;
  const float eps = static_cast<float>(m.rms_norm_eps);
  const float scale = 1.0f / std::sqrt(static_cast<float>(m.head_dim));
  const k::DecodeSplitPlan& dplan = f.dplan;
  const std::int32_t d_max_ctx = f.d_max_ctx;
  Impl& s = *this;
  float* residual = s.residual.as<float>();
  k::embedding_lookup(f.tokens, T, s.embed.as<Bf16>(), m.vocab_size, H, residual, s.stream.get());
  unsigned char* cache = s.kv_cache.as<unsigned char>();
  const std::int64_t eb = s.layout.elem_bytes;
  const k::FloatFormat kvf = options.kv_format;
  for (std::int32_t l = 0; l < m.num_layers; ++l) {
    const Impl::Layer& w = s.layers[l];
    k::rms_norm({residual, nullptr, nullptr, w.in_norm.as<float>(), s.hbuf.as<Bf16>(), T, H, eps},
                s.stream.get());
    s.gemm->linear(s.hbuf.as<Bf16>(), w.qkv.as<Bf16>(), s.qkv.get(), k::Gemm::Out::kF32, T, H,
                   Q + 2 * KV, 0.0f, s.stream.get());
    const bool lora = f.lora != nullptr && !f.lora->empty();
    if (lora) {
      s.apply_lora(*f.lora, l, LoraTarget::kQ, 3, s.hbuf.as<Bf16>(), H, s.qkv.get(),
                   k::Gemm::Out::kF32, Q + 2 * KV);
    }
    void* k_layer = cache + s.layout.layer_base(l, 0) * eb;
    void* v_layer = cache + s.layout.layer_base(l, 1) * eb;
    const float* bias = m.qkv_bias ? w.qkv_bias.as<float>() : nullptr;
    if (options.fused_qkv_rope) {
      k::qkv_rope_kv_write(
          {s.qkv.as<float>(), bias, f.positions, s.cos_sin.as<float>(), T, m.num_heads,
           m.num_kv_heads, m.head_dim, s.q.as<Bf16>(), f.slots, k_layer, v_layer,
           s.layout.block_stride(), bs, kvf, options.k_scale, options.v_scale},
          s.stream.get());
    } else {
      k::qkv_rope({s.qkv.as<float>(), bias, f.positions, s.cos_sin.as<float>(), T, m.num_heads,
                   m.num_kv_heads, m.head_dim, s.q.as<Bf16>(), s.kk.as<Bf16>(), s.vv.as<Bf16>()},
                  s.stream.get());
      k::kv_write(
          {s.kk.as<Bf16>(), s.vv.as<Bf16>(), f.slots, T, k_layer, v_layer, s.layout.block_stride(),
           bs, m.num_kv_heads, m.head_dim, kvf, options.k_scale, options.v_scale},
          s.stream.get());
    }
    k::PagedKv kv{k_layer,
                  v_layer,
                  s.layout.block_stride(),
                  bs,
                  m.num_kv_heads,
                  m.head_dim,
                  nullptr,
                  width,
                  kvf,
                  options.k_scale,
                  options.v_scale};
    if (D > 0) {
      kv.block_tables = f.d_tab;
      k::paged_decode_attention(
          {kv, s.q.as<Bf16>(), s.attn.as<Bf16>(), f.d_rows, f.d_ctx, D, m.num_heads, scale, dplan,
           f.d_workspace, d_max_ctx, s.options.decode_kernel},
          s.stream.get());
    }
    if (P > 0) {
      kv.block_tables = f.p_tab;
      k::paged_prefill_attention(
          {kv, s.q.as<Bf16>(), s.attn.as<Bf16>(), f.p_beg, f.p_num, f.p_first, f.tiles, f.num_tiles,
           m.num_heads, scale, f.p_kernel, f.psplit, s.prefill_workspace.as<float>(), f.p_longest},
          s.stream.get());
    }
    s.gemm->linear(s.attn.as<Bf16>(), w.o.as<Bf16>(), residual, k::Gemm::Out::kF32, T, Q, H, 1.0f,
                   s.stream.get());
    if (lora) {
      s.apply_lora(*f.lora, l, LoraTarget::kO, 1, s.attn.as<Bf16>(), Q, residual,
                   k::Gemm::Out::kF32, H);
    }
    k::rms_norm({residual, nullptr, nullptr, w.post_norm.as<float>(), s.hbuf.as<Bf16>(), T, H, eps},
                s.stream.get());
    s.gemm->linear(s.hbuf.as<Bf16>(), w.gate_up.as<Bf16>(), s.gate_up.get(), k::Gemm::Out::kBf16, T,
                   H, 2 * I, 0.0f, s.stream.get());
    if (!lora) {
      s.gemm->swiglu_linear(s.gate_up.as<Bf16>(), s.act.as<Bf16>(), w.down.as<Bf16>(), residual,
                            k::Gemm::Out::kF32, T, I, H, 1.0f, s.stream.get());
      continue;
    }
    // Adapted steps: gate and up take their deltas before the activation, and down's input
    // (act) is materialised for its own delta.
    s.apply_lora(*f.lora, l, LoraTarget::kGate, 2, s.hbuf.as<Bf16>(), H, s.gate_up.get(),
                 k::Gemm::Out::kBf16, 2 * I);
    k::silu_mul(s.gate_up.as<Bf16>(), s.act.as<Bf16>(), T, I, s.stream.get());
    s.gemm->linear(s.act.as<Bf16>(), w.down.as<Bf16>(), residual, k::Gemm::Out::kF32, T, I, H, 1.0f,
                   s.stream.get());
    s.apply_lora(*f.lora, l, LoraTarget::kDown, 1, s.act.as<Bf16>(), I, residual,
                 k::Gemm::Out::kF32, H);
  }
}

void CudaExecutor::Impl::load_lora(std::int32_t slot, std::uint32_t id, std::int32_t rank) {
  // Generated on the device from make_lora_adapter's draws (an 8B model's rank-16 adapter is 42 M
  // values: seconds on the host, milliseconds here; vLLM copies it from its CPU cache instead),
  // B times the scaling in fp32 as the host's `scaling * b`, then rounded to bf16.
  const ModelConfig& m = model();
  Bf16* base = lora_slot_memory.as<Bf16>() + slot * lora_slot_elements;
  const float scaling = lora_scaling(rank);
  for (std::int32_t l = 0; l < m.num_layers; ++l) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const LoraPairDraw d =
          lora_pair_draw(m, options.lora_seed, id, rank, l, static_cast<LoraTarget>(t));
      k::fill_counter_normal(base + lora_shape.a_offset(rank, l, t), std::int64_t{rank} * d.in, d.a,
                             stream.get());
      k::fill_counter_normal(base + lora_shape.b_offset(rank, l, t), d.out * rank, d.b,
                             stream.get(), scaling);
    }
  }
}

void CudaExecutor::Impl::apply_lora(const LoraStep& lora, std::int32_t l, LoraTarget first,
                                    std::int32_t num_targets, const Bf16* in, std::int32_t ld_in,
                                    void* out, k::Gemm::Out out_type, std::int32_t ld_out) {
  const int first_target = static_cast<int>(first);
  k::lora_cublas(*gemm, lora.segments.data(), static_cast<std::int32_t>(lora.segments.size()),
                 lora_shape, l, first_target, num_targets, in, ld_in, out, out_type, ld_out,
                 lora_tmp.as<Bf16>(), stream.get());
  if (lora.num_rows == 0) return;
  k::LoraGroupArgs g;
  g.rows = lora.rows;
  g.num_rows = lora.num_rows;
  g.shape = lora_shape;
  g.layer = l;
  g.first_target = first_target;
  g.num_targets = num_targets;
  g.tmp = lora.gather_tmp;
  g.max_rank = lora.max_rank;
  k::lora_shrink(g, in, ld_in, stream.get());
  k::lora_expand(g, out, out_type == k::Gemm::Out::kF32, ld_out, 0, stream.get());
}

void CudaExecutor::Impl::run_decode_graph(const k::DecodeGraphKey& key, const ForwardArgs& f) {
  // Graphs of an older buffer generation point at freed memory: drop them all.
  for (auto it = graphs.begin(); it != graphs.end();) {
    it = it->first.buffers_generation != buffers_generation ? graphs.erase(it) : std::next(it);
  }
  auto it = graphs.find(key);
  if (it == graphs.end()) {
    // The first capture of a (bucket, split, lora) triple follows an eager pass of the step (it
    // warms cuBLAS up for the bucket's shapes and loads every kernel, so that nothing initialises
    // lazily during capture); replaying recomputes the same values, so the KV rows it writes
    // are bit-identical. Later keys of the triple (a wider table, another partition) only capture.
    const bool eager_ran = warmed.emplace(key.bucket, key.max_splits > 1, key.lora).second;
    if (eager_ran) {
      forward_layers(f);
      ++stats.padded_eager;
    }
    GraphEntry entry;
    try {
      entry.graph.begin_capture(stream.get());
      forward_layers(f);
      entry.graph.end_capture();
    } catch (const std::exception& e) {
      entry.graph.abort_capture();
      stats.disabled = true;
      graphs.clear();
      std::fprintf(stderr,
                   "servelab: CUDA graph capture failed (%s); decode steps run eagerly from now "
                   "on (SERVELAB_CUDA_GRAPHS=0 skips the attempt)\n",
                   e.what());
      if (!eager_ran) {
        forward_layers(f);
        ++stats.padded_eager;
      }
      return;
    }
    ++stats.captures;
    if (graphs.size() >= max_graphs()) {
      auto oldest = graphs.begin();
      for (auto g = graphs.begin(); g != graphs.end(); ++g) {
        if (g->second.last_used < oldest->second.last_used) oldest = g;
      }
      graphs.erase(oldest);
    }
    it = graphs.emplace(key, std::move(entry)).first;
  }
  it->second.last_used = ++graph_clock;
  it->second.graph.launch(stream.get());
  ++stats.replays;
}

StepResult CudaExecutor::execute(const StepPlan& plan) {
  const auto start = std::chrono::steady_clock::now();
  Impl& s = *impl_;
  const ModelConfig& m = s.model();
  const CudaExecutorOptions& opt = s.options;
  const std::int32_t bs = opt.block_size;
  // The kernels that support it launch with programmatic dependent launch (kernels/
  // programmatic_launch.h), captured graphs included.
  const k::ProgrammaticLaunch pdl(opt.programmatic_launch);

  // Validation: the same plans CpuExecutor refuses, before any state changes.
  PlanLimits limits;
  limits.num_blocks = opt.num_blocks;
  limits.num_host_blocks = opt.num_host_blocks;
  limits.block_size = bs;
  limits.max_context = s.rope_rows;
  check_plan(plan, limits, "CudaExecutor");
  check_tier_moves(plan, opt.num_blocks, opt.num_tier_slots, "CudaExecutor");
  const std::vector<std::uint8_t> takes_previous = s.previous.takers(plan, "CudaExecutor");
  check_lora_entries(
      plan, opt.enable_lora,
      [&](std::uint32_t id) {
        const auto it = s.lora_ranks.find(id);
        return it == s.lora_ranks.end() ? 0 : it->second;
      },
      "CudaExecutor");
  // The step's adapters, each once in order of first appearance: at most max_loras of them, each
  // within max_lora_rank (the scheduler admits no more; a plan from elsewhere is refused here).
  std::vector<std::uint32_t> step_loras;
  step_adapters(plan, step_loras);
  for (const ScheduledRequest& e : plan.requests) {
    if (e.spec->lora_id != 0 && e.spec->lora_rank > opt.max_lora_rank) {
      throw std::invalid_argument("CudaExecutor: LoRA adapter " + std::to_string(e.spec->lora_id) +
                                  " has rank " + std::to_string(e.spec->lora_rank) +
                                  ", above max_lora_rank " + std::to_string(opt.max_lora_rank));
    }
  }
  if (static_cast<std::int64_t>(step_loras.size()) > opt.max_loras) {
    throw std::invalid_argument("CudaExecutor: a step under " + std::to_string(step_loras.size()) +
                                " LoRA adapters, more than max_loras " +
                                std::to_string(opt.max_loras));
  }

  std::int32_t max_ctx = 0;
  for (const ScheduledRequest& e : plan.requests) max_ctx = std::max(max_ctx, e.context_len());

  // Step metadata on the host.
  const std::int32_t width = std::max<std::int32_t>(1, (max_ctx + bs - 1) / bs);  // table stride
  std::vector<std::int32_t> tokens, positions;
  std::vector<std::int64_t> slots;
  std::vector<std::int32_t> d_rows, d_ctx, d_tables;
  std::vector<std::int32_t> p_begin, p_num, p_first, p_tables;
  std::vector<std::int32_t> sample_rows;
  std::vector<std::int32_t> mask_rows, mask_tokens;  // (sampled row, token) it must not draw
  std::vector<std::int32_t> pen_rows, pen_tokens;    // (sampled row, token) a request adjusts
  // The sampled rows with allowed_token_ids or a grammar, and their masks of the vocabulary's
  // words, one after another (row_keep_mask, keep_allowed_logits).
  std::vector<std::int32_t> keep_rows;
  std::vector<std::uint32_t> keep_masks;
  std::vector<float> pen_adjust;  // by (bias, factor, delta), LogitAdjustment
  std::vector<float> sample_u;
  s.prompt_sets.retain(plan);
  // Rows' own (temperature, top_p, top_k, min_p) when a sampled entry's request has its own
  // parameters (RequestSpec::sampling); then every row of the step takes the per-row kernel.
  bool per_row = false;
  bool any_top_p = opt.sampling.temperature > 0;
  for (const ScheduledRequest& e : plan.requests)
    per_row = per_row || (e.samples && e.spec->sampling);
  std::vector<float> sample_params;
  std::vector<std::int32_t> sample_k;     // its sample index (parallel sampling)
  std::vector<std::size_t> sample_entry;  // its plan entry
  std::vector<std::int32_t> first_sample(plan.requests.size(), -1);  // each entry's first row
  // Prompt log probabilities: the rows that give them (core/step_plan.h prompt_logprob_rows),
  // in plan order, and the entry of each.
  std::vector<std::int32_t> prompt_rows;
  std::vector<std::size_t> prompt_entry;
  // Consecutive rows of the step under one adapter (adjacent entries of one adapter merged).
  std::vector<k::LoraSegment> lora_segments;
  if (!step_loras.empty()) {
    const std::vector<LoraSlots::Placement> placed = s.lora_slots->place(step_loras);
    for (std::size_t i = 0; i < step_loras.size(); ++i) {
      if (!placed[i].load) continue;
      const std::uint32_t id = step_loras[i];
      const auto e = std::find_if(plan.requests.begin(), plan.requests.end(),
                                  [&](const ScheduledRequest& r) { return r.spec->lora_id == id; });
      s.load_lora(placed[i].slot, id, e->spec->lora_rank);
      s.lora_ranks[id] = e->spec->lora_rank;
    }
  }
  for (std::size_t i = 0; i < plan.requests.size(); ++i) {
    const ScheduledRequest& e = plan.requests[i];
    const auto row0 = static_cast<std::int32_t>(tokens.size());
    if (e.spec->lora_id != 0 && e.num_tokens > 0) {
      const std::int32_t slot = s.lora_slots->slot_of(e.spec->lora_id);
      const Bf16* weights = s.lora_slot(slot);
      if (!lora_segments.empty() && lora_segments.back().weights == weights &&
          lora_segments.back().row0 + lora_segments.back().rows == row0) {
        lora_segments.back().rows += e.num_tokens;
      } else {
        lora_segments.push_back({weights, row0, e.num_tokens, e.spec->lora_rank});
      }
    }
    const std::span<const std::int32_t> drafts = plan.drafts_of(i);
    const auto d = static_cast<std::int32_t>(drafts.size());
    if (d > 0 && !opt.speculative.enabled()) {
      throw std::invalid_argument("CudaExecutor: request " + std::to_string(e.id) +
                                  " has draft tokens but speculative decoding is off");
    }
    if (d > 0 && (!e.samples || e.num_samples > 1 || d >= e.num_tokens)) {
      throw std::invalid_argument("CudaExecutor: request " + std::to_string(e.id) +
                                  ": a verify entry samples one sequence and has fewer drafts "
                                  "than tokens");
    }
    const auto known = e.spec->prompt_len + static_cast<std::int32_t>(e.output_tokens.size());
    for (std::int32_t p = e.first_token; p < e.context_len(); ++p) {
      std::int32_t value;
      if (p < e.spec->prompt_len) {
        value = prompt_token_value(*e.spec, p, m.vocab_size);
      } else if (p < known) {
        value = e.output_tokens[static_cast<std::size_t>(p - e.spec->prompt_len)];
      } else if (takes_previous[i] != 0) {  // async scheduling: the last plan's token
        value = s.previous.token(e.id);
      } else if (p - known < d) {
        value = drafts[static_cast<std::size_t>(p - known)];
      } else {
        throw std::invalid_argument("CudaExecutor: request " + std::to_string(e.id) +
                                    " runs position " + std::to_string(p) +
                                    " past its known tokens without a draft for it");
      }
      tokens.push_back(value);
      positions.push_back(p);
      slots.push_back(s.layout.slot_of(e.block_table.data(), p));
    }
    for (std::int32_t j = 0, n = prompt_logprob_rows(e); j < n; ++j) {
      prompt_rows.push_back(row0 + j);
      prompt_entry.push_back(i);
    }
    const bool decode = e.num_tokens == 1;
    std::vector<std::int32_t>& tables = decode ? d_tables : p_tables;
    const std::int32_t nb = (e.context_len() + bs - 1) / bs;
    for (std::int32_t b = 0; b < width; ++b) tables.push_back(b < nb ? e.block_table[b] : 0);
    if (decode) {
      d_rows.push_back(row0);
      d_ctx.push_back(e.context_len());
    } else {
      p_begin.push_back(row0);
      p_num.push_back(e.num_tokens);
      p_first.push_back(e.first_token);
    }
    // Parallel sampling draws num_samples tokens from the same logits: the row repeats. A
    // verify entry samples each of its last 1 + d rows (j = 0 .. d), row j at output index
    // outputs + j.
    if (e.samples) first_sample[i] = static_cast<std::int32_t>(sample_rows.size());
    const std::int32_t rows_sampled = e.samples ? std::max<std::int32_t>(1, e.num_samples) + d : 0;
    for (std::int32_t r = 0; r < rows_sampled; ++r) {
      const std::int32_t k = d > 0 ? 0 : r, j = d > 0 ? r : d;
      // The output index this row samples (CpuExecutor's): one more when the entry starts at
      // the previous step's token (async scheduling); a fork samples the request's first.
      const std::size_t index =
          e.output_tokens.size() + (k == 0 ? takes_previous[i] : 0) + static_cast<std::size_t>(j);
      const std::optional<std::int32_t> previous =
          k == 0 && takes_previous[i] != 0 ? std::optional(s.previous.token(e.id)) : std::nullopt;
      // min_tokens' and the bad words' bans, the allowed_token_ids (CpuExecutor's).
      for (const std::int32_t t : row_bans(e, index, previous, plan.drafts_of(i))) {
        mask_rows.push_back(static_cast<std::int32_t>(sample_rows.size()));
        mask_tokens.push_back(t);
      }
      const RequestSampling* own = e.spec->sampling.get();
      // The tokens it may draw: its allowed_token_ids, its structured output's grammar's, or
      // those of both (CpuExecutor's).
      const std::shared_ptr<const TokenMask> grammar = row_constraint(
          e, k == 0 ? e.id : sample_request_id(e.id, k), index, previous, plan.drafts_of(i));
      if (own != nullptr && (!own->allowed_token_ids.empty() || grammar != nullptr)) {
        keep_rows.push_back(static_cast<std::int32_t>(sample_rows.size()));
        const TokenMask keep = row_keep_mask(own->allowed_token_ids, grammar.get(), m.vocab_size);
        keep_masks.insert(keep_masks.end(), keep.begin(), keep.end());
      }
      if (own != nullptr && own->adjusts_logits()) {  // CpuExecutor's
        for (const LogitAdjustment& a : row_adjustments(e, index, previous, plan.drafts_of(i),
                                                        s.prompt_sets.of(e, m.vocab_size))) {
          pen_rows.push_back(static_cast<std::int32_t>(sample_rows.size()));
          pen_tokens.push_back(a.token);
          pen_adjust.insert(pen_adjust.end(), {a.bias, a.factor, a.delta});
        }
      }
      sample_rows.push_back(row0 + e.num_tokens - 1 - d + j);
      sample_k.push_back(k);
      sample_entry.push_back(i);
      // CpuExecutor's parameters and stream (engine/sample_stream.h).
      const RowSampling row =
          row_sampling(opt.sampling, *e.spec, k == 0 ? e.id : sample_request_id(e.id, k), index);
      sample_u.push_back(static_cast<float>(row.u));
      if (per_row) {
        // top_k as a float (exact below 2^24); one at or above the vocabulary keeps every token.
        const std::int32_t top_k = row.top_k < m.vocab_size ? row.top_k : 0;
        sample_params.insert(sample_params.end(),
                             {static_cast<float>(row.temperature), static_cast<float>(row.top_p),
                              static_cast<float>(top_k), static_cast<float>(row.min_p)});
        any_top_p = any_top_p || row.temperature > 0;
      }
    }
  }
  // LoRA: short segments' rows to the gather kernels (kernels/lora_kernel.h), the rest to cuBLAS;
  // in a decode-only step every row to the gather kernels (one row per sequence: the weights are
  // not reused across rows anyway, and the step can then be a CUDA graph).
  Impl::LoraStep lora;
  std::vector<k::LoraRow> lora_rows;
  std::int32_t lora_cublas_rank = 0;
  const bool decode_only = p_num.empty() && d_rows.size() == tokens.size();
  for (const k::LoraSegment& g : lora_segments) {
    const std::int32_t r = g.rank;
    if (opt.lora_kernel == k::LoraKernel::kGather && s.lora_gather_ok &&
        (g.rows <= k::kLoraGatherMaxRows || decode_only) && r <= k::kLoraMaxGatherRank) {
      for (std::int32_t i = 0; i < g.rows; ++i) lora_rows.push_back({g.weights, g.row0 + i, r});
      lora.max_rank = std::max(lora.max_rank, r);
    } else {
      lora.segments.push_back(g);
      lora_cublas_rank = std::max(lora_cublas_rank, r);
    }
  }
  lora.num_rows = static_cast<std::int32_t>(lora_rows.size());
  // The prefill launch's shape: packed heads when every entry is short (prefill_launch_shape).
  const PrefillLaunchShape p_shape = prefill_launch_shape(
      s.prefill_launch, p_num.empty() ? 0 : *std::max_element(p_num.begin(), p_num.end()));
  const k::PrefillKernel p_kernel =
      p_shape.packed ? k::PrefillKernel::kFa2Gqa : *opt.prefill_kernel;
  const std::int32_t tile_rows = p_shape.tile_rows;
  const std::vector<k::PrefillTile> tiles = k::plan_prefill_tiles(p_num, tile_rows);
  auto pairs_of = [](const std::vector<BlockMove>& moves) {
    std::vector<k::BlockPair> v;
    for (const BlockMove& mv : moves) v.push_back({mv.src, mv.dst});
    return v;
  };
  const auto T = static_cast<std::int32_t>(tokens.size());
  const auto S = static_cast<std::int32_t>(sample_rows.size());
  const auto D = static_cast<std::int32_t>(d_rows.size());
  const auto P = static_cast<std::int32_t>(p_num.size());

  s.staging.clear();
  const std::size_t o_tokens = s.staging.add(tokens), o_pos = s.staging.add(positions),
                    o_slots = s.staging.add(slots), o_drows = s.staging.add(d_rows),
                    o_dctx = s.staging.add(d_ctx), o_dtab = s.staging.add(d_tables),
                    o_pbeg = s.staging.add(p_begin), o_pnum = s.staging.add(p_num),
                    o_pfirst = s.staging.add(p_first), o_ptab = s.staging.add(p_tables),
                    o_tiles = s.staging.add(tiles), o_srows = s.staging.add(sample_rows),
                    o_u = s.staging.add(sample_u), o_out = s.staging.add(pairs_of(plan.swap_out)),
                    o_in = s.staging.add(pairs_of(plan.swap_in)),
                    o_copy = s.staging.add(pairs_of(plan.copies)),
                    o_mrows = s.staging.add(mask_rows), o_mtoks = s.staging.add(mask_tokens),
                    o_lrows = s.staging.add(lora_rows), o_sparams = s.staging.add(sample_params),
                    o_prows = s.staging.add(pen_rows), o_ptoks = s.staging.add(pen_tokens),
                    o_padjust = s.staging.add(pen_adjust), o_plrows = s.staging.add(prompt_rows),
                    o_krows = s.staging.add(keep_rows), o_kmasks = s.staging.add(keep_masks);
  const TierPhases tier = tier_phases(plan);
  std::vector<std::size_t> o_tier;
  for (const TierPhase& ph : tier.phases) o_tier.push_back(s.staging.add(ph.pairs));
  s.ensure_bytes(s.meta, s.staging.bytes().size() + 16, false);
  s.ensure_bytes(s.tier_staging,
                 static_cast<std::size_t>(tier.staged_blocks * s.layout.block_bytes()), false);
  s.ensure_capacity(T, S);
  if (any_top_p) {  // the probabilities' scratch (requests' own temperatures: grown here)
    s.ensure_bytes(s.prob, static_cast<std::size_t>(S) * m.vocab_size * sizeof(float), false);
  }
  k::copy_async(s.meta.get(), s.staging.bytes().data(), s.staging.bytes().size(), s.stream.get());
  auto at = [&](std::size_t off) { return static_cast<unsigned char*>(s.meta.get()) + off; };
  auto i32 = [&](std::size_t off) { return reinterpret_cast<const std::int32_t*>(at(off)); };

  // Block moves, in CpuExecutor's order.
  const std::int64_t block_bytes = s.layout.block_bytes();
  auto pairs = [&](std::size_t off) { return reinterpret_cast<const k::BlockPair*>(at(off)); };
  k::copy_blocks(s.kv_cache.get(), s.host_cache.get(), pairs(o_out),
                 static_cast<std::int32_t>(plan.swap_out.size()), block_bytes, s.stream.get());
  if (!tier.phases.empty()) {
    // Timed as CpuExecutor times them: the copies' wall time (the step waits for them).
    k::synchronize(s.stream.get());
    const auto t0 = std::chrono::steady_clock::now();
    void* where[3] = {s.kv_cache.get(), s.tier_cache.get(), s.tier_staging.get()};
    for (std::size_t i = 0; i < tier.phases.size(); ++i) {
      const TierPhase& ph = tier.phases[i];
      k::copy_blocks(where[static_cast<int>(ph.from)], where[static_cast<int>(ph.to)],
                     pairs(o_tier[i]), static_cast<std::int32_t>(ph.pairs.size()), block_bytes,
                     s.stream.get());
    }
    k::synchronize(s.stream.get());
    s.tier_copy_ns +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count();
  }
  k::copy_blocks(s.host_cache.get(), s.kv_cache.get(), pairs(o_in),
                 static_cast<std::int32_t>(plan.swap_in.size()), block_bytes, s.stream.get());
  k::copy_blocks(s.kv_cache.get(), s.kv_cache.get(), pairs(o_copy),
                 static_cast<std::int32_t>(plan.copies.size()), block_bytes, s.stream.get());

  StepResult result;
  result.sampled_tokens.assign(plan.requests.size(), -1);
  s.last_logits.assign(opt.keep_logits ? plan.requests.size() : 0, {});
  if (T > 0) {
    const std::int32_t H = m.hidden_size;
    const float eps = static_cast<float>(m.rms_norm_eps);
    float* residual = s.residual.as<float>();
    // Decode-only steps of at most the largest bucket take the graph path (replayed, or padded
    // eager with pad_decode_steps); everything else runs eagerly, unpadded. A decode step under
    // LoRA adapters takes it when every adapted row went to the gather kernels (none to cuBLAS,
    // whose GEMMs per segment depend on the batch's adapters).
    const std::int32_t bucket = P == 0 && D == T && lora.segments.empty()
                                    ? k::decode_graph_bucket(s.buckets, D)
                                    : std::int32_t{0};
    const bool graph_path =
        bucket > 0 && ((opt.cuda_graphs && !s.stats.disabled) || opt.pad_decode_steps);
    if (graph_path) {
      // Padding rows attend to one key (pad_decode_inputs).
      std::vector<std::int32_t> padded_ctx = d_ctx;
      padded_ctx.resize(static_cast<std::size_t>(bucket), 1);
      const k::DecodeGraphShape shape = k::decode_graph_shape(
          padded_ctx, width, s.max_table_width(),
          k::decode_graph_min_table_width(bucket, s.max_table_width(), opt.graph_table_bytes),
          s.decode_ctas_per_seq, s.decode_max_ctas, bs);
      const std::int32_t table_width = shape.table_width;
      const k::PaddedDecodeInputs in = k::pad_decode_inputs(
          tokens, positions, slots, d_ctx, d_tables, width, bucket, table_width, 0);
      Impl::ForwardArgs f;
      f.num_tokens = f.D = bucket;
      f.width = table_width;
      f.dplan = shape.plan;
      f.d_max_ctx = *std::max_element(d_ctx.begin(), d_ctx.end());
      // Size everything before the key is taken: a reallocation bumps buffers_generation.
      s.ensure_capacity(bucket, S);
      if (f.dplan.split()) {
        s.ensure_bytes(s.graph_workspace,
                       s.graph_workspace_bytes(table_width, bucket, f.dplan.max_splits));
      }
      f.d_workspace = s.graph_workspace.as<float>();
      // LoRA: an entry per bucket row (rank 0: no adapter), at the gather kernels' largest rank
      // so that the graph does not depend on the batch's ranks.
      std::vector<k::LoraRow> graph_lora(static_cast<std::size_t>(bucket));
      for (std::int32_t i = 0; i < bucket; ++i) graph_lora[static_cast<std::size_t>(i)].row = i;
      for (const k::LoraRow& r : lora_rows) graph_lora[static_cast<std::size_t>(r.row)] = r;
      if (lora.num_rows > 0) {  // as allocated by the constructor: never grows here
        s.ensure_bytes(s.graph_lora_gather, graph_lora_gather_bytes(bucket));
      }
      const Impl::GraphInputOffsets g = s.stage_graph_inputs(in, graph_lora);
      s.ensure_bytes(s.graph_meta, s.graph_staging.bytes().size() + 16);
      k::copy_async(s.graph_meta.get(), s.graph_staging.bytes().data(),
                    s.graph_staging.bytes().size(), s.stream.get());
      const auto* gm = static_cast<const unsigned char*>(s.graph_meta.get());
      auto g32 = [&](std::size_t off) { return reinterpret_cast<const std::int32_t*>(gm + off); };
      f.tokens = g32(g.tokens);
      f.positions = g32(g.positions);
      f.slots = reinterpret_cast<const std::int64_t*>(gm + g.slots);
      f.d_rows = g32(g.q_rows);
      f.d_ctx = g32(g.context_lens);
      f.d_tab = g32(g.block_tables);
      Impl::LoraStep graph_step;
      if (lora.num_rows > 0) {
        graph_step.rows = reinterpret_cast<const k::LoraRow*>(gm + g.lora_rows);
        graph_step.num_rows = bucket;
        graph_step.max_rank = k::kLoraMaxGatherRank;
        graph_step.gather_tmp = s.graph_lora_gather.as<float>();
        f.lora = &graph_step;
      }
      const k::DecodeGraphKey key{bucket,
                                  table_width,
                                  f.dplan.partition_tokens,
                                  f.dplan.max_splits,
                                  s.buffers_generation,
                                  lora.num_rows > 0};
      if (opt.cuda_graphs && !s.stats.disabled) {
        s.run_decode_graph(key, f);
      } else {
        s.forward_layers(f);
        ++s.stats.padded_eager;
      }
    } else {
      Impl::ForwardArgs f;
      f.num_tokens = T;
      f.tokens = i32(o_tokens);
      f.positions = i32(o_pos);
      f.slots = reinterpret_cast<const std::int64_t*>(at(o_slots));
      f.width = width;
      f.D = D;
      f.P = P;
      if (D > 0) {
        f.d_rows = i32(o_drows);
        f.d_ctx = i32(o_dctx);
        f.d_tab = i32(o_dtab);
        f.d_max_ctx = *std::max_element(d_ctx.begin(), d_ctx.end());
        f.dplan = k::plan_decode_splits(d_ctx, s.decode_ctas_per_seq, s.decode_max_ctas);
        if (f.dplan.split()) {
          s.ensure_bytes(s.workspace,
                         static_cast<std::size_t>(k::decode_workspace_floats(
                             D, m.num_heads, m.head_dim, f.dplan.max_splits)) *
                             sizeof(float),
                         false);
          f.d_workspace = s.workspace.as<float>();
        }
      }
      if (P > 0) {
        f.p_beg = i32(o_pbeg);
        f.p_num = i32(o_pnum);
        f.p_first = i32(o_pfirst);
        f.p_tab = i32(o_ptab);
        f.tiles = reinterpret_cast<const k::PrefillTile*>(at(o_tiles));
        f.num_tiles = static_cast<std::int32_t>(tiles.size());
        for (std::size_t i = 0; i < p_num.size(); ++i) {
          f.p_longest = std::max<std::int64_t>(f.p_longest, std::int64_t{p_first[i]} + p_num[i]);
        }
        f.p_kernel = p_kernel;
        // Split as the launch description says (0: the configured kernel never splits, and a
        // packed launch then stays unsplit too, as the cost model prices it).
        if (const std::int32_t min_split = s.prefill_launch.min_split_tokens; min_split > 0) {
          f.psplit = k::plan_prefill_splits(f.num_tiles, p_shape.head_ctas, f.p_longest,
                                            p_shape.max_ctas, min_split);
        }
        if (p_shape.packed) ++s.packed_prefill_steps;
        if (f.psplit.split()) {
          s.ensure_bytes(s.prefill_workspace,
                         static_cast<std::size_t>(k::prefill_workspace_floats(
                             f.num_tiles, m.num_heads, m.head_dim, f.psplit.kv_splits, tile_rows)) *
                             sizeof(float),
                         false);
        }
      }
      if (!lora.empty()) {
        s.ensure_bytes(s.lora_tmp,
                       static_cast<std::size_t>(T) *
                           static_cast<std::size_t>(std::max(1, lora_cublas_rank)) * sizeof(Bf16),
                       false);
        s.ensure_bytes(s.lora_gather,
                       static_cast<std::size_t>(std::max(1, lora.num_rows)) *
                           k::kLoraMaxGroupTargets *
                           static_cast<std::size_t>(std::max(1, lora.max_rank)) * sizeof(float),
                       false);
        lora.gather_tmp = s.lora_gather.as<float>();
        lora.rows = reinterpret_cast<const k::LoraRow*>(at(o_lrows));
        f.lora = &lora;
      }
      s.forward_layers(f);
      ++s.stats.eager_steps;
    }
    if (S > 0) {
      k::rms_norm({residual, nullptr, i32(o_srows), s.final_norm.as<float>(), s.final_h.as<Bf16>(),
                   S, H, eps},
                  s.stream.get());
      const Bf16* head = m.tie_word_embeddings ? s.embed.as<Bf16>() : s.lm_head.as<Bf16>();
      s.gemm->linear(s.final_h.as<Bf16>(), head, s.logits.get(), k::Gemm::Out::kF32, S, H,
                     m.vocab_size, 0.0f, s.stream.get());
      // The raw logits (before the min_tokens mask) of the entries whose requests asked for log
      // probabilities, to the host (engine/logprobs.h computes them there, as CpuExecutor does).
      std::vector<std::int32_t> lp_index(plan.requests.size(), -1);
      std::vector<float> lp_rows;
      for (std::size_t i = 0; i < plan.requests.size(); ++i) {
        if (first_sample[i] < 0 || plan.requests[i].spec->logprobs < 0 ||
            !plan.drafts_of(i).empty()) {
          continue;
        }
        lp_index[i] = static_cast<std::int32_t>(lp_rows.size() / m.vocab_size);
        lp_rows.resize(lp_rows.size() + static_cast<std::size_t>(m.vocab_size));
      }
      for (std::size_t i = 0; i < plan.requests.size(); ++i) {
        if (lp_index[i] < 0) continue;
        k::copy_async(lp_rows.data() + std::int64_t{lp_index[i]} * m.vocab_size,
                      s.logits.as<float>() + std::int64_t{first_sample[i]} * m.vocab_size,
                      static_cast<std::size_t>(m.vocab_size) * sizeof(float), s.stream.get());
      }
      k::keep_allowed_logits(s.logits.as<float>(), m.vocab_size, i32(o_krows),
                             reinterpret_cast<const std::uint32_t*>(at(o_kmasks)),
                             (m.vocab_size + 31) / 32, static_cast<std::int32_t>(keep_rows.size()),
                             s.stream.get());
      k::adjust_logits(s.logits.as<float>(), m.vocab_size, i32(o_prows), i32(o_ptoks),
                       reinterpret_cast<const float*>(at(o_padjust)),
                       static_cast<std::int32_t>(pen_rows.size()), s.stream.get());
      k::mask_logits(s.logits.as<float>(), m.vocab_size, i32(o_mrows), i32(o_mtoks),
                     static_cast<std::int32_t>(mask_rows.size()), s.stream.get());
      if (per_row) {
        k::sample_rows(s.logits.as<float>(), S, m.vocab_size,
                       reinterpret_cast<const float*>(at(o_sparams)),
                       reinterpret_cast<const float*>(at(o_u)), s.prob.as<float>(),
                       s.sampled.as<std::int32_t>(), s.stream.get());
      } else if (opt.sampling.temperature > 0) {
        k::top_p_sample(
            s.logits.as<float>(), S, m.vocab_size, static_cast<float>(opt.sampling.temperature),
            static_cast<float>(opt.sampling.top_p), reinterpret_cast<const float*>(at(o_u)),
            s.prob.as<float>(), s.sampled.as<std::int32_t>(), s.stream.get());
      } else {
        k::greedy_sample(s.logits.as<float>(), S, m.vocab_size, s.sampled.as<std::int32_t>(),
                         s.stream.get());
      }
      std::vector<std::int32_t> sampled(S);
      k::copy_async(sampled.data(), s.sampled.get(), S * sizeof(std::int32_t), s.stream.get());
      std::vector<float> logits;
      if (opt.keep_logits) {
        logits.resize(static_cast<std::size_t>(S) * m.vocab_size);
        k::copy_async(logits.data(), s.logits.get(), logits.size() * sizeof(float), s.stream.get());
      }
      k::synchronize(s.stream.get());
      if (plan.num_draft_tokens > 0) result.num_accepted.assign(plan.requests.size(), 0);
      if (opt.speculative.enabled()) result.num_proposed.assign(plan.requests.size(), 0);
      std::vector<std::int32_t> history;
      for (std::size_t i = 0; i < plan.requests.size(); ++i) {
        if (first_sample[i] < 0) continue;
        // Verification: row j's token is the draft at j while they agree.
        const std::span<const std::int32_t> drafts = plan.drafts_of(i);
        const auto d = static_cast<std::int32_t>(drafts.size());
        std::int32_t accepted = 0;
        while (accepted < d && sampled[first_sample[i] + accepted] == drafts[accepted]) ++accepted;
        if (d > 0) result.num_accepted[i] = accepted;
        const std::int32_t r = first_sample[i] + accepted;
        result.sampled_tokens[i] = sampled[r];
        if (opt.keep_logits) {
          s.last_logits[i].assign(logits.begin() + std::int64_t{r} * m.vocab_size,
                                  logits.begin() + std::int64_t{r + 1} * m.vocab_size);
        }
        if (opt.speculative.enabled()) {
          result.num_proposed[i] = propose_after_step(
              plan.requests[i], drafts.first(static_cast<std::size_t>(accepted)), sampled[r],
              m.vocab_size, opt.speculative, history, result.proposed_tokens);
        }
      }
      const auto raw_row = [&](std::size_t i) {
        return std::span<const float>(lp_rows.data() + std::int64_t{lp_index[i]} * m.vocab_size,
                                      static_cast<std::size_t>(m.vocab_size));
      };
      for (std::size_t i = 0; i < plan.requests.size(); ++i) {
        if (lp_index[i] < 0) continue;
        result.logprobs.resize(plan.requests.size());
        result.logprobs[i] =
            token_logprobs(raw_row(i), result.sampled_tokens[i], plan.requests[i].spec->logprobs);
      }
      // Forks (sample index k >= 1): rows in plan order, samples in order.
      for (std::int32_t r = 0; r < S; ++r) {
        if (sample_k[r] == 0) continue;
        result.fork_tokens.push_back(sampled[r]);
        const std::size_t i = sample_entry[r];
        if (lp_index[i] < 0) continue;
        result.fork_logprobs.resize(result.fork_tokens.size());
        result.fork_logprobs.back() =
            token_logprobs(raw_row(i), sampled[r], plan.requests[i].spec->logprobs);
      }
      if (!result.fork_logprobs.empty()) result.fork_logprobs.resize(result.fork_tokens.size());
    }
    if (!prompt_rows.empty()) {
      // Prompt log probabilities: the final norm and the LM head over the rows that give them,
      // as many at a time as the sampled rows' buffers hold, each row's raw logits to the host.
      const auto PL = static_cast<std::int32_t>(prompt_rows.size());
      const std::int32_t chunk = std::max(1, s.cap_rows);
      const Bf16* head = m.tie_word_embeddings ? s.embed.as<Bf16>() : s.lm_head.as<Bf16>();
      std::vector<float> rows(static_cast<std::size_t>(std::min(chunk, PL)) * m.vocab_size);
      for (std::int32_t b = 0; b < PL; b += chunk) {
        const std::int32_t n = std::min(chunk, PL - b);
        k::rms_norm({residual, nullptr, i32(o_plrows) + b, s.final_norm.as<float>(),
                     s.final_h.as<Bf16>(), n, H, eps},
                    s.stream.get());
        s.gemm->linear(s.final_h.as<Bf16>(), head, s.logits.get(), k::Gemm::Out::kF32, n, H,
                       m.vocab_size, 0.0f, s.stream.get());
        k::copy_async(rows.data(), s.logits.get(),
                      static_cast<std::size_t>(n) * m.vocab_size * sizeof(float), s.stream.get());
        k::synchronize(s.stream.get());
        for (std::int32_t r = b; r < b + n; ++r) {
          const std::size_t i = prompt_entry[static_cast<std::size_t>(r)];
          const ScheduledRequest& e = plan.requests[i];
          if (result.prompt_logprobs.empty() || result.prompt_logprobs.back().entry != i) {
            PromptLogprobs& out = result.prompt_logprobs.emplace_back();
            out.entry = i;
            out.first_position = e.first_token + 1;
          }
          PromptLogprobs& out = result.prompt_logprobs.back();
          const std::int32_t position =
              out.first_position + static_cast<std::int32_t>(out.values.size());
          out.values.push_back(token_logprobs(
              std::span<const float>(rows.data() + std::int64_t{r - b} * m.vocab_size,
                                     static_cast<std::size_t>(m.vocab_size)),
              prompt_token_value(*e.spec, position, m.vocab_size), e.spec->prompt_logprobs));
        }
      }
    }
  }
  k::synchronize(s.stream.get());
  s.previous.record(plan, result);
  result.duration_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  return result;
}

}  // namespace servelab
