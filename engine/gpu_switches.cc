#include "engine/gpu_switches.h"

#include <cstddef>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/config_error.h"

namespace servelab {

std::optional<bool> parse_switch(std::string_view name, const char* value) {
  if (value == nullptr) return std::nullopt;
  std::string_view v(value);
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  if (v == "1") return true;
  if (v == "0") return false;
  throw ConfigError("environment variable " + std::string(name) + "='" + std::string(value) +
                    "': expected 0 (off) or 1 (on), or unset it for the default");
}

CudaSwitches cuda_switches_from_env() {
  CudaSwitches sw;
  sw.cuda_graphs = parse_switch(kCudaGraphsEnv, std::getenv(kCudaGraphsEnv));
  sw.fused_qkv_rope = parse_switch(kCudaFusedQkvEnv, std::getenv(kCudaFusedQkvEnv));
  sw.programmatic_launch = parse_switch(kCudaPdlEnv, std::getenv(kCudaPdlEnv));
  sw.prefill_pack_heads = parse_switch(kCudaPrefillPackEnv, std::getenv(kCudaPrefillPackEnv));
  try {
    if (std::getenv(kernels::kDecodeKernelEnv) != nullptr) {
      sw.decode_kernel = kernels::decode_kernel_from_env(kernels::kDefaultDecodeKernel);
    }
    if (std::getenv(kernels::kPrefillKernelEnv) != nullptr) {
      sw.prefill_kernel = kernels::prefill_kernel_from_env(kernels::PrefillKernel::kFa2);
    }
    if (std::getenv(kernels::kGemmKernelEnv) != nullptr) {
      sw.gemm_kernel = kernels::gemm_kernel_from_env(kernels::GemmKernel::kCublas);
    }
    if (std::getenv(kernels::kLoraKernelEnv) != nullptr) {
      sw.lora_kernel = kernels::lora_kernel_from_env(kernels::LoraKernel::kGather);
    }
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string("environment variable ") + e.what());
  }
  if (const char* file = std::getenv(kCudaGemmLtFileEnv); file != nullptr) {
    if (*file == '\0') {
      throw ConfigError(std::string("environment variable ") + kCudaGemmLtFileEnv +
                        " is empty: name the file of cuBLASLt decisions, or unset it");
    }
    sw.gemm_lt_file = file;
  }
  return sw;
}

std::string cuda_kv_kernels_refusal(kernels::FloatFormat kv_format, kernels::DecodeKernel decode,
                                    kernels::PrefillKernel prefill) {
  const bool fp8 =
      kv_format == kernels::FloatFormat::kFp8E4m3 || kv_format == kernels::FloatFormat::kFp8E5m2;
  if (!fp8 ||
      (decode == kernels::DecodeKernel::kPipelined && kernels::prefill_reads_fp8(prefill))) {
    return "";
  }
  std::vector<const char*> readers;
  for (kernels::PrefillKernel k : kernels::kPrefillKernels) {
    if (kernels::prefill_reads_fp8(k)) readers.push_back(kernels::prefill_kernel_name(k));
  }
  std::string prefill_names;
  for (std::size_t i = 0; i < readers.size(); ++i) {
    if (i > 0) prefill_names += i + 1 == readers.size() ? " and " : ", ";
    prefill_names += readers[i];
  }
  return "an " + std::string(kernels::format_name(kv_format)) + " KV cache is read by the " +
         kernels::decode_kernel_name(kernels::DecodeKernel::kPipelined) +
         " decode kernel and the " + prefill_names + " prefill kernel" +
         (readers.size() > 1 ? "s" : "") + " only, and " + kernels::kDecodeKernelEnv + " / " +
         kernels::kPrefillKernelEnv + " chose " + kernels::decode_kernel_name(decode) + " / " +
         kernels::prefill_kernel_name(prefill) + "; unset them, or use a bf16 KV cache";
}

std::string cuda_prefill_refusal(kernels::PrefillKernel prefill, std::int32_t gqa_group,
                                 bool built) {
  if (!built) {
    return std::string(kernels::kPrefillKernelEnv) + "=" + kernels::prefill_kernel_name(prefill) +
           ": this build has no such kernel (it needs sm_90a: cmake -DSERVELAB_CUDA_SM90A=ON); "
           "use fa2 or fa2_128";
  }
  const std::int32_t heads = kernels::prefill_heads_per_cta(prefill);
  if (gqa_group % heads == 0) return "";
  return std::string(kernels::kPrefillKernelEnv) + "=" + kernels::prefill_kernel_name(prefill) +
         ": the kernel packs " + std::to_string(heads) +
         " query heads of a GQA group per CTA, and the model's group (num_heads / num_kv_heads) "
         "is " +
         std::to_string(gqa_group) + "; unset it, or choose fa2, fa2_128 or wgmma";
}

}  // namespace servelab
