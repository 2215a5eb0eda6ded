#include "traces/lora_workload.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace servelab {

std::optional<LoraWorkloadOptions> parse_lora_workload_options(const ConfigNode& s) {
  if (!s.has("lora")) return std::nullopt;
  const ConfigNode n = s.at("lora");
  if (!n.is_map()) n.fail("a mapping (adapters, rank, distribution, zipf_s, share)");
  n.allow_keys({"adapters", "rank", "distribution", "zipf_s", "share"});
  LoraWorkloadOptions o;
  o.adapters = static_cast<std::int32_t>(n.get_int("adapters", 1, 1'000'000));
  o.rank = static_cast<std::int32_t>(n.get_int("rank", o.rank, 1, 1 << 16));
  if (n.has("distribution")) o.zipf = n.at("distribution").as_choice({"uniform", "zipf"}) == "zipf";
  if (n.has("zipf_s")) {
    if (!o.zipf) n.at("zipf_s").fail_message("only for distribution zipf");
    o.zipf_s = n.get_double("zipf_s", 0.0, 100.0);
    if (!(o.zipf_s > 0)) n.at("zipf_s").fail("a number > 0 and up to 100");
  }
  o.share = n.get_double("share", 1.0, 0.0, 1.0);
  return o;
}

LoraWorkload::LoraWorkload(std::unique_ptr<Workload> inner, LoraWorkloadOptions options,
                           std::uint64_t seed)
    : WorkloadDecorator(std::move(inner)), options_(options), rng_(Rng::stream(seed, "lora")) {
  if (options_.zipf) {
    double sum = 0;
    cdf_.reserve(static_cast<std::size_t>(options_.adapters));
    for (std::int32_t k = 1; k <= options_.adapters; ++k) {
      sum += std::pow(static_cast<double>(k), -options_.zipf_s);
      cdf_.push_back(sum);
    }
    for (double& c : cdf_) c /= sum;
  }
}

std::optional<RequestSpec> LoraWorkload::next() {
  std::optional<RequestSpec> r = inner().next();
  if (!r) return r;
  // Both draws are taken for every request, so the assignment of one request never depends on
  // whether an earlier one got an adapter.
  const double u_share = rng_.uniform();
  const double u_adapter = rng_.uniform();
  if (u_share >= options_.share) return r;
  std::int32_t k;
  if (options_.zipf) {
    k = 1 + static_cast<std::int32_t>(std::upper_bound(cdf_.begin(), cdf_.end(), u_adapter) -
                                      cdf_.begin());
    k = std::min(k, options_.adapters);
  } else {
    k = 1 +
        std::min(options_.adapters - 1, static_cast<std::int32_t>(u_adapter * options_.adapters));
  }
  r->lora_id = static_cast<std::uint32_t>(k);
  r->lora_rank = options_.rank;
  return r;
}

std::string LoraWorkload::describe() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, ", LoRA (%d adapters of rank %d, %s, share %g)", options_.adapters,
                options_.rank,
                options_.zipf ? ("zipf s=" + std::to_string(options_.zipf_s)).c_str() : "uniform",
                options_.share);
  return inner().describe() + buf;
}

}  // namespace servelab
