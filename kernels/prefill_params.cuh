// The kernel parameters both paged prefill attention kernels take (attention_prefill.cu: wmma,
// attention_prefill_fa2.cu: fa2), built once from the launcher's PrefillAttentionArgs. Internal
// to the .cu files (never included by host-only code).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/common.cuh"

namespace servelab::kernels::detail {

struct PrefillParams {
  PagedKv kv;
  const __nv_bfloat16* q;
  __nv_bfloat16* out;
  const std::int32_t* q_row_begin;
  const std::int32_t* num_queries;
  const std::int32_t* first_pos;
  const PrefillTile* tiles;
  std::int32_t num_q_heads;
  float scale_log2;           // the score scale times log2(e) (and k_scale with fp8 KV): exp2 units
  std::int32_t split_tokens;  // split-KV (fa2): keys per split; kv_splits is gridDim.z
  float* workspace;           // split-KV partial states (prefill_workspace_floats)
};

inline PrefillParams prefill_params(const PrefillAttentionArgs& a) {
  const float k_scale = is_fp8(a.kv.format) ? a.kv.k_scale : 1.0f;
  return {a.kv,
          bf(a.q),
          bf(a.out),
          a.q_row_begin,
          a.num_queries,
          a.first_pos,
          a.tiles,
          a.num_q_heads,
          a.scale * kLog2e * k_scale,
          a.split.split() ? a.split.split_tokens : 0,
          a.workspace};
}

}  // namespace servelab::kernels::detail
