// The choice of paged prefill attention kernel (kernels/prefill_kernel.h): names, parsing, and
// $SERVELAB_CUDA_PREFILL (a bad value is an error naming the variable and the accepted values).
#include "kernels/prefill_kernel.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <iterator>
#include <stdexcept>
#include <string>

namespace servelab {
namespace {

using kernels::PrefillKernel;

TEST(PrefillKernel, NamesRoundTrip) {
  ASSERT_EQ(std::size(kernels::kPrefillKernels), 5u);
  for (PrefillKernel k : kernels::kPrefillKernels) {
    EXPECT_EQ(kernels::parse_prefill_kernel(kernels::prefill_kernel_name(k), "x"), k);
  }
  EXPECT_STREQ(kernels::prefill_kernel_name(PrefillKernel::kFa2), "fa2");
  EXPECT_STREQ(kernels::prefill_kernel_name(PrefillKernel::kWmma), "wmma");
  EXPECT_STREQ(kernels::prefill_kernel_name(PrefillKernel::kFa2Wide), "fa2_128");
  EXPECT_STREQ(kernels::prefill_kernel_name(PrefillKernel::kWgmma), "wgmma");
  EXPECT_STREQ(kernels::prefill_kernel_name(PrefillKernel::kFa2Gqa), "fa2_gqa");
}

// Tile rows, and the two capabilities: reading an fp8 cache (the fa2 kernels) and splitting the
// key range (every kernel but wmma).
TEST(PrefillKernel, TileRowsFp8AndSplits) {
  EXPECT_EQ(kernels::prefill_tile_rows(PrefillKernel::kFa2), 64);
  EXPECT_EQ(kernels::prefill_tile_rows(PrefillKernel::kWmma), 64);
  EXPECT_EQ(kernels::prefill_tile_rows(PrefillKernel::kFa2Wide), 128);
  EXPECT_EQ(kernels::prefill_tile_rows(PrefillKernel::kWgmma), 128);
  EXPECT_EQ(kernels::prefill_tile_rows(PrefillKernel::kFa2Gqa), 16);
  // Head packing: 4 heads x 16 rows, the 64 rows of the fa2 CTA; every other kernel one head.
  for (PrefillKernel k : kernels::kPrefillKernels) {
    EXPECT_EQ(kernels::prefill_heads_per_cta(k), k == PrefillKernel::kFa2Gqa ? 4 : 1)
        << kernels::prefill_kernel_name(k);
  }
  EXPECT_TRUE(kernels::prefill_reads_fp8(PrefillKernel::kFa2Gqa));
  EXPECT_TRUE(kernels::prefill_splits_keys(PrefillKernel::kFa2Gqa));
  EXPECT_TRUE(kernels::prefill_reads_fp8(PrefillKernel::kFa2));
  EXPECT_TRUE(kernels::prefill_reads_fp8(PrefillKernel::kFa2Wide));
  EXPECT_FALSE(kernels::prefill_reads_fp8(PrefillKernel::kWmma));
  EXPECT_TRUE(kernels::prefill_reads_fp8(PrefillKernel::kWgmma));  // since 2026-12-05
  EXPECT_TRUE(kernels::prefill_splits_keys(PrefillKernel::kFa2));
  EXPECT_TRUE(kernels::prefill_splits_keys(PrefillKernel::kFa2Wide));
  EXPECT_TRUE(kernels::prefill_splits_keys(PrefillKernel::kWgmma));
  EXPECT_FALSE(kernels::prefill_splits_keys(PrefillKernel::kWmma));
}

TEST(PrefillKernel, BadNamesAreRefusedWithTheAcceptedValues) {
  for (const char* bad : {"", "FA2", "wmma ", "flash", "fa3", "fa2_64", "fa2-128", "WGMMA"}) {
    try {
      kernels::parse_prefill_kernel(bad, "SERVELAB_CUDA_PREFILL");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), std::string("SERVELAB_CUDA_PREFILL: expected one of fa2, "
                                                   "wmma, fa2_128, wgmma, fa2_gqa, got '") +
                                           bad + "'");
    }
  }
}

TEST(PrefillKernel, EnvironmentOverridesTheFallbackWhenSet) {
  ::unsetenv(kernels::kPrefillKernelEnv);
  EXPECT_EQ(kernels::prefill_kernel_from_env(PrefillKernel::kWmma), PrefillKernel::kWmma);
  EXPECT_EQ(kernels::prefill_kernel_from_env(PrefillKernel::kFa2), PrefillKernel::kFa2);
  ::setenv(kernels::kPrefillKernelEnv, "wmma", 1);
  EXPECT_EQ(kernels::prefill_kernel_from_env(PrefillKernel::kFa2), PrefillKernel::kWmma);
  ::setenv(kernels::kPrefillKernelEnv, "fa2", 1);
  EXPECT_EQ(kernels::prefill_kernel_from_env(PrefillKernel::kWmma), PrefillKernel::kFa2);
  ::setenv(kernels::kPrefillKernelEnv, "fa2_128", 1);
  EXPECT_EQ(kernels::prefill_kernel_from_env(PrefillKernel::kFa2), PrefillKernel::kFa2Wide);
  ::setenv(kernels::kPrefillKernelEnv, "wgmma", 1);
  EXPECT_EQ(kernels::prefill_kernel_from_env(PrefillKernel::kFa2), PrefillKernel::kWgmma);
  ::setenv(kernels::kPrefillKernelEnv, "fa2_gqa", 1);
  EXPECT_EQ(kernels::prefill_kernel_from_env(PrefillKernel::kFa2), PrefillKernel::kFa2Gqa);
  ::setenv(kernels::kPrefillKernelEnv, "bogus", 1);
  EXPECT_THROW(kernels::prefill_kernel_from_env(PrefillKernel::kFa2), std::invalid_argument);
  ::unsetenv(kernels::kPrefillKernelEnv);
}

}  // namespace
}  // namespace servelab
