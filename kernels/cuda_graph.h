// CudaGraph: one captured and instantiated CUDA graph (cudaGraphExec_t), owned. The engine
// captures a decode step's launches once per DecodeGraphKey (kernels/decode_graph_plan.h) and
// replays them with one launch. No CUDA types here (kernels/device.h's Stream); throws
// std::runtime_error("CUDA <what>: <reason>") on failure. Compiled only with CUDA.
//
// Capture contract: between begin_capture(stream) and end_capture() the calling thread only
// enqueues work on `stream` (kernel launches, cuBLAS with a fixed workspace, async copies
// between device buffers); no allocation, no synchronisation, no pageable-memory copy. Capture
// is thread-local (cudaStreamCaptureModeThreadLocal): other threads' CUDA calls are unaffected.
// Kernel arguments are recorded by value: replay reuses the same pointers and scalars, reading
// whatever the buffers hold at replay time.
#pragma once

#include "kernels/device.h"

namespace servelab::kernels {

class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(CudaGraph&& other) noexcept;
  CudaGraph& operator=(CudaGraph&& other) noexcept;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Starts capturing `stream` (which must not be the legacy default stream, nullptr). REQUIRES:
  // empty().
  void begin_capture(Stream stream);
  // Ends the capture started by begin_capture and instantiates the graph. When capture failed
  // (an illegal call was made while capturing) throws, leaving this empty and the stream out of
  // capture mode.
  void end_capture();
  // Stops a capture without instantiating (error paths: an exception while capturing); never
  // throws. No-op when not capturing.
  void abort_capture() noexcept;
  // Enqueues the whole graph on `stream`. REQUIRES: !empty().
  void launch(Stream stream) const;
  bool empty() const { return exec_ == nullptr; }

 private:
  void release() noexcept;
  Stream capturing_ = nullptr;
  void* exec_ = nullptr;  // cudaGraphExec_t
};

}  // namespace servelab::kernels
