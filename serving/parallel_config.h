// ParallelConfig: how one replica spreads a model over GPUs, and what its communication costs.
//
// Tensor parallelism (Megatron-LM style, as vLLM runs it) over `tensor` GPUs: each GPU holds
// 1/tensor of the attention heads (and of the KV heads; they are replicated when tensor exceeds
// num_kv_heads), of the MLP's intermediate width and of the vocabulary; the QKV and gate/up
// projections are split by columns, O and down by rows, so each layer ends its attention and
// its MLP with an all-reduce of the hidden states (two per layer), and the vocabulary-parallel
// embedding adds one more. Pipeline parallelism over `pipeline` stages: stage s holds
// stage_layers(L, pipeline, s) consecutive layers (the first on also the embedding, the last
// the LM head) and sends its hidden states and residual to the next stage (vLLM's
// IntermediateTensors). A step's batch passes through the
// stages in `microbatches` micro-batches (GPipe). How the cost model prices all this:
// sim/roofline_cost_model.h and docs/cost-model.md ("Parallelism").
//
// A replica occupies tensor * pipeline GPUs of a topology: stage s on GPUs
// [first + s * tensor, first + (s + 1) * tensor).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "serving/collectives.h"
#include "serving/config_node.h"
#include "serving/expert_routing.h"
#include "serving/hardware_config.h"
#include "serving/model_config.h"
#include "serving/topology.h"

namespace servelab {

struct ParallelConfig {
  std::int32_t tensor = 1;
  std::int32_t pipeline = 1;
  std::int32_t microbatches = 1;
  // Expert parallelism (vLLM's --enable-expert-parallel, data parallelism 1): in a mixture of
  // experts each GPU of a tensor-parallel group holds num_experts / tensor whole experts,
  // placed by `expert_placement`, instead of 1/tensor of every expert's width; attention, the
  // shared expert and the all-reduces stay as under tensor parallelism.
  bool expert = false;
  ExpertPlacement expert_placement = ExpertPlacement::kLinear;
  // Copies of the most loaded experts beyond the num_experts (vLLM's --num-redundant-experts
  // with EPLB; balanced placement only): each GPU holds (num_experts + redundant_experts) /
  // tensor experts, more weights and less KV room (serving/expert_routing.h).
  std::int32_t redundant_experts = 0;
  // One all-reduce over a stage's tensor-parallel group (the slowest stage's); free when
  // tensor == 1.
  CollectiveCost tp_all_reduce;
  // Hidden states from one stage to the next (the slowest boundary); free when pipeline == 1.
  CollectiveCost stage_send;

  bool is_default() const { return tensor == 1 && pipeline == 1 && microbatches == 1; }
  std::int32_t num_gpus() const { return tensor * pipeline; }
};

// Layers of stage `stage` (0-based) when `layers` are split over `stages` as evenly as
// possible as vLLM splits them (get_pp_indices): the (layers mod stages) stages before the last
// take one more (28 over 3: 9, 10, 9). REQUIRES: 1 <= stages <= layers, 0 <= stage < stages.
std::int32_t stage_layers(std::int32_t layers, std::int32_t stages, std::int32_t stage);

// One GPU's part of `model` under tensor parallelism over `tensor` GPUs: num_heads / tensor
// query heads, max(1, num_kv_heads / tensor) KV heads, intermediate_size / tensor (in a mixture
// of experts: every expert's width, and the shared expert's, as vLLM's FusedMoE shards them
// without expert parallelism; the router is replicated), and ceil(vocab_size / tensor)
// vocabulary rows; hidden_size, head_dim, experts and layers unchanged. The
// model itself when tensor == 1. Throws ConfigError (naming `where` and the model's field)
// when num_heads, intermediate_size or shared_expert_intermediate_size is not divisible by
// tensor, or num_kv_heads neither divides nor is divisible by it.
ModelConfig tensor_shard(const ModelConfig& model, std::int32_t tensor,
                         const std::string& where = "");

// Communication costs of a replica of tensor x pipeline GPUs placed from GPU `first` of
// `topology`. REQUIRES: the GPUs exist (ConfigError otherwise).
ParallelConfig place_replica(std::int32_t tensor, std::int32_t pipeline, std::int32_t microbatches,
                             const Topology& topology, GpuId first = 0);

// Checks a replica of tensor x pipeline GPUs placed from GPU `first`: each stage's
// tensor-parallel group inside one node (and no wider than a node), every GPU in the topology.
// Throws ConfigError prefixed by `tensor_where` or `pipeline_where` (e.g. "FILE:LINE:COL: key
// 'parallel.tensor'"), naming the GPUs. For a cluster placing replicas one after another.
void check_replica_placement(std::int32_t tensor, std::int32_t pipeline, const Topology& topology,
                             GpuId first, const std::string& tensor_where,
                             const std::string& pipeline_where);

// The experiment's `parallel:` section (and `topology:`, when given), as parsed; resolved
// against the model and hardware at run time by resolve_parallel().
struct ParallelChoice {
  bool set = false;  // a `parallel:` section was given
  std::int32_t tensor = 1;
  std::int32_t pipeline = 1;
  std::int32_t microbatches = 1;
  bool expert = false;
  ExpertPlacement expert_placement = ExpertPlacement::kLinear;
  std::int32_t redundant_experts = 0;
  // "FILE:LINE:COL: key 'parallel.tensor'" and the like, for errors found at run time.
  std::string where, tensor_where, pipeline_where, expert_where, redundant_where;
  std::optional<ConfigNode> topology;  // the `topology:` section
};

// Reads `parallel: {tensor: N, pipeline: M, microbatches: K, expert: B, expert_placement: P,
// redundant_experts: R}` and `topology:` from the experiment's top level into `choice`. Types
// and ranges are checked here; expert_placement or redundant_experts without expert: true are
// refused (the rest of expert parallelism: apply_expert_parallel).
void parse_parallel_section(const ConfigNode& top, ParallelChoice& choice);

// The topology a replica runs on: the `topology:` section when given, else `nodes` nodes of the
// hardware's gpus_per_node GPUs (NVLink inside a node when the GPU has it, PCIe otherwise;
// InfiniBand between nodes), enough for tensor * pipeline GPUs.
Topology replica_topology(const ParallelChoice& choice, const HardwareConfig& hardware);

// The ParallelConfig of a single-replica experiment: checks the choice against the model and
// the topology (ConfigError naming the key and its line: a tensor-parallel group wider than a
// node or spanning two, heads not divisible by tensor, more GPUs than the topology has, more
// stages than layers; expert parallelism on a dense model, or with num_experts (plus
// redundant_experts) not divisible by tensor) and prices the collectives. The default config when
// `choice.set` is false (a `topology:` section is then still parsed, so its errors show).
ParallelConfig resolve_parallel(const ParallelChoice& choice, const ModelConfig& model,
                                const HardwareConfig& hardware);

// Checks `choice`'s expert parallelism against `model` (ConfigError naming parallel.expert or
// parallel.redundant_experts and its line: a dense model, experts (with their copies) not
// splitting evenly over tensor, copies without balanced placement, on one GPU, or more than one
// per GPU) and copies it into `parallel`. A no-op without expert: true.
void apply_expert_parallel(const ParallelChoice& choice, const ModelConfig& model,
                           ParallelConfig& parallel);

}  // namespace servelab
