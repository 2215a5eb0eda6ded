// Stand-in for NVIDIA's <cuda_bf16.h> in the CUDA emulator build
// (tests/emu/include/servelab_cuda_emu.h).
#pragma once
#include "servelab_cuda_emu.h"
