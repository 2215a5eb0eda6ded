#include "engine/weight_quant_probe.h"

#include "engine/weight_quantization.h"

namespace servelab {

std::vector<KvProbeDifference> compare_weight_quantizations(
    const LlamaWeights& weights, const KvProbeSetup& setup,
    const std::vector<std::string>& quantizations) {
  const std::vector<RequestSpec> specs = kv_probe_requests(setup);
  const std::vector<BlockId> table = kv_probe_block_table(setup);
  CpuExecutorOptions options;
  options.block_size = setup.block_size;
  options.num_blocks = static_cast<std::int32_t>(table.size());
  options.kv_format = kernels::FloatFormat::kFp32;

  std::vector<KvProbeGeneration> ref;
  for (const RequestSpec& s : specs) {
    CpuExecutor exec(weights, options);
    ref.push_back(kv_probe_generate(exec, s, setup.decode_tokens, table, nullptr));
  }
  std::vector<KvProbeDifference> out;
  for (const std::string& q : quantizations) {
    LlamaWeights quantized = weights;
    quantize_weights(quantized, q);
    KvProbeDifference d;
    d.name = q;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      CpuExecutor exec(quantized, options);
      add_probe_difference(
          d, kv_probe_generate(exec, specs[i], setup.decode_tokens, table, &ref[i].tokens), ref[i]);
    }
    out.push_back(d);
  }
  return out;
}

}  // namespace servelab
