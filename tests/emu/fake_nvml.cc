// A stand-in for the driver's NVML (libnvidia-ml.so.1) with the four functions
// engine/nvml_energy.cc opens, so that the board-energy paths (`engine run` and `engine profile
// --device cuda` on the CUDA emulator, NvmlEnergy itself) run in CI, where no driver exists.
// Built as <build>/tests/emu/fake_nvml/libnvidia-ml.so.1 and found only by the tests that put
// that folder on LD_LIBRARY_PATH (tests/emu/CMakeLists.txt); nothing links it.
//
// The one board has the bus id SERVELAB_FAKE_NVML_BUS_ID ("0000:00:00.0" unless set: the
// emulator's, tests/emu/cuda_emu.cc) and draws a constant SERVELAB_FAKE_NVML_WATTS (250 unless
// set) from the first nvmlInit on, so its energy counter is watts x milliseconds of wall time since
// then: a test knows the average power every window must show. Return codes are NVML's: 0 success,
// 1 uninitialised, 2 invalid argument, 6 not found.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

using Clock = std::chrono::steady_clock;

int g_inits = 0;  // NVML counts nvmlInit against nvmlShutdown
Clock::time_point g_start;
int g_board = 0;  // its address is the device handle

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

}  // namespace

extern "C" {

int nvmlInit_v2() {
  if (g_inits++ == 0) g_start = Clock::now();
  return 0;
}

int nvmlShutdown() {
  if (g_inits == 0) return 1;
  --g_inits;
  return 0;
}

int nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, void** device) {
  if (g_inits == 0) return 1;
  if (bus_id == nullptr || device == nullptr) return 2;
  if (env_or("SERVELAB_FAKE_NVML_BUS_ID", "0000:00:00.0") != bus_id) return 6;
  *device = &g_board;
  return 0;
}

int nvmlDeviceGetTotalEnergyConsumption(void* device, unsigned long long* millijoules) {
  if (g_inits == 0) return 1;
  if (device != &g_board || millijoules == nullptr) return 2;
  const double watts = std::atof(env_or("SERVELAB_FAKE_NVML_WATTS", "250").c_str());
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - g_start).count();
  *millijoules = static_cast<unsigned long long>(watts * ms);  // W x ms = mJ
  return 0;
}

}  // extern "C"
