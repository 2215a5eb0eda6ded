// Stand-in for NVIDIA's <cuda_runtime.h> in the CUDA emulator build
// (tests/emu/include/servelab_cuda_emu.h).
#pragma once
#include "servelab_cuda_emu.h"
