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

// fp8 KV (one byte per element): the kernel reads the codes straight from the pipeline stage
// into registers and widens them there, without ldmatrix, so the dims of both products are
// permuted (any permutation gives the same dot products; Q and the output are permuted to match):
//   S = Q K^T, k-step s (0 .. head_dim / 16), logical k = 2 t + 8 h + e of the m16n8k16 tile is
//     dim fp8_qk_dim(t, s, h, head_dim) + e: lane t of a quad owns dims
//     t head_dim / 4 .. + head_dim / 4 - 1 of every K row, so it loads them as 16-byte chunks
//     (fp8_k_chunk) and 32-bit word s holds the codes of its B registers 0 (bytes 0, 1) and 1
//     (bytes 2, 3) of step s;
//   O = P V, n-tile nt (0 .. head_dim / 8), column n of the tile is dim fp8_pv_dim(n, nt, ...):
//     the lane with g = lane / 4 owns dims g head_dim / 8 .. + head_dim / 8 - 1 of every V row
//     (16 bytes at head_dim 128, 8 at 64) of its four tokens 2 t, 2 t + 1, 2 t + 8, 2 t + 9, and
//     interleave_bytes pairs two tokens' codes of one dim into a B register.
SERVELAB_HOST_DEVICE constexpr int fp8_qk_dim(int t, int step, int h, int head_dim) {
  return t * (head_dim / 4) + 4 * step + 2 * h;
}
// The 16-byte chunk (of head_dim / 16 per row) that holds K dims fp8_qk_dim(t, 4 i, 0, .) ..
// + 15 of lane t (i < head_dim / 64).
SERVELAB_HOST_DEVICE constexpr int fp8_k_chunk(int t, int i, int head_dim) {
  return t * (head_dim / 64) + i;
}
SERVELAB_HOST_DEVICE constexpr int fp8_pv_dim(int col, int nt, int head_dim) {
  return col * (head_dim / 8) + nt;
}
// Byte offset of 16-byte chunk `chunk` of row `row` in an fp8 K or V tile (rows of head_dim
// bytes, 64 or 128). head_dim 128: chunks XOR-swizzled by row mod 8, as the bf16 tiles. head_dim
// 64: two rows per 128-byte line, the line's 8 chunks XOR-swizzled by 2 (line mod 4). Either way
// the kernel's K reads (16 bytes: rows g, chunks fp8_k_chunk) and V reads (16 or 8 bytes: rows
// 2 t (+ 1, + 8, + 9), dims of g) are free of bank conflicts (tests/kernels_host_test.cc).
SERVELAB_HOST_DEVICE constexpr int fp8_tile_offset(int row, int chunk, int head_dim) {
  if (head_dim == 128) return row * 128 + ((chunk ^ (row & 7)) << 4);
  const int line = row >> 1, c8 = ((row & 1) << 2) | chunk;
  return line * 128 + ((c8 ^ ((line & 3) << 1)) << 4);
}
// Bytes [a0, b0, a1, b1] (hi = false) or [a2, b2, a3, b3] (hi = true) of words a, b (byte 0 the
// least significant): two tokens' codes of dims 4 w .. 4 w + 3 paired per dim (PRMT 0x5140 /
// 0x7362).
SERVELAB_HOST_DEVICE constexpr unsigned interleave_bytes(unsigned a, unsigned b, bool hi) {
  if (hi) {
    a >>= 16;
    b >>= 16;
  }
  return (a & 0xffu) | ((b & 0xffu) << 8) | ((a & 0xff00u) << 8) | ((b & 0xff00u) << 16);
}

}  // namespace servelab::kernels::decode_frag
