// Speed of the roofline cost model: step_time() is called once per simulated step, so it bounds
// how fast the simulator can go. Run: build/release/bench/cost_model_bench
#include <benchmark/benchmark.h>

#include "core/step_plan.h"
#include "serving/hardware_config.h"
#include "serving/model_config.h"
#include "sim/roofline_cost_model.h"

namespace servelab {
namespace {

// `batch` decode entries at contexts spread over 512..4607 tokens.
StepPlan decode_plan(int batch) {
  StepPlan plan;
  for (int i = 0; i < batch; ++i) {
    ScheduledRequest r;
    r.id = static_cast<RequestId>(i);
    r.first_token = 512 + (i * 997) % 4096;
    r.num_tokens = 1;
    r.samples = true;
    plan.requests.push_back(r);
  }
  plan.num_decode_tokens = batch;
  return plan;
}

// step_time() of a decode plan of state.range(0) entries, `model` on `hardware`.
void decode_step_time(benchmark::State& state, const char* model, const char* hardware) {
  const RooflineCostModel cm(load_model(model, default_catalog_dir()),
                             load_hardware(hardware, default_catalog_dir()), 16);
  const StepPlan plan = decode_plan(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    benchmark::DoNotOptimize(cm.step_time(plan));
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["entries"] = static_cast<double>(state.range(0));
}

void BM_RooflineStepTimeDecode(benchmark::State& state) {
  decode_step_time(state, "Llama-3-8B", "H100-SXM");
}
BENCHMARK(BM_RooflineStepTimeDecode)->Arg(1)->Arg(32)->Arg(256);

// A mixture of experts (Qwen3-30B-A3B on an H200): the same tables, plus the experts a step
// touches for its bytes.
void BM_RooflineStepTimeDecodeMoe(benchmark::State& state) {
  decode_step_time(state, "Qwen3-30B-A3B", "H200");
}
BENCHMARK(BM_RooflineStepTimeDecodeMoe)->Arg(1)->Arg(32)->Arg(256);

void BM_RooflineStepTimeMixed(benchmark::State& state) {
  const RooflineCostModel cm(load_model("Llama-3-8B", default_catalog_dir()),
                             load_hardware("H100-SXM", default_catalog_dir()), 16);
  StepPlan plan = decode_plan(255);
  ScheduledRequest chunk;
  chunk.first_token = 1024;
  chunk.num_tokens = 1792;
  chunk.is_prefill = true;
  plan.requests.push_back(chunk);
  plan.num_prefill_tokens = chunk.num_tokens;
  for (auto _ : state) {
    benchmark::DoNotOptimize(cm.step_time(plan));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RooflineStepTimeMixed);

}  // namespace
}  // namespace servelab

BENCHMARK_MAIN();
