// NvmlEnergy (engine/nvml_energy.h) against the fake NVML of tests/emu/fake_nvml.cc, which ctest
// puts on LD_LIBRARY_PATH (tests/emu/CMakeLists.txt): the board found by its bus id, its counter
// read in millijoules, and each failure NVML can answer reported with its reason; `engine
// serve`'s /metrics counter of the board's joules (engine/serve_metrics.h).
#include "engine/nvml_energy.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <thread>

#include "engine/serve_metrics.h"

namespace servelab {
namespace {

TEST(FakeNvml, TheCounterMovesAtTheBoardsPower) {
  ::setenv("SERVELAB_FAKE_NVML_WATTS", "400", 1);
  const NvmlEnergy meter("0000:00:00.0");
  ASSERT_TRUE(meter.available()) << meter.why();
  EXPECT_TRUE(meter.why().empty());
  const auto t0 = std::chrono::steady_clock::now();
  const std::optional<std::uint64_t> a = meter.millijoules();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const std::optional<std::uint64_t> b = meter.millijoules();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(a.has_value() && b.has_value());
  ASSERT_GT(*b, *a);
  // At most the wall time between the reads, at least the 200 ms slept: 400 W x [0.2, s] s.
  const double joules = static_cast<double>(*b - *a) * 1e-3;
  EXPECT_GE(joules, 400 * 0.2 * 0.99);
  EXPECT_LE(joules, 400 * s * 1.01);
  ::unsetenv("SERVELAB_FAKE_NVML_WATTS");
}

// The advance between two reads: none when a read failed or the counter went back.
TEST(FakeNvml, AdvanceBetweenReads) {
  EXPECT_EQ(NvmlEnergy::advance(1000, 1500), 500u);
  EXPECT_EQ(NvmlEnergy::advance(1000, 1000), 0u);
  EXPECT_FALSE(NvmlEnergy::advance(1500, 1000));  // a driver reload resets the counter
  EXPECT_FALSE(NvmlEnergy::advance(std::nullopt, 1000));
  EXPECT_FALSE(NvmlEnergy::advance(1000, std::nullopt));
}

TEST(FakeNvml, ABoardNotOnTheBusIsUnavailableWithItsBusIdInTheReason) {
  const NvmlEnergy meter("0000:3B:00.0");
  EXPECT_FALSE(meter.available());
  EXPECT_EQ(meter.why(), "nvmlDeviceGetHandleByPciBusId(0000:3B:00.0): error 6");
  EXPECT_FALSE(meter.millijoules().has_value());
}

TEST(FakeNvml, TwoMetersOnOneBoardAgree) {
  const NvmlEnergy a("0000:00:00.0"), b("0000:00:00.0");
  ASSERT_TRUE(a.available() && b.available());
  const std::optional<std::uint64_t> first = a.millijoules();
  const std::optional<std::uint64_t> second = b.millijoules();
  ASSERT_TRUE(first && second);
  EXPECT_GE(*second, *first);  // one counter, read later
}

// The joules on /metrics since set_board_energy: 250 W x the time between, and no line without a
// meter.
TEST(FakeNvml, ServeMetricsCountTheBoardsJoulesSinceTheServerStarted) {
  ServeMetrics none("m");
  EXPECT_EQ(none.render().find("servelab:gpu_energy_joules_total"), std::string::npos);
  none.set_board_energy(nullptr);
  EXPECT_EQ(none.render().find("servelab:gpu_energy_joules_total"), std::string::npos);

  const NvmlEnergy meter("0000:00:00.0");
  ASSERT_TRUE(meter.available()) << meter.why();
  ServeMetrics m("m");
  const auto t0 = std::chrono::steady_clock::now();
  m.set_board_energy(&meter);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const std::string text = m.render();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string key = "servelab:gpu_energy_joules_total{model_name=\"m\"} ";
  const std::size_t at = text.find(key);
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE servelab:gpu_energy_joules_total counter"), std::string::npos);
  const double joules = std::stod(text.substr(at + key.size()));
  EXPECT_GE(joules, 250 * 0.2 * 0.99);
  EXPECT_LE(joules, 250 * s * 1.01);
}

}  // namespace
}  // namespace servelab
