#include "kernels/device.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <stdexcept>
#include <utility>

namespace servelab::kernels {

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
  }
}

cudaStream_t as_stream(Stream s) { return static_cast<cudaStream_t>(s); }

}  // namespace

bool cuda_device_available(std::string* reason) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (reason != nullptr) *reason = cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky error
    return false;
  }
  if (n == 0) {
    if (reason != nullptr) *reason = "no CUDA device found";
    return false;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    if (reason != nullptr) *reason = "cannot query device 0";
    return false;
  }
  if (prop.major < 9) {
    if (reason != nullptr) {
      *reason = std::string(prop.name) + " is sm_" + std::to_string(prop.major) +
                std::to_string(prop.minor) + "; the kernels are built for sm_90 only";
    }
    return false;
  }
  return true;
}

DeviceInfo device_info() {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  DeviceInfo info;
  info.name = prop.name;
  info.sm_count = prop.multiProcessorCount;
  info.major = prop.major;
  info.minor = prop.minor;
  std::size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  info.total_bytes = static_cast<std::int64_t>(total_b);
  info.free_bytes = static_cast<std::int64_t>(free_b);
  char bus_id[32] = {};
  check(cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, 0), "cudaDeviceGetPCIBusId");
  info.pci_bus_id = bus_id;
  return info;
}

DeviceBuffer::DeviceBuffer(std::size_t bytes, Kind kind) : bytes_(bytes), kind_(kind) {
  if (bytes == 0) return;
  if (kind == Kind::kDevice) {
    check(cudaMalloc(&device_ptr_, bytes), "cudaMalloc");
  } else {
    check(cudaHostAlloc(&host_ptr_, bytes, cudaHostAllocMapped | cudaHostAllocPortable),
          "cudaHostAlloc");
    check(cudaHostGetDevicePointer(&device_ptr_, host_ptr_, 0), "cudaHostGetDevicePointer");
  }
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : device_ptr_(std::exchange(other.device_ptr_, nullptr)),
      host_ptr_(std::exchange(other.host_ptr_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      kind_(other.kind_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    device_ptr_ = std::exchange(other.device_ptr_, nullptr);
    host_ptr_ = std::exchange(other.host_ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    kind_ = other.kind_;
  }
  return *this;
}

void DeviceBuffer::release() noexcept {
  if (kind_ == Kind::kDevice && device_ptr_ != nullptr) cudaFree(device_ptr_);
  if (kind_ == Kind::kPinnedHost && host_ptr_ != nullptr) cudaFreeHost(host_ptr_);
  device_ptr_ = host_ptr_ = nullptr;
  bytes_ = 0;
}

void copy_async(void* dst, const void* src, std::size_t bytes, Stream stream) {
  if (bytes == 0) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, as_stream(stream)), "cudaMemcpyAsync");
}

void copy_to_device(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}

void copy_to_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
}

void fill_bytes(void* dst, int value, std::size_t bytes, Stream stream) {
  if (bytes == 0) return;
  check(cudaMemsetAsync(dst, value, bytes, as_stream(stream)), "cudaMemsetAsync");
}

void synchronize(Stream stream) {
  check(cudaStreamSynchronize(as_stream(stream)), "cudaStreamSynchronize");
}

OwnedStream OwnedStream::create() {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  OwnedStream o;
  o.stream_ = s;
  return o;
}

OwnedStream::~OwnedStream() { release(); }

OwnedStream::OwnedStream(OwnedStream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)) {}

OwnedStream& OwnedStream::operator=(OwnedStream&& other) noexcept {
  if (this != &other) {
    release();
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

void OwnedStream::release() noexcept {
  if (stream_ == nullptr) return;
  const cudaStream_t s = as_stream(std::exchange(stream_, nullptr));
  // At process exit the runtime may already be unloading; that is not worth a message.
  auto report = [](cudaError_t e, const char* what) {
    if (e != cudaSuccess && e != cudaErrorCudartUnloading) {
      std::fprintf(stderr, "servelab: CUDA %s: %s\n", what, cudaGetErrorString(e));
    }
  };
  report(cudaStreamSynchronize(s), "cudaStreamSynchronize (stream destruction)");
  report(cudaStreamDestroy(s), "cudaStreamDestroy");
}

GpuTimer::GpuTimer(Stream stream) : stream_(stream) {
  cudaEvent_t a = nullptr, b = nullptr;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  start_ = a;
  stop_ = b;
}

GpuTimer::~GpuTimer() {
  cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}

void GpuTimer::start() {
  check(cudaEventRecord(static_cast<cudaEvent_t>(start_), as_stream(stream_)), "cudaEventRecord");
}

float GpuTimer::stop() {
  check(cudaEventRecord(static_cast<cudaEvent_t>(stop_), as_stream(stream_)), "cudaEventRecord");
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)), "cudaEventSynchronize");
  float ms = 0;
  check(
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_)),
      "cudaEventElapsedTime");
  return ms;
}

}  // namespace servelab::kernels
