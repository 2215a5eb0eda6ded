// The CUDA executor's environment switches (engine/gpu_switches.h): parsed and validated without
// a GPU; a bad value is a ConfigError naming the variable and the accepted values.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

#include "core/config_error.h"
#include "engine/gpu_switches.h"

namespace servelab {
namespace {

struct FakeOptions {
  bool cuda_graphs = true;
  bool fused_qkv_rope = true;
  bool programmatic_launch = false;
  bool prefill_pack_heads = true;
  kernels::DecodeKernel decode_kernel = kernels::kDefaultDecodeKernel;
  std::optional<kernels::PrefillKernel> prefill_kernel;  // unset: the executor's default
  kernels::GemmKernel gemm_kernel = kernels::GemmKernel::kCublas;
  kernels::LoraKernel lora_kernel = kernels::LoraKernel::kGather;
};

TEST(CudaSwitches, ZeroAndOneAreTheOnlyValues) {
  EXPECT_EQ(parse_switch(kCudaGraphsEnv, nullptr), std::nullopt);
  EXPECT_EQ(parse_switch(kCudaGraphsEnv, "1"), true);
  EXPECT_EQ(parse_switch(kCudaGraphsEnv, "0"), false);
  EXPECT_EQ(parse_switch(kCudaGraphsEnv, " 0\t"), false);
  for (const char* bad : {"", "yes", "true", "2", "01", "off"}) {
    try {
      parse_switch(kCudaFusedQkvEnv, bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("SERVELAB_CUDA_FUSED_QKV"), std::string::npos) << msg;
      EXPECT_NE(msg.find("expected 0 (off) or 1 (on)"), std::string::npos) << msg;
    }
  }
}

TEST(CudaSwitches, EnvironmentSetsOnlyWhatItNames) {
  ::unsetenv(kCudaGraphsEnv);
  ::unsetenv(kCudaFusedQkvEnv);
  FakeOptions o;
  apply_cuda_switches(cuda_switches_from_env(), o);
  EXPECT_TRUE(o.cuda_graphs);
  EXPECT_TRUE(o.fused_qkv_rope);
  ::setenv(kCudaGraphsEnv, "0", 1);
  apply_cuda_switches(cuda_switches_from_env(), o);
  EXPECT_FALSE(o.cuda_graphs);
  EXPECT_TRUE(o.fused_qkv_rope);
  ::setenv(kCudaFusedQkvEnv, "0", 1);
  ::setenv(kCudaGraphsEnv, "1", 1);
  apply_cuda_switches(cuda_switches_from_env(), o);
  EXPECT_TRUE(o.cuda_graphs);
  EXPECT_FALSE(o.fused_qkv_rope);
  ::setenv(kCudaGraphsEnv, "maybe", 1);
  EXPECT_THROW(cuda_switches_from_env(), ConfigError);
  ::unsetenv(kCudaGraphsEnv);
  ::unsetenv(kCudaFusedQkvEnv);
  // SERVELAB_CUDA_PDL: programmatic dependent launch, off unless set to 1.
  ::unsetenv(kCudaPdlEnv);
  apply_cuda_switches(cuda_switches_from_env(), o);
  EXPECT_FALSE(o.programmatic_launch);
  ::setenv(kCudaPdlEnv, "1", 1);
  apply_cuda_switches(cuda_switches_from_env(), o);
  EXPECT_TRUE(o.programmatic_launch);
  EXPECT_TRUE(o.cuda_graphs);
  ::setenv(kCudaPdlEnv, "on", 1);
  EXPECT_THROW(cuda_switches_from_env(), ConfigError);
  ::unsetenv(kCudaPdlEnv);
  // SERVELAB_CUDA_PREFILL_PACK: head packing of short prefill launches, on unless set to 0.
  ::unsetenv(kCudaPrefillPackEnv);
  apply_cuda_switches(cuda_switches_from_env(), o);
  EXPECT_TRUE(o.prefill_pack_heads);
  ::setenv(kCudaPrefillPackEnv, "0", 1);
  apply_cuda_switches(cuda_switches_from_env(), o);
  EXPECT_FALSE(o.prefill_pack_heads);
  EXPECT_TRUE(o.programmatic_launch);
  ::setenv(kCudaPrefillPackEnv, "no", 1);
  try {
    cuda_switches_from_env();
    ADD_FAILURE() << "accepted SERVELAB_CUDA_PREFILL_PACK=no";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("SERVELAB_CUDA_PREFILL_PACK"), std::string::npos)
        << e.what();
  }
  ::unsetenv(kCudaPrefillPackEnv);
}

// The attention kernels by name: SERVELAB_CUDA_DECODE and SERVELAB_CUDA_PREFILL set only their
// own option; a name that is no kernel is a ConfigError naming the variable and the choices.
TEST(CudaSwitches, KernelVariablesPickTheAttentionKernels) {
  ::unsetenv(kernels::kDecodeKernelEnv);
  ::unsetenv(kernels::kPrefillKernelEnv);
  FakeOptions o;
  apply_cuda_switches(cuda_switches_from_env(), o);
  EXPECT_EQ(o.decode_kernel, kernels::DecodeKernel::kPipelined);
  EXPECT_EQ(o.prefill_kernel, std::nullopt);
  ::setenv(kernels::kDecodeKernelEnv, "tiled", 1);
  apply_cuda_switches(cuda_switches_from_env(), o);
  EXPECT_EQ(o.decode_kernel, kernels::DecodeKernel::kTiled);
  EXPECT_EQ(o.prefill_kernel, std::nullopt);
  ::setenv(kernels::kPrefillKernelEnv, "wmma", 1);
  apply_cuda_switches(cuda_switches_from_env(), o);
  EXPECT_EQ(o.prefill_kernel, kernels::PrefillKernel::kWmma);
  ::setenv(kernels::kDecodeKernelEnv, "flash", 1);
  try {
    cuda_switches_from_env();
    ADD_FAILURE() << "accepted SERVELAB_CUDA_DECODE=flash";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("SERVELAB_CUDA_DECODE=flash: expected one of tiled, "
                                         "pipelined"),
              std::string::npos)
        << e.what();
  }
  ::unsetenv(kernels::kDecodeKernelEnv);
  ::setenv(kernels::kPrefillKernelEnv, "wgmma", 1);
  apply_cuda_switches(cuda_switches_from_env(), o);
  EXPECT_EQ(o.prefill_kernel, kernels::PrefillKernel::kWgmma);
  ::setenv(kernels::kPrefillKernelEnv, "fa2_gqa", 1);
  apply_cuda_switches(cuda_switches_from_env(), o);
  EXPECT_EQ(o.prefill_kernel, kernels::PrefillKernel::kFa2Gqa);
  ::setenv(kernels::kPrefillKernelEnv, "fa3", 1);
  try {
    cuda_switches_from_env();
    ADD_FAILURE() << "accepted SERVELAB_CUDA_PREFILL=fa3";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("SERVELAB_CUDA_PREFILL: expected one of fa2, wmma, "
                                         "fa2_128, wgmma, fa2_gqa, got 'fa3'"),
              std::string::npos)
        << e.what();
  }
  ::unsetenv(kernels::kPrefillKernelEnv);
}

// An fp8 KV cache with kernels that do not read it: one reason, shared by the CUDA executor and
// the engine driver, naming the kernels that do, the switches and what they chose.
TEST(CudaSwitches, Fp8KvNeedsKernelsThatReadIt) {
  using kernels::DecodeKernel;
  using kernels::FloatFormat;
  using kernels::PrefillKernel;
  for (DecodeKernel d : {DecodeKernel::kTiled, DecodeKernel::kPipelined}) {
    for (PrefillKernel p : kernels::kPrefillKernels) {
      SCOPED_TRACE(std::string(kernels::decode_kernel_name(d)) + " / " +
                   kernels::prefill_kernel_name(p));
      EXPECT_EQ(cuda_kv_kernels_refusal(FloatFormat::kBf16, d, p), "");
      for (FloatFormat f : {FloatFormat::kFp8E4m3, FloatFormat::kFp8E5m2}) {
        const std::string why = cuda_kv_kernels_refusal(f, d, p);
        EXPECT_EQ(why.empty(), d == DecodeKernel::kPipelined && kernels::prefill_reads_fp8(p))
            << why;
      }
    }
  }
  EXPECT_EQ(
      cuda_kv_kernels_refusal(FloatFormat::kFp8E4m3, DecodeKernel::kTiled, PrefillKernel::kFa2),
      "an fp8_e4m3 KV cache is read by the pipelined decode kernel and the fa2, fa2_128, wgmma "
      "and fa2_gqa prefill kernels only, and SERVELAB_CUDA_DECODE / SERVELAB_CUDA_PREFILL chose "
      "tiled "
      "/ "
      "fa2; unset them, or use a bf16 KV cache");
  const std::string wmma = cuda_kv_kernels_refusal(FloatFormat::kFp8E5m2, DecodeKernel::kPipelined,
                                                   PrefillKernel::kWmma);
  EXPECT_NE(wmma.find("an fp8_e5m2 KV cache"), std::string::npos) << wmma;
  EXPECT_NE(wmma.find("SERVELAB_CUDA_DECODE / SERVELAB_CUDA_PREFILL chose pipelined / wmma"),
            std::string::npos)
      << wmma;
  EXPECT_EQ(cuda_kv_kernels_refusal(FloatFormat::kFp8E5m2, DecodeKernel::kPipelined,
                                    PrefillKernel::kWgmma),
            "");
}

// SERVELAB_CUDA_PREFILL=fa2_gqa packs 4 query heads of a GQA group per CTA: a model whose group
// is not a multiple of 4 is refused with the reason (exit code 2 from the engine, where the
// executor's own check was an internal error); every other kernel takes any group. A kernel this
// build lacks (wgmma without sm_90a) is refused whatever the group, in `engine run` and `engine
// profile` alike (the profile's was the executor's internal error).
TEST(CudaSwitches, PackedPrefillNeedsAGroupOfFourAndABuiltKernel) {
  using kernels::PrefillKernel;
  for (PrefillKernel p : kernels::kPrefillKernels) {
    SCOPED_TRACE(kernels::prefill_kernel_name(p));
    for (std::int32_t group : {1, 2, 3, 4, 6, 8}) {
      const std::string why = cuda_prefill_refusal(p, group, /*built=*/true);
      EXPECT_EQ(why.empty(), p != PrefillKernel::kFa2Gqa || group % 4 == 0) << group << ": " << why;
      EXPECT_NE(cuda_prefill_refusal(p, group, /*built=*/false), "");
    }
  }
  EXPECT_EQ(cuda_prefill_refusal(PrefillKernel::kFa2Gqa, 2, true),
            "SERVELAB_CUDA_PREFILL=fa2_gqa: the kernel packs 4 query heads of a GQA group per CTA, "
            "and the model's group (num_heads / num_kv_heads) is 2; unset it, or choose fa2, "
            "fa2_128 or wgmma");
  EXPECT_EQ(cuda_prefill_refusal(PrefillKernel::kWgmma, 4, false),
            "SERVELAB_CUDA_PREFILL=wgmma: this build has no such kernel (it needs sm_90a: cmake "
            "-DSERVELAB_CUDA_SM90A=ON); use fa2 or fa2_128");
}

// SERVELAB_CUDA_GEMM picks the linear layers' kernel of small steps and nothing else.
TEST(CudaSwitches, GemmVariablePicksTheLinearKernel) {
  ::unsetenv(kernels::kGemmKernelEnv);
  ::unsetenv(kernels::kPrefillKernelEnv);
  ::unsetenv(kernels::kDecodeKernelEnv);
  FakeOptions o;
  apply_cuda_switches(cuda_switches_from_env(), o);
  EXPECT_EQ(o.gemm_kernel, kernels::GemmKernel::kCublas);
  ::setenv(kernels::kGemmKernelEnv, "skinny", 1);
  apply_cuda_switches(cuda_switches_from_env(), o);
  EXPECT_EQ(o.gemm_kernel, kernels::GemmKernel::kSkinny);
  EXPECT_EQ(o.prefill_kernel, std::nullopt);
  EXPECT_EQ(o.decode_kernel, kernels::DecodeKernel::kPipelined);
  EXPECT_STREQ(kernels::gemm_kernel_name(o.gemm_kernel), "skinny");
  ::setenv(kernels::kGemmKernelEnv, "lt", 1);
  apply_cuda_switches(cuda_switches_from_env(), o);
  EXPECT_EQ(o.gemm_kernel, kernels::GemmKernel::kCublasLt);
  EXPECT_STREQ(kernels::gemm_kernel_name(o.gemm_kernel), "lt");
  ::setenv(kernels::kGemmKernelEnv, "auto", 1);
  apply_cuda_switches(cuda_switches_from_env(), o);
  EXPECT_EQ(o.gemm_kernel, kernels::GemmKernel::kAuto);
  EXPECT_STREQ(kernels::gemm_kernel_name(o.gemm_kernel), "auto");
  ::setenv(kernels::kGemmKernelEnv, "cublas", 1);
  apply_cuda_switches(cuda_switches_from_env(), o);
  EXPECT_EQ(o.gemm_kernel, kernels::GemmKernel::kCublas);
  EXPECT_STREQ(kernels::gemm_kernel_name(o.gemm_kernel), "cublas");
  for (const char* bad : {"", "Skinny", "cutlass", "cublasLt", "Auto"}) {
    ::setenv(kernels::kGemmKernelEnv, bad, 1);
    try {
      cuda_switches_from_env();
      ADD_FAILURE() << "accepted SERVELAB_CUDA_GEMM='" << bad << "'";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("SERVELAB_CUDA_GEMM: expected one of cublas, skinny, "
                                           "lt, auto, got '" +
                                           std::string(bad) + "'"),
                std::string::npos)
          << e.what();
    }
  }
  ::unsetenv(kernels::kGemmKernelEnv);
}

// SERVELAB_CUDA_GEMM_LT_FILE names the file of cuBLASLt decisions (engine/gemm_lt_file.h): unset
// is none, a path is kept as given, an empty value is refused naming the variable.
TEST(CudaSwitches, GemmLtFileVariableNamesTheDecisionsFile) {
  ::unsetenv(kCudaGemmLtFileEnv);
  EXPECT_EQ(cuda_switches_from_env().gemm_lt_file, std::nullopt);
  ::setenv(kCudaGemmLtFileEnv, "/tmp/some dir/decisions.txt", 1);
  EXPECT_EQ(cuda_switches_from_env().gemm_lt_file, "/tmp/some dir/decisions.txt");
  ::setenv(kCudaGemmLtFileEnv, "", 1);
  try {
    cuda_switches_from_env();
    ADD_FAILURE() << "accepted an empty SERVELAB_CUDA_GEMM_LT_FILE";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("SERVELAB_CUDA_GEMM_LT_FILE is empty"), std::string::npos)
        << e.what();
  }
  ::unsetenv(kCudaGemmLtFileEnv);
}

// SERVELAB_CUDA_LORA picks how LoRA deltas are computed, and nothing else; a bad value names the
// variable and both kernels.
TEST(CudaSwitches, LoraVariablePicksTheDeltaKernel) {
  ::unsetenv(kernels::kLoraKernelEnv);
  ::unsetenv(kernels::kGemmKernelEnv);
  FakeOptions o;
  apply_cuda_switches(cuda_switches_from_env(), o);
  EXPECT_EQ(o.lora_kernel, kernels::LoraKernel::kGather);
  const std::pair<const char*, kernels::LoraKernel> good[] = {
      {"cublas", kernels::LoraKernel::kCublas}, {"gather", kernels::LoraKernel::kGather}};
  for (const auto& [text, kernel] : good) {
    ::setenv(kernels::kLoraKernelEnv, text, 1);
    apply_cuda_switches(cuda_switches_from_env(), o);
    EXPECT_EQ(o.lora_kernel, kernel);
    EXPECT_STREQ(kernels::lora_kernel_name(o.lora_kernel), text);
    EXPECT_EQ(o.gemm_kernel, kernels::GemmKernel::kCublas);
  }
  ::setenv(kernels::kLoraKernelEnv, "sgmv", 1);
  EXPECT_THROW(
      {
        try {
          cuda_switches_from_env();
        } catch (const ConfigError& e) {
          EXPECT_NE(std::string(e.what()).find(
                        "SERVELAB_CUDA_LORA: expected one of gather, cublas, got 'sgmv'"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      ConfigError);
  ::unsetenv(kernels::kLoraKernelEnv);
}

}  // namespace
}  // namespace servelab
