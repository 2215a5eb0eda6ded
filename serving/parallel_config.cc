#include "serving/parallel_config.h"

#include <algorithm>

namespace servelab {

std::int32_t stage_layers(std::int32_t layers, std::int32_t stages, std::int32_t stage) {
  // vLLM's get_pp_indices: the extra layers go to partitions[-2], [-3], ..., sparing the last
  // stage (the LM head) and, unless every other stage takes one, the first (the embedding).
  const std::int32_t extra = layers % stages;
  return layers / stages + (stage >= stages - 1 - extra && stage <= stages - 2 ? 1 : 0);
}

ModelConfig tensor_shard(const ModelConfig& model, std::int32_t tensor, const std::string& where) {
  if (tensor == 1) return model;
  const std::string prefix = (where.empty() ? std::string("tensor parallelism") : where) + ": ";
  const std::string tp = std::to_string(tensor);
  auto fail = [&](const std::string& what) {
    throw ConfigError(prefix + "model " + model.name + " " + what + " (tensor parallelism " + tp +
                      ")");
  };
  if (tensor < 1) fail("needs at least one GPU");
  if (model.num_heads % tensor != 0) {
    fail("has " + std::to_string(model.num_heads) + " attention heads, not divisible by " + tp);
  }
  if (model.num_kv_heads % tensor != 0 && tensor % model.num_kv_heads != 0) {
    fail("has " + std::to_string(model.num_kv_heads) + " KV heads, which neither divide nor are " +
         "divisible by " + tp);
  }
  if (model.intermediate_size % tensor != 0) {
    fail("has intermediate_size " + std::to_string(model.intermediate_size) +
         ", not divisible by " + tp);
  }
  if (model.shared_expert_intermediate_size % tensor != 0) {
    fail("has shared_expert_intermediate_size " +
         std::to_string(model.shared_expert_intermediate_size) + ", not divisible by " + tp);
  }
  ModelConfig s = model;
  s.shared_expert_intermediate_size = model.shared_expert_intermediate_size / tensor;
  s.num_heads = model.num_heads / tensor;
  s.num_kv_heads = std::max(1, model.num_kv_heads / tensor);
  s.intermediate_size = model.intermediate_size / tensor;
  s.vocab_size = (model.vocab_size + tensor - 1) / tensor;
  if (is_awq(s.quantization)) {
    // vLLM: "The input size is not aligned with the quantized weight shape".
    if (const std::string problem = awq_alignment_problem(s); !problem.empty()) {
      fail("stored as " + s.quantization + " has a shard whose " + problem);
    }
  }
  return s;
}

ParallelConfig place_replica(std::int32_t tensor, std::int32_t pipeline, std::int32_t microbatches,
                             const Topology& topology, GpuId first) {
  if (tensor < 1 || pipeline < 1 || microbatches < 1) {
    throw ConfigError("parallel: tensor, pipeline and microbatches must be at least 1");
  }
  if (first < 0 || first + tensor * pipeline > topology.num_gpus()) {
    throw ConfigError("parallel: a replica of " + std::to_string(tensor * pipeline) +
                      " GPUs from GPU " + std::to_string(first) + " does not fit the topology's " +
                      std::to_string(topology.num_gpus()) + " GPUs");
  }
  ParallelConfig p;
  p.tensor = tensor;
  p.pipeline = pipeline;
  p.microbatches = microbatches;
  auto slower = [](const CollectiveCost& a, const CollectiveCost& b) {
    return CollectiveCost{std::max(a.latency_s, b.latency_s), std::max(a.s_per_byte, b.s_per_byte)};
  };
  for (std::int32_t s = 0; s < pipeline; ++s) {
    std::vector<GpuId> group;
    for (std::int32_t i = 0; i < tensor; ++i) group.push_back(first + s * tensor + i);
    p.tp_all_reduce = slower(p.tp_all_reduce, ring_all_reduce(topology, group));
    if (s + 1 < pipeline) {
      p.stage_send = slower(p.stage_send,
                            point_to_point(topology, first + s * tensor, first + (s + 1) * tensor));
    }
  }
  return p;
}

void parse_parallel_section(const ConfigNode& top, ParallelChoice& c) {
  if (auto t = top.find("topology")) c.topology = *t;
  const auto p = top.find("parallel");
  if (!p) return;
  p->allow_keys(
      {"tensor", "pipeline", "microbatches", "expert", "expert_placement", "redundant_experts"});
  c.set = true;
  c.where = p->location() + ": key '" + p->path() + "'";
  c.tensor = static_cast<std::int32_t>(p->get_int("tensor", 1, 1, 1024));
  c.pipeline = static_cast<std::int32_t>(p->get_int("pipeline", 1, 1, 1024));
  c.microbatches = static_cast<std::int32_t>(p->get_int("microbatches", 1, 1, 1024));
  auto where = [&](const char* key) {
    return p->has(key) ? p->at(key).location() + ": key '" + p->at(key).path() + "'" : c.where;
  };
  c.tensor_where = where("tensor");
  c.pipeline_where = where("pipeline");
  c.expert = p->get_bool("expert", false);
  c.expert_where = where("expert");
  if (p->has("expert_placement")) {
    const ConfigNode placement = p->at("expert_placement");
    if (!c.expert) {
      placement.fail_message("an expert placement needs expert parallelism (expert: true)");
    }
    parse_expert_placement(placement.as_choice({"linear", "round_robin", "balanced"}),
                           c.expert_placement);
  }
  if (p->has("redundant_experts")) {
    const ConfigNode redundant = p->at("redundant_experts");
    c.redundant_experts = static_cast<std::int32_t>(redundant.as_int(0, 65536));
    c.redundant_where = redundant.location() + ": key '" + redundant.path() + "'";
    // The rest is checked against the model by apply_expert_parallel, which a config without
    // expert: true never reaches.
    if (c.redundant_experts > 0 && !c.expert) {
      redundant.fail_message("redundant experts need expert parallelism (expert: true)");
    }
  }
  if (c.microbatches > 1 && c.pipeline == 1) {
    p->at("microbatches")
        .fail_message("micro-batches need pipeline parallelism (pipeline > 1); leave it at 1");
  }
}

Topology replica_topology(const ParallelChoice& c, const HardwareConfig& hw) {
  if (c.topology) return parse_topology(*c.topology, hw.interconnect, hw.name);
  const std::int32_t gpus = c.tensor * c.pipeline;
  UniformTopologySpec s;
  s.gpus_per_node = hw.interconnect.gpus_per_node > 0 ? hw.interconnect.gpus_per_node : gpus;
  s.nodes = (gpus + s.gpus_per_node - 1) / s.gpus_per_node;
  s.intra = hw.interconnect[LinkKind::kNvlink].bandwidth > 0 ? LinkKind::kNvlink : LinkKind::kPcie;
  s.inter = hw.interconnect[LinkKind::kInfiniband].bandwidth > 0 ? LinkKind::kInfiniband
                                                                 : LinkKind::kEthernet;
  try {
    return build_uniform_topology(s, hw.interconnect, hw.name);
  } catch (const ConfigError& e) {
    throw ConfigError(c.where +
                      ": no `topology:` section, and the default one cannot be built: " + e.what());
  }
}

void check_replica_placement(std::int32_t tensor, std::int32_t pipeline, const Topology& topology,
                             GpuId first, const std::string& tensor_where,
                             const std::string& pipeline_where) {
  const std::string tp = std::to_string(tensor), pp = std::to_string(pipeline);
  if (tensor > topology.max_gpus_per_node()) {
    throw ConfigError(tensor_where + ": tensor parallelism " + tp +
                      " is larger than a node's GPUs (" +
                      std::to_string(topology.max_gpus_per_node()) +
                      "); a tensor-parallel group must stay inside one node");
  }
  if (first < 0 || first + tensor * pipeline > topology.num_gpus()) {
    throw ConfigError((pipeline > 1 ? pipeline_where : tensor_where) + ": tensor " + tp +
                      " x pipeline " + pp + " needs " + std::to_string(tensor * pipeline) +
                      " GPUs from GPU " + std::to_string(first) + "; the topology has " +
                      std::to_string(topology.num_gpus()));
  }
  for (std::int32_t s = 0; s < pipeline; ++s) {
    const GpuId lo = first + s * tensor, hi = lo + tensor - 1;
    if (topology.node_of(lo) != topology.node_of(hi)) {
      throw ConfigError(tensor_where + ": the tensor-parallel group of stage " + std::to_string(s) +
                        " (GPUs " + topology.vertex_name(lo) + " to " + topology.vertex_name(hi) +
                        ") spans two nodes; choose a tensor size " +
                        "that divides the GPUs per node");
    }
  }
}

ParallelConfig resolve_parallel(const ParallelChoice& c, const ModelConfig& model,
                                const HardwareConfig& hw) {
  if (!c.set) {
    // A topology without parallelism is still checked: its errors are the user's to see.
    if (c.topology) (void)replica_topology(c, hw);
    return {};
  }
  const std::string tp = std::to_string(c.tensor), pp = std::to_string(c.pipeline);
  // Divisibility first: it needs no topology.
  (void)tensor_shard(model, c.tensor, c.tensor_where);
  ParallelConfig expert;
  apply_expert_parallel(c, model, expert);
  if (c.pipeline > model.num_layers) {
    throw ConfigError(c.pipeline_where + ": " + pp + " pipeline stages for model " + model.name +
                      " of " + std::to_string(model.num_layers) + " layers; at most one stage " +
                      "per layer");
  }
  if (c.tensor * c.pipeline == 1) {
    if (c.topology) (void)replica_topology(c, hw);
    return expert;
  }
  const Topology topology = replica_topology(c, hw);
  check_replica_placement(c.tensor, c.pipeline, topology, 0, c.tensor_where, c.pipeline_where);
  ParallelConfig placed = place_replica(c.tensor, c.pipeline, c.microbatches, topology);
  apply_expert_parallel(c, model, placed);
  return placed;
}

void apply_expert_parallel(const ParallelChoice& c, const ModelConfig& model, ParallelConfig& p) {
  if (!c.expert) return;
  if (!model.is_moe()) {
    throw ConfigError(c.expert_where + ": expert parallelism needs a mixture of experts; model " +
                      model.name + " is dense (no num_experts)");
  }
  if (model.num_experts % c.tensor != 0) {
    throw ConfigError(c.expert_where + ": model " + model.name + "'s " +
                      std::to_string(model.num_experts) + " experts do not split evenly over " +
                      std::to_string(c.tensor) +
                      " GPUs (parallel.tensor); choose a tensor size that divides them");
  }
  if (c.redundant_experts > 0) {
    const std::string r = std::to_string(c.redundant_experts);
    if (c.expert_placement != ExpertPlacement::kBalanced) {
      throw ConfigError(c.redundant_where +
                        ": redundant experts are placed by load: set expert_placement: balanced");
    }
    if (c.tensor == 1) {
      throw ConfigError(c.redundant_where + ": " + r +
                        " redundant experts on one GPU only take memory; they need expert "
                        "parallelism over several GPUs (parallel.tensor > 1)");
    }
    if ((model.num_experts + c.redundant_experts) % c.tensor != 0) {
      throw ConfigError(c.redundant_where + ": model " + model.name + "'s " +
                        std::to_string(model.num_experts) + " experts and " + r +
                        " redundant copies do not split evenly over " + std::to_string(c.tensor) +
                        " GPUs; choose a multiple of " + std::to_string(c.tensor));
    }
    if (c.redundant_experts > model.num_experts * (c.tensor - 1)) {
      throw ConfigError(c.redundant_where + ": " + r + " redundant copies of " +
                        std::to_string(model.num_experts) + " experts over " +
                        std::to_string(c.tensor) +
                        " GPUs: at most one copy of an expert per GPU, so at most " +
                        std::to_string(model.num_experts * (c.tensor - 1)));
    }
  }
  p.expert = true;
  p.expert_placement = c.expert_placement;
  p.redundant_experts = c.redundant_experts;
}

}  // namespace servelab
