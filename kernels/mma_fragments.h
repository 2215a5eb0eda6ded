// Fragment ownership maps of the warp-level tensor-core instructions the FlashAttention-2-style
// prefill kernel (kernels/attention_prefill_fa2.cu) uses, per the PTX ISA (sm_80+):
//   - mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: A 16x16 (row-major, 4 x .b32 = 8 bf16
//     per lane), B 16x8 (K x N, "col": 2 x .b32 = 4 bf16 per lane), C/D 16x8 fp32 (4 per lane);
//   - ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: four 8x8 b16 matrices, lane L gives the
//     shared address of row L % 8 of matrix L / 8; register j of every lane receives matrix j.
// With g = lane / 4 (the "group") and t = lane % 4 (the thread in the group):
//   A element i (0..7, register i / 2, half i % 2): row g + 8 * ((i / 2) % 2), col 2t + i % 2 +
//     8 * (i / 4);
//   B element i (0..3): k = 2t + i % 2 + 8 * (i / 2), n = g;
//   C element i (0..3): row g + 8 * (i / 2), col 2t + i % 2;
//   ldmatrix register j, half e: row g, col 2t + e of matrix j (plain); row 2t + e, col g of
//     matrix j as stored (.trans: the lane gets the transpose's (g, 2t + e)).
// The functions below are those maps plus the row/column each lane must hand ldmatrix for the
// kernel's three operand loads (Q as A, K as B of S = Q K^T, V as B of O += P V with .trans),
// and the C-to-A re-use of S's accumulators as P. They are plain arithmetic, __host__ __device__
// under nvcc, so tests/mma_fragments_test.cc runs a warp (32 lanes as a loop) through exactly
// these maps on the CPU and compares one tile of attention with a plain matrix reference.
#pragma once

#ifdef __CUDACC__
#define SERVELAB_HD __host__ __device__ __forceinline__
#else
#define SERVELAB_HD inline
#endif

namespace servelab::kernels::frag {

// (row, col) of one element in a matrix.
struct Rc {
  int row;
  int col;
};

SERVELAB_HD constexpr int group(int lane) { return lane / 4; }
SERVELAB_HD constexpr int thread_in_group(int lane) { return lane % 4; }

// m16n8k16 A (16 x 16, row-major): element i in 0..7 of `lane` (register i / 2, low half when
// i is even).
SERVELAB_HD constexpr Rc a_elem(int lane, int i) {
  return {group(lane) + 8 * ((i / 2) % 2), 2 * thread_in_group(lane) + i % 2 + 8 * (i / 4)};
}
// m16n8k16 B (16 x 8, K x N): element i in 0..3; row = k, col = n.
SERVELAB_HD constexpr Rc b_elem(int lane, int i) {
  return {2 * thread_in_group(lane) + i % 2 + 8 * (i / 2), group(lane)};
}
// m16n8k16 C/D (16 x 8 fp32): element i in 0..3.
SERVELAB_HD constexpr Rc c_elem(int lane, int i) {
  return {group(lane) + 8 * (i / 2), 2 * thread_in_group(lane) + i % 2};
}

// ldmatrix .x4: the (row, col) inside matrix `reg` (as stored in shared memory) that half `e`
// of register `reg` of `lane` receives. `reg` does not change the position, only the matrix.
SERVELAB_HD constexpr Rc ldmatrix_elem(int lane, int e, bool trans) {
  return trans ? Rc{2 * thread_in_group(lane) + e, group(lane)}
               : Rc{group(lane), 2 * thread_in_group(lane) + e};
}
// ldmatrix .x4: which matrix and which of its rows `lane` gives the address of.
SERVELAB_HD constexpr int ldmatrix_addr_matrix(int lane) { return lane / 8; }
SERVELAB_HD constexpr int ldmatrix_addr_row(int lane) { return lane % 8; }

// The kernel's operand loads. Each returns the (row, col) offset, within a 16 x 16 block of a
// row-major shared-memory tile, of the 8-element row whose address `lane` hands ldmatrix .x4.
//
// Q as A (plain): matrices (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (rows 0-7, cols 8-15),
// (rows 8-15, cols 8-15) = A registers 0, 1, 2, 3.
SERVELAB_HD constexpr Rc q_ldmatrix_addr(int lane) {
  return {ldmatrix_addr_row(lane) + 8 * (ldmatrix_addr_matrix(lane) % 2),
          8 * (ldmatrix_addr_matrix(lane) / 2)};
}
// K (tile rows = keys, cols = head dims) as B of S = Q K^T (plain): B(k = dim, n = key) =
// K[key][dim]. Matrices (keys 0-7, dims 0-7), (keys 0-7, dims 8-15), (keys 8-15, dims 0-7),
// (keys 8-15, dims 8-15) = registers {0, 1} of the B fragment for keys 0-7, then {0, 1} for keys
// 8-15 of the block.
SERVELAB_HD constexpr Rc k_ldmatrix_addr(int lane) {
  return {ldmatrix_addr_row(lane) + 8 * (ldmatrix_addr_matrix(lane) / 2),
          8 * (ldmatrix_addr_matrix(lane) % 2)};
}
// V (tile rows = keys, cols = head dims) as B of O += P V (.trans): B(k = key, n = dim) =
// V[key][dim]. Matrices (keys 0-7, dims 0-7), (keys 8-15, dims 0-7), (keys 0-7, dims 8-15),
// (keys 8-15, dims 8-15) = registers {0, 1} of the B fragment for dims 0-7, then {0, 1} for
// dims 8-15 of the block.
SERVELAB_HD constexpr Rc v_ldmatrix_addr(int lane) {
  return {ldmatrix_addr_row(lane) + 8 * (ldmatrix_addr_matrix(lane) % 2),
          8 * (ldmatrix_addr_matrix(lane) / 2)};
}

// P as A from S's accumulators: the A fragment of key block kb (16 keys) is built from the C
// fragments of key n-tiles 2 kb and 2 kb + 1. A element i comes from C tile 2 kb + i / 4,
// element i % 4 (A's (g, 2t + e), (g + 8, 2t + e), (g, 8 + 2t + e), (g + 8, 8 + 2t + e) are C's
// (g, 2t + e) and (g + 8, 2t + e) of the two 8-key tiles).
SERVELAB_HD constexpr int p_from_c_tile(int i) { return i / 4; }
SERVELAB_HD constexpr int p_from_c_elem(int i) { return i % 4; }

}  // namespace servelab::kernels::frag

#undef SERVELAB_HD
