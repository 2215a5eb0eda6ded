// LoraWorkload: assigns each request of any workload the LoRA adapter it runs under (vLLM's
// LoRARequest), from the `lora:` key of a `workload:` section. make_workload() wraps the workload
// it builds when the key is present; without it every request runs the base model.
//
// YAML, inside any synthetic, azure or trace `workload:` section:
//
//   lora:
//     adapters: 8            # (>= 1) distinct adapters, ids 1 .. adapters
//     rank: 16               # (>= 1) every adapter's rank; at most serving.lora.max_lora_rank
//     distribution: uniform  # which adapter a request uses: uniform, or zipf (adapter k with
//                            # probability proportional to 1 / k^zipf_s: a few popular adapters)
//     zipf_s: 1.0            # (> 0, zipf only) the exponent
//     share: 1.0             # (in [0, 1]) the fraction of requests under an adapter; the others
//                            # run the base model
//
// Draws come from Rng::stream(seed, "lora"): two per request (share, then adapter), so the same
// experiment and seed give the same assignment. The experiment checks the section against
// serving.lora (serving/experiment.cc): adapters without serving.lora, or a rank above
// max_lora_rank, are errors naming the key.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "serving/config_node.h"
#include "traces/workload.h"

namespace servelab {

struct LoraWorkloadOptions {
  std::int32_t adapters = 1;
  std::int32_t rank = 16;
  bool zipf = false;
  double zipf_s = 1.0;
  double share = 1.0;
};

// Reads the `lora:` key of a workload section (nullopt when absent). Throws ConfigError naming
// the key for any invalid value.
std::optional<LoraWorkloadOptions> parse_lora_workload_options(const ConfigNode& section);

class LoraWorkload : public WorkloadDecorator {
 public:
  LoraWorkload(std::unique_ptr<Workload> inner, LoraWorkloadOptions options, std::uint64_t seed);

  std::optional<RequestSpec> next() override;
  std::string describe() const override;

 private:
  LoraWorkloadOptions options_;
  Rng rng_;
  std::vector<double> cdf_;  // zipf: cumulative probability of adapters 1 .. k
};

}  // namespace servelab
