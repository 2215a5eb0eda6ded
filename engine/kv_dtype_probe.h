// What a KV-cache dtype costs in accuracy on the CPU executor (engine/cpu_executor.h, "KV cache
// dtype"): the same requests are decoded greedily with bf16 KV (the reference), then run again
// with each other format, teacher-forced (every step fed the reference run's tokens, so both
// runs see the same context at every step), and the logits and greedy tokens are compared step
// by step. docs/lessons/fp8-kv.md quotes this measurement on the tiny model; the Python module
// exposes it as servelab.compare_kv_dtypes (docs/python.md).
#pragma once

#include <Eigen/Dense>
#include <cstdint>
#include <string>
#include <vector>

#include "core/request.h"
#include "engine/cpu_executor.h"
#include "engine/llama_weights.h"
#include "kernels/float_formats.h"

namespace servelab {

// The probe's requests: `requests` requests (ids 1..n, each prompt one distinct synthetic
// segment, content 100 + i) of `prompt_len` tokens, each decoding `decode_tokens` tokens alone:
// the whole prompt in one step, then one token per step.
struct KvProbeSetup {
  std::int32_t requests = 8;
  std::int32_t prompt_len = 48;
  std::int32_t decode_tokens = 32;
  std::int32_t block_size = 16;
};

// One KV format to measure: `format`, with scales computed from the data
// (CpuExecutorOptions::compute_kv_scales) when `compute_scales`.
struct KvProbeCase {
  std::string name;
  kernels::FloatFormat format = kernels::FloatFormat::kBf16;
  bool compute_scales = false;
};

// One format against bf16 KV, over every sampling step of every request.
struct KvProbeDifference {
  std::string name;
  double max_abs = 0;    // largest |logit - bf16 logit|
  double max_logit = 0;  // largest |bf16 logit|
  int differing = 0;     // steps whose greedy token differs from bf16's
  int steps = 0;         // sampling steps compared (requests x decode_tokens)
};

// One request's run: its logits and greedy token per sampling step.
struct KvProbeGeneration {
  std::vector<Eigen::VectorXf> logits;
  std::vector<std::int32_t> tokens;
};

// The probe's requests. Throws std::invalid_argument unless every count is >= 1.
std::vector<RequestSpec> kv_probe_requests(const KvProbeSetup& setup);

// The block table every probe request runs over: the blocks its prompt and decode tokens need,
// in reverse order (so a table is never the identity); its size is the executor's block count.
std::vector<BlockId> kv_probe_block_table(const KvProbeSetup& setup);

// Runs `spec` alone on `exec` for `decode_tokens` sampling steps over `block_table` (which must
// hold prompt + decode tokens). With `forced`, step k is fed forced[0..k) as its outputs so far;
// else the run's own samples. Throws Interrupted (serving/interrupt.h) at a step after SIGINT or
// SIGTERM while a handler is installed.
KvProbeGeneration kv_probe_generate(CpuExecutor& exec, const RequestSpec& spec,
                                    std::int32_t decode_tokens,
                                    const std::vector<BlockId>& block_table,
                                    const std::vector<std::int32_t>* forced);

// Adds one request's run `got` to `d`, compared step by step with the reference run `ref` of the
// same request (same number of steps): the largest logit difference and largest reference
// logit, and the steps whose greedy tokens differ.
void add_probe_difference(KvProbeDifference& d, const KvProbeGeneration& got,
                          const KvProbeGeneration& ref);

// Every case against bf16 KV, in the order given, on `weights`. Each request runs on a fresh
// executor holding just the blocks it needs, its block table in reverse order (so a table is
// never the identity). Deterministic: the same weights, setup and cases give the same numbers.
std::vector<KvProbeDifference> compare_kv_dtypes(const LlamaWeights& weights,
                                                 const KvProbeSetup& setup,
                                                 const std::vector<KvProbeCase>& cases);

}  // namespace servelab
