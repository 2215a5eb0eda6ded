#include "engine/nvml_energy.h"

#include <dlfcn.h>

namespace servelab {

namespace {

// The few NVML entry points used, by their C signatures (nvml.h): every function returns
// nvmlReturn_t, 0 (NVML_SUCCESS) on success; nvmlDevice_t is an opaque pointer.
using InitFn = int (*)();
using HandleByBusIdFn = int (*)(const char*, void**);

}  // namespace

NvmlEnergy::NvmlEnergy(const std::string& pci_bus_id) {
  library_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library_ == nullptr) {
    const char* err = dlerror();
    why_ = err != nullptr ? err : "libnvidia-ml.so.1: cannot be opened";
    return;
  }
  const auto init = reinterpret_cast<InitFn>(dlsym(library_, "nvmlInit_v2"));
  const auto by_bus_id =
      reinterpret_cast<HandleByBusIdFn>(dlsym(library_, "nvmlDeviceGetHandleByPciBusId_v2"));
  get_energy_ = reinterpret_cast<int (*)(void*, unsigned long long*)>(
      dlsym(library_, "nvmlDeviceGetTotalEnergyConsumption"));
  shutdown_ = reinterpret_cast<int (*)()>(dlsym(library_, "nvmlShutdown"));
  if (init == nullptr || by_bus_id == nullptr || get_energy_ == nullptr || shutdown_ == nullptr) {
    why_ =
        "libnvidia-ml.so.1 lacks nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2, "
        "nvmlDeviceGetTotalEnergyConsumption or nvmlShutdown";
    return;
  }
  if (const int rc = init(); rc != 0) {
    why_ = "nvmlInit: error " + std::to_string(rc);
    return;
  }
  initialised_ = true;
  void* device = nullptr;
  if (const int rc = by_bus_id(pci_bus_id.c_str(), &device); rc != 0) {
    why_ = "nvmlDeviceGetHandleByPciBusId(" + pci_bus_id + "): error " + std::to_string(rc);
    return;
  }
  unsigned long long mj = 0;
  if (const int rc = get_energy_(device, &mj); rc != 0) {
    // 3: NVML_ERROR_NOT_SUPPORTED (boards older than Volta).
    why_ = "nvmlDeviceGetTotalEnergyConsumption: error " + std::to_string(rc);
    return;
  }
  device_ = device;
}

NvmlEnergy::~NvmlEnergy() {
  if (initialised_) shutdown_();
  if (library_ != nullptr) dlclose(library_);
}

std::optional<std::uint64_t> NvmlEnergy::millijoules() const {
  if (device_ == nullptr) return std::nullopt;
  unsigned long long mj = 0;
  if (get_energy_(device_, &mj) != 0) return std::nullopt;
  return static_cast<std::uint64_t>(mj);
}

std::optional<std::uint64_t> NvmlEnergy::advance(std::optional<std::uint64_t> before,
                                                 std::optional<std::uint64_t> after) {
  if (!before.has_value() || !after.has_value() || after.value() < before.value()) {
    return std::nullopt;
  }
  return after.value() - before.value();
}

}  // namespace servelab
