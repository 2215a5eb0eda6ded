// Minimal CUDA runtime access for code that must not include CUDA headers (the engine, tests,
// benchmarks): device discovery, device and pinned host buffers, copies, a stream, timing.
// Everything throws std::runtime_error("CUDA <what>: <cudaGetErrorString>") on failure.
// Compiled only when the build has CUDA (SERVELAB_HAVE_CUDA).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace servelab::kernels {

// A cudaStream_t, opaque here; nullptr is the default stream.
using Stream = void*;
// bf16 values are passed around as their 16-bit patterns.
using Bf16 = std::uint16_t;

// True when a CUDA device can be used; otherwise false with `reason` (e.g. "CUDA driver version
// is insufficient for CUDA runtime version", "no CUDA device found"). Never throws.
bool cuda_device_available(std::string* reason);

struct DeviceInfo {
  std::string name;
  std::int32_t sm_count = 0;
  std::int32_t major = 0, minor = 0;
  std::int64_t total_bytes = 0, free_bytes = 0;
  std::string pci_bus_id;  // cudaDeviceGetPCIBusId: "0000:3B:00.0" (how NVML finds the board)
};
DeviceInfo device_info();

// Device memory (cudaMalloc) or pinned, device-mapped host memory (cudaHostAlloc), freed on
// destruction. Move-only.
class DeviceBuffer {
 public:
  enum class Kind { kDevice, kPinnedHost };
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes, Kind kind = Kind::kDevice);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // For pinned host memory this is the device-side alias (cudaHostGetDevicePointer), which
  // kernels may read and write; host_ptr() is the host-side one.
  void* get() const { return device_ptr_; }
  void* host_ptr() const { return host_ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(device_ptr_);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  void release() noexcept;
  void* device_ptr_ = nullptr;
  void* host_ptr_ = nullptr;  // pinned host only
  std::size_t bytes_ = 0;
  Kind kind_ = Kind::kDevice;
};

// cudaMemcpyAsync with cudaMemcpyDefault (any direction, UVA); then the caller synchronizes.
void copy_async(void* dst, const void* src, std::size_t bytes, Stream stream = nullptr);
// Synchronous convenience wrappers.
void copy_to_device(void* dst, const void* src, std::size_t bytes);
void copy_to_host(void* dst, const void* src, std::size_t bytes);
// cudaMemsetAsync: tests poison outputs with 0xff bytes (NaN in fp32 and bf16).
void fill_bytes(void* dst, int value, std::size_t bytes, Stream stream = nullptr);
void synchronize(Stream stream = nullptr);

// A stream (cudaStreamNonBlocking) owned by this object: synchronised and destroyed with it.
// Default-constructed it holds none (get() is nullptr, the default stream) and touches no
// device. Move-only. Anything bound to the stream (a cuBLAS handle, events recorded on it) must
// be destroyed first: declare the OwnedStream BEFORE such members, since members are destroyed
// in reverse order of declaration.
class OwnedStream {
 public:
  OwnedStream() = default;
  // Throws std::runtime_error when the stream cannot be created.
  static OwnedStream create();
  ~OwnedStream();
  OwnedStream(OwnedStream&& other) noexcept;
  OwnedStream& operator=(OwnedStream&& other) noexcept;
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;

  Stream get() const { return stream_; }

 private:
  void release() noexcept;  // errors go to stderr: a destructor cannot throw
  Stream stream_ = nullptr;
};

// Elapsed milliseconds of `stream` work between two points (CUDA events).
class GpuTimer {
 public:
  explicit GpuTimer(Stream stream = nullptr);
  ~GpuTimer();
  GpuTimer(const GpuTimer&) = delete;
  GpuTimer& operator=(const GpuTimer&) = delete;
  void start();
  // Records the stop event, waits for it, returns milliseconds since start().
  float stop();

 private:
  Stream stream_;
  void* start_ = nullptr;
  void* stop_ = nullptr;
};

}  // namespace servelab::kernels
