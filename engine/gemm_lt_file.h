// The file of GEMM decisions named by $SERVELAB_CUDA_GEMM_LT_FILE (engine/gpu_switches.h), for
// `engine run`, `engine serve` and `engine profile` on --device cuda with SERVELAB_CUDA_GEMM=lt
// or auto: the processes of one study (a profile, its calibration run and the runs it validates;
// two runs of one experiment) then run every linear-layer shape with the same kernel and
// algorithm instead of each timing its own (kernels/gemm_lt.h: a choice by timing may differ
// between processes, and with it the last bits of the results and the cost of a step).
// load_gemm_lt_file reads the file, when it exists, before the executor's first step; save_*
// writes the process's decisions back to it (those loaded and those made since) after the
// warm-up and at the end of a run, replacing it atomically. The file is a cache the user named:
// rewriting it with its own decisions plus the new ones is the contract. Both do nothing unless
// the kernel is lt or auto and the variable is set. Compiled only with CUDA (SERVELAB_HAVE_CUDA).
#pragma once

#include "kernels/gemm_kernel.h"

namespace servelab {

// Throws ConfigError naming the variable and the file when it is malformed, made on another
// device or cuBLASLt version, or cannot be read.
void load_gemm_lt_file(kernels::GemmKernel kernel);
// Throws ConfigError naming the variable and the file when it cannot be written.
void save_gemm_lt_file(kernels::GemmKernel kernel);

}  // namespace servelab
