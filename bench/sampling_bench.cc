// The host side of a request's own sampling (engine/sample_stream.h, kernels/sampling_ref.h), per
// sampled row of a step, at Llama-3's vocabulary (128,256 tokens):
//   - PromptAdjustments/P: logit_adjustments of a request with a repetition penalty, presence and
//     frequency penalties and a 4-token logit_bias, over a prompt of P distinct tokens (the
//     PromptTokenSets cache's, read once a request) and 256 outputs: what each step computes
//     for each of its rows (and, on the GPU, sends as 20 bytes per entry);
//   - DistinctPromptTokens/P: the set itself, once per request while it stays scheduled;
//   - SampleReference/K/P: CpuExecutor's draw (softmax, truncations, quickselects) with top_k K
//     (0: none) and top_p P %;
//   - KeepMask/A: row_keep_mask of a structured output's row whose grammar allows every A-th
//     token (a row the CUDA executor uploads as 16 KB of mask), and KeepIdList/A the list of its
//     allowed ids that the executor built and uploaded instead until 2026-12-06 (token_allowed
//     over the vocabulary: up to 0.5 MB a row).
// Figures and the command that produced them: docs/performance.md.
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "core/request.h"
#include "core/rng.h"
#include "core/sampling_params.h"
#include "engine/sample_stream.h"
#include "kernels/sampling_ref.h"

namespace servelab {
namespace {

constexpr std::int32_t kVocab = 128'256;

std::vector<std::int32_t> random_tokens(std::int64_t n, std::uint64_t seed) {
  Rng rng = Rng::stream(seed, "sampling_bench");
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  for (std::int32_t& x : t) x = static_cast<std::int32_t>(rng.uniform_int(0, kVocab - 1));
  return t;
}

RequestSpec penalized_request(std::int64_t prompt_len) {
  RequestSpec spec = make_literal_request(1, 0, random_tokens(prompt_len, 1), 256);
  RequestSampling own;
  own.temperature = 0.8;
  own.repetition_penalty = 1.1;
  own.presence_penalty = 0.5;
  own.frequency_penalty = 0.3;
  own.logit_bias = {{13, 2.0f}, {198, -5.0f}, {4000, 1.0f}, {90000, -100.0f}};
  spec.sampling = std::make_shared<const RequestSampling>(own);
  return spec;
}

void BM_PromptAdjustments(benchmark::State& state) {
  const RequestSpec spec = penalized_request(state.range(0));
  const std::vector<std::int32_t> prompt = distinct_prompt_tokens(spec, kVocab);
  const std::vector<std::int32_t> outputs = random_tokens(256, 2);
  std::size_t entries = 0;
  for (auto _ : state) {
    const std::vector<LogitAdjustment> a = logit_adjustments(spec, prompt, outputs, {});
    entries = a.size();
    benchmark::DoNotOptimize(a.data());
  }
  state.counters["entries"] = static_cast<double>(entries);
}
BENCHMARK(BM_PromptAdjustments)->Arg(512)->Arg(8192)->Arg(32768)->Unit(benchmark::kMicrosecond);

void BM_DistinctPromptTokens(benchmark::State& state) {
  const RequestSpec spec = penalized_request(state.range(0));
  for (auto _ : state) {
    const std::vector<std::int32_t> set = distinct_prompt_tokens(spec, kVocab);
    benchmark::DoNotOptimize(set.data());
  }
}
BENCHMARK(BM_DistinctPromptTokens)->Arg(512)->Arg(8192)->Arg(32768)->Unit(benchmark::kMicrosecond);

void BM_SampleReference(benchmark::State& state) {
  Rng rng = Rng::stream(3, "sampling_bench");
  std::vector<float> logits(kVocab);
  for (float& x : logits) x = static_cast<float>(rng.normal(0.0, 3.0));
  kernels::Truncation keep;
  keep.top_k = static_cast<std::int32_t>(state.range(0));
  keep.top_p = static_cast<double>(state.range(1)) / 100.0;
  double u = 0.37;
  for (auto _ : state) {
    benchmark::DoNotOptimize(kernels::sample_reference(logits, 0.8, keep, u));
    u = u < 0.9 ? u + 0.05 : 0.01;
  }
}
BENCHMARK(BM_SampleReference)
    ->Args({0, 95})
    ->Args({50, 95})
    ->Args({0, 100})
    ->Unit(benchmark::kMicrosecond);

// A grammar's mask allowing every `every`-th token of the vocabulary.
TokenMask every_nth(std::int64_t every) {
  TokenMask m(static_cast<std::size_t>((kVocab + 31) / 32), 0u);
  for (std::int32_t t = 0; t < kVocab; t += static_cast<std::int32_t>(every)) {
    m[static_cast<std::size_t>(t) / 32] |= 1u << (t % 32);
  }
  return m;
}

void BM_KeepMask(benchmark::State& state) {
  const TokenMask grammar = every_nth(state.range(0));
  for (auto _ : state) {
    const TokenMask keep = row_keep_mask({}, &grammar, kVocab);
    benchmark::DoNotOptimize(keep.data());
  }
}
BENCHMARK(BM_KeepMask)->Arg(1)->Arg(2)->Arg(1000)->Unit(benchmark::kMicrosecond);

void BM_KeepIdList(benchmark::State& state) {
  const TokenMask grammar = every_nth(state.range(0));
  std::vector<std::int32_t> ids;
  for (auto _ : state) {
    ids.clear();
    for (std::int32_t t = 0; t < kVocab; ++t) {
      if (token_allowed(grammar, t)) ids.push_back(t);
    }
    benchmark::DoNotOptimize(ids.data());
  }
}
BENCHMARK(BM_KeepIdList)->Arg(1)->Arg(2)->Arg(1000)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace servelab

BENCHMARK_MAIN();
