// Simulator speed: whole experiments replayed in memory (no output files), one core.
// Figures and the command that produced them: docs/performance.md.
#include <benchmark/benchmark.h>

#include "serving/experiment.h"
#include "serving/home.h"
#include "sim/run.h"

namespace servelab {
namespace {

const std::string kExperiments = home_path("experiments") + "/";

void replay(benchmark::State& state, const std::string& file, std::vector<std::string> overrides) {
  const ExperimentConfig config = load_experiment(kExperiments + file, overrides);
  RunOptions options;
  options.write_files = false;
  std::int64_t requests = 0, steps = 0;
  for (auto _ : state) {
    const RunOutput out = run_simulation(config, options);
    requests += out.summary.num_requests;
    steps += out.summary.num_steps;
    benchmark::DoNotOptimize(out.summary.e2e_ms.mean);
  }
  state.counters["requests/s"] =
      benchmark::Counter(static_cast<double>(requests), benchmark::Counter::kIsRate);
  state.counters["steps/s"] =
      benchmark::Counter(static_cast<double>(steps), benchmark::Counter::kIsRate);
  state.counters["steps"] = static_cast<double>(steps) / static_cast<double>(state.iterations());
}

void BM_Burst(benchmark::State& state) { replay(state, "burst.yaml", {}); }
BENCHMARK(BM_Burst)->Unit(benchmark::kMillisecond);

// The Azure 2023 conversation trace, 19,366 requests, vLLM v1 defaults (prefix caching on).
void BM_AzureConv(benchmark::State& state) { replay(state, "azure-conv.yaml", {}); }
BENCHMARK(BM_AzureConv)->Unit(benchmark::kMillisecond);

void BM_AzureConvNoPrefixCache(benchmark::State& state) {
  replay(state, "azure-conv.yaml", {"policies.prefix_cache=none"});
}
BENCHMARK(BM_AzureConvNoPrefixCache)->Unit(benchmark::kMillisecond);

// A cluster (issue 17): 16 replicas of azure-code.yaml's Llama-3-8B / H100 behind a
// least-outstanding router, replaying the Azure 2023 code trace (8,819 requests) at 16 times its
// rate, so each replica sees about the single-replica load.
void BM_AzureCode16Replicas(benchmark::State& state) {
  replay(
      state, "azure-code.yaml",
      {"workload.time_scale=0.0625", "cluster={router: least_outstanding, pools: [{count: 16}]}"});
}
BENCHMARK(BM_AzureCode16Replicas)->Unit(benchmark::kMillisecond);

// The same behind the prefix-affinity router (it hashes every prompt's blocks).
void BM_AzureCode16ReplicasPrefixAffinity(benchmark::State& state) {
  replay(state, "azure-code.yaml",
         {"workload.time_scale=0.0625", "cluster={router: prefix_affinity, pools: [{count: 16}]}"});
}
BENCHMARK(BM_AzureCode16ReplicasPrefixAffinity)->Unit(benchmark::kMillisecond);

// One million synthetic requests (burst.yaml's distributions at a steady 20 req/s, the whole
// H100 memory for KV).
void BM_Synthetic1M(benchmark::State& state) {
  replay(state, "burst.yaml",
         {"workload.num_requests=1000000", "workload.arrival={process: poisson, rate: 20}",
          "serving.gpu_memory_utilization=0.9"});
}
BENCHMARK(BM_Synthetic1M)->Unit(benchmark::kSecond)->Iterations(1);

}  // namespace
}  // namespace servelab

BENCHMARK_MAIN();
