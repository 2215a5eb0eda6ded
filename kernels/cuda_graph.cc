#include "kernels/cuda_graph.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>

namespace servelab::kernels {

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
  }
}

}  // namespace

CudaGraph::~CudaGraph() {
  abort_capture();
  release();
}

CudaGraph::CudaGraph(CudaGraph&& other) noexcept
    : capturing_(std::exchange(other.capturing_, nullptr)),
      exec_(std::exchange(other.exec_, nullptr)) {}

CudaGraph& CudaGraph::operator=(CudaGraph&& other) noexcept {
  if (this != &other) {
    abort_capture();
    release();
    capturing_ = std::exchange(other.capturing_, nullptr);
    exec_ = std::exchange(other.exec_, nullptr);
  }
  return *this;
}

void CudaGraph::release() noexcept {
  if (exec_ == nullptr) return;
  const cudaError_t e = cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (e != cudaSuccess) {
    std::fprintf(stderr, "servelab: CUDA cudaGraphExecDestroy: %s\n", cudaGetErrorString(e));
  }
  exec_ = nullptr;
}

void CudaGraph::begin_capture(Stream stream) {
  if (!empty() || capturing_ != nullptr) {
    throw std::logic_error("CudaGraph::begin_capture: already holds or captures a graph");
  }
  if (stream == nullptr) {
    throw std::invalid_argument("CudaGraph::begin_capture: the default stream cannot be captured");
  }
  check(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream), cudaStreamCaptureModeThreadLocal),
        "cudaStreamBeginCapture");
  capturing_ = stream;
}

void CudaGraph::end_capture() {
  if (capturing_ == nullptr) throw std::logic_error("CudaGraph::end_capture: not capturing");
  cudaGraph_t graph = nullptr;
  const cudaError_t e =
      cudaStreamEndCapture(static_cast<cudaStream_t>(std::exchange(capturing_, nullptr)), &graph);
  if (e != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();  // an invalidated capture leaves a sticky-free error: clear it
    check(e, "cudaStreamEndCapture");
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t ie = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);  // the executable graph is independent of it
  check(ie, "cudaGraphInstantiate");
  exec_ = exec;
}

void CudaGraph::abort_capture() noexcept {
  if (capturing_ == nullptr) return;
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(static_cast<cudaStream_t>(std::exchange(capturing_, nullptr)), &graph);
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();
}

void CudaGraph::launch(Stream stream) const {
  if (empty()) throw std::logic_error("CudaGraph::launch: no graph");
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaStream_t>(stream)),
        "cudaGraphLaunch");
}

}  // namespace servelab::kernels
