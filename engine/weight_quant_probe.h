// What quantized weights (engine/weight_quantization.h) cost in accuracy on the CPU executor, as
// engine/kv_dtype_probe.h measures a KV dtype: the probe's requests (kv_probe_requests) are
// decoded greedily with the weights as given (the reference), then run again with each
// quantization of them, teacher-forced (every step fed the reference run's tokens), and the
// logits and greedy tokens are compared step by step. The KV cache is fp32 in every run, so only
// the weights differ. docs/lessons/quantized-weights.md quotes this measurement.
#pragma once

#include <string>
#include <vector>

#include "engine/kv_dtype_probe.h"
#include "engine/llama_weights.h"

namespace servelab {

// Each of `quantizations` ("fp8", "awq"; "none" gives zero differences) against `weights`, in
// the order given; each result is named after its quantization. Deterministic. Throws
// ConfigError as quantize_weights does (awq on a model whose projection inputs are not a
// multiple of 128 wide), std::invalid_argument for a setup count < 1.
std::vector<KvProbeDifference> compare_weight_quantizations(
    const LlamaWeights& weights, const KvProbeSetup& setup,
    const std::vector<std::string>& quantizations);

}  // namespace servelab
