// SERVELAB_HOST_DEVICE: marks a function that the CUDA kernels and their CPU tests share; under
// nvcc it is __host__ __device__, elsewhere nothing. Header-only helpers that use it (for example
// counter_normal.h, fast_divmod.h, softmax_merge.h, decode_fragments.h) include this header.
#pragma once

#if defined(__CUDACC__)
#define SERVELAB_HOST_DEVICE __host__ __device__
#else
#define SERVELAB_HOST_DEVICE
#endif
