// Speed of the roofline cost model: step_time() is called once per simulated step, so it bounds
// how fast the simulator can go. Run: build/release/bench/cost_model_bench
#include <benchmark/benchmark.h>

#include "core/step_plan.h"
#include "serving/hardware_config.h"
#include "serving/model_config.h"
#include "serving/parallel_config.h"
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

// Qwen3-30B-A3B on H100s as `mode` says: 0 one GPU, uniform router; 1 one GPU, router skew 1;
// 2 tensor 8, skew 1; 3 tensor 8 with expert parallelism (balanced placement), skew 1.
RooflineCostModel qwen3_moe(std::int64_t mode) {
  ModelConfig m = load_model("Qwen3-30B-A3B", default_catalog_dir());
  if (mode > 0) m.router_skew = 1.0;
  ParallelConfig p;
  if (mode >= 2) p.tensor = 8;
  if (mode == 3) {
    p.expert = true;
    p.expert_placement = ExpertPlacement::kBalanced;
  }
  return RooflineCostModel(m, load_hardware("H100-SXM", default_catalog_dir()), 16, p);
}

// Construction (the tables by token count): a skewed router sums over the 128 experts for each
// token count, expert parallelism over each GPU's experts too.
void BM_RooflineConstructMoe(benchmark::State& state) {
  for (auto _ : state) {
    const RooflineCostModel cm = qwen3_moe(state.range(0));
    benchmark::DoNotOptimize(cm.block_bytes());
  }
  state.counters["mode"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_RooflineConstructMoe)->DenseRange(0, 3)->Unit(benchmark::kMillisecond);

// step_time() of a 32-entry decode plan in each mode: the tables make the router's skew and
// expert parallelism free per step.
void BM_RooflineStepTimeDecodeMoeModes(benchmark::State& state) {
  const RooflineCostModel cm = qwen3_moe(state.range(0));
  const StepPlan plan = decode_plan(32);
  for (auto _ : state) {
    benchmark::DoNotOptimize(cm.step_time(plan));
  }
  state.counters["mode"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_RooflineStepTimeDecodeMoeModes)->DenseRange(0, 3);

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
