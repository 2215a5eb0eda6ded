// Index arithmetic of the pipelined decode kernel (kernels/attention_decode_pipelined.cu): where a
// K/V row chunk lives in a shared-memory tile, which rows each lane hands to ldmatrix, and where
// each element of an m16n8k16 MMA fragment sits. The kernel calls only these functions for that
// arithmetic, and tests/kernels_host_test.cc runs them on the CPU: it emulates ldmatrix and
// mma.sync as the PTX ISA defines them on random tiles and compares S = Q K^T and O = P V with
// direct products, and checks that the shared-memory accesses are free of bank conflicts.
//
// MMA fragments (PTX ISA, mma.m16n8k16 with .bf16 inputs and .f32 accumulators), lane = g * 4 + t:
//   A (16 x 16, row-major), register r = 0..3: elements (g + 8 (r & 1), 2 t + 8 (r >> 1) + {0, 1})
//   B (16 x 8), register r = 0..1:              elements (2 t + 8 r + {0, 1}, g)
//   C (16 x 8, fp32), element e = 0..3:         (g + 8 (e >> 1), 2 t + (e & 1))
// The first of a register's two bf16 elements is its low half.
//
// Plain C++17; the functions are __host__ __device__ under nvcc.
#pragma once

#include "kernels/host_device.h"

namespace servelab::kernels::decode_frag {

struct RowCol {
  int row;
  int col;
};

// Byte offset of 16-byte chunk `chunk` of row `row` in a K or V tile of rows of `row_bytes`
// (a multiple of 128): chunks are XOR-swizzled by row mod 8, so 8 consecutive rows' chunk c lie
// in 8 different groups of 4 banks.
SERVELAB_HOST_DEVICE constexpr int tile_offset(int row, int chunk, int row_bytes) {
  return row * row_bytes + ((chunk ^ (row & 7)) << 4);
}

// Floats per row of a warp's O in the end-of-kernel merge (shared memory, [warp][16 rows][this]):
// the padding of 8 floats makes each half-warp's float2 stores of a C fragment hit 32 different
// banks.
SERVELAB_HOST_DEVICE constexpr int merge_row_floats(int head_dim) { return head_dim + 8; }

// The (row, first column) of register r of the A fragment of `lane`.
SERVELAB_HOST_DEVICE constexpr RowCol a_frag(int lane, int r) {
  return {lane / 4 + 8 * (r & 1), (lane % 4) * 2 + 8 * (r >> 1)};
}
// The (row, column) of element e of the C fragment of `lane`.
SERVELAB_HOST_DEVICE constexpr RowCol c_frag(int lane, int e) {
  return {lane / 4 + 8 * (e >> 1), (lane % 4) * 2 + (e & 1)};
}

// S = Q K^T for tokens 8 j .. 8 j + 7 of a warp's 16 (starting at tile row tok0), dims
// 32 kk .. 32 kk + 31: the K tile (row, chunk) whose address `lane` gives ldmatrix.x4. Matrix
// lane / 8 is dims 32 kk + 8 (lane / 8) .. + 7, so the four registers are the B fragments of
// k-steps 2 kk (registers 0, 1) and 2 kk + 1 (registers 2, 3).
SERVELAB_HOST_DEVICE constexpr RowCol k_ldmatrix_row(int lane, int tok0, int j, int kk) {
  return {tok0 + 8 * j + (lane & 7), 4 * kk + (lane >> 3)};
}
// O += P V for the warp's 16 tokens (from tile row tok0) and dims 16 n2 .. 16 n2 + 15: the V tile
// (row, chunk) whose address `lane` gives ldmatrix.x4.trans. Matrix lane / 8 is tokens
// 8 ((lane / 8) & 1) .. + 7 and dims 16 n2 + 8 (lane / 16) .. + 7, so registers 0, 1 are the B
// fragment of dim tile 2 n2 and registers 2, 3 that of dim tile 2 n2 + 1.
SERVELAB_HOST_DEVICE constexpr RowCol v_ldmatrix_row(int lane, int tok0, int n2) {
  return {tok0 + (lane & 7) + 8 * ((lane >> 3) & 1), 2 * n2 + (lane >> 4)};
}
// P as the A operand of P V, from the two C fragments of S (token halves j = 0, 1): register
// 2 j + h holds C elements 2 h and 2 h + 1 of half j (row g + 8 h, tokens 8 j + 2 t, + 1).
SERVELAB_HOST_DEVICE constexpr int p_register(int j, int h) { return 2 * j + h; }

}  // namespace servelab::kernels::decode_frag
