// NvmlEnergy: a GPU board's energy counter, read through NVML (the driver's management library)
// for `engine profile` to record the power each step shape draws (docs/validation.md, "Power").
//
// NVML is opened at run time (dlopen of libnvidia-ml.so.1, which ships with the driver, never
// with the bundle), so nothing links it and a machine without a driver simply has no meter.
// The counter is nvmlDeviceGetTotalEnergyConsumption: millijoules since the driver loaded
// (Volta and newer boards). The device is found by its PCI bus id, which CUDA and NVML share
// whatever their device numbering (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER).
//
// Not copyable; one per device. Reading is thread-compatible (NVML is thread-safe).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace servelab {

class NvmlEnergy {
 public:
  // Opens NVML and the device at `pci_bus_id` ("0000:3B:00.0", as cudaDeviceGetPCIBusId writes
  // it). Never throws: when NVML, the device or its counter is missing, available() is false and
  // why() says which ("libnvidia-ml.so.1: cannot open shared object file", "nvmlInit: error 9").
  explicit NvmlEnergy(const std::string& pci_bus_id);
  ~NvmlEnergy();
  NvmlEnergy(const NvmlEnergy&) = delete;
  NvmlEnergy& operator=(const NvmlEnergy&) = delete;

  bool available() const { return device_ != nullptr; }
  const std::string& why() const { return why_; }
  // The counter in millijoules; nullopt when unavailable or when a read fails.
  std::optional<std::uint64_t> millijoules() const;
  // The counter's advance from `before` to `after` (two millijoules() reads), in millijoules:
  // nullopt when either read failed or the counter went back (the driver reloaded).
  static std::optional<std::uint64_t> advance(std::optional<std::uint64_t> before,
                                              std::optional<std::uint64_t> after);

 private:
  void* library_ = nullptr;  // dlopen handle
  void* device_ = nullptr;   // nvmlDevice_t
  bool initialised_ = false;
  int (*get_energy_)(void*, unsigned long long*) = nullptr;
  int (*shutdown_)() = nullptr;
  std::string why_;
};

}  // namespace servelab
