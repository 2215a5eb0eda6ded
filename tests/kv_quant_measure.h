// The KV-dtype measurement on the tiny model, shared by tests/kv_quant_engine_test.cc (which
// bounds it) and tests/lessons_test.cc (which checks the numbers docs/lessons/fp8-kv.md quotes).
//
// 8 requests of 48 prompt tokens decode 32 tokens each with bf16 KV (random weights, seed 5);
// the same requests are then run teacher-forced (each step fed the bf16 run's tokens, so every
// step sees the same context) with each other format. Per format: the largest |logit
// difference| against bf16 KV over all 256 sampling steps, the largest |logit| of the bf16 run,
// and the steps whose greedy token differs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/request.h"
#include "engine/cpu_executor.h"
#include "engine/llama_weights.h"
#include "kernels/float_formats.h"
#include "serving/home.h"

namespace servelab::kv_quant {

using kernels::FloatFormat;

inline LlamaConfig tiny() {
  return load_llama_config("tiny", servelab_home().string() + "/experiments/catalog");
}

constexpr std::int32_t kPrompt = 48, kDecode = 32, kRequests = 8;

struct Generation {
  std::vector<Eigen::VectorXf> logits;  // per sampling step
  std::vector<std::int32_t> tokens;     // greedy token per sampling step
};

// One request alone: the prompt in one step, then kDecode decode steps. With `forced`, step k
// is fed forced[0..k) as the outputs so far (teacher forcing); else its own samples.
inline Generation run_request(CpuExecutor& exec, const RequestSpec& spec,
                              const std::vector<std::int32_t>* forced) {
  Generation r;
  std::vector<BlockId> table;
  for (BlockId b = 0; b < 8; ++b) table.push_back(7 - b);  // (48 + 32) / 16 = 5 blocks needed
  std::int32_t done = 0;
  while (static_cast<std::int32_t>(r.tokens.size()) < kDecode) {
    StepPlan plan;
    ScheduledRequest e;
    e.id = spec.id;
    e.spec = &spec;
    const auto n_out = static_cast<std::int32_t>(r.tokens.size());
    // (a view: the vector must outlive the step)
    const std::vector<std::int32_t> outputs =
        forced ? std::vector<std::int32_t>(forced->begin(), forced->begin() + n_out) : r.tokens;
    e.output_tokens = outputs;
    e.first_token = done;
    e.num_tokens = spec.prompt_len + n_out - done;
    e.samples = true;
    e.is_prefill = done < spec.prompt_len;
    e.block_table = table;
    plan.requests.push_back(e);
    const StepResult out = exec.execute(plan);
    done += e.num_tokens;
    r.logits.push_back(exec.last_logits()[0]);
    r.tokens.push_back(out.sampled_tokens[0]);
  }
  return r;
}

inline std::vector<RequestSpec> requests() {
  std::vector<RequestSpec> specs;
  for (int i = 0; i < kRequests; ++i) {
    specs.push_back(make_request(static_cast<RequestId>(i + 1), 0,
                                 {{static_cast<std::uint64_t>(100 + i), 0, kPrompt}}, kDecode));
  }
  return specs;
}

struct Difference {
  double max_abs = 0;    // largest |logit - reference logit|
  double max_logit = 0;  // largest |reference logit|
  int differing = 0;     // steps whose greedy token differs
  int steps = 0;
};

inline Difference compare(const LlamaWeights& w, CpuExecutorOptions opt,
                          const std::vector<Generation>& ref) {
  Difference d;
  const std::vector<RequestSpec> specs = requests();
  for (std::size_t i = 0; i < specs.size(); ++i) {
    CpuExecutor exec(w, opt);
    const Generation got = run_request(exec, specs[i], &ref[i].tokens);
    for (std::size_t s = 0; s < got.logits.size(); ++s) {
      d.max_abs = std::max(
          d.max_abs, static_cast<double>((got.logits[s] - ref[i].logits[s]).cwiseAbs().maxCoeff()));
      d.max_logit =
          std::max(d.max_logit, static_cast<double>(ref[i].logits[s].cwiseAbs().maxCoeff()));
      d.differing += got.tokens[s] != ref[i].tokens[s];
      ++d.steps;
    }
  }
  return d;
}

inline CpuExecutorOptions options(FloatFormat f) {
  CpuExecutorOptions opt;
  opt.block_size = 16;
  opt.num_blocks = 8;
  opt.kv_format = f;
  return opt;
}

// The measured cases, in this order: fp32, fp16, fp8_e4m3, fp8_e5m2, fp8_e4m3 with computed
// scales, each against bf16 KV.
struct Case {
  const char* name;
  CpuExecutorOptions opt;
};
inline std::vector<Case> cases() {
  CpuExecutorOptions computed = options(FloatFormat::kFp8E4m3);
  computed.compute_kv_scales = true;
  return {{"fp32", options(FloatFormat::kFp32)},
          {"fp16", options(FloatFormat::kFp16)},
          {"fp8_e4m3", options(FloatFormat::kFp8E4m3)},
          {"fp8_e5m2", options(FloatFormat::kFp8E5m2)},
          {"fp8_e4m3 computed scales", computed}};
}

inline std::vector<Difference> measure() {
  const LlamaWeights w = LlamaWeights::random(tiny(), 5);
  const std::vector<RequestSpec> specs = requests();
  std::vector<Generation> ref;
  for (const RequestSpec& s : specs) {
    CpuExecutor exec(w, options(FloatFormat::kBf16));
    ref.push_back(run_request(exec, s, nullptr));
  }
  std::vector<Difference> out;
  for (const Case& c : cases()) out.push_back(compare(w, c.opt, ref));
  return out;
}

}  // namespace servelab::kv_quant
