// The cuBLAS form of the LoRA deltas (kernels/lora.h lora_cublas): two GEMMs per segment and
// target.
#include "kernels/lora.h"

namespace servelab::kernels {

void lora_cublas(Gemm& gemm, const LoraSegment* segments, std::int32_t num_segments,
                 const LoraShape& shape, std::int32_t layer, std::int32_t first_target,
                 std::int32_t num_targets, const Bf16* in, std::int32_t ld_in, void* out,
                 Gemm::Out out_type, std::int32_t ld_out, Bf16* tmp, Stream stream) {
  const std::int64_t out_elem = out_type == Gemm::Out::kF32 ? 4 : 2;
  std::int32_t col0 = 0;
  for (int t = first_target; t < first_target + num_targets; ++t) {
    for (const LoraSegment* g = segments; g != segments + num_segments; ++g) {
      const Bf16* a = g->weights + shape.a_offset(g->rank, layer, t);
      const Bf16* b = g->weights + shape.b_offset(g->rank, layer, t);
      gemm.linear_strided(in + std::int64_t{g->row0} * ld_in, ld_in, a, tmp, Gemm::Out::kBf16,
                          g->rank, g->rows, shape.in[t], g->rank, 0.0f, stream);
      void* dst =
          static_cast<unsigned char*>(out) + (std::int64_t{g->row0} * ld_out + col0) * out_elem;
      gemm.linear_strided(tmp, g->rank, b, dst, out_type, ld_out, g->rows, g->rank, shape.out[t],
                          1.0f, stream);
    }
    col0 += shape.out[t];
  }
}

}  // namespace servelab::kernels
