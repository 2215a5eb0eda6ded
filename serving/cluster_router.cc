#include "serving/cluster_router.h"

#include "core/rng.h"
#include "policies/registry.h"

namespace servelab {

std::unique_ptr<Router> make_cluster_router(const ExperimentConfig& config, RouterStage stage,
                                            std::int32_t num_candidates) {
  const ClusterConfig& cl = config.cluster;
  const bool decode = stage == RouterStage::kDecode;
  const PolicySpec& spec = decode && cl.decode_router ? *cl.decode_router : cl.router;
  const std::string key = decode && cl.decode_router ? "cluster.decode_router" : "cluster.router";
  SchedulerConfig scratch;
  RouterMaker maker;
  PolicyTarget target{&scratch, nullptr, config.seed, &maker};
  build_policy(PolicyKind::kRouter, spec, target, config.file + ": " + key);
  return maker({num_candidates, config.scheduler.block_size,
                mix64(config.seed ^ name_hash(decode ? "router-decode" : "router"))});
}

}  // namespace servelab
