// Workload throughput: how fast requests are generated or read, so a workload never limits the
// simulator. Targets: 1M synthetic requests well under 1 s; the Azure conversation trace (19,366
// rows) well under 50 ms.
#include <benchmark/benchmark.h>

#include <string>

#include "serving/config_node.h"
#include "serving/home.h"
#include "traces/azure_trace.h"
#include "traces/workload.h"

namespace servelab {
namespace {

void BM_SyntheticGenerate(benchmark::State& state) {
  const std::string yaml =
      "workload:\n"
      "  type: synthetic\n"
      "  num_requests: " +
      std::to_string(state.range(0)) +
      "\n"
      "  arrival: {process: gamma, rate: 20, cv: 3}\n"
      "  prompt_len: {dist: lognormal, mean: 800, stddev: 400, min: 16, max: 4096}\n"
      "  output_len: {dist: uniform, min: 16, max: 512}\n"
      "  shared_prefix: {num_prefixes: 4, length: 256, fraction: 0.5}\n";
  const ConfigNode root = ConfigNode::load_string(yaml, "bench.yaml");
  std::int64_t tokens = 0;
  for (auto _ : state) {
    auto w = make_workload(root.at("workload"), 42, ".");
    while (auto r = w->next()) tokens += r->prompt_len;
  }
  benchmark::DoNotOptimize(tokens);
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_SyntheticGenerate)->Arg(100'000)->Arg(1'000'000)->Unit(benchmark::kMillisecond);

void BM_AzureConvRead(benchmark::State& state) {
  const std::string path = home_path("traces/azure2023/AzureLLMInferenceTrace_conv.csv");
  std::int64_t rows = 0;
  for (auto _ : state) {
    AzureTraceWorkload w(path);
    while (auto r = w.next()) ++rows;
  }
  benchmark::DoNotOptimize(rows);
  state.SetItemsProcessed(rows);
}
BENCHMARK(BM_AzureConvRead)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace servelab

BENCHMARK_MAIN();
