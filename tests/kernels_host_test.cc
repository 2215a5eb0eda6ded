// The host-side halves of the GPU kernels, checked on the CPU: the KV cache layout, KV sizing,
// split-K and prefill tile planning, the RoPE table against CpuExecutor's apply_rope, and the
// sampling algorithm of the top-p kernel against CpuExecutor's sampling semantics.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/request.h"
#include "core/rng.h"
#include "engine/cpu_executor.h"
#include "engine/llama_weights.h"
#include "kernels/attention_plan.h"
#include "kernels/decode_fragments.h"
#include "kernels/fast_divmod.h"
#include "kernels/float_formats.h"
#include "kernels/kv_layout.h"
#include "kernels/lora_kernel.h"
#include "kernels/rope_table.h"
#include "kernels/sampling_ref.h"
#include "kernels/softmax_merge.h"
#include "serving/home.h"

namespace servelab {
namespace {

using kernels::KvCacheLayout;

TEST(KernelsHostTest, KvLayoutIsABijectionWithContiguousBlocks) {
  const KvCacheLayout l{3, 5, 2, 8, 2};
  std::set<std::int64_t> seen;
  for (std::int64_t b = 0; b < 4; ++b) {
    for (std::int32_t layer = 0; layer < l.num_layers; ++layer) {
      for (std::int32_t kv = 0; kv < 2; ++kv) {
        for (std::int32_t s = 0; s < l.block_size; ++s) {
          for (std::int32_t h = 0; h < l.num_kv_heads; ++h) {
            for (std::int32_t d = 0; d < l.head_dim; ++d) {
              const std::int64_t off = l.offset(b, layer, kv, s, h, d);
              // Every element of block b lies in [b * stride, (b + 1) * stride).
              EXPECT_GE(off, b * l.block_stride());
              EXPECT_LT(off, (b + 1) * l.block_stride());
              EXPECT_TRUE(seen.insert(off).second);
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(static_cast<std::int64_t>(seen.size()), 4 * l.block_stride());
  // Within a (block, layer, K|V) plane: CpuExecutor's [slot][kv_head][head_dim] order.
  EXPECT_EQ(l.offset(0, 1, 1, 2, 1, 3) - l.layer_base(1, 1), (2 * 2 + 1) * 8 + 3);
  const std::int32_t table[] = {7, 3, 9};
  EXPECT_EQ(l.slot_of(table, 0), 7 * 5);
  EXPECT_EQ(l.slot_of(table, 6), 3 * 5 + 1);
  EXPECT_EQ(l.slot_of(table, 14), 9 * 5 + 4);
  // Llama-3-8B, 16-token blocks: 2 MiB per block across all layers (kernels.md section 0).
  const KvCacheLayout llama{32, 16, 8, 128, 2};
  EXPECT_EQ(llama.block_bytes(), 2 << 20);
}

TEST(KernelsHostTest, KvBlocksForMemory) {
  const std::int64_t gib = 1LL << 30, block = 2LL << 20;
  // 80 GiB device, 20 GiB held (weights + activations), 90 %: 72 - 20 = 52 GiB of blocks.
  EXPECT_EQ(kernels::kv_blocks_for_memory(80 * gib, 60 * gib, 0.9, block), 52 * 512);
  // The budget is already exceeded: nothing.
  EXPECT_EQ(kernels::kv_blocks_for_memory(80 * gib, 60 * gib, 0.2, block), 0);
  // Never more than is free (another process holds memory the utilization would allow).
  EXPECT_EQ(kernels::kv_blocks_for_memory(80 * gib, 10 * gib, 1.0, block), 10 * 512);
}

// The GPU cache's element formats: bf16 (2 bytes), fp8 e4m3/e5m2 (1 byte); fp8 needs positive,
// finite scales; fp32 and fp16 are refused with the caller's name in the message.
TEST(KernelsHostTest, KvFormatsOfTheGpuCache) {
  using kernels::FloatFormat;
  EXPECT_EQ(kernels::kv_elem_bytes(FloatFormat::kBf16), 2);
  EXPECT_EQ(kernels::kv_elem_bytes(FloatFormat::kFp8E4m3), 1);
  EXPECT_EQ(kernels::kv_elem_bytes(FloatFormat::kFp8E5m2), 1);
  EXPECT_THROW(kernels::kv_elem_bytes(FloatFormat::kFp16), std::invalid_argument);
  EXPECT_NO_THROW(kernels::check_kv_format(FloatFormat::kBf16, 0.0f, -1.0f, "x"));  // unused
  EXPECT_NO_THROW(kernels::check_kv_format(FloatFormat::kFp8E5m2, 0.5f, 3.0f, "x"));
  auto message = [](FloatFormat f, float ks, float vs) {
    try {
      kernels::check_kv_format(f, ks, vs, "kv_write");
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message(FloatFormat::kFp32, 1, 1),
            "kv_write: the GPU KV cache holds bf16, fp8_e4m3 or fp8_e5m2, not fp32");
  EXPECT_NE(message(FloatFormat::kFp8E4m3, 0, 1).find("kv_write: fp8 KV scales must be positive"),
            std::string::npos);
  EXPECT_NE(message(FloatFormat::kFp8E4m3, 1, std::numeric_limits<float>::infinity()), "");
  EXPECT_NE(message(FloatFormat::kFp8E4m3, std::nanf(""), 1), "");
  // An fp8 layout: one byte an element, so a block is half the bf16 one.
  const kernels::KvCacheLayout bf16{32, 16, 8, 128, 2}, fp8{32, 16, 8, 128, 1};
  EXPECT_EQ(fp8.block_bytes() * 2, bf16.block_bytes());
  EXPECT_EQ(fp8.block_stride(), bf16.block_stride());
}

TEST(KernelsHostTest, DecodeHeadsPerCta) {
  EXPECT_EQ(kernels::decode_heads_per_cta(32, 8), 4);   // Llama-3-8B
  EXPECT_EQ(kernels::decode_heads_per_cta(64, 8), 8);   // Llama-3-70B
  EXPECT_EQ(kernels::decode_heads_per_cta(32, 32), 1);  // Llama-2-7B (MHA)
  EXPECT_EQ(kernels::decode_heads_per_cta(28, 4), 1);   // group 7
  EXPECT_EQ(kernels::decode_heads_per_cta(48, 4), 4);   // group 12
  EXPECT_EQ(kernels::decode_heads_per_cta(32, 16), 2);
}

TEST(KernelsHostTest, DecodeKernelNamesAndEnvironment) {
  using kernels::DecodeKernel;
  EXPECT_EQ(kernels::kDefaultDecodeKernel, DecodeKernel::kPipelined);
  for (DecodeKernel k : {DecodeKernel::kTiled, DecodeKernel::kPipelined}) {
    EXPECT_EQ(kernels::decode_kernel_from_name(kernels::decode_kernel_name(k)), k);
  }
  EXPECT_EQ(kernels::decode_kernel_from_name("Tiled"), std::nullopt);
  EXPECT_EQ(kernels::decode_kernel_from_name(""), std::nullopt);
  const char* env = kernels::kDecodeKernelEnv;
  EXPECT_STREQ(env, "SERVELAB_CUDA_DECODE");
  ::unsetenv(env);
  EXPECT_EQ(kernels::decode_kernel_from_env(DecodeKernel::kTiled), DecodeKernel::kTiled);
  ::setenv(env, "", 1);
  EXPECT_EQ(kernels::decode_kernel_from_env(DecodeKernel::kPipelined), DecodeKernel::kPipelined);
  ::setenv(env, "tiled", 1);
  EXPECT_EQ(kernels::decode_kernel_from_env(DecodeKernel::kPipelined), DecodeKernel::kTiled);
  ::setenv(env, "pipelined", 1);
  EXPECT_EQ(kernels::decode_kernel_from_env(DecodeKernel::kTiled), DecodeKernel::kPipelined);
  ::setenv(env, "fast", 1);
  try {
    kernels::decode_kernel_from_env(DecodeKernel::kTiled);
    ADD_FAILURE() << "accepted SERVELAB_CUDA_DECODE=fast";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "SERVELAB_CUDA_DECODE=fast: expected one of tiled, pipelined");
  }
  ::unsetenv(env);
}

TEST(KernelsHostTest, DecodeCtasPerSeq) {
  using kernels::DecodeKernel;
  // Tiled: one CTA per decode_heads_per_cta query heads.
  EXPECT_EQ(kernels::decode_ctas_per_seq(DecodeKernel::kTiled, 32, 8), 8);
  EXPECT_EQ(kernels::decode_ctas_per_seq(DecodeKernel::kTiled, 28, 4), 28);
  // Pipelined: one CTA per KV head while the group fits in 16 MMA rows.
  EXPECT_EQ(kernels::decode_ctas_per_seq(DecodeKernel::kPipelined, 32, 8), 8);
  EXPECT_EQ(kernels::decode_ctas_per_seq(DecodeKernel::kPipelined, 28, 4), 4);
  EXPECT_EQ(kernels::decode_ctas_per_seq(DecodeKernel::kPipelined, 32, 32), 32);
  EXPECT_EQ(kernels::decode_ctas_per_seq(DecodeKernel::kPipelined, 64, 4), 4);   // group 16
  EXPECT_EQ(kernels::decode_ctas_per_seq(DecodeKernel::kPipelined, 68, 4), 8);   // group 17
  EXPECT_EQ(kernels::decode_ctas_per_seq(DecodeKernel::kPipelined, 128, 1), 8);  // group 128
}

// FastDivmod (the pipelined decode kernel's position -> block) equals integer division for every
// block size the cache allows, on every small position and on random and edge positions < 2^31.
TEST(KernelsHostTest, FastDivmodEqualsDivision) {
  Rng rng = Rng::stream(19, "kernels_host_test.fastdiv");
  std::vector<std::uint32_t> ns;
  for (std::uint32_t n = 0; n < 20000; ++n) ns.push_back(n);
  for (int i = 0; i < 2000; ++i) {
    ns.push_back(static_cast<std::uint32_t>(rng.uniform_int(0, (std::int64_t{1} << 31) - 1)));
  }
  for (std::uint32_t n : {0x7fffffffu, 0x7ffffffeu, 0x40000000u, 0x3fffffffu, 0x40000001u}) {
    ns.push_back(n);
  }
  std::vector<std::uint32_t> divisors;
  for (std::uint32_t d = 1; d <= 256; ++d) divisors.push_back(d);
  for (std::uint32_t d : {1000u, 4095u, 65537u, 1u << 20, 0x7fffffffu}) divisors.push_back(d);
  for (std::uint32_t d : divisors) {
    const kernels::FastDivmod f = kernels::FastDivmod::make(d);
    for (std::uint32_t n : ns) {
      const std::uint32_t q = f.div(n);
      ASSERT_EQ(q, n / d) << n << " / " << d;
      ASSERT_EQ(f.mod(n, q), n % d) << n << " % " << d;
    }
  }
}

// The staged table window: a multiple of the tile whose blocks fit in the staged entries wherever
// it starts (the kernel's windows start at multiples of the tile), and no smaller than needed.
TEST(KernelsHostTest, DecodeTableWindowFitsTheStagedEntries) {
  const std::int32_t tile = kernels::kDecodeTileTokens;
  EXPECT_EQ(kernels::decode_table_window_tokens(16), 16320);
  EXPECT_EQ(kernels::decode_table_window_tokens(1), 960);
  for (std::int32_t bs = 1; bs <= 256; ++bs) {
    const std::int32_t w = kernels::decode_table_window_tokens(bs);
    SCOPED_TRACE("block size " + std::to_string(bs));
    ASSERT_GT(w, 0);
    ASSERT_EQ(w % tile, 0);
    std::int64_t most = 0;
    for (std::int64_t start = 0; start < 4 * std::int64_t{bs} * tile; start += tile) {
      most = std::max(most, (start + w - 1) / bs - start / bs + 1);
    }
    ASSERT_LE(most, kernels::kDecodeTableEntries);
    // One tile more could need more entries than are staged.
    ASSERT_GT((std::int64_t{w} + tile + bs - 1) / bs + 1, kernels::kDecodeTableEntries);
  }
}

// merge_softmax_states (the pipelined decode kernel's warp merge and split-K merge) against a
// direct softmax: keys cut into ranges at random (some empty), each range reduced the way a warp
// does it (64-key tiles, online update with shifted_exp2, masked keys at -inf, fully masked
// tiles included), the ranges merged, compared with the softmax-weighted sum in double.
TEST(KernelsHostTest, SoftmaxMergeEqualsDirectSoftmax) {
  Rng rng = Rng::stream(20, "kernels_host_test.merge");
  for (int trial = 0; trial < 300; ++trial) {
    const int n = static_cast<int>(rng.uniform_int(1, 3000));
    const double spread = rng.uniform() < 0.5 ? 4.0 : 60.0;  // 60: most weights underflow
    std::vector<float> s(n), v(n);
    for (int i = 0; i < n; ++i) {
      s[i] = static_cast<float>((rng.uniform() - 0.5) * spread);
      v[i] = static_cast<float>(rng.uniform() * 2 - 1);
    }
    // Direct softmax in double.
    double mx = -1e300, den = 0, num = 0;
    for (float x : s) mx = std::max(mx, double{x});
    for (int i = 0; i < n; ++i) {
      den += std::exp2(s[i] - mx);
      num += std::exp2(s[i] - mx) * v[i];
    }
    // Ranges: cut points at random, empty ranges allowed.
    const int parts = static_cast<int>(rng.uniform_int(1, 9));
    std::vector<int> cuts = {0, n};
    for (int j = 1; j < parts; ++j) cuts.push_back(static_cast<int>(rng.uniform_int(0, n)));
    std::sort(cuts.begin(), cuts.end());
    std::vector<float> ml, o;
    for (int j = 0; j + 1 < static_cast<int>(cuts.size()); ++j) {
      float m = -std::numeric_limits<float>::infinity(), l = 0, acc = 0;
      // Tiles of 64 keys from the range start, padded with masked keys; a random extra fully
      // masked tile in front.
      const int lo = cuts[j], hi = cuts[j + 1];
      const int first = rng.uniform() < 0.3 ? lo - 64 : lo;
      for (int t0 = first; t0 < hi; t0 += 64) {
        float tile_max = -std::numeric_limits<float>::infinity();
        for (int i = t0; i < t0 + 64; ++i) {
          if (i >= lo && i < hi) tile_max = std::max(tile_max, s[i]);
        }
        const float m_new = std::max(m, tile_max);
        const float alpha = kernels::shifted_exp2(m, m_new);
        float sum = 0, pv = 0;
        for (int i = t0; i < t0 + 64; ++i) {
          const float x = i >= lo && i < hi ? s[i] : -std::numeric_limits<float>::infinity();
          const float p = kernels::shifted_exp2(x, m_new);
          ASSERT_FALSE(std::isnan(p));
          sum += p;
          pv += p * (i >= lo && i < hi ? v[i] : 0.0f);
        }
        l = l * alpha + sum;
        acc = acc * alpha + pv;
        m = m_new;
        ASSERT_FALSE(std::isnan(l) || std::isnan(acc));
      }
      ml.push_back(m);
      ml.push_back(l);
      o.push_back(l > 0 ? acc / l : 0.0f);  // as the kernel writes an empty range
    }
    const int k = static_cast<int>(o.size());
    const kernels::SoftmaxState r = kernels::merge_softmax_states(ml.data(), o.data(), k, 1);
    SCOPED_TRACE("trial " + std::to_string(trial) + " keys " + std::to_string(n));
    EXPECT_FLOAT_EQ(r.m, static_cast<float>(mx));
    EXPECT_NEAR(r.l, den, 1e-4 * den);
    EXPECT_NEAR(r.o, num / den, 1e-4);
    // A strided layout gives the same result (the kernel's o_j are head_dim or a row apart).
    std::vector<float> strided(static_cast<std::size_t>(k) * 3, 1e30f);
    for (int j = 0; j < k; ++j) strided[static_cast<std::size_t>(j) * 3] = o[j];
    EXPECT_EQ(kernels::merge_softmax_states(ml.data(), strided.data(), k, 3).o, r.o);
  }
  // Empty states weigh nothing, even merged first; two -inf maxima do not make a NaN.
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(kernels::shifted_exp2(-inf, -inf), 0.0f);
  EXPECT_EQ(kernels::shifted_exp2(-inf, 3.0f), 0.0f);
  EXPECT_EQ(kernels::shifted_exp2(2.0f, 3.0f), 0.5f);
  const float ml[] = {-inf, 0.0f, 1.0f, 2.0f, -inf, 0.0f};
  const float o[] = {0.0f, 0.25f, 0.0f};
  const kernels::SoftmaxState r = kernels::merge_softmax_states(ml, o, 3, 1);
  EXPECT_EQ(r.m, 1.0f);
  EXPECT_EQ(r.l, 2.0f);
  EXPECT_EQ(r.o, 0.25f);
}

// ldmatrix and mma.sync m16n8k16 (bf16 in, fp32 accumulate) emulated on the CPU exactly as the
// PTX ISA defines them, for checking the pipelined decode kernel's fragment arithmetic
// (kernels/decode_fragments.h). Registers are per lane: [32][n] of 32-bit words.
namespace frag_emu {

using Regs = std::vector<std::vector<std::uint32_t>>;

float BitsToFloat(std::uint16_t b) {
  const std::uint32_t w = std::uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}
std::uint16_t FloatToBits(float f) {  // only for bf16-exact values
  std::uint32_t w;
  std::memcpy(&w, &f, 4);
  EXPECT_EQ(w & 0xffffu, 0u) << f << " is not a bf16 value";
  return static_cast<std::uint16_t>(w >> 16);
}
std::uint32_t Pack(float lo, float hi) {
  return FloatToBits(lo) | (std::uint32_t{FloatToBits(hi)} << 16);
}
float Lo(std::uint32_t r) { return BitsToFloat(static_cast<std::uint16_t>(r & 0xffffu)); }
float Hi(std::uint32_t r) { return BitsToFloat(static_cast<std::uint16_t>(r >> 16)); }

// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: lane 8 m + i gives the address of row i of
// matrix m (16 bytes); without .trans lane t receives (row t / 4, columns 2 (t % 4), + 1) of each
// matrix, with .trans (rows 2 (t % 4), + 1, column t / 4).
Regs Ldmatrix(const std::vector<std::uint8_t>& smem, const std::vector<int>& addr, bool trans) {
  auto elem = [&](int m, int row, int col) {
    std::uint16_t b;
    std::memcpy(&b, smem.data() + addr[8 * m + row] + 2 * col, 2);
    return b;
  };
  Regs r(32, std::vector<std::uint32_t>(4));
  for (int t = 0; t < 32; ++t) {
    for (int m = 0; m < 4; ++m) {
      const std::uint16_t lo = trans ? elem(m, 2 * (t % 4), t / 4) : elem(m, t / 4, 2 * (t % 4));
      const std::uint16_t hi =
          trans ? elem(m, 2 * (t % 4) + 1, t / 4) : elem(m, t / 4, 2 * (t % 4) + 1);
      r[t][m] = lo | (std::uint32_t{hi} << 16);
    }
  }
  return r;
}

// d = a b + c for mma.m16n8k16.row.col.f32.bf16.bf16.f32, fragments as in the PTX ISA tables
// (written out here independently of decode_fragments.h): lane = 4 g + t;
// A reg r: row g + 8 (r & 1), columns 2 t + 8 (r >> 1) + {0, 1};
// B reg r: rows 2 t + 8 r + {0, 1}, column g; C element e: row g + 8 (e >> 1), column 2 t + (e &
// 1).
void Mma(std::vector<std::vector<float>>& c, const Regs& a, const Regs& b) {
  float am[16][16], bm[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int r = 0; r < 4; ++r) {
      am[g + 8 * (r & 1)][2 * t + 8 * (r >> 1)] = Lo(a[lane][r]);
      am[g + 8 * (r & 1)][2 * t + 8 * (r >> 1) + 1] = Hi(a[lane][r]);
    }
    for (int r = 0; r < 2; ++r) {
      bm[2 * t + 8 * r][g] = Lo(b[lane][r]);
      bm[2 * t + 8 * r + 1][g] = Hi(b[lane][r]);
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int e = 0; e < 4; ++e) {
      const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
      for (int k = 0; k < 16; ++k) c[lane][e] += am[row][k] * bm[k][col];
    }
  }
}

// The 32 banks of a set of 4-byte words accessed in one shared-memory phase are all different.
bool ConflictFree(const std::vector<int>& byte_addrs, int bytes_each) {
  std::set<int> banks;
  for (int a : byte_addrs) {
    for (int w = 0; w < bytes_each / 4; ++w) banks.insert((a / 4 + w) % 32);
  }
  return banks.size() == byte_addrs.size() * (bytes_each / 4);
}

using Mat = std::vector<std::vector<float>>;
namespace df = kernels::decode_frag;

// C fragments `s` of S = Q K^T for tokens tok0 + 8 j .. + 7 equal the direct products exactly.
void ExpectScores(const std::vector<std::vector<float>>& s, const Mat& q, const Mat& k, int tok0,
                  int j, int hd) {
  for (int lane = 0; lane < 32; ++lane) {
    for (int e = 0; e < 4; ++e) {
      const df::RowCol rc = df::c_frag(lane, e);
      float want = 0;
      for (int d = 0; d < hd; ++d) want += q[rc.row][d] * k[tok0 + 8 * j + rc.col][d];
      ASSERT_EQ(s[lane][e], want) << "S tokens from " << tok0 << " half " << j << " lane " << lane;
    }
  }
}

// P (C-layout values, as the kernel holds its probabilities) for the warp's 16 tokens from tok0,
// packed as the A operand of P V.
Regs PFragments(const Mat& p, int tok0) {
  Regs pa(32, std::vector<std::uint32_t>(4));
  for (int lane = 0; lane < 32; ++lane) {
    for (int j = 0; j < 2; ++j) {
      for (int h = 0; h < 2; ++h) {
        const df::RowCol c0 = df::c_frag(lane, 2 * h), c1 = df::c_frag(lane, 2 * h + 1);
        pa[lane][df::p_register(j, h)] =
            Pack(p[c0.row][tok0 + 8 * j + c0.col], p[c1.row][tok0 + 8 * j + c1.col]);
      }
    }
  }
  return pa;
}

// acc[n] (the C fragments of n-tile n of O = P V over the 16 tokens from tok0) equals the direct
// products exactly, column c of n-tile n being dim dim_of(n, c); every dim appears once.
template <typename DimOf>
void ExpectOutputs(const std::vector<std::vector<std::vector<float>>>& acc, const Mat& p,
                   const Mat& v, int tok0, int hd, DimOf dim_of) {
  std::set<int> dims;
  for (int n = 0; n < hd / 8; ++n) {
    for (int lane = 0; lane < 32; ++lane) {
      for (int e = 0; e < 4; ++e) {
        const df::RowCol rc = df::c_frag(lane, e);
        const int dim = dim_of(n, rc.col);
        dims.insert(dim);
        float want = 0;
        for (int t = 0; t < 16; ++t) want += p[rc.row][tok0 + t] * v[tok0 + t][dim];
        ASSERT_EQ(acc[n][lane][e], want) << "O tokens from " << tok0 << " n-tile " << n;
      }
    }
  }
  ASSERT_EQ(static_cast<int>(dims.size()), hd) << "every dim of O once";
}

}  // namespace frag_emu

// The pipelined decode kernel's index arithmetic, run on the CPU: K and V tiles laid out in
// "shared memory" with the kernel's swizzle, read back through emulated ldmatrix at the kernel's
// lane addresses, multiplied by emulated mma.sync with Q and P fragments built the kernel's way;
// S = Q K^T and O = P V must equal the direct products exactly (small integer multiples of 1/8:
// every product and sum is exact in fp32). Also: every ldmatrix phase, every quarter-warp of
// tile stores and every half-warp of the merge's float2 stores touches 32 different banks.
TEST(KernelsHostTest, PipelinedDecodeFragmentsComputeQKAndPV) {
  namespace df = kernels::decode_frag;
  using frag_emu::Pack;
  Rng rng = Rng::stream(22, "kernels_host_test.fragments");
  auto small = [&] { return static_cast<float>(rng.uniform_int(-16, 16)) / 8.0f; };
  for (int hd : {64, 128}) {
    SCOPED_TRACE("head_dim " + std::to_string(hd));
    const int tile = kernels::kDecodeTileTokens, row_bytes = hd * 2, chunks = hd / 8;
    std::vector<std::vector<float>> q(16, std::vector<float>(hd)), k(tile, std::vector<float>(hd)),
        v(tile, std::vector<float>(hd)), p(16, std::vector<float>(tile));
    for (auto* m : {&q, &k, &v, &p}) {
      for (auto& row : *m) {
        for (float& x : row) x = small();
      }
    }
    // The tiles as the kernel's requests store them: thread tid, pass i -> (row, chunk).
    std::vector<std::uint8_t> ks(static_cast<std::size_t>(tile) * row_bytes, 0xee), vs = ks;
    std::set<int> written;
    for (int tid = 0; tid < 128; ++tid) {
      for (int i = 0; i < tile / (128 / chunks); ++i) {
        const int row = tid / chunks + i * (128 / chunks), chunk = tid % chunks;
        const int off = df::tile_offset(row, chunk, row_bytes);
        ASSERT_TRUE(written.insert(off).second) << "chunk written twice";
        for (int e = 0; e < 8; ++e) {
          const std::uint16_t kb = frag_emu::FloatToBits(k[row][chunk * 8 + e]);
          const std::uint16_t vb = frag_emu::FloatToBits(v[row][chunk * 8 + e]);
          std::memcpy(ks.data() + off + 2 * e, &kb, 2);
          std::memcpy(vs.data() + off + 2 * e, &vb, 2);
        }
      }
    }
    ASSERT_EQ(static_cast<int>(written.size()), tile * chunks);
    for (int first = 0; first < 128; first += 8) {  // quarter-warps of 16-byte stores
      std::vector<int> addrs;
      for (int tid = first; tid < first + 8; ++tid) {
        addrs.push_back(df::tile_offset(tid / chunks, tid % chunks, row_bytes));
      }
      EXPECT_TRUE(frag_emu::ConflictFree(addrs, 16)) << "tile stores of threads " << first;
    }
    // Q fragments as the kernel loads them.
    std::vector<frag_emu::Regs> qa(hd / 16, frag_emu::Regs(32, std::vector<std::uint32_t>(4)));
    for (int kk = 0; kk < hd / 16; ++kk) {
      for (int lane = 0; lane < 32; ++lane) {
        for (int r = 0; r < 4; ++r) {
          const df::RowCol rc = df::a_frag(lane, r);
          qa[kk][lane][r] = Pack(q[rc.row][kk * 16 + rc.col], q[rc.row][kk * 16 + rc.col + 1]);
        }
      }
    }
    for (int warp = 0; warp < 4; ++warp) {
      const int tok0 = warp * 16;
      // S = Q K^T, two 8-token halves.
      for (int j = 0; j < 2; ++j) {
        std::vector<std::vector<float>> s(32, std::vector<float>(4, 0.0f));
        for (int kk = 0; kk < hd / 32; ++kk) {
          std::vector<int> addr(32);
          for (int lane = 0; lane < 32; ++lane) {
            const df::RowCol rc = df::k_ldmatrix_row(lane, tok0, j, kk);
            addr[lane] = df::tile_offset(rc.row, rc.col, row_bytes);
          }
          for (int m = 0; m < 4; ++m) {
            EXPECT_TRUE(
                frag_emu::ConflictFree({addr.begin() + 8 * m, addr.begin() + 8 * m + 8}, 16))
                << "K ldmatrix, matrix " << m;
          }
          const frag_emu::Regs b = frag_emu::Ldmatrix(ks, addr, false);
          frag_emu::Regs b01(32), b23(32);
          for (int lane = 0; lane < 32; ++lane) {
            b01[lane] = {b[lane][0], b[lane][1]};
            b23[lane] = {b[lane][2], b[lane][3]};
          }
          frag_emu::Mma(s, qa[2 * kk], b01);
          frag_emu::Mma(s, qa[2 * kk + 1], b23);
        }
        frag_emu::ExpectScores(s, q, k, tok0, j, hd);
      }
      const frag_emu::Regs pa = frag_emu::PFragments(p, tok0);
      // O = P V over the warp's 16 tokens.
      std::vector<std::vector<std::vector<float>>> acc(
          hd / 8, std::vector<std::vector<float>>(32, std::vector<float>(4, 0.0f)));
      for (int n2 = 0; n2 < hd / 16; ++n2) {
        std::vector<int> addr(32);
        for (int lane = 0; lane < 32; ++lane) {
          const df::RowCol rc = df::v_ldmatrix_row(lane, tok0, n2);
          addr[lane] = df::tile_offset(rc.row, rc.col, row_bytes);
        }
        for (int m = 0; m < 4; ++m) {
          EXPECT_TRUE(frag_emu::ConflictFree({addr.begin() + 8 * m, addr.begin() + 8 * m + 8}, 16))
              << "V ldmatrix, matrix " << m;
        }
        const frag_emu::Regs b = frag_emu::Ldmatrix(vs, addr, true);
        frag_emu::Regs b01(32), b23(32);
        for (int lane = 0; lane < 32; ++lane) {
          b01[lane] = {b[lane][0], b[lane][1]};
          b23[lane] = {b[lane][2], b[lane][3]};
        }
        frag_emu::Mma(acc[2 * n2], pa, b01);
        frag_emu::Mma(acc[2 * n2 + 1], pa, b23);
      }
      frag_emu::ExpectOutputs(acc, p, v, tok0, hd, [](int n, int col) { return 8 * n + col; });
    }
    // The merge's float2 stores of O (row stride merge_row_floats): each half-warp conflict-free.
    const int ld = df::merge_row_floats(hd);
    for (int warp = 0; warp < 4; ++warp) {
      for (int h = 0; h < 2; ++h) {
        for (int n = 0; n < hd / 8; ++n) {
          for (int half = 0; half < 2; ++half) {
            std::vector<int> addrs;
            for (int lane = 16 * half; lane < 16 * half + 16; ++lane) {
              const df::RowCol rc = df::c_frag(lane, 2 * h);
              addrs.push_back(((warp * 16 + rc.row) * ld + rc.col + 8 * n) * 4);
            }
            EXPECT_TRUE(frag_emu::ConflictFree(addrs, 8)) << "merge stores, half-warp " << half;
          }
        }
      }
    }
  }
}

// The fp8 path of the pipelined decode kernel, run on the CPU the same way: e4m3 K and V tiles
// stored by the kernel's requests at fp8_tile_offset, each lane's codes read from them as the
// kernel reads them (16-byte K chunks, 16- or 8-byte V pieces of four token rows), widened to
// bf16 and paired by interleave_bytes into B registers, Q loaded and O read back with the
// permuted dims (fp8_qk_dim, fp8_pv_dim): S = Q K^T and O = P V must equal the direct products
// exactly, and every phase of those reads must be free of bank conflicts.
TEST(KernelsHostTest, PipelinedDecodeFp8FragmentsComputeQKAndPV) {
  namespace df = kernels::decode_frag;
  using frag_emu::Pack;
  EXPECT_EQ(df::interleave_bytes(0x44332211u, 0x88776655u, false), 0x66225511u);
  EXPECT_EQ(df::interleave_bytes(0x44332211u, 0x88776655u, true), 0x88447733u);
  Rng rng = Rng::stream(23, "kernels_host_test.fp8_fragments");
  auto small = [&] { return static_cast<float>(rng.uniform_int(-16, 16)) / 8.0f; };
  // A pair of e4m3 codes (low 16 bits) as the bf16 pair fp8x2_to_bf16x2 makes of them.
  auto widen = [](unsigned codes) {
    return Pack(kernels::fp8_e4m3_to_float(static_cast<std::uint8_t>(codes & 0xffu)),
                kernels::fp8_e4m3_to_float(static_cast<std::uint8_t>((codes >> 8) & 0xffu)));
  };
  auto word = [](const std::vector<std::uint8_t>& m, int off) {
    std::uint32_t w;
    std::memcpy(&w, m.data() + off, 4);
    return w;
  };
  for (int hd : {64, 128}) {
    SCOPED_TRACE("head_dim " + std::to_string(hd));
    const int tile = kernels::kDecodeTileTokens, chunks = hd / 16;
    std::vector<std::vector<float>> q(16, std::vector<float>(hd)), k(tile, std::vector<float>(hd)),
        v(tile, std::vector<float>(hd)), p(16, std::vector<float>(tile));
    for (auto* m : {&q, &k, &v, &p}) {
      for (auto& row : *m) {
        for (float& x : row) x = small();
      }
    }
    // The tiles as the requests store them: thread tid, pass i -> (row, chunk of 16 codes).
    std::vector<std::uint8_t> ks(static_cast<std::size_t>(tile) * hd, 0xee), vs = ks;
    std::set<int> written;
    for (int tid = 0; tid < 128; ++tid) {
      for (int i = 0; i < tile / (128 / chunks); ++i) {
        const int row = tid / chunks + i * (128 / chunks), chunk = tid % chunks;
        const int off = df::fp8_tile_offset(row, chunk, hd);
        ASSERT_TRUE(off >= 0 && off + 16 <= tile * hd && written.insert(off).second)
            << "row " << row << " chunk " << chunk;
        for (int e = 0; e < 16; ++e) {
          ks[off + e] = kernels::float_to_fp8_e4m3(k[row][chunk * 16 + e]);
          vs[off + e] = kernels::float_to_fp8_e4m3(v[row][chunk * 16 + e]);
        }
      }
    }
    // Q fragments, permuted dims.
    std::vector<frag_emu::Regs> qa(hd / 16, frag_emu::Regs(32, std::vector<std::uint32_t>(4)));
    for (int step = 0; step < hd / 16; ++step) {
      for (int lane = 0; lane < 32; ++lane) {
        for (int r = 0; r < 4; ++r) {
          const int row = df::a_frag(lane, r).row;
          const int dim = df::fp8_qk_dim(lane % 4, step, r >> 1, hd);
          qa[step][lane][r] = Pack(q[row][dim], q[row][dim + 1]);
        }
      }
    }
    for (int warp = 0; warp < 4; ++warp) {
      const int tok0 = warp * 16;
      for (int j = 0; j < 2; ++j) {
        std::vector<std::vector<float>> s(32, std::vector<float>(4, 0.0f));
        for (int i = 0; i < hd / 64; ++i) {
          std::vector<int> addr(32);
          for (int lane = 0; lane < 32; ++lane) {
            addr[lane] =
                df::fp8_tile_offset(tok0 + 8 * j + lane / 4, df::fp8_k_chunk(lane % 4, i, hd), hd);
          }
          for (int phase = 0; phase < 4; ++phase) {  // 16-byte loads: quarter-warps
            EXPECT_TRUE(frag_emu::ConflictFree(
                {addr.begin() + 8 * phase, addr.begin() + 8 * phase + 8}, 16))
                << "fp8 K reads, chunk pass " << i << " phase " << phase;
          }
          for (int u = 0; u < 4; ++u) {
            frag_emu::Regs b(32);
            for (int lane = 0; lane < 32; ++lane) {
              const std::uint32_t w = word(ks, addr[lane] + 4 * u);
              b[lane] = {widen(w), widen(w >> 16)};
            }
            frag_emu::Mma(s, qa[4 * i + u], b);
          }
        }
        frag_emu::ExpectScores(s, q, k, tok0, j, hd);
      }
      const frag_emu::Regs pa = frag_emu::PFragments(p, tok0);
      // V: lane (g, t) reads dims of g from token rows 2 t, 2 t + 1, 2 t + 8, 2 t + 9.
      const int piece = hd / 8;  // bytes per lane and row
      std::vector<std::vector<int>> vaddr(4, std::vector<int>(32));
      for (int r = 0; r < 4; ++r) {
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, t = lane % 4;
          const int row = tok0 + 2 * t + (r & 1) + 8 * (r >> 1);
          vaddr[r][lane] = hd == 128 ? df::fp8_tile_offset(row, g, hd)
                                     : df::fp8_tile_offset(row, g / 2, hd) + 8 * (g % 2);
        }
        const int per_phase = 128 / piece;  // lanes per shared-memory phase
        for (int first = 0; first < 32; first += per_phase) {
          EXPECT_TRUE(frag_emu::ConflictFree(
              {vaddr[r].begin() + first, vaddr[r].begin() + first + per_phase}, piece))
              << "fp8 V reads, row " << r << " lanes " << first;
        }
      }
      std::vector<std::vector<std::vector<float>>> acc(
          hd / 8, std::vector<std::vector<float>>(32, std::vector<float>(4, 0.0f)));
      for (int w = 0; w < hd / 32; ++w) {
        for (int hi = 0; hi < 2; ++hi) {
          for (int e = 0; e < 2; ++e) {
            frag_emu::Regs b(32);
            for (int lane = 0; lane < 32; ++lane) {
              const unsigned lo_tok = df::interleave_bytes(word(vs, vaddr[0][lane] + 4 * w),
                                                           word(vs, vaddr[1][lane] + 4 * w), hi);
              const unsigned hi_tok = df::interleave_bytes(word(vs, vaddr[2][lane] + 4 * w),
                                                           word(vs, vaddr[3][lane] + 4 * w), hi);
              b[lane] = {widen(lo_tok >> (16 * e)), widen(hi_tok >> (16 * e))};
            }
            frag_emu::Mma(acc[4 * w + 2 * hi + e], pa, b);
          }
        }
      }
      frag_emu::ExpectOutputs(acc, p, v, tok0, hd,
                              [hd](int n, int col) { return df::fp8_pv_dim(col, n, hd); });
    }
  }
}

TEST(KernelsHostTest, DecodeSplitPlanProperties) {
  Rng rng = Rng::stream(5, "kernels_host_test");
  const std::int32_t tile = kernels::kDecodeTileTokens;
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<std::int32_t> ctx(static_cast<std::size_t>(rng.uniform_int(1, 80)));
    const std::int32_t longest_cap = static_cast<std::int32_t>(rng.uniform_int(1, 40000));
    for (std::int32_t& c : ctx) c = static_cast<std::int32_t>(rng.uniform_int(1, longest_cap));
    const auto per_seq = static_cast<std::int32_t>(rng.uniform_int(1, 16));
    const auto max_ctas = static_cast<std::int32_t>(rng.uniform_int(1, 1200));
    const kernels::DecodeSplitPlan p = kernels::plan_decode_splits(ctx, per_seq, max_ctas);
    const std::int32_t longest = *std::max_element(ctx.begin(), ctx.end());
    SCOPED_TRACE("trial " + std::to_string(trial));
    ASSERT_EQ(p.partition_tokens % tile, 0);
    ASSERT_GE(std::int64_t{p.partition_tokens} * p.max_splits, longest);        // covers
    ASSERT_LT(std::int64_t{p.partition_tokens} * (p.max_splits - 1), longest);  // no empty z
    auto ctas = [&](std::int64_t part) {
      std::int64_t n = 0;
      for (std::int32_t c : ctx) n += (c + part - 1) / part * per_seq;
      return n;
    };
    const std::int64_t base = static_cast<std::int64_t>(ctx.size()) * per_seq;
    if (base >= max_ctas) {
      ASSERT_FALSE(p.split());
    }
    if (p.split()) {
      ASSERT_GE(p.partition_tokens, 128);
      ASSERT_LE(ctas(p.partition_tokens), max_ctas);
      // Minimal: one tile less would overflow the grid (or go under the 128-token floor).
      if (p.partition_tokens - tile >= 128) {
        ASSERT_GT(ctas(p.partition_tokens - tile), max_ctas);
      }
    }
  }
  // Batch 1, 8k context, 528 CTAs of room, 8 CTAs per sequence: 64 splits of 128 tokens.
  const kernels::DecodeSplitPlan one = kernels::plan_decode_splits({8192}, 8, 528);
  EXPECT_EQ(one.partition_tokens, 128);
  EXPECT_EQ(one.max_splits, 64);
  EXPECT_EQ(kernels::decode_workspace_floats(2, 4, 64, 3), 2 * 4 * 3 * 66);
}

// Issue 14: a plan with partition_tokens 0 used to pass, and the kernel then wrote nothing.
TEST(KernelsHostTest, DecodePlanValidationRejectsEachBrokenInvariant) {
  using kernels::DecodeSplitPlan;
  const std::int32_t tile = kernels::kDecodeTileTokens;
  auto rejects = [](DecodeSplitPlan p, std::int64_t longest, const std::string& words) {
    const std::string e = kernels::decode_plan_error(p, longest);
    EXPECT_NE(e.find(words), std::string::npos) << "error was '" << e << "'";
    try {
      kernels::validate_decode_plan(p, longest, "caller");
      ADD_FAILURE() << "accepted partition " << p.partition_tokens << " x " << p.max_splits;
    } catch (const std::invalid_argument& ex) {
      EXPECT_EQ(std::string(ex.what()), "caller: invalid decode split plan: " + e);
    }
  };
  rejects({0, 1}, 10, "must be > 0");
  rejects({0, 4}, 1, "must be > 0");
  rejects({-tile, 2}, 10, "must be > 0");
  rejects({}, 1, "must be > 0");  // a default plan is not a plan
  rejects({tile + 1, 1}, 10, "not a multiple of the 64-token tile");
  rejects({100, 3}, 10, "not a multiple");
  rejects({tile, 0}, 10, "max_splits is 0");
  rejects({tile, -1}, 10, "max_splits is -1");
  rejects({tile, kernels::kMaxDecodeSplits + 1}, 10, "max_splits is 65536");
  rejects({tile, 1}, tile + 1, "1 splits x 64 tokens do not cover the longest context (65");
  rejects({2 * tile, 3}, 6 * tile + 1, "do not cover");
  // Exactly covering is fine, and so is over-covering.
  EXPECT_EQ(kernels::decode_plan_error({tile, 1}, tile), "");
  EXPECT_EQ(kernels::decode_plan_error({2 * tile, 3}, 6 * tile), "");
  EXPECT_EQ(kernels::decode_plan_error({8192, 1}, 1), "");
  EXPECT_NO_THROW(kernels::validate_decode_plan({128, 64}, 8192, "caller"));
}

TEST(KernelsHostTest, DecodePlannerRejectsBadInputs) {
  EXPECT_THROW(kernels::plan_decode_splits({}, 1, 100), std::invalid_argument);
  EXPECT_THROW(kernels::plan_decode_splits({10, 0}, 1, 100), std::invalid_argument);
  EXPECT_THROW(kernels::plan_decode_splits({10, -3}, 1, 100), std::invalid_argument);
  EXPECT_THROW(kernels::plan_decode_splits({10}, 0, 100), std::invalid_argument);
  EXPECT_THROW(kernels::plan_decode_splits({10}, 1, 0), std::invalid_argument);
  EXPECT_THROW(kernels::plan_decode_splits({10}, 1, 100, 0), std::invalid_argument);
}

// The planner's output is a valid plan that covers every sequence, on many shapes: lengths
// 1 .. 2^31 - 1 around the tile and partition edges, any min_partition, grids from 1 CTA to
// more than the split cap allows.
TEST(KernelsHostTest, DecodePlannerCoversEveryContextOnManyShapes) {
  Rng rng = Rng::stream(14, "kernels_host_test.cover");
  const std::int32_t tile = kernels::kDecodeTileTokens;
  const std::vector<std::int32_t> edges = {
      1, 2, 63, 64, 65, 127, 128, 129, 4095, 4096, 4097, 131071, 1 << 20, 5000000, (1 << 30) + 1};
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::int32_t> ctx(static_cast<std::size_t>(rng.uniform_int(1, 40)));
    for (std::int32_t& c : ctx) {
      c = rng.uniform() < 0.3 ? edges[rng.uniform_int(0, std::int64_t(edges.size()) - 1)]
                              : static_cast<std::int32_t>(rng.uniform_int(1, 70000));
    }
    const auto per_seq = static_cast<std::int32_t>(rng.uniform_int(1, 64));
    const auto max_ctas = static_cast<std::int32_t>(
        rng.uniform() < 0.2 ? rng.uniform_int(1 << 20, 1 << 30) : rng.uniform_int(1, 4000));
    const auto min_partition = static_cast<std::int32_t>(rng.uniform_int(1, 1000));
    SCOPED_TRACE("trial " + std::to_string(trial));
    const kernels::DecodeSplitPlan p =
        kernels::plan_decode_splits(ctx, per_seq, max_ctas, min_partition);
    const std::int64_t longest = *std::max_element(ctx.begin(), ctx.end());
    ASSERT_EQ(kernels::decode_plan_error(p, longest), "");
    ASSERT_GT(p.partition_tokens, 0);
    ASSERT_EQ(p.partition_tokens % tile, 0);
    ASSERT_LE(p.max_splits, kernels::kMaxDecodeSplits);
    // Every key of every sequence lies in exactly one split < max_splits, and no split of the
    // longest sequence is empty.
    for (std::int32_t c : ctx) {
      const std::int64_t splits = (c + std::int64_t{p.partition_tokens} - 1) / p.partition_tokens;
      ASSERT_GE(splits, 1);
      ASSERT_LE(splits, p.max_splits);
    }
    ASSERT_EQ((longest + p.partition_tokens - 1) / p.partition_tokens, p.max_splits);
  }
}

// Split-KV prefill planning (kernels/attention_plan.h): a short chunk after a long prefix is
// split until the device is full; a step that fills the device, or a short range, is not.
TEST(KernelsHostTest, PrefillSplitPlanFillsTheDeviceOnlyWhenItIsIdle) {
  using kernels::plan_prefill_splits;
  using kernels::PrefillSplitPlan;
  // One 16-token chunk after 6,160 cached keys, 32 heads, 264 resident CTAs (an H200's 132 SMs
  // x 2): 8 splits of 832 keys (264 / 32 = 8), covering 6,176.
  const PrefillSplitPlan chunk = plan_prefill_splits(1, 32, 6176, 264);
  EXPECT_EQ(chunk.kv_splits, 8);
  EXPECT_EQ(chunk.split_tokens, 832);
  EXPECT_EQ(kernels::prefill_plan_error(chunk, 6176), "");
  // A full prefill of 8k tokens: 128 tiles x 32 heads fill the device, no split.
  EXPECT_FALSE(plan_prefill_splits(128, 32, 8192, 264).split());
  // More than half the device busy, no split (5 tiles x 32 heads: 160 CTAs); 4 tiles (128)
  // split in two.
  EXPECT_FALSE(plan_prefill_splits(5, 32, 8192, 264).split());
  EXPECT_TRUE(plan_prefill_splits(4, 32, 8192, 264).split());
  // A short range: at most 2 x min_split_tokens keys, no split; just above, ceil(1025 / 512)
  // splits of whole key tiles.
  EXPECT_FALSE(plan_prefill_splits(1, 8, 1024, 264).split());
  const PrefillSplitPlan three = plan_prefill_splits(1, 8, 1025, 264);
  EXPECT_EQ(three.kv_splits, 3);
  EXPECT_EQ(three.split_tokens, 384);
  EXPECT_FALSE(plan_prefill_splits(0, 32, 100000, 264).split());  // no tiles
  // On many shapes the plan is valid for its range and leaves no split empty.
  Rng rng = Rng::stream(15, "kernels_host_test.prefill_split");
  for (int trial = 0; trial < 2000; ++trial) {
    const auto tiles = static_cast<std::int32_t>(rng.uniform_int(1, 300));
    const auto heads = static_cast<std::int32_t>(rng.uniform_int(1, 64));
    const std::int64_t longest = rng.uniform_int(1, 2000000);
    const auto max_ctas = static_cast<std::int32_t>(rng.uniform_int(1, 5000));
    const auto min_split = static_cast<std::int32_t>(rng.uniform_int(1, 2000));
    const PrefillSplitPlan p = plan_prefill_splits(tiles, heads, longest, max_ctas, min_split);
    ASSERT_EQ(kernels::prefill_plan_error(p, longest), "") << trial;
    if (p.split()) {
      ASSERT_LE(std::int64_t{tiles} * heads * 2, max_ctas) << trial;
      ASSERT_LT(std::int64_t{p.kv_splits - 1} * p.split_tokens, longest) << trial;
      ASSERT_LE(std::int64_t{tiles} * heads * p.kv_splits, std::max(max_ctas, 2 * tiles * heads))
          << trial;
    }
  }
  // The invariants, one broken at a time.
  EXPECT_NE(kernels::prefill_plan_error({64, 0}, 10), "");
  EXPECT_NE(kernels::prefill_plan_error({0, 2}, 10), "");
  EXPECT_NE(kernels::prefill_plan_error({100, 2}, 10), "");
  EXPECT_NE(kernels::prefill_plan_error({64, 2}, 129), "");
  EXPECT_EQ(kernels::prefill_plan_error({64, 2}, 128), "");
  EXPECT_EQ(kernels::prefill_plan_error({}, 1 << 30), "");
  EXPECT_THROW(plan_prefill_splits(1, 0, 10, 10), std::invalid_argument);
  EXPECT_THROW(plan_prefill_splits(1, 1, 0, 10), std::invalid_argument);
  EXPECT_THROW(plan_prefill_splits(-1, 1, 10, 10), std::invalid_argument);
}

TEST(KernelsHostTest, PrefillTilesCoverEveryQueryOnce) {
  const std::vector<std::int32_t> nq = {1, 64, 65, 0, 200};
  const std::vector<kernels::PrefillTile> tiles = kernels::plan_prefill_tiles(nq);
  std::vector<std::vector<int>> covered(nq.size());
  for (std::size_t s = 0; s < nq.size(); ++s) covered[s].assign(nq[s], 0);
  for (const kernels::PrefillTile& t : tiles) {
    for (std::int32_t q = t.q_begin; q < std::min(nq[t.seq], t.q_begin + kernels::kPrefillTileRows);
         ++q) {
      ++covered[t.seq][q];
    }
  }
  for (const auto& c : covered) {
    for (int n : c) EXPECT_EQ(n, 1);
  }
  EXPECT_EQ(tiles.size(), 1u + 1 + 2 + 0 + 4);
}

TEST(KernelsHostTest, RopeTableMatchesCpuExecutorRope) {
  LlamaConfig c;
  c.model.head_dim = 128;
  c.model.num_heads = 1;
  c.model.rope_theta = 500000.0;
  c.rope_scaling = RopeScaling{};  // Llama-3.1: factor 8, low 1, high 4, original 8192
  const std::vector<double> inv_freq = rope_inv_freq(c);
  ASSERT_EQ(inv_freq.size(), 64u);
  const std::vector<std::int64_t> positions = {0, 1, 17, 4095, 8191, 100000, 131071};
  const std::vector<float> table = kernels::rope_cos_sin_table(inv_freq, 131072);
  Rng rng = Rng::stream(9, "rope");
  for (std::int64_t p : positions) {
    std::vector<float> want(128), got(128);
    for (float& x : want) x = static_cast<float>(rng.normal(0.0, 1.0));
    got = want;
    apply_rope(want.data(), 1, 128, inv_freq, p);
    kernels::rope_rotate_reference(got.data(), 128, table.data() + p * 128);
    for (int d = 0; d < 128; ++d)
      ASSERT_FLOAT_EQ(got[d], want[d]) << "position " << p << " d " << d;
  }
}

TEST(KernelsHostTest, GreedyReferenceTakesTheLowestIdOnTies) {
  const std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(kernels::greedy_reference(l), 1);
}

// The textbook definition sample_reference implements without sorting: a stable sort of the
// vocabulary by probability, the truncations as prefixes of it, and a walk.
std::int32_t sort_and_walk(std::span<const float> logits, double temperature,
                           const kernels::Truncation& keep, double u) {
  const auto n = static_cast<std::int32_t>(logits.size());
  double mx = logits[0];
  for (float l : logits) mx = std::max<double>(mx, l);
  std::vector<double> prob(n);
  for (std::int32_t t = 0; t < n; ++t) prob[t] = std::exp((logits[t] - mx) / temperature);
  std::vector<std::int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int32_t a, std::int32_t b) { return prob[a] > prob[b]; });
  std::int32_t allowed = 1;
  while (allowed < n && prob[order[allowed]] >= keep.min_p) ++allowed;
  if (keep.top_k > 0) allowed = std::min(allowed, keep.top_k);
  double total = 0;
  for (std::int32_t r = 0; r < allowed; ++r) total += prob[order[r]];
  std::int32_t kept = allowed;
  if (keep.top_p < 1.0) {
    kept = 0;
    double mass = 0;
    while (kept < allowed && (kept == 0 || mass < keep.top_p * total)) mass += prob[order[kept++]];
  }
  double mass = 0;
  for (std::int32_t r = 0; r < kept; ++r) mass += prob[order[r]];
  double x = u * mass;
  for (std::int32_t r = 0; r < kept; ++r) {
    x -= prob[order[r]];
    if (x < 0) return order[r];
  }
  return order[kept - 1];
}

// sample_reference's quickselects pick the token the sorted walk picks, at vocabularies from 1
// to 20,000 (the selections recurse from 32 tokens up), flat and peaked, with ties, with every
// truncation. The sums run in another order, so a u within rounding of a boundary could differ:
// at double precision none of these draws is.
TEST(KernelsHostTest, SampleReferencePicksWhatTheSortedWalkPicks) {
  Rng rng = Rng::stream(5, "sample_reference");
  for (int trial = 0; trial < 800; ++trial) {
    const auto vocab = static_cast<std::size_t>(
        trial % 4 == 0 ? rng.uniform_int(1, 64)
                       : rng.uniform_int(1, trial % 4 == 1 ? 20000 : 3000));
    std::vector<float> logits(vocab);
    const double spread = rng.uniform(0.05, 8.0);
    for (float& x : logits) x = static_cast<float>(rng.normal(0.0, spread));
    if (trial % 5 == 0) {
      for (std::size_t i = 0; i < vocab; i += 3) logits[i] = logits[0];  // many exact ties
    }
    if (trial % 7 == 0) {
      for (float& x : logits) x = std::round(x);  // ties everywhere
    }
    const double temp = rng.uniform(0.2, 2.0);
    kernels::Truncation keep;
    keep.top_p = trial % 3 == 1 ? 1.0 : rng.uniform(0.01, 1.0);
    if (trial % 2 == 1) keep.top_k = static_cast<std::int32_t>(rng.uniform_int(1, 600));
    if (trial % 4 >= 2) keep.min_p = rng.uniform(0.0, 0.3);
    const double u = rng.uniform();
    ASSERT_EQ(kernels::sample_reference(logits, temp, keep, u),
              sort_and_walk(logits, temp, keep, u))
        << "trial " << trial << " vocab " << vocab << " top_p " << keep.top_p << " top_k "
        << keep.top_k << " min_p " << keep.min_p << " u " << u;
  }
}

// The sampling kernel's sort-free algorithm (64-bit keys, bisections) picks the token
// CpuExecutor (sample_reference) picks, with any top_p, top_k and min_p, except where u (or a
// min_p threshold) falls within rounding of a boundary.
TEST(KernelsHostTest, SampleBisectionAgreesWithTheSortingReference) {
  Rng rng = Rng::stream(3, "top_p");
  int agree = 0, total = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const auto vocab = static_cast<std::size_t>(rng.uniform_int(1, 700));
    std::vector<float> logits(vocab);
    const double spread = rng.uniform(0.1, 6.0);
    for (float& x : logits) x = static_cast<float>(rng.normal(0.0, spread));
    if (trial % 10 == 0 && vocab > 4) logits[1] = logits[3] = logits[0];  // exact ties
    const double temp = rng.uniform(0.3, 1.5);
    kernels::Truncation keep;
    keep.top_p = trial % 3 == 1 ? 1.0 : rng.uniform(0.05, 1.0);
    if (trial % 2 == 1) keep.top_k = static_cast<std::int32_t>(rng.uniform_int(1, 40));
    if (trial % 4 >= 2) keep.min_p = rng.uniform(0.0, 0.5);
    const double u = rng.uniform();
    const std::int32_t want = kernels::sample_reference(logits, temp, keep, u);
    const std::int32_t got =
        kernels::sample_bisect(logits, static_cast<float>(temp), keep, static_cast<float>(u));
    ASSERT_GE(got, 0);
    ASSERT_LT(got, static_cast<std::int32_t>(vocab));
    agree += got == want;
    ++total;
  }
  EXPECT_GE(agree * 100, total * 98) << agree << " of " << total;
  // Degenerate cases are exact: a tiny top_p, top_k 1 and min_p 1 are greedy; ties go to the
  // lowest id first.
  const std::vector<float> tied = {1.0f, 3.0f, 3.0f, 0.0f};
  for (const kernels::Truncation keep :
       {kernels::Truncation{1e-6, 0, 0.0}, kernels::Truncation{1.0, 1, 0.0},
        kernels::Truncation{0.9, 0, 0.0}}) {
    EXPECT_EQ(kernels::sample_bisect(tied, 1.0f, keep, keep.top_p == 0.9 ? 0.0f : 0.99f), 1);
    EXPECT_EQ(kernels::sample_reference(tied, 1.0, keep, keep.top_p == 0.9 ? 0.0 : 0.99), 1);
  }
  const std::vector<float> peaked = {1.0f, 3.0f, 2.9f, 0.0f};
  EXPECT_EQ(kernels::sample_bisect(peaked, 1.0f, {1.0, 0, 1.0}, 0.99f), 1);
  EXPECT_EQ(kernels::sample_reference(peaked, 1.0, {1.0, 0, 1.0}, 0.99), 1);
  // Probabilities against the largest (id 1): id 2 e^-0.1 = 0.90, id 0 e^-2 = 0.14, id 3 e^-3.
  // top_k 2 keeps ids 1 and 2, and so does min_p 0.5: u = 0.99 lands on the second of them.
  EXPECT_EQ(kernels::sample_bisect(peaked, 1.0f, {1.0, 2, 0.0}, 0.99f), 2);
  EXPECT_EQ(kernels::sample_reference(peaked, 1.0, {1.0, 2, 0.0}, 0.99), 2);
  EXPECT_EQ(kernels::sample_bisect(peaked, 1.0f, {1.0, 0, 0.5}, 0.99f), 2);
  EXPECT_EQ(kernels::sample_reference(peaked, 1.0, {1.0, 0, 0.5}, 0.99), 2);
  // Without them the same u reaches the tail (id 3, the least likely, last in the order).
  EXPECT_EQ(kernels::sample_bisect(peaked, 1.0f, {}, 0.99f), 3);
  EXPECT_EQ(kernels::sample_reference(peaked, 1.0, {}, 0.99), 3);
}

// sample_reference, fed the u of CpuExecutor's stream, samples what CpuExecutor samples: the GPU
// executor draws u from the same stream, so both engines follow the same semantics.
TEST(KernelsHostTest, SampleReferenceReproducesCpuExecutorSampling) {
  const LlamaConfig config =
      load_llama_config("tiny", servelab_home().string() + "/experiments/catalog");
  const LlamaWeights w = LlamaWeights::random(config, 4);
  CpuExecutorOptions opt;
  opt.block_size = 4;
  opt.num_blocks = 16;
  opt.sampling = {0.8, 0.9, 77};
  CpuExecutor exec(w, opt);
  int checked = 0;
  for (RequestId id = 0; id < 20; ++id) {
    const RequestSpec spec = make_request(id, 0, {{unique_content_id(1, id), 0, 9}}, 4);
    StepPlan plan;
    ScheduledRequest e;
    e.id = id;
    e.spec = &spec;
    e.first_token = 0;
    e.num_tokens = 9;
    e.samples = true;
    const std::vector<BlockId> table = {1, 2, 3};
    e.block_table = table;
    plan.requests.push_back(e);
    const StepResult r = exec.execute(plan);
    const Eigen::VectorXf& logits = exec.last_logits()[0];
    Rng stream(mix64(mix64(opt.sampling.seed ^ name_hash("cpu_executor.sample")) ^ id) ^ mix64(0));
    const double u = stream.uniform();
    const std::vector<float> l(logits.data(), logits.data() + logits.size());
    EXPECT_EQ(kernels::sample_reference(l, 0.8, {0.9, 0, 0.0}, u), r.sampled_tokens[0])
        << "request " << id;
    ++checked;
  }
  EXPECT_EQ(checked, 20);
}

// An adapter's packed layout (kernels/lora_kernel.h): over layers and targets, A_t [r][in_t] then
// B_t [out_t][r] tile the allocation in order with no gap or overlap, every pair starts at a
// multiple of 8 elements (16-byte aligned rows for the gather kernels), and the Llama shape puts
// each projection's dimensions where LoraTarget's order says.
TEST(KernelsHostTest, LoraShapePacksEveryPairOnceInOrder) {
  const kernels::LoraShape s = kernels::llama_lora_shape(4096, 4096, 1024, 14336);
  const std::int32_t in[] = {4096, 4096, 4096, 4096, 4096, 4096, 14336};
  const std::int32_t out[] = {4096, 1024, 1024, 4096, 14336, 14336, 4096};
  for (int t = 0; t < kernels::kLoraTargets; ++t) {
    EXPECT_EQ(s.in[t], in[t]) << t;
    EXPECT_EQ(s.out[t], out[t]) << t;
  }
  for (const std::int32_t rank : {1, 4, 12, 16}) {
    const std::int32_t layers = 3;
    std::int64_t next = 0;
    for (std::int32_t l = 0; l < layers; ++l) {
      for (int t = 0; t < kernels::kLoraTargets; ++t) {
        EXPECT_EQ(s.a_offset(rank, l, t), next) << "rank " << rank << " layer " << l << " t " << t;
        EXPECT_EQ(s.b_offset(rank, l, t), next + std::int64_t{rank} * in[t]);
        EXPECT_EQ(s.a_offset(rank, l, t) % 8, 0);
        EXPECT_EQ(s.b_offset(rank, l, t) % 8, 0);
        next += std::int64_t{rank} * (in[t] + out[t]);
      }
    }
    EXPECT_EQ(s.elements(rank, layers), next);
  }
  EXPECT_TRUE(kernels::lora_gather_fits(s));
  kernels::LoraShape odd = s;
  odd.out[1] = 1020;  // k_proj's outputs not a multiple of 8: the gather kernels cannot take it
  EXPECT_FALSE(kernels::lora_gather_fits(odd));
  EXPECT_EQ(kernels::parse_lora_kernel("cublas", "x"), kernels::LoraKernel::kCublas);
  EXPECT_EQ(kernels::parse_lora_kernel("gather", "x"), kernels::LoraKernel::kGather);
  EXPECT_THROW(kernels::parse_lora_kernel("", "x"), std::invalid_argument);
}

}  // namespace
}  // namespace servelab
