// The CUDA executor's environment switches (engine/gpu_switches.h): parsed and validated without
// a GPU; a bad value is a ConfigError naming the variable and the accepted values.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/config_error.h"
#include "engine/gpu_switches.h"

namespace servelab {
namespace {

struct FakeOptions {
  bool cuda_graphs = true;
  bool fused_qkv_rope = true;
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
}

}  // namespace
}  // namespace servelab
