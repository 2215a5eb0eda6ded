// The KV-dtype measurement on the tiny model, shared by tests/kv_quant_engine_test.cc (which
// bounds it) and tests/lessons_test.cc (which checks the numbers docs/lessons/fp8-kv.md quotes).
//
// 8 requests of 48 prompt tokens decode 32 tokens each with bf16 KV (random weights, seed 5);
// the same requests are then run teacher-forced with each other format: engine/kv_dtype_probe.h
// (compare_kv_dtypes, which servelab.compare_kv_dtypes also runs). Per format: the largest
// |logit difference| against bf16 KV over all 256 sampling steps, the largest |logit| of the
// bf16 run, and the steps whose greedy token differs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/kv_dtype_probe.h"
#include "serving/home.h"

namespace servelab::kv_quant {

using kernels::FloatFormat;

inline LlamaConfig tiny() {
  return load_llama_config("tiny", servelab_home().string() + "/experiments/catalog");
}

constexpr std::int32_t kDecode = 32;

using Difference = KvProbeDifference;

inline std::vector<RequestSpec> requests() { return kv_probe_requests(KvProbeSetup{}); }

// An executor of 8 blocks; run_request gives a request blocks 7, 6, ..., 3 (of which the prompt
// fills the first three).
inline CpuExecutorOptions options(FloatFormat f) {
  CpuExecutorOptions opt;
  opt.block_size = 16;
  opt.num_blocks = 8;
  opt.kv_format = f;
  return opt;
}

inline KvProbeGeneration run_request(CpuExecutor& exec, const RequestSpec& spec,
                                     const std::vector<std::int32_t>* forced) {
  std::vector<BlockId> table;
  for (BlockId b = 0; b < 8; ++b) table.push_back(7 - b);
  return kv_probe_generate(exec, spec, kDecode, table, forced);
}

// The measured cases, in this order: fp32, fp16, fp8_e4m3, fp8_e5m2, fp8_e4m3 with computed
// scales, each against bf16 KV.
inline std::vector<KvProbeCase> cases() {
  return {{"fp32", FloatFormat::kFp32, false},
          {"fp16", FloatFormat::kFp16, false},
          {"fp8_e4m3", FloatFormat::kFp8E4m3, false},
          {"fp8_e5m2", FloatFormat::kFp8E5m2, false},
          {"fp8_e4m3 computed scales", FloatFormat::kFp8E4m3, true}};
}

inline std::vector<Difference> measure() {
  return compare_kv_dtypes(LlamaWeights::random(tiny(), 5), KvProbeSetup{}, cases());
}

}  // namespace servelab::kv_quant
