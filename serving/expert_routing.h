// Expert routing of a mixture of experts: how often each expert is chosen, which GPU holds it
// under expert parallelism, and how uneven the GPUs' shares of a step are. The roofline cost
// model prices a step's routed-expert launches from these (sim/roofline_cost_model.h;
// docs/cost-model.md "Expert parallelism and router skew").
//
// Popularity. With model.router_skew = s, the expert of popularity rank j (0 = most popular)
// draws weight (1 + j)^-s (Zipf; s = 0: every expert alike). A token chooses experts_per_token
// = k experts, expert e with probability q_e = min(1, c w_e), c such that the q_e sum to k
// (so q_e = k / E when s = 0). Which expert id has which rank is a fixed pseudo-random
// permutation (splitmix64 from a constant seed; the same in every run and on every machine),
// so neither linear nor round-robin placement is favoured by construction: real routers' hot
// experts do not sit at low ids.
//
// Placement over `ranks` GPUs (each holds E / ranks whole experts; vLLM's
// --expert-placement-strategy names the first two):
//   linear:      GPU r holds experts [r E / ranks, (r + 1) E / ranks);
//   round_robin: expert e is on GPU e mod ranks;
//   balanced:    the experts in decreasing q_e, each to the GPU with the smallest sum of q so
//                far among those with room (ties: the lower GPU): a static stand-in for vLLM's
//                expert-parallel load balancer (EPLB).
// Redundant experts (vLLM's --num-redundant-experts, with balanced placement only): R more
// copies of the most loaded experts, one at a time to the expert whose copies carry the most
// (q_e / copies; at most one copy per GPU), each copy taking q_e / copies of the tokens; then
// the E + R copies are placed as balanced does, a copy never on a GPU that holds the same expert
// while another GPU with room does not.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "serving/model_config.h"

namespace servelab {

enum class ExpertPlacement { kLinear, kRoundRobin, kBalanced };

std::string_view expert_placement_name(ExpertPlacement placement);
// "linear", "round_robin" or "balanced"; false for anything else.
bool parse_expert_placement(std::string_view name, ExpertPlacement& placement);

// q_e for every expert id of `model` (size num_experts; empty for a dense model), as above.
std::vector<double> expert_selection_probabilities(const ModelConfig& model);

// The expert ids on each of `ranks` GPUs, each list ascending. REQUIRES: ranks >= 1 divides
// q.size().
std::vector<std::vector<std::int32_t>> place_experts(const std::vector<double>& q,
                                                     std::int32_t ranks, ExpertPlacement placement);

// One copy of an expert on a GPU: the expert's id and the probability that a token chooses it
// (q_e divided among the expert's copies).
struct ExpertCopy {
  std::int32_t expert = 0;
  double q = 0;
};

// The copies on each of `ranks` GPUs: place_experts' experts with their q when redundant is 0;
// with redundant > 0 (REQUIRES: placement balanced, ranks divides q.size() + redundant,
// redundant <= q.size() * (ranks - 1)) the replicated and balanced placement above. Each GPU's
// list is ordered by expert id.
std::vector<std::vector<ExpertCopy>> place_expert_copies(const std::vector<double>& q,
                                                         std::int32_t ranks,
                                                         ExpertPlacement placement,
                                                         std::int32_t redundant);

// The expected largest of n independent standard normal variables (0 for n = 1; 0.5642 for
// 2, 1.4236 for 8), by numerical integration. REQUIRES: n >= 1.
double expected_max_standard_normal(std::int32_t n);

}  // namespace servelab
