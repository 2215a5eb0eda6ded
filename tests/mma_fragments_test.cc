// The fragment maps of kernels/mma_fragments.h on the CPU: each map is a bijection onto its
// matrix, and one warp (32 lanes as a loop) running the FlashAttention-2 prefill kernel's tile
// loop exactly through those maps (ldmatrix x4 plain and .trans from padded shared-memory tiles,
// mma m16n8k16, the C-to-A repacking of P, the masked online softmax with 4-lane shuffles)
// reproduces a plain causal attention. A layout or index bug in the kernel's operand loads shows
// up here without a GPU.
#include "kernels/mma_fragments.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "kernels/float_formats.h"

namespace servelab {
namespace {

namespace frag = kernels::frag;

float RoundBf16(float x) { return kernels::bf16_to_float(kernels::float_to_bf16(x)); }

TEST(MmaFragments, MapsAreBijections) {
  std::set<std::pair<int, int>> a, b, c, plain, trans;
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) a.insert({frag::a_elem(lane, i).row, frag::a_elem(lane, i).col});
    for (int i = 0; i < 4; ++i) {
      b.insert({frag::b_elem(lane, i).row, frag::b_elem(lane, i).col});
      c.insert({frag::c_elem(lane, i).row, frag::c_elem(lane, i).col});
    }
    for (int e = 0; e < 2; ++e) {
      plain.insert(
          {frag::ldmatrix_elem(lane, e, false).row, frag::ldmatrix_elem(lane, e, false).col});
      trans.insert(
          {frag::ldmatrix_elem(lane, e, true).row, frag::ldmatrix_elem(lane, e, true).col});
    }
  }
  EXPECT_EQ(a.size(), 256u);  // 16 x 16
  EXPECT_EQ(b.size(), 128u);  // 16 x 8
  EXPECT_EQ(c.size(), 128u);  // 16 x 8
  EXPECT_EQ(plain.size(), 64u);
  EXPECT_EQ(trans.size(), 64u);
  for (const auto& [r, col] : a) EXPECT_TRUE(r < 16 && col < 16);
  for (const auto& [r, col] : b) EXPECT_TRUE(r < 16 && col < 8);
  for (const auto& [r, col] : c) EXPECT_TRUE(r < 16 && col < 8);
  // The operand loads address every 8-element row of a 16 x 16 block once.
  for (auto addr : {frag::q_ldmatrix_addr, frag::k_ldmatrix_addr, frag::v_ldmatrix_addr}) {
    std::set<std::pair<int, int>> rows;
    for (int lane = 0; lane < 32; ++lane) rows.insert({addr(lane).row, addr(lane).col});
    EXPECT_EQ(rows.size(), 32u);
    for (const auto& [r, col] : rows) EXPECT_TRUE(r < 16 && (col == 0 || col == 8));
  }
}

// A warp's registers: [lane][register][half] as floats (bf16 values are exact in float).
using Regs = std::vector<std::vector<std::vector<float>>>;
Regs MakeRegs(int regs) {
  return Regs(32, std::vector<std::vector<float>>(regs, std::vector<float>(2, 0.0f)));
}

// ldmatrix.x4[.trans]: lane L supplies the element offset of row L % 8 of matrix L / 8;
// register j of every lane receives matrix j per frag::ldmatrix_elem.
Regs Ldmatrix(const std::vector<float>& smem, const int (&addr)[32], bool trans) {
  Regs r = MakeRegs(4);
  for (int lane = 0; lane < 32; ++lane) {
    EXPECT_EQ(frag::ldmatrix_addr_matrix(lane) * 8 + frag::ldmatrix_addr_row(lane), lane);
    for (int j = 0; j < 4; ++j) {
      for (int e = 0; e < 2; ++e) {
        const frag::Rc rc = frag::ldmatrix_elem(lane, e, trans);
        r[lane][j][e] = smem[addr[8 * j + rc.row] + rc.col];
      }
    }
  }
  return r;
}

// d += a b on fragments: a (4 registers per lane), b registers b0, b1 of `b_regs`, d: 4 floats
// per lane ([lane][i]).
void Mma(std::vector<std::vector<float>>& d, const Regs& a, const Regs& b_regs, int b0, int b1) {
  float A[16][16], B[16][8], C[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) {
      const frag::Rc rc = frag::a_elem(lane, i);
      A[rc.row][rc.col] = a[lane][i / 2][i % 2];
    }
    for (int i = 0; i < 4; ++i) {
      const frag::Rc rb = frag::b_elem(lane, i);
      B[rb.row][rb.col] = b_regs[lane][i / 2 == 0 ? b0 : b1][i % 2];
      const frag::Rc rc = frag::c_elem(lane, i);
      C[rc.row][rc.col] = d[lane][i];
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 4; ++i) {
      const frag::Rc rc = frag::c_elem(lane, i);
      double acc = C[rc.row][rc.col];
      for (int k = 0; k < 16; ++k) acc += double{A[rc.row][k]} * B[k][rc.col];
      d[lane][i] = static_cast<float>(acc);
    }
  }
}

// One warp of prefill_fa2_kernel: 16 query rows at positions pos0 .. pos0 + 15 against keys
// 0 .. num_keys - 1 (64-key tiles, causal), head_dim hd; q [16][hd], k and v [num_keys][hd]
// (bf16-exact). Shared-memory tiles use the kernel's padded row stride hd + 8. Returns O [16][hd].
std::vector<float> EmulateWarp(const std::vector<float>& q, const std::vector<float>& k,
                               const std::vector<float>& v, int hd, int num_keys, int pos0,
                               float scale) {
  const int ld = hd + 8, kKeys = 64;
  const float scale_log2 = scale * 1.4426950408889634f;
  std::vector<float> sq(16 * ld, 0.0f);
  for (int r = 0; r < 16; ++r) {
    for (int d = 0; d < hd; ++d) sq[r * ld + d] = q[r * hd + d];
  }
  std::vector<Regs> qf;
  for (int kk = 0; kk < hd / 16; ++kk) {
    int addr[32];
    for (int lane = 0; lane < 32; ++lane) {
      const frag::Rc a = frag::q_ldmatrix_addr(lane);
      addr[lane] = a.row * ld + kk * 16 + a.col;
    }
    qf.push_back(Ldmatrix(sq, addr, false));
  }
  std::vector<std::vector<std::vector<float>>> o(
      hd / 8, std::vector<std::vector<float>>(32, std::vector<float>(4, 0.0f)));
  std::vector<std::vector<float>> m_run(32, {-INFINITY, -INFINITY}), l_run(32, {0.0f, 0.0f});
  for (int kt = 0; kt < num_keys; kt += kKeys) {
    if (kt > pos0 + 15) continue;                                   // the warp's tile skip
    std::vector<float> sk(kKeys * ld, 0.0f), sv(kKeys * ld, 0.0f);  // zero-filled past the end
    for (int r = 0; r < kKeys && kt + r < num_keys; ++r) {
      for (int d = 0; d < hd; ++d) {
        sk[r * ld + d] = k[(kt + r) * hd + d];
        sv[r * ld + d] = v[(kt + r) * hd + d];
      }
    }
    // S = Q K^T.
    std::vector<std::vector<std::vector<float>>> s(
        kKeys / 8, std::vector<std::vector<float>>(32, std::vector<float>(4, 0.0f)));
    for (int kb = 0; kb < kKeys / 16; ++kb) {
      for (int kk = 0; kk < hd / 16; ++kk) {
        int addr[32];
        for (int lane = 0; lane < 32; ++lane) {
          const frag::Rc a = frag::k_ldmatrix_addr(lane);
          addr[lane] = (kb * 16 + a.row) * ld + kk * 16 + a.col;
        }
        const Regs b = Ldmatrix(sk, addr, false);
        Mma(s[2 * kb], qf[kk], b, 0, 1);
        Mma(s[2 * kb + 1], qf[kk], b, 2, 3);
      }
    }
    // Mask and online softmax per lane; shuffles within the 4 lanes of a group.
    for (int lane = 0; lane < 32; ++lane) {
      for (int n = 0; n < kKeys / 8; ++n) {
        for (int i = 0; i < 4; ++i) {
          const frag::Rc c = frag::c_elem(lane, i);
          if (kt + kKeys - 1 > pos0 && kt + n * 8 + c.col > pos0 + c.row) s[n][lane][i] = -INFINITY;
        }
      }
    }
    std::vector<std::vector<float>> mx(32, {-INFINITY, -INFINITY});
    for (int lane = 0; lane < 32; ++lane) {
      for (int n = 0; n < kKeys / 8; ++n) {
        for (int i = 0; i < 4; ++i) mx[lane][i / 2] = std::fmax(mx[lane][i / 2], s[n][lane][i]);
      }
    }
    for (int x : {1, 2}) {
      std::vector<std::vector<float>> next = mx;
      for (int lane = 0; lane < 32; ++lane) {
        for (int r = 0; r < 2; ++r) next[lane][r] = std::fmax(mx[lane][r], mx[lane ^ x][r]);
      }
      mx = next;
    }
    for (int lane = 0; lane < 32; ++lane) {
      float alpha[2], m_use[2];
      for (int r = 0; r < 2; ++r) {
        const float m_new = std::fmax(m_run[lane][r], mx[lane][r] * scale_log2);
        m_use[r] = m_new == -INFINITY ? 0.0f : m_new;
        alpha[r] = std::exp2(m_run[lane][r] - m_use[r]);
        m_run[lane][r] = m_new;
      }
      float rs[2] = {0.0f, 0.0f};
      for (int n = 0; n < kKeys / 8; ++n) {
        for (int i = 0; i < 4; ++i) {
          s[n][lane][i] = std::exp2(std::fma(s[n][lane][i], scale_log2, -m_use[i / 2]));
          rs[i / 2] += s[n][lane][i];
        }
      }
      for (int r = 0; r < 2; ++r) l_run[lane][r] = l_run[lane][r] * alpha[r] + rs[r];
      for (int d = 0; d < hd / 8; ++d) {
        for (int i = 0; i < 4; ++i) o[d][lane][i] *= alpha[i / 2];
      }
    }
    // O += P V, P repacked from S's accumulators as bf16 A fragments.
    for (int kb = 0; kb < kKeys / 16; ++kb) {
      Regs pa = MakeRegs(4);
      for (int lane = 0; lane < 32; ++lane) {
        for (int i = 0; i < 8; ++i) {
          pa[lane][i / 2][i % 2] =
              RoundBf16(s[2 * kb + frag::p_from_c_tile(i)][lane][frag::p_from_c_elem(i)]);
        }
      }
      for (int db = 0; db < hd / 16; ++db) {
        int addr[32];
        for (int lane = 0; lane < 32; ++lane) {
          const frag::Rc a = frag::v_ldmatrix_addr(lane);
          addr[lane] = (kb * 16 + a.row) * ld + db * 16 + a.col;
        }
        const Regs b = Ldmatrix(sv, addr, true);
        Mma(o[2 * db], pa, b, 0, 1);
        Mma(o[2 * db + 1], pa, b, 2, 3);
      }
    }
  }
  // Row sums over the group, then O / l into [16][hd].
  std::vector<float> out(16 * hd, NAN);
  for (int lane = 0; lane < 32; ++lane) {
    for (int r = 0; r < 2; ++r) {
      float l = l_run[lane][r];
      l += l_run[lane ^ 1][r];
      l += l_run[lane ^ 2][r] + l_run[lane ^ 3][r];
      for (int d = 0; d < hd / 8; ++d) {
        for (int e = 0; e < 2; ++e) {
          const frag::Rc c = frag::c_elem(lane, 2 * r + e);
          out[c.row * hd + d * 8 + c.col] = o[d][lane][2 * r + e] / l;
        }
      }
    }
  }
  return out;
}

// Causal attention in double: row r at position pos0 + r sees keys 0 .. pos0 + r.
std::vector<float> Reference(const std::vector<float>& q, const std::vector<float>& k,
                             const std::vector<float>& v, int hd, int pos0, float scale) {
  std::vector<float> out(16 * hd);
  for (int r = 0; r < 16; ++r) {
    const int n = pos0 + r + 1;
    std::vector<double> s(n);
    double mx = -INFINITY;
    for (int j = 0; j < n; ++j) {
      double acc = 0;
      for (int d = 0; d < hd; ++d) acc += double{q[r * hd + d]} * k[j * hd + d];
      s[j] = acc * scale;
      mx = std::fmax(mx, s[j]);
    }
    double sum = 0;
    for (double& x : s) sum += (x = std::exp(x - mx));
    for (int d = 0; d < hd; ++d) {
      double acc = 0;
      for (int j = 0; j < n; ++j) acc += s[j] * v[j * hd + d];
      out[r * hd + d] = static_cast<float>(acc / sum);
    }
  }
  return out;
}

std::vector<float> RandomBf16(Rng& rng, int n) {
  std::vector<float> x(n);
  for (float& f : x) f = RoundBf16(static_cast<float>(rng.normal(0.0, 1.0)));
  return x;
}

// Positions: the diagonal inside the first tile (pos0 0), a whole tile before the diagonal tile
// (pos0 100: keys 0-63 unmasked, 64-115 masked per row), the diagonal straddling two tiles
// (pos0 56), and a tile skipped outright (pos0 10 with 192 keys: tiles 64 and 128 lie wholly
// above the warp's rows).
TEST(MmaFragments, EmulatedWarpComputesCausalAttention) {
  Rng rng = Rng::stream(19, "mma_fragments");
  struct Case {
    int hd, pos0, num_keys;
  };
  for (const Case c : {Case{64, 0, 16}, Case{64, 100, 116}, Case{128, 56, 72}, Case{128, 10, 192},
                       Case{64, 300, 316}}) {
    SCOPED_TRACE("hd " + std::to_string(c.hd) + " pos0 " + std::to_string(c.pos0));
    const std::vector<float> q = RandomBf16(rng, 16 * c.hd);
    const std::vector<float> k = RandomBf16(rng, c.num_keys * c.hd);
    const std::vector<float> v = RandomBf16(rng, c.num_keys * c.hd);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    const std::vector<float> got = EmulateWarp(q, k, v, c.hd, c.num_keys, c.pos0, scale);
    const std::vector<float> want = Reference(q, k, v, c.hd, c.pos0, scale);
    int bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      // The GPU tests' attention tolerance (P is rounded to bf16 for the MMA).
      if (!(std::fabs(got[i] - want[i]) <= 4e-3 + 1e-2 * std::fabs(want[i]))) {
        if (++bad <= 5) ADD_FAILURE() << "[" << i << "] got " << got[i] << " want " << want[i];
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

// A transposed or swapped fragment map does not pass: the emulation is sensitive to layout.
TEST(MmaFragments, EmulationDetectsAWrongMap) {
  // V loaded without .trans gives B(k, n) = V[n][k]-style values: the result must differ.
  Rng rng = Rng::stream(20, "mma_fragments");
  const int hd = 64, ld = hd + 8;
  std::vector<float> sv(16 * ld);
  for (float& x : sv) x = RoundBf16(static_cast<float>(rng.normal(0.0, 1.0)));
  int addr[32];
  for (int lane = 0; lane < 32; ++lane) {
    const frag::Rc a = frag::v_ldmatrix_addr(lane);
    addr[lane] = a.row * ld + a.col;
  }
  const Regs right = Ldmatrix(sv, addr, true);
  const Regs wrong = Ldmatrix(sv, addr, false);
  // The right load yields B(k = key, n = dim) = V[key][dim] per frag::b_elem.
  int mismatches = 0;
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 4; ++i) {
      const frag::Rc kn = frag::b_elem(lane, i);
      EXPECT_EQ(right[lane][i / 2][i % 2], sv[kn.row * ld + kn.col]);
      mismatches += wrong[lane][i / 2][i % 2] != sv[kn.row * ld + kn.col];
    }
  }
  EXPECT_GT(mismatches, 64);
}

}  // namespace
}  // namespace servelab
