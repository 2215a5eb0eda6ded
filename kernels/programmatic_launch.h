// Programmatic dependent launch (PDL; sm_90, cudaLaunchAttributeProgrammaticStreamSerialization)
// for the kernels of a decode step. While a ProgrammaticLaunch object with `on` lives on a
// thread, the kernels that thread launches through SERVELAB_LAUNCH_PDL (kernels/common.cuh) carry
// the attribute: the GPU may schedule such a kernel's CTAs as soon as every CTA of the kernel
// before it on the stream has run griddepcontrol.launch_dependents or exited, instead of after
// that kernel has completed, so the launch latency and the new kernel's prologue overlap the
// previous kernel's last wave (about 290 kernels make one decode step of an 8B model).
//
// Contract of a kernel launched through SERVELAB_LAUNCH_PDL: every thread executes
// detail::wait_for_predecessor() (griddepcontrol.wait: returns once the grids before it on the
// stream have completed and their memory is visible) before it exits and before it touches
// memory another kernel of the stream writes or reads; before the wait it may only read memory
// no kernel writes (weights). Every thread waiting keeps the chain transitive: a kernel cannot
// complete before the one before it has. The CUDA emulator (tests/emu/) fails a launch in which
// a thread exits without waiting. Without the attribute the wait returns at once, so the results
// are the same bits with PDL on or off; cuBLAS and the other kernels are launched as always.
// Plain C++ (a thread-local flag), in servelab_kernels_host.
#pragma once

namespace servelab::kernels {

class ProgrammaticLaunch {
 public:
  // Sets this thread's flag to `on` until destruction, which restores the previous value.
  explicit ProgrammaticLaunch(bool on);
  ~ProgrammaticLaunch();
  ProgrammaticLaunch(const ProgrammaticLaunch&) = delete;
  ProgrammaticLaunch& operator=(const ProgrammaticLaunch&) = delete;

  // This thread's flag (false outside any scope).
  static bool active();

 private:
  bool previous_;
};

}  // namespace servelab::kernels
