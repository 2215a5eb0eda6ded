// Every CUDA kernel against a CPU fp32 reference on random inputs (labelled GPU in ctest).
// Outputs are poisoned with 0xff bytes (NaN in bf16 and fp32) before each run, so an element a
// kernel fails to write fails the comparison. Inputs are rounded to bf16 first, so the reference
// sees exactly the values the kernel reads. Tolerances (stated per test):
//   exact            embedding, kv_write, copy_blocks, greedy sampling
//   one bf16 round   rms_norm, qkv_rope, silu_mul: |err| <= 1e-3 + 8e-3 |ref|
//   attention        decode and prefill: |err| <= 4e-3 + 1e-2 |ref| (fp32 softmax and
//                    accumulation; bf16 output; prefill also rounds P to bf16 for the MMA)
//   GEMM             |err| <= 1e-2 sqrt(in) * max|x| max|w| / 16 (fp32 accumulation order)
//   top-p            same token as the double-precision reference in >= 98 % of draws
// Without CUDA in the build or a device on the machine every test skips with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "engine/cpu_executor.h"
#include "engine/llama_weights.h"
#include "engine/safetensors.h"
#include "engine/sample_stream.h"
#include "kernels/attention_plan.h"
#include "kernels/kv_layout.h"
#include "kernels/rope_table.h"
#include "kernels/sampling_ref.h"
#include "tests/gpu_test_support.h"
#if SERVELAB_HAVE_CUDA
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/cache_ops.h"
#include "kernels/cuda_graph.h"
#include "kernels/device.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/gemm_skinny.h"
#include "kernels/lora.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "kernels/sampling.h"
#include "kernels/wgmma_probe.h"
#endif

namespace servelab {
namespace {

// A reduced run: under compute-sanitizer (gpu-check sets SERVELAB_SANITIZER_RUN=1) and under the
// CUDA emulator (tests/emu/CMakeLists.txt sets it for its ctest entries), both about a hundredfold
// slower than the GPU, the long case lists run every fourth case (case i with i % 4 == 0).
[[maybe_unused]] bool SkippedInReducedRun(std::size_t case_index) {
  return ReducedRun() && case_index % 4 != 0;
}

// bf16-exact random values.
[[maybe_unused]] std::vector<float> RandomBf16(Rng& rng, std::size_t n, double stddev = 1.0) {
  std::vector<float> v(n);
  for (float& x : v) x = bf16_to_float(float_to_bf16(static_cast<float>(rng.normal(0.0, stddev))));
  return v;
}
[[maybe_unused]] std::vector<std::uint16_t> ToBits(const std::vector<float>& v) {
  std::vector<std::uint16_t> b(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) b[i] = float_to_bf16(v[i]);
  return b;
}
[[maybe_unused]] std::vector<float> FromBits(const std::vector<std::uint16_t>& b) {
  std::vector<float> v(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) v[i] = bf16_to_float(b[i]);
  return v;
}

// y[t][o] = sum_i x[t][i] w[o][i] in double precision (x [tokens][in], w [out][in]), as fp32.
[[maybe_unused]] std::vector<float> ReferenceLinear(const std::vector<float>& x,
                                                    const std::vector<float>& w,
                                                    std::int32_t tokens, std::int32_t in,
                                                    std::int32_t out) {
  std::vector<float> y(static_cast<std::size_t>(tokens) * out);
  for (std::int32_t t = 0; t < tokens; ++t) {
    for (std::int32_t o = 0; o < out; ++o) {
      double sum = 0;
      for (std::int32_t i = 0; i < in; ++i) sum += double{x[t * in + i]} * w[o * in + i];
      y[static_cast<std::size_t>(t) * out + o] = static_cast<float>(sum);
    }
  }
  return y;
}

// Checks |got - want| <= atol + rtol |want| element-wise (NaN fails); reports the first misses.
[[maybe_unused]] void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                                  double atol, double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= atol + rtol * std::fabs(want[i]))) {
      if (++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << " want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements out of tolerance";
}

#if SERVELAB_HAVE_CUDA
namespace k = kernels;
using k::DeviceBuffer;

template <typename T>
DeviceBuffer Upload(const std::vector<T>& v) {
  DeviceBuffer b(std::max<std::size_t>(v.size() * sizeof(T), 16));
  k::copy_to_device(b.get(), v.data(), v.size() * sizeof(T));
  return b;
}
template <typename T>
std::vector<T> Download(const DeviceBuffer& b, std::size_t n) {
  k::synchronize();
  std::vector<T> v(n);
  k::copy_to_host(v.data(), b.get(), n * sizeof(T));
  return v;
}
DeviceBuffer Poisoned(std::size_t bytes) {
  DeviceBuffer b(std::max<std::size_t>(bytes, 16));
  k::fill_bytes(b.get(), 0xff, b.bytes());
  return b;
}

// g.linear of x [T][in] (d_x on the device) by w [out][in] (d_w) three ways, each against the
// double-precision reference: fp32 added into a known base (beta 1), fp32 over NaN (beta 0) and
// bf16. Returns the fp32 beta-0 output.
[[maybe_unused]] std::vector<float> CheckLinearThreeWays(k::Gemm& g, const std::vector<float>& x,
                                                         const DeviceBuffer& d_x,
                                                         const std::vector<float>& w,
                                                         const DeviceBuffer& d_w, std::int32_t T,
                                                         std::int32_t in, std::int32_t out) {
  const std::vector<float> want = ReferenceLinear(x, w, T, in, out);
  std::vector<float> base(want.size()), want_acc(want);
  for (std::size_t i = 0; i < base.size(); ++i) {
    base[i] = 0.25f * static_cast<float>(i % 7);
    want_acc[i] += base[i];
  }
  DeviceBuffer acc = Upload(base), y32 = Poisoned(T * out * 4), y16 = Poisoned(T * out * 2);
  const auto run = [&](void* y, k::Gemm::Out type, float beta) {
    g.linear(d_x.as<k::Bf16>(), d_w.as<k::Bf16>(), y, type, T, in, out, beta, nullptr);
  };
  run(acc.get(), k::Gemm::Out::kF32, 1.0f);
  run(y32.get(), k::Gemm::Out::kF32, 0.0f);
  run(y16.get(), k::Gemm::Out::kBf16, 0.0f);
  ExpectClose(Download<float>(acc, want.size()), want_acc, 1e-3, 1e-4, "fp32, beta 1");
  const std::vector<float> y = Download<float>(y32, want.size());
  ExpectClose(y, want, 1e-3, 1e-4, "fp32, beta 0 over NaN");
  ExpectClose(FromBits(Download<std::uint16_t>(y16, want.size())), want, 1e-2, 8e-3, "bf16");
  return y;
}

// fp8 codes of `format` (e4m3 or e5m2) and back.
[[maybe_unused]] std::uint8_t Fp8Code(float x, k::FloatFormat format) {
  return format == k::FloatFormat::kFp8E5m2 ? k::float_to_fp8_e5m2(x) : k::float_to_fp8_e4m3(x);
}
[[maybe_unused]] float Fp8Value(std::uint8_t code, k::FloatFormat format) {
  return format == k::FloatFormat::kFp8E5m2 ? k::fp8_e5m2_to_float(code)
                                            : k::fp8_e4m3_to_float(code);
}

// A paged cache of one layer in the block-major layout, filled with random K and V, and
// shuffled block tables for `ctx.size()` sequences. bf16 (the default): bf16-exact N(0, 1)
// values. fp8: the codes of N(0, 1) / scale with k_scale 1/32 and v_scale 1/16 (scales that are
// not 1 exercise the kernels' dequantization), the host copy holding code * scale.
struct PagedFixture {
  k::KvCacheLayout layout;
  k::FloatFormat format = k::FloatFormat::kBf16;
  float k_scale = 1.0f, v_scale = 1.0f;
  std::int32_t width = 0;
  std::vector<float> cache;          // host copy: the values attention must read
  std::vector<std::int32_t> tables;  // [seq][width]
  DeviceBuffer d_cache, d_tables;
  PagedFixture(Rng& rng, std::int32_t block_size, std::int32_t kv_heads, std::int32_t hd,
               const std::vector<std::int32_t>& ctx,
               k::FloatFormat kv_format = k::FloatFormat::kBf16)
      : layout{1, block_size, kv_heads, hd, k::kv_elem_bytes(kv_format)}, format(kv_format) {
    std::int32_t total = 0;
    for (std::int32_t c : ctx) {
      width = std::max(width, (c + block_size - 1) / block_size);
      total += (c + block_size - 1) / block_size;
    }
    const std::int32_t blocks = total + 3;  // a few never referenced
    cache = RandomBf16(rng, static_cast<std::size_t>(blocks * layout.block_stride()));
    if (layout.elem_bytes == 1) {
      k_scale = 1.0f / 32;
      v_scale = 1.0f / 16;
      std::vector<std::uint8_t> codes(cache.size());
      for (std::size_t i = 0; i < cache.size(); ++i) {
        const bool value =
            (static_cast<std::int64_t>(i) % layout.block_stride()) >= layout.plane_elems();
        const float s = value ? v_scale : k_scale;
        codes[i] = Fp8Code(cache[i] / s, format);
        cache[i] = Fp8Value(codes[i], format) * s;
      }
      d_cache = Upload(codes);
    } else {
      d_cache = Upload(ToBits(cache));
    }
    std::vector<std::int32_t> ids(blocks);
    std::iota(ids.begin(), ids.end(), 0);
    for (std::size_t i = ids.size(); i > 1; --i) {
      std::swap(ids[i - 1], ids[static_cast<std::size_t>(rng.uniform_int(0, i - 1))]);
    }
    std::size_t next = 0;
    for (std::int32_t c : ctx) {
      const std::int32_t nb = (c + block_size - 1) / block_size;
      for (std::int32_t b = 0; b < width; ++b) tables.push_back(b < nb ? ids[next++] : 0);
    }
    d_tables = Upload(tables);
  }
  k::PagedKv view() const {
    const auto* base = d_cache.as<unsigned char>();
    return {base + layout.layer_base(0, 0) * layout.elem_bytes,
            base + layout.layer_base(0, 1) * layout.elem_bytes,
            layout.block_stride(),
            layout.block_size,
            layout.num_kv_heads,
            layout.head_dim,
            d_tables.as<std::int32_t>(),
            width,
            format,
            k_scale,
            v_scale};
  }
  const float* kv(std::int32_t seq, std::int32_t pos, std::int32_t kvh, bool value) const {
    const std::int32_t block =
        tables[static_cast<std::size_t>(seq) * width + pos / layout.block_size];
    return cache.data() + layout.offset(block, 0, value ? 1 : 0, pos % layout.block_size, kvh, 0);
  }
};

// fp32 attention of one query head over positions [0, pos] of `seq`.
void ReferenceAttention(const PagedFixture& f, std::int32_t seq, const float* q, std::int32_t head,
                        std::int32_t q_heads, std::int32_t pos, float scale, float* out) {
  const std::int32_t hd = f.layout.head_dim;
  const std::int32_t kvh = head / (q_heads / f.layout.num_kv_heads);
  std::vector<double> s(pos + 1);
  double mx = -1e300;
  for (std::int32_t p = 0; p <= pos; ++p) {
    const float* kr = f.kv(seq, p, kvh, false);
    double dot = 0;
    for (std::int32_t d = 0; d < hd; ++d) dot += double{q[d]} * kr[d];
    s[p] = dot * scale;
    mx = std::max(mx, s[p]);
  }
  double denom = 0;
  for (double& x : s) denom += (x = std::exp(x - mx));
  for (std::int32_t d = 0; d < hd; ++d) {
    double o = 0;
    for (std::int32_t p = 0; p <= pos; ++p) o += s[p] * f.kv(seq, p, kvh, true)[d];
    out[d] = static_cast<float>(o / denom);
  }
}

// ReferenceAttention for a decode launch: sequence s's query (row q_rows[s] of q, every head)
// attends to positions [0, ctx[s] - 1]; the result is laid out as q, rows no sequence owns 0.
std::vector<float> ReferenceDecode(const PagedFixture& f, const std::vector<float>& q,
                                   const std::vector<std::int32_t>& q_rows,
                                   const std::vector<std::int32_t>& ctx, std::int32_t q_heads,
                                   float scale) {
  const std::int32_t hd = f.layout.head_dim;
  std::vector<float> want(q.size());
  for (std::size_t s = 0; s < q_rows.size(); ++s) {
    for (std::int32_t h = 0; h < q_heads; ++h) {
      const std::int64_t off = (std::int64_t{q_rows[s]} * q_heads + h) * hd;
      ReferenceAttention(f, static_cast<std::int32_t>(s), q.data() + off, h, q_heads, ctx[s] - 1,
                         scale, want.data() + off);
    }
  }
  return want;
}
#endif

TEST(GpuKernels, EmbeddingLookupIsExact) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  Rng rng = Rng::stream(1, "gpu_kernels");
  const std::int32_t vocab = 100, hidden = 72;
  const std::vector<float> table = RandomBf16(rng, vocab * hidden);
  const std::vector<std::int32_t> tokens = {5, 0, 99, 5, 42};
  DeviceBuffer d_table = Upload(ToBits(table)), d_tokens = Upload(tokens);
  DeviceBuffer out = Poisoned(tokens.size() * hidden * 4);
  k::embedding_lookup(d_tokens.as<std::int32_t>(), 5, d_table.as<k::Bf16>(), vocab, hidden,
                      out.as<float>(), nullptr);
  const std::vector<float> got = Download<float>(out, tokens.size() * hidden);
  std::vector<float> want;
  for (std::int32_t t : tokens)
    want.insert(want.end(), table.begin() + t * hidden, table.begin() + (t + 1) * hidden);
  ExpectClose(got, want, 0, 0, "embedding");
#endif
}

TEST(GpuKernels, RmsNormWithFusedResidualAdd) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  Rng rng = Rng::stream(2, "gpu_kernels");
  for (std::int32_t hidden : {64, 1000, 4096}) {
    const std::int32_t rows = 7;
    std::vector<float> resid(rows * hidden), weight(hidden);
    for (float& x : resid) x = static_cast<float>(rng.normal(0.0, 2.0));
    for (float& x : weight) x = static_cast<float>(1.0 + 0.1 * rng.normal(0.0, 1.0));
    const std::vector<float> delta = RandomBf16(rng, rows * hidden);
    const std::vector<std::int32_t> pick = {6, 2, 2};  // a subset, with a repeat, add off
    // 1. all rows, fused add.
    DeviceBuffer d_resid = Upload(resid), d_delta = Upload(ToBits(delta)), d_w = Upload(weight);
    DeviceBuffer out = Poisoned(rows * hidden * 2);
    k::rms_norm({d_resid.as<float>(), d_delta.as<k::Bf16>(), nullptr, d_w.as<float>(),
                 out.as<k::Bf16>(), rows, hidden, 1e-5f},
                nullptr);
    std::vector<float> summed(resid);
    for (std::size_t i = 0; i < summed.size(); ++i) summed[i] += delta[i];
    ExpectClose(Download<float>(d_resid, summed.size()), summed, 0, 0, "residual after add");
    RowMatrix x = Eigen::Map<RowMatrix>(summed.data(), rows, hidden);
    const RowMatrix ref = rms_norm(x, Eigen::Map<Eigen::VectorXf>(weight.data(), hidden), 1e-5);
    std::vector<float> want(ref.data(), ref.data() + ref.size());
    ExpectClose(FromBits(Download<std::uint16_t>(out, want.size())), want, 1e-3, 8e-3, "rms_norm");
    // 2. selected rows, no add.
    DeviceBuffer d_pick = Upload(pick), out2 = Poisoned(pick.size() * hidden * 2);
    k::rms_norm({d_resid.as<float>(), nullptr, d_pick.as<std::int32_t>(), d_w.as<float>(),
                 out2.as<k::Bf16>(), 3, hidden, 1e-5f},
                nullptr);
    std::vector<float> want2;
    for (std::int32_t r : pick)
      want2.insert(want2.end(), want.begin() + r * hidden, want.begin() + (r + 1) * hidden);
    ExpectClose(FromBits(Download<std::uint16_t>(out2, want2.size())), want2, 1e-3, 8e-3,
                "rms_norm rows");
  }
#endif
}

// The register kernels at the executor's shapes (32 rows of Llama-3-8B's 4,096, 70B's 8,192,
// 2,048) and the scalar loop they fall back to (100: not a multiple of 4; 12,288: wider than the
// register kernels): the fused add exact, the output within one bf16 rounding, with and without
// delta and through a row subset; a second run gives the same bits; and pointers too misaligned
// for vector accesses (element-wise accesses in the same order) give the same bits as aligned
// ones.
TEST(GpuKernels, RmsNormAtLlamaShapesAndFallbacks) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  Rng rng = Rng::stream(42, "gpu_kernels.rms_llama");
  for (std::int32_t hidden : {4096, 8192, 2048, 100, 12288}) {
    SCOPED_TRACE("hidden " + std::to_string(hidden));
    const std::int32_t rows = 32;
    const std::size_t n = static_cast<std::size_t>(rows) * hidden;
    std::vector<float> resid(n), weight(hidden);
    for (float& x : resid) x = static_cast<float>(rng.normal(0.0, 2.0));
    for (float& x : weight) x = static_cast<float>(1.0 + 0.1 * rng.normal(0.0, 1.0));
    const std::vector<float> delta = RandomBf16(rng, n);
    std::vector<float> summed(resid);
    for (std::size_t i = 0; i < n; ++i) summed[i] += delta[i];
    const auto reference = [&](const std::vector<float>& x) {
      const RowMatrix ref = rms_norm(Eigen::Map<const RowMatrix>(x.data(), rows, hidden),
                                     Eigen::Map<Eigen::VectorXf>(weight.data(), hidden), 1e-5);
      return std::vector<float>(ref.data(), ref.data() + ref.size());
    };
    const std::vector<float> want_plain = reference(resid), want_summed = reference(summed);
    const auto pick_rows = [&](const std::vector<float>& all, const std::vector<std::int32_t>& p) {
      std::vector<float> out;
      for (std::int32_t r : p) {
        out.insert(out.end(), all.begin() + std::int64_t{r} * hidden,
                   all.begin() + std::int64_t{r + 1} * hidden);
      }
      return out;
    };
    DeviceBuffer d_delta = Upload(ToBits(delta)), d_w = Upload(weight);
    // 1. Every row, fused add.
    DeviceBuffer d_resid = Upload(resid), out = Poisoned(n * 2);
    k::rms_norm({d_resid.as<float>(), d_delta.as<k::Bf16>(), nullptr, d_w.as<float>(),
                 out.as<k::Bf16>(), rows, hidden, 1e-5f},
                nullptr);
    const std::vector<std::uint16_t> fused_bits = Download<std::uint16_t>(out, n);
    ExpectClose(Download<float>(d_resid, n), summed, 0, 0, "residual after add");
    ExpectClose(FromBits(fused_bits), want_summed, 1e-3, 8e-3, "rms_norm with delta");
    // 2. Every row, no add, twice: the same bits.
    DeviceBuffer d_plain = Upload(resid), out2 = Poisoned(n * 2), out3 = Poisoned(n * 2);
    const k::RmsNormArgs plain{d_plain.as<float>(), nullptr, nullptr, d_w.as<float>(),
                               out2.as<k::Bf16>(),  rows,    hidden,  1e-5f};
    k::rms_norm(plain, nullptr);
    k::RmsNormArgs again = plain;
    again.out = out3.as<k::Bf16>();
    k::rms_norm(again, nullptr);
    const std::vector<std::uint16_t> plain_bits = Download<std::uint16_t>(out2, n);
    ExpectClose(FromBits(plain_bits), want_plain, 1e-3, 8e-3, "rms_norm");
    EXPECT_EQ(Download<std::uint16_t>(out3, n), plain_bits) << "a second run's bits";
    ExpectClose(Download<float>(d_plain, n), resid, 0, 0, "residual without delta");
    // 3. A row subset with a repeat, no add: the rows' bits of run 2.
    const std::vector<std::int32_t> pick = {31, 0, 17, 5, 5};
    const auto np = static_cast<std::int32_t>(pick.size());
    DeviceBuffer d_pick = Upload(pick), out4 = Poisoned(pick.size() * hidden * 2);
    k::rms_norm({d_plain.as<float>(), nullptr, d_pick.as<std::int32_t>(), d_w.as<float>(),
                 out4.as<k::Bf16>(), np, hidden, 1e-5f},
                nullptr);
    std::vector<std::uint16_t> want_pick;
    for (std::int32_t r : pick) {
      want_pick.insert(want_pick.end(), plain_bits.begin() + std::int64_t{r} * hidden,
                       plain_bits.begin() + std::int64_t{r + 1} * hidden);
    }
    EXPECT_EQ(Download<std::uint16_t>(out4, pick.size() * hidden), want_pick) << "rows' bits";
    // 4. A row subset (distinct rows) with the add: only those rows of the residual change.
    const std::vector<std::int32_t> pick2 = {30, 3, 12};
    DeviceBuffer d_pick2 = Upload(pick2), d_resid2 = Upload(resid),
                 out5 = Poisoned(pick2.size() * hidden * 2);
    k::rms_norm({d_resid2.as<float>(), d_delta.as<k::Bf16>(), d_pick2.as<std::int32_t>(),
                 d_w.as<float>(), out5.as<k::Bf16>(), 3, hidden, 1e-5f},
                nullptr);
    std::vector<float> want_resid2 = resid;
    for (std::int32_t r : pick2) {
      std::copy(summed.begin() + std::int64_t{r} * hidden,
                summed.begin() + std::int64_t{r + 1} * hidden,
                want_resid2.begin() + std::int64_t{r} * hidden);
    }
    ExpectClose(Download<float>(d_resid2, n), want_resid2, 0, 0, "residual after a rows add");
    ExpectClose(FromBits(Download<std::uint16_t>(out5, pick2.size() * hidden)),
                pick_rows(want_summed, pick2), 1e-3, 8e-3, "rms_norm rows with delta");
    // 5. Run 1 again with every pointer misaligned for vector accesses (residual and weight 4
    // bytes past 16-byte alignment, delta and out 2 bytes past 8): the same bits.
    DeviceBuffer m_resid(n * 4 + 16), m_delta(n * 2 + 16), m_w(hidden * 4 + 16), m_out(n * 2 + 16);
    k::copy_to_device(m_resid.as<unsigned char>() + 4, resid.data(), n * 4);
    const std::vector<std::uint16_t> delta_bits = ToBits(delta);
    k::copy_to_device(m_delta.as<unsigned char>() + 2, delta_bits.data(), n * 2);
    k::copy_to_device(m_w.as<unsigned char>() + 4, weight.data(), hidden * 4);
    k::fill_bytes(m_out.get(), 0xff, m_out.bytes());
    float* mr = reinterpret_cast<float*>(m_resid.as<unsigned char>() + 4);
    k::Bf16* mo = reinterpret_cast<k::Bf16*>(m_out.as<unsigned char>() + 2);
    k::rms_norm(
        {mr, reinterpret_cast<const k::Bf16*>(m_delta.as<unsigned char>() + 2), nullptr,
         reinterpret_cast<const float*>(m_w.as<unsigned char>() + 4), mo, rows, hidden, 1e-5f},
        nullptr);
    k::synchronize();
    std::vector<std::uint16_t> mis_bits(n);
    std::vector<float> mis_resid(n);
    k::copy_to_host(mis_bits.data(), mo, n * 2);
    k::copy_to_host(mis_resid.data(), mr, n * 4);
    EXPECT_EQ(mis_bits, fused_bits) << "misaligned pointers' bits";
    ExpectClose(mis_resid, summed, 0, 0, "misaligned residual after add");
  }
#endif
}

TEST(GpuKernels, QkvBiasAndRopeMatchCpuExecutor) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  Rng rng = Rng::stream(3, "gpu_kernels");
  for (std::int32_t hd : {64, 128}) {
    LlamaConfig c;
    c.model.head_dim = hd;
    c.model.rope_theta = 500000.0;
    c.rope_scaling = RopeScaling{};
    const std::vector<double> inv_freq = rope_inv_freq(c);
    const std::int32_t qh = 8, kvh = 2, T = 9, width = (qh + 2 * kvh) * hd, rows = 20000;
    const std::vector<float> table = k::rope_cos_sin_table(inv_freq, rows);
    std::vector<float> qkv(T * width), bias(width);
    for (float& x : qkv) x = static_cast<float>(rng.normal(0.0, 1.0));
    for (float& x : bias) x = static_cast<float>(rng.normal(0.0, 0.1));
    std::vector<std::int32_t> pos(T);
    for (std::int32_t& p : pos) p = static_cast<std::int32_t>(rng.uniform_int(0, rows - 1));
    DeviceBuffer d_qkv = Upload(qkv), d_bias = Upload(bias), d_pos = Upload(pos),
                 d_tab = Upload(table);
    DeviceBuffer q = Poisoned(T * qh * hd * 2), kk = Poisoned(T * kvh * hd * 2),
                 vv = Poisoned(T * kvh * hd * 2);
    k::qkv_rope({d_qkv.as<float>(), d_bias.as<float>(), d_pos.as<std::int32_t>(), d_tab.as<float>(),
                 T, qh, kvh, hd, q.as<k::Bf16>(), kk.as<k::Bf16>(), vv.as<k::Bf16>()},
                nullptr);
    std::vector<float> wq, wk, wv;
    for (std::int32_t t = 0; t < T; ++t) {
      std::vector<float> row(qkv.begin() + t * width, qkv.begin() + (t + 1) * width);
      for (std::int32_t i = 0; i < width; ++i) row[i] += bias[i];
      apply_rope(row.data(), qh, hd, inv_freq, pos[t]);
      apply_rope(row.data() + qh * hd, kvh, hd, inv_freq, pos[t]);
      wq.insert(wq.end(), row.begin(), row.begin() + qh * hd);
      wk.insert(wk.end(), row.begin() + qh * hd, row.begin() + (qh + kvh) * hd);
      wv.insert(wv.end(), row.begin() + (qh + kvh) * hd, row.end());
    }
    ExpectClose(FromBits(Download<std::uint16_t>(q, wq.size())), wq, 1e-3, 8e-3, "q");
    ExpectClose(FromBits(Download<std::uint16_t>(kk, wk.size())), wk, 1e-3, 8e-3, "k");
    ExpectClose(FromBits(Download<std::uint16_t>(vv, wv.size())), wv, 1e-3, 8e-3, "v");
  }
#endif
}

#if SERVELAB_HAVE_CUDA
// silu_mul over T random rows of `width` into a poisoned output (so any row or group the grid
// misses fails) against the host's g / (1 + e^-g) * u.
void CheckSiluMul(Rng& rng, std::int32_t T, std::int32_t width) {
  const std::size_t n = static_cast<std::size_t>(T) * width;
  const std::vector<float> gu = RandomBf16(rng, 2 * n, 2.0);
  DeviceBuffer d_gu = Upload(ToBits(gu)), out = Poisoned(n * 2);
  k::silu_mul(d_gu.as<k::Bf16>(), out.as<k::Bf16>(), T, width, nullptr);
  k::synchronize();
  std::vector<float> want;
  want.reserve(n);
  for (std::size_t t = 0; t < static_cast<std::size_t>(T); ++t) {
    for (std::int32_t i = 0; i < width; ++i) {
      const float g = gu[t * 2 * width + i], u = gu[t * 2 * width + width + i];
      want.push_back(g / (1.0f + std::exp(-g)) * u);
    }
  }
  ExpectClose(FromBits(Download<std::uint16_t>(out, n)), want, 1e-3, 8e-3, "silu_mul");
}
#endif

TEST(GpuKernels, SiluMul) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  Rng rng = Rng::stream(4, "gpu_kernels");
  CheckSiluMul(rng, 5, 14336 / 4);
#endif
}

// Issue 14: the token count was on grid.y, which stops at 65,535. More rows than that, with
// narrow rows (one and two 8-value groups, so most of a warp idles) and a wide one.
TEST(GpuKernels, SiluMulHandlesMoreThan65535Tokens) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  Rng rng = Rng::stream(14, "gpu_kernels.silu_many");
  const std::vector<std::pair<std::int32_t, std::int32_t>> shapes = {
      {65536 + 37, 8}, {140000, 16}, {70001, 1032}};
  for (std::size_t ci = 0; ci < shapes.size(); ++ci) {
    if (SkippedInReducedRun(ci)) continue;
    const auto& [T, width] = shapes[ci];
    SCOPED_TRACE("tokens " + std::to_string(T) + " width " + std::to_string(width));
    CheckSiluMul(rng, T, width);  // the last rows above all would show a grid that misses them
  }
#endif
}

// Llama-3-8B's intermediate width (1,792 8-value groups: 14 chunks of 128 threads) at one and
// 32 token rows.
TEST(GpuKernels, SiluMulAtLlamaShapes) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  Rng rng = Rng::stream(43, "gpu_kernels.silu_llama");
  for (std::int32_t T : {1, 32}) {
    SCOPED_TRACE("tokens " + std::to_string(T));
    CheckSiluMul(rng, T, 14336);
  }
#endif
}

TEST(GpuKernels, KvWriteIsExactAndSkipsNegativeSlots) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  Rng rng = Rng::stream(5, "gpu_kernels");
  for (std::int32_t bs : {1, 7, 16, 256}) {
    const k::KvCacheLayout l{3, bs, 2, 64, 2};
    const std::int32_t blocks = 5, T = 6, layer = 1, row = 2 * 64;
    std::vector<std::uint16_t> before = ToBits(RandomBf16(rng, blocks * l.block_stride()));
    const std::vector<float> kin = RandomBf16(rng, T * row), vin = RandomBf16(rng, T * row);
    std::vector<std::int64_t> slots;
    for (std::int32_t t = 0; t < T; ++t)
      slots.push_back(t == 2 ? -1 : (t * 3 % blocks) * bs + (t * 5) % bs);
    if (bs == 1) slots = {0, 1, -1, 3, 4, 2};
    DeviceBuffer cache = Upload(before), d_k = Upload(ToBits(kin)), d_v = Upload(ToBits(vin)),
                 d_s = Upload(slots);
    k::Bf16* base = cache.as<k::Bf16>();
    k::kv_write(
        {d_k.as<k::Bf16>(), d_v.as<k::Bf16>(), d_s.as<std::int64_t>(), T,
         base + l.layer_base(layer, 0), base + l.layer_base(layer, 1), l.block_stride(), bs, 2, 64},
        nullptr);
    std::vector<std::uint16_t> want = before;
    const std::vector<std::uint16_t> kb = ToBits(kin), vb = ToBits(vin);
    for (std::int32_t t = 0; t < T; ++t) {
      if (slots[t] < 0) continue;
      for (std::int32_t h = 0; h < 2; ++h) {
        for (std::int32_t d = 0; d < 64; ++d) {
          want[l.offset(slots[t] / bs, layer, 0, slots[t] % bs, h, d)] = kb[t * row + h * 64 + d];
          want[l.offset(slots[t] / bs, layer, 1, slots[t] % bs, h, d)] = vb[t * row + h * 64 + d];
        }
      }
    }
    EXPECT_EQ(Download<std::uint16_t>(cache, want.size()), want) << "block size " << bs;
  }
#endif
}

// Issue 19 item 3: bias + RoPE + KV write in one kernel. Q equals qkv_rope's bit for bit, the
// cache equals what qkv_rope + kv_write store bit for bit (untouched where the slot is -1), and
// both are within one bf16 rounding of CpuExecutor's apply_rope.
TEST(GpuKernels, FusedQkvRopeKvWriteEqualsTheUnfusedPair) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  Rng rng = Rng::stream(19, "gpu_kernels.fused_qkv");
  for (std::int32_t hd : {64, 128}) {
    for (const bool with_bias : {false, true}) {
      for (std::int32_t bs : {1, 16}) {
        SCOPED_TRACE("head_dim " + std::to_string(hd) + (with_bias ? " bias" : "") +
                     " block size " + std::to_string(bs));
        LlamaConfig c;
        c.model.head_dim = hd;
        c.model.rope_theta = 500000.0;
        c.rope_scaling = RopeScaling{};
        const std::vector<double> inv_freq = rope_inv_freq(c);
        const std::int32_t qh = 8, kvh = 2, T = 7, width = (qh + 2 * kvh) * hd, rows = 4096;
        const std::int32_t row = kvh * hd;
        const k::KvCacheLayout l{2, bs, kvh, hd, 2};
        const std::int32_t blocks = 8 * 16 / bs + 2, layer = 1;
        const std::vector<float> table = k::rope_cos_sin_table(inv_freq, rows);
        std::vector<float> qkv(T * width), bias(width);
        for (float& x : qkv) x = static_cast<float>(rng.normal(0.0, 1.0));
        for (float& x : bias) x = static_cast<float>(rng.normal(0.0, 0.1));
        std::vector<std::int32_t> pos(T);
        for (std::int32_t& p : pos) p = static_cast<std::int32_t>(rng.uniform_int(0, rows - 1));
        std::vector<std::int64_t> slots;
        for (std::int32_t t = 0; t < T; ++t)
          slots.push_back(t == 3 ? -1 : (t * 5 + 2) % (blocks * bs));
        const std::vector<std::uint16_t> before =
            ToBits(RandomBf16(rng, static_cast<std::size_t>(blocks * l.block_stride())));
        DeviceBuffer d_qkv = Upload(qkv), d_bias = Upload(bias), d_pos = Upload(pos),
                     d_tab = Upload(table), d_slots = Upload(slots);
        const float* b = with_bias ? d_bias.as<float>() : nullptr;
        // The unfused pair.
        DeviceBuffer q1 = Poisoned(T * qh * hd * 2), kk = Poisoned(T * row * 2),
                     vv = Poisoned(T * row * 2), cache1 = Upload(before);
        k::qkv_rope({d_qkv.as<float>(), b, d_pos.as<std::int32_t>(), d_tab.as<float>(), T, qh, kvh,
                     hd, q1.as<k::Bf16>(), kk.as<k::Bf16>(), vv.as<k::Bf16>()},
                    nullptr);
        k::Bf16* base1 = cache1.as<k::Bf16>();
        k::kv_write({kk.as<k::Bf16>(), vv.as<k::Bf16>(), d_slots.as<std::int64_t>(), T,
                     base1 + l.layer_base(layer, 0), base1 + l.layer_base(layer, 1),
                     l.block_stride(), bs, kvh, hd},
                    nullptr);
        // The fused kernel.
        DeviceBuffer q2 = Poisoned(T * qh * hd * 2), cache2 = Upload(before);
        k::Bf16* base2 = cache2.as<k::Bf16>();
        k::qkv_rope_kv_write(
            {d_qkv.as<float>(), b, d_pos.as<std::int32_t>(), d_tab.as<float>(), T, qh, kvh, hd,
             q2.as<k::Bf16>(), d_slots.as<std::int64_t>(), base2 + l.layer_base(layer, 0),
             base2 + l.layer_base(layer, 1), l.block_stride(), bs},
            nullptr);
        const std::vector<std::uint16_t> fused_q = Download<std::uint16_t>(q2, T * qh * hd);
        const std::vector<std::uint16_t> fused_cache =
            Download<std::uint16_t>(cache2, before.size());
        EXPECT_EQ(fused_q, Download<std::uint16_t>(q1, T * qh * hd)) << "q bits";
        EXPECT_EQ(fused_cache, Download<std::uint16_t>(cache1, before.size())) << "cache bits";
        // Against CpuExecutor's rope (one bf16 rounding), and the skipped slot untouched.
        std::vector<float> wq, got_k, wk, got_v, wv;
        for (std::int32_t t = 0; t < T; ++t) {
          std::vector<float> r(qkv.begin() + t * width, qkv.begin() + (t + 1) * width);
          if (with_bias) {
            for (std::int32_t i = 0; i < width; ++i) r[i] += bias[i];
          }
          apply_rope(r.data(), qh, hd, inv_freq, pos[t]);
          apply_rope(r.data() + qh * hd, kvh, hd, inv_freq, pos[t]);
          wq.insert(wq.end(), r.begin(), r.begin() + qh * hd);
          if (slots[t] < 0) continue;
          for (std::int32_t h = 0; h < kvh; ++h) {
            for (std::int32_t d = 0; d < hd; ++d) {
              const std::int64_t ko = l.offset(slots[t] / bs, layer, 0, slots[t] % bs, h, d);
              const std::int64_t vo = l.offset(slots[t] / bs, layer, 1, slots[t] % bs, h, d);
              got_k.push_back(bf16_to_float(fused_cache[ko]));
              got_v.push_back(bf16_to_float(fused_cache[vo]));
              wk.push_back(r[(qh + h) * hd + d]);
              wv.push_back(r[(qh + kvh + h) * hd + d]);
            }
          }
        }
        ExpectClose(FromBits(fused_q), wq, 1e-3, 8e-3, "q");
        ExpectClose(got_k, wk, 1e-3, 8e-3, "k in cache");
        ExpectClose(got_v, wv, 1e-3, 8e-3, "v in cache");
        // Only the written slots changed.
        std::int64_t changed = 0;
        for (std::size_t i = 0; i < before.size(); ++i) changed += fused_cache[i] != before[i];
        EXPECT_LE(changed, std::int64_t{T - 1} * 2 * row);
      }
    }
  }
#endif
}

#if SERVELAB_HAVE_CUDA
// rope_pair of kernels/elementwise.cu on the host: every fp32 operation rounded on its own (the
// volatile products keep the compiler from contracting one into an FMA), so the results are the
// kernels' bit for bit.
void HostRopePair(float x1, float x2, float c, float s, float& y1, float& y2) {
  const volatile float x1c = x1 * c, x2s = x2 * s, x2c = x2 * c, x1s = x1 * s;
  y1 = x1c - x2s;
  y2 = x2c + x1s;
}
#endif

// qkv_rope and qkv_rope_kv_write at Llama-3-8B's shape (32 tokens, 32 q heads, 8 KV heads,
// head_dim 128: 3,584 items per token over 28 chunks), with and without bias, into a bf16 and
// both fp8 caches, every fifth token skipped (slot -1): Q, K and V bit for bit what the kernels'
// explicitly rounded fp32 arithmetic gives on the host (then bf16, or fp8 of x / scale rounded
// once), the skipped tokens' Q written and their slots untouched, and nothing else changed.
TEST(GpuKernels, QkvRopeAtLlamaShapesIsBitExact) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  Rng rng = Rng::stream(44, "gpu_kernels.rope_llama");
  const std::int32_t qh = 32, kvh = 8, hd = 128, half = hd / 2, T = 32, bs = 16, layer = 1;
  const std::int32_t width = (qh + 2 * kvh) * hd, row = kvh * hd, positions = 8192;
  LlamaConfig c;
  c.model.head_dim = hd;
  c.model.rope_theta = 500000.0;
  c.rope_scaling = RopeScaling{};
  const std::vector<float> table = k::rope_cos_sin_table(rope_inv_freq(c), positions);
  std::vector<float> qkv(static_cast<std::size_t>(T) * width), bias(width);
  for (float& x : qkv) x = static_cast<float>(rng.normal(0.0, 1.0));
  for (float& x : bias) x = static_cast<float>(rng.normal(0.0, 0.1));
  std::vector<std::int32_t> pos(T);
  for (std::int32_t& p : pos) p = static_cast<std::int32_t>(rng.uniform_int(0, positions - 1));
  const std::int32_t blocks = 5;  // 80 slots; t * 7 + 3 mod 80 are distinct
  std::vector<std::int64_t> slots;
  for (std::int32_t t = 0; t < T; ++t)
    slots.push_back(t % 5 == 3 ? -1 : (t * 7 + 3) % (blocks * bs));
  DeviceBuffer d_qkv = Upload(qkv), d_bias = Upload(bias), d_pos = Upload(pos),
               d_tab = Upload(table), d_slots = Upload(slots);
  for (const bool with_bias : {false, true}) {
    SCOPED_TRACE(with_bias ? "bias" : "no bias");
    // The host's result per token: Q and K heads rotated, V with its bias, all fp32.
    std::vector<float> y(qkv.size());
    for (std::int32_t t = 0; t < T; ++t) {
      const float* in = qkv.data() + std::int64_t{t} * width;
      float* out = y.data() + std::int64_t{t} * width;
      const float* cs = table.data() + std::int64_t{pos[t]} * hd;
      for (std::int32_t col = 0; col < width; ++col)
        out[col] = with_bias ? in[col] + bias[col] : in[col];
      for (std::int32_t h = 0; h < qh + kvh; ++h) {
        for (std::int32_t j = 0; j < half; ++j) {
          const std::int32_t c1 = h * hd + j, c2 = c1 + half;
          HostRopePair(out[c1], out[c2], cs[j], cs[half + j], out[c1], out[c2]);
        }
      }
    }
    std::vector<float> wq, wk, wv;
    for (std::int32_t t = 0; t < T; ++t) {
      const auto r = y.begin() + std::int64_t{t} * width;
      wq.insert(wq.end(), r, r + qh * hd);
      wk.insert(wk.end(), r + qh * hd, r + (qh + kvh) * hd);
      wv.insert(wv.end(), r + (qh + kvh) * hd, r + width);
    }
    const float* b = with_bias ? d_bias.as<float>() : nullptr;
    DeviceBuffer q = Poisoned(wq.size() * 2), kk = Poisoned(wk.size() * 2),
                 vv = Poisoned(wv.size() * 2);
    k::qkv_rope({d_qkv.as<float>(), b, d_pos.as<std::int32_t>(), d_tab.as<float>(), T, qh, kvh, hd,
                 q.as<k::Bf16>(), kk.as<k::Bf16>(), vv.as<k::Bf16>()},
                nullptr);
    EXPECT_EQ(Download<std::uint16_t>(q, wq.size()), ToBits(wq)) << "qkv_rope q bits";
    EXPECT_EQ(Download<std::uint16_t>(kk, wk.size()), ToBits(wk)) << "qkv_rope k bits";
    EXPECT_EQ(Download<std::uint16_t>(vv, wv.size()), ToBits(wv)) << "qkv_rope v bits";
    for (k::FloatFormat fmt :
         {k::FloatFormat::kBf16, k::FloatFormat::kFp8E4m3, k::FloatFormat::kFp8E5m2}) {
      SCOPED_TRACE(k::format_name(fmt));
      const bool fp8 = fmt != k::FloatFormat::kBf16;
      const float ks = fp8 ? 1.0f / 32 : 1.0f, vs = fp8 ? 2.0f : 1.0f;
      const k::KvCacheLayout l{2, bs, kvh, hd, k::kv_elem_bytes(fmt)};
      const auto cache_bytes = static_cast<std::size_t>(blocks * l.block_stride() * l.elem_bytes);
      std::vector<std::uint8_t> before(cache_bytes);
      for (std::uint8_t& x : before) x = static_cast<std::uint8_t>(rng.uniform_int(0, 255));
      std::vector<std::uint8_t> want = before;
      for (std::int32_t t = 0; t < T; ++t) {
        if (slots[t] < 0) continue;
        for (std::int32_t kv = 0; kv < 2; ++kv) {
          for (std::int32_t i = 0; i < row; ++i) {
            const float x = y[std::int64_t{t} * width + (qh + kv * kvh) * hd + i];
            const std::int64_t e = l.offset(slots[t] / bs, layer, kv, slots[t] % bs, 0, i);
            if (fp8) {
              want[e] = Fp8Code(x / (kv == 0 ? ks : vs), fmt);
            } else {
              const std::uint16_t bits = float_to_bf16(x);
              std::memcpy(&want[e * 2], &bits, 2);
            }
          }
        }
      }
      DeviceBuffer q2 = Poisoned(wq.size() * 2), cache = Upload(before);
      unsigned char* base = cache.as<unsigned char>();
      k::qkv_rope_kv_write(
          {d_qkv.as<float>(), b, d_pos.as<std::int32_t>(), d_tab.as<float>(), T, qh, kvh, hd,
           q2.as<k::Bf16>(), d_slots.as<std::int64_t>(),
           base + l.layer_base(layer, 0) * l.elem_bytes,
           base + l.layer_base(layer, 1) * l.elem_bytes, l.block_stride(), bs, fmt, ks, vs},
          nullptr);
      EXPECT_EQ(Download<std::uint16_t>(q2, wq.size()), ToBits(wq)) << "fused q bits";
      const std::vector<std::uint8_t> got = Download<std::uint8_t>(cache, cache_bytes);
      std::int64_t bad = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        if (got[i] != want[i] && ++bad <= 5) {
          ADD_FAILURE() << "cache byte " << i << ": got " << int{got[i]} << " want " << int{want[i]}
                        << (want[i] == before[i] ? " (untouched)" : "");
        }
      }
      EXPECT_EQ(bad, 0) << "cache bytes that differ";
    }
  }
#endif
}

TEST(GpuKernels, CopyBlocksDeviceAndPinnedHostAreExact) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  Rng rng = Rng::stream(6, "gpu_kernels");
  const std::int64_t block_bytes = 2 * 64 * 1024 + 48;  // spans chunks, not a power of two
  const std::int32_t blocks = 6;
  std::vector<unsigned char> src(blocks * block_bytes);
  for (auto& b : src) b = static_cast<unsigned char>(rng.uniform_int(0, 255));
  DeviceBuffer dev = Upload(src);
  DeviceBuffer host(src.size(), DeviceBuffer::Kind::kPinnedHost);
  std::memset(host.host_ptr(), 0, src.size());
  const std::vector<k::BlockPair> out_pairs = {{0, 5}, {3, 1}, {4, 4}};
  DeviceBuffer d_out = Upload(out_pairs);
  k::copy_blocks(dev.get(), host.get(), d_out.as<k::BlockPair>(), 3, block_bytes, nullptr);
  k::synchronize();
  const auto* h = static_cast<const unsigned char*>(host.host_ptr());
  for (const k::BlockPair& p : out_pairs) {
    EXPECT_TRUE(std::equal(h + p.dst * block_bytes, h + (p.dst + 1) * block_bytes,
                           src.begin() + p.src * block_bytes))
        << "swap out " << p.src << " -> " << p.dst;
  }
  // Swap in to other device blocks, then copy-on-write within the device.
  const std::vector<k::BlockPair> in_pairs = {{5, 2}}, cow = {{2, 3}};
  DeviceBuffer d_in = Upload(in_pairs), d_cow = Upload(cow);
  k::copy_blocks(host.get(), dev.get(), d_in.as<k::BlockPair>(), 1, block_bytes, nullptr);
  k::copy_blocks(dev.get(), dev.get(), d_cow.as<k::BlockPair>(), 1, block_bytes, nullptr);
  const std::vector<unsigned char> got = Download<unsigned char>(dev, src.size());
  for (std::int32_t b : {2, 3}) {
    EXPECT_TRUE(std::equal(got.begin() + b * block_bytes, got.begin() + (b + 1) * block_bytes,
                           src.begin() + 0 * block_bytes))
        << "block " << b;
  }
  EXPECT_TRUE(std::equal(got.begin(), got.begin() + block_bytes, src.begin()));  // untouched
#endif
}

// Decode attention over shuffled block tables, across head dims, GQA groups, block sizes, and
// with and without split-K.
TEST(GpuKernels, PagedDecodeAttentionMatchesReference) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  Rng rng = Rng::stream(7, "gpu_kernels");
  struct Case {
    std::int32_t hd, q_heads, kv_heads, block_size, seqs, max_ctx;
    bool force_split;
  };
  const std::vector<Case> cases = {
      {128, 32, 8, 16, 5, 3000, false}, {128, 32, 8, 16, 3, 3000, true},
      {64, 8, 8, 8, 4, 700, true},      {64, 16, 2, 256, 3, 1200, false},
      {128, 12, 4, 7, 4, 300, true},    {64, 4, 1, 1, 2, 150, false},
      {128, 64, 8, 32, 2, 5000, true},  {64, 32, 16, 16, 6, 64, false}};
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    if (SkippedInReducedRun(ci)) continue;
    const Case& c = cases[ci];
    SCOPED_TRACE("hd " + std::to_string(c.hd) + " heads " + std::to_string(c.q_heads) + "/" +
                 std::to_string(c.kv_heads) + " block " + std::to_string(c.block_size) +
                 (c.force_split ? " split" : ""));
    std::vector<std::int32_t> ctx(c.seqs);
    for (std::int32_t& x : ctx) x = static_cast<std::int32_t>(rng.uniform_int(1, c.max_ctx));
    ctx[0] = c.max_ctx;
    PagedFixture f(rng, c.block_size, c.kv_heads, c.hd, ctx);
    const std::int32_t rows = c.seqs + 3;  // q rows: sequences scattered among unused rows
    const std::vector<float> q = RandomBf16(rng, rows * c.q_heads * c.hd);
    std::vector<std::int32_t> q_rows(c.seqs);
    for (std::int32_t i = 0; i < c.seqs; ++i) q_rows[i] = rows - 1 - i;
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    std::vector<float> want;
    for (std::int32_t s = 0; s < c.seqs; ++s) {
      for (std::int32_t h = 0; h < c.q_heads; ++h) {
        std::vector<float> o(c.hd);
        const std::int64_t off = (std::int64_t{q_rows[s]} * c.q_heads + h) * c.hd;
        ReferenceAttention(f, s, q.data() + off, h, c.q_heads, ctx[s] - 1, scale, o.data());
        want.insert(want.end(), o.begin(), o.end());
      }
    }
    DeviceBuffer d_q = Upload(ToBits(q)), d_rows = Upload(q_rows), d_ctx = Upload(ctx);
    for (k::DecodeKernel kernel : {k::DecodeKernel::kTiled, k::DecodeKernel::kPipelined}) {
      SCOPED_TRACE(k::decode_kernel_name(kernel));
      const std::int32_t per_seq = k::decode_ctas_per_seq(kernel, c.q_heads, c.kv_heads);
      const k::DecodeSplitPlan plan =
          c.force_split
              ? k::plan_decode_splits(ctx, per_seq, 1 << 20, 64)
              : k::plan_decode_splits(
                    ctx, per_seq, k::decode_max_resident_ctas(kernel, c.hd, c.q_heads, c.kv_heads));
      if (c.force_split) {
        ASSERT_TRUE(plan.split() || c.max_ctx <= 128);
      }
      DeviceBuffer out = Poisoned(q.size() * 2);
      DeviceBuffer ws =
          Poisoned(k::decode_workspace_floats(c.seqs, c.q_heads, c.hd, plan.max_splits) * 4);
      k::paged_decode_attention(
          {f.view(), d_q.as<k::Bf16>(), out.as<k::Bf16>(), d_rows.as<std::int32_t>(),
           d_ctx.as<std::int32_t>(), c.seqs, c.q_heads, scale, plan, ws.as<float>(),
           *std::max_element(ctx.begin(), ctx.end()), kernel},
          nullptr);
      const std::vector<float> got = FromBits(Download<std::uint16_t>(out, q.size()));
      std::vector<float> got_rows;
      for (std::int32_t s = 0; s < c.seqs; ++s) {
        for (std::int32_t h = 0; h < c.q_heads; ++h) {
          const std::int64_t off = (std::int64_t{q_rows[s]} * c.q_heads + h) * c.hd;
          got_rows.insert(got_rows.end(), got.begin() + off, got.begin() + off + c.hd);
        }
      }
      ExpectClose(got_rows, want, 4e-3, 1e-2, "decode");
      // Rows no sequence owns stay poisoned: no stray writes.
      for (std::int32_t r = 0; r < rows - c.seqs; ++r) {
        EXPECT_TRUE(std::isnan(got[static_cast<std::size_t>(r) * c.q_heads * c.hd])) << "row " << r;
      }
    }
  }
#endif
}

// Both decode kernels on every shape the brief of issue 19 lists: head_dim {64, 128}, GQA groups
// {1, 2, 4, 7, 8} and 18 (more than the 16 query heads of one pipelined CTA), block sizes
// {1, 16, 32, 256}, contexts 1 .. 9000 (tile edges 63/64/65, non-multiples, a 9000-token context
// spanning several staged table windows at block size 1), each with an unsplit plan, the plan
// for this device and a forced split (partitions of 64+ tokens); a second run of every launch
// gives the same bits (no atomics, fixed reduction order).
TEST(GpuKernels, DecodeKernelsMatchReferenceOnEveryShape) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  Rng rng = Rng::stream(21, "gpu_kernels.decode_shapes");
  const std::vector<std::int32_t> longest = {1, 63, 64, 65, 1000, 4097, 9000};
  // A reduced run (ReducedRun) takes every fourth shape: 12 of the 48, still both head dims,
  // every group and block size, both kernels and all three plans. Otherwise all 48.
  std::size_t next = 0, shape = 0;
  for (std::int32_t hd : {64, 128}) {
    for (std::int32_t group : {1, 2, 4, 7, 8, 18}) {
      for (std::int32_t bs : {1, 16, 32, 256}) {
        if (SkippedInReducedRun(shape++)) continue;
        const std::int32_t kv_heads = group == 18 ? 1 : 2, q_heads = group * kv_heads;
        const std::vector<std::int32_t> ctx = {longest[next++ % longest.size()],
                                               static_cast<std::int32_t>(rng.uniform_int(1, 2000))};
        const std::int32_t seqs = 2, max_ctx = std::max(ctx[0], ctx[1]);
        SCOPED_TRACE("hd " + std::to_string(hd) + " heads " + std::to_string(q_heads) + "/" +
                     std::to_string(kv_heads) + " block " + std::to_string(bs) + " ctx " +
                     std::to_string(ctx[0]) + "," + std::to_string(ctx[1]));
        PagedFixture f(rng, bs, kv_heads, hd, ctx);
        const std::vector<float> q = RandomBf16(rng, seqs * q_heads * hd);
        const std::vector<std::int32_t> q_rows = {1, 0};
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        const std::vector<float> want = ReferenceDecode(f, q, q_rows, ctx, q_heads, scale);
        DeviceBuffer d_q = Upload(ToBits(q)), d_rows = Upload(q_rows), d_ctx = Upload(ctx);
        for (k::DecodeKernel kernel : {k::DecodeKernel::kTiled, k::DecodeKernel::kPipelined}) {
          const std::int32_t per_seq = k::decode_ctas_per_seq(kernel, q_heads, kv_heads);
          const std::int32_t whole = (max_ctx + 63) / 64 * 64;
          const std::vector<k::DecodeSplitPlan> plans = {
              {whole, 1},
              k::plan_decode_splits(ctx, per_seq,
                                    k::decode_max_resident_ctas(kernel, hd, q_heads, kv_heads)),
              k::plan_decode_splits(ctx, per_seq, 1 << 20, 64)};
          for (const k::DecodeSplitPlan& plan : plans) {
            SCOPED_TRACE(std::string(k::decode_kernel_name(kernel)) + " partition " +
                         std::to_string(plan.partition_tokens) + " x " +
                         std::to_string(plan.max_splits));
            auto run = [&] {
              DeviceBuffer out = Poisoned(q.size() * 2);
              DeviceBuffer ws =
                  Poisoned(k::decode_workspace_floats(seqs, q_heads, hd, plan.max_splits) * 4);
              k::paged_decode_attention({f.view(), d_q.as<k::Bf16>(), out.as<k::Bf16>(),
                                         d_rows.as<std::int32_t>(), d_ctx.as<std::int32_t>(), seqs,
                                         q_heads, scale, plan, ws.as<float>(), max_ctx, kernel},
                                        nullptr);
              return Download<std::uint16_t>(out, q.size());
            };
            const std::vector<std::uint16_t> first = run();
            ExpectClose(FromBits(first), want, 4e-3, 1e-2, "decode");
            EXPECT_TRUE(first == run()) << "a repeat run changed bits";
          }
        }
      }
    }
  }
#endif
}

// The launcher refuses a plan that does not cover the batch before it touches the device (so this
// runs on any CUDA build, with or without a GPU). Issue 14: partition_tokens 0 used to launch,
// write nothing and divide by zero in the merge.
TEST(GpuKernels, DecodeLauncherRejectsInvalidPlans) {
#if SERVELAB_HAVE_CUDA
  k::DecodeAttentionArgs a;
  a.kv.head_dim = 128;
  a.kv.num_kv_heads = 8;
  a.num_q_heads = 32;
  a.num_seqs = 3;
  a.max_context_len = 1000;
  auto expect_reject = [&](k::DecodeSplitPlan plan, const std::string& words) {
    a.plan = plan;
    try {
      k::paged_decode_attention(a, nullptr);
      ADD_FAILURE() << "launched partition " << plan.partition_tokens << " x " << plan.max_splits;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  for (k::DecodeKernel kernel : {k::DecodeKernel::kTiled, k::DecodeKernel::kPipelined}) {
    a.kernel = kernel;  // both kernels share the launcher's checks
    expect_reject({0, 1}, "must be > 0");
    expect_reject({128, 7}, "do not cover the longest context (1000");
  }
  expect_reject({0, 16}, "must be > 0");
  expect_reject({100, 10}, "not a multiple");
  expect_reject({128, 0}, "max_splits is 0");
  expect_reject({128, 7}, "do not cover the longest context (1000");
  expect_reject({960, 1}, "do not cover");
  a.max_context_len = 0;  // unset: the launcher cannot check coverage
  expect_reject({1024, 1}, "max_context_len");
  a.max_context_len = 1000;
  a.num_seqs = 70000;
  expect_reject({1024, 1}, "num_seqs");
#else
  GTEST_SKIP() << "this build has no CUDA support (configured without nvcc)";
#endif
}

// Chunked prefill over a cached prefix: sequences whose queries start at first_pos > 0, every
// kernel (PrefillKernel::kFa2, kWmma, kFa2Wide and kWgmma over their 128-row tiles, and kFa2Gqa
// over 16-row tiles of 4 heads where the GQA group is a multiple of 4, refused where it is not)
// against the same reference, each run into fresh poisoned buffers, twice on a GPU: the two
// outputs must be bit-identical, and kFa2Wide's and kFa2Gqa's must be kFa2's bit for bit (split
// or not). kWgmma's
// S and O sum their k blocks in fa2's order: on the CUDA emulator, whose wgmma rounds each
// 16-element block as its mma.sync does, its outputs must be fa2's bit for bit too (a wrong
// descriptor or fragment mapping could not pass that); on a GPU only the reference binds it.
// The PTX layout reading of the wgmma prefill kernel, one instruction at a time
// (kernels/wgmma_probe.h): with the kernel's strides, the form of S = Q K^T (A and B K-major from
// shared memory, n 64) and of O += P V (A from registers, B MN-major, n 64 and 128) give A B
// (fp32 sums of 16 exact bf16 products: within 1e-4 of the double-precision product). If the
// GPU disagrees, the test runs the other stride assignments and names the one that agrees: the
// fix for attention_prefill_wgmma.cu's wgmma_desc calls and the emulator's wgmma_operand. Every
// other assignment must disagree, else the probe could not tell a misreading apart.
TEST(GpuKernels, WgmmaOperandLayoutsMatchTheProduct) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  if (!k::wgmma_probe_built()) {
    GTEST_SKIP() << "this build has no sm_90a code (configured with SERVELAB_CUDA_SM90A=OFF)";
  }
  using k::WgmmaProbeForm;
  using k::WgmmaStrides;
  Rng rng = Rng::stream(23, "gpu_kernels.wgmma_probe");
  struct Case {
    WgmmaProbeForm form;
    std::int32_t n;
    const char* name;
  };
  const Case cases[] = {
      {WgmmaProbeForm::kSs, 64, "S = Q K^T form (A, B K-major in smem), n 64"},
      {WgmmaProbeForm::kRsBmn, 64, "O += P V form (A in registers, B MN-major), n 64"},
      {WgmmaProbeForm::kRsBmn, 128, "O += P V form (A in registers, B MN-major), n 128"}};
  auto text = [](const WgmmaStrides& st) {
    return "{lbo " + std::to_string(st.lbo) + ", sbo " + std::to_string(st.sbo) + "}";
  };
  // The operands' strides as a message names them (A's only where A is in shared memory).
  auto strides = [&](WgmmaProbeForm form, const WgmmaStrides& as, const WgmmaStrides& bs) {
    return (form == WgmmaProbeForm::kSs ? "A " + text(as) + ", " : std::string()) + "B " + text(bs);
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::int32_t n = c.n;
    const std::vector<float> a = RandomBf16(rng, 64 * 16), b = RandomBf16(rng, 16 * n);
    std::vector<float> want(static_cast<std::size_t>(64) * n);
    for (int m = 0; m < 64; ++m) {
      for (int j = 0; j < n; ++j) {
        double sum = 0;
        for (int kk = 0; kk < 16; ++kk) sum += double{a[m * 16 + kk]} * b[kk * n + j];
        want[static_cast<std::size_t>(m) * n + j] = static_cast<float>(sum);
      }
    }
    DeviceBuffer d_a = Upload(ToBits(a)), d_b = Upload(ToBits(b));
    // The first element that differs from A B (index, got, want), or -1.
    auto first_miss = [&](const std::vector<float>& got, float* g, float* w) {
      for (std::size_t i = 0; i < got.size(); ++i) {
        if (!(std::fabs(got[i] - want[i]) <= 1e-4 + 1e-5 * std::fabs(want[i]))) {
          *g = got[i];
          *w = want[i];
          return static_cast<std::int64_t>(i);
        }
      }
      return std::int64_t{-1};
    };
    auto run = [&](const WgmmaStrides& as, const WgmmaStrides& bs) {
      DeviceBuffer d = Poisoned(static_cast<std::size_t>(64) * n * 4);
      k::WgmmaProbeArgs args;
      args.form = c.form;
      args.n = n;
      args.a = d_a.as<k::Bf16>();
      args.b = d_b.as<k::Bf16>();
      args.d = d.as<float>();
      args.a_strides = as;
      args.b_strides = bs;
      k::wgmma_probe(args, nullptr);
      return Download<float>(d, static_cast<std::size_t>(64) * n);
    };
    const WgmmaStrides ka = k::wgmma_probe_kernel_strides(c.form, false, n),
                       kb = k::wgmma_probe_kernel_strides(c.form, true, n);
    const WgmmaStrides sa{ka.sbo, ka.lbo}, sb{kb.sbo, kb.lbo};
    // The other assignments: LBO and SBO swapped for A (SS only), for B, for both.
    std::vector<std::pair<WgmmaStrides, WgmmaStrides>> others = {{ka, sb}};
    if (c.form == WgmmaProbeForm::kSs) {
      others.push_back({sa, kb});
      others.push_back({sa, sb});
    }
    float g = 0, w = 0;
    const std::int64_t miss = first_miss(run(ka, kb), &g, &w);
    if (miss < 0) {
      for (const auto& [as, bs] : others) {
        EXPECT_GE(first_miss(run(as, bs), &g, &w), 0)
            << strides(c.form, as, bs)
            << " also gives A B: the probe cannot tell these strides from the kernel's";
      }
      continue;
    }
    std::string agrees;
    for (const auto& [as, bs] : others) {
      if (first_miss(run(as, bs), &g, &w) < 0) agrees += " " + strides(c.form, as, bs) + ";";
    }
    first_miss(run(ka, kb), &g, &w);
    ADD_FAILURE() << "with the kernel's strides (" << strides(c.form, ka, kb)
                  << ") D differs from A B, first at row " << miss / n << " column " << miss % n
                  << " (got " << g << ", want " << w << "). "
                  << (agrees.empty()
                          ? "No other LBO/SBO assignment gives A B either: the accumulator or A "
                            "fragment mapping (kernels/ptx.cuh) or the instruction's flags are "
                            "misread."
                          : "It is A B with" + agrees +
                                " so LBO and SBO are misread for that operand: fix "
                                "attention_prefill_wgmma.cu's wgmma_desc calls and the emulator's "
                                "wgmma_operand (tests/emu/cuda_emu.cc).");
  }
#endif
}

TEST(GpuKernels, PagedPrefillAttentionMatchesReference) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  Rng rng = Rng::stream(8, "gpu_kernels");
  struct Case {
    std::int32_t hd, block_size, q_heads, kv_heads;
    std::vector<std::int32_t> first, nq;
  };
  std::vector<Case> cases;
  for (std::int32_t hd : {64, 128}) {
    for (std::int32_t bs : {1, 16, 100}) {
      cases.push_back({hd, bs, 8, 2, {0, 37, 500, 3}, {130, 1, 64, 77}});
    }
  }
  // A long cached prefix and one chunk; several sequences of mixed lengths (block sizes 1, 16,
  // 256; GQA groups 4 and 1); a chunk starting mid-tile.
  cases.push_back({128, 16, 8, 2, {2000}, {200}});
  cases.push_back({64, 16, 8, 2, {1500}, {150}});
  cases.push_back({128, 256, 16, 4, {0, 0, 700, 1, 300}, {200, 5, 129, 64, 17}});
  cases.push_back({64, 256, 16, 4, {0, 260, 33}, {300, 40, 1}});
  cases.push_back({128, 1, 4, 4, {0, 90}, {70, 63}});
  cases.push_back({64, 1, 16, 4, {511, 0}, {65, 3}});
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    if (SkippedInReducedRun(ci)) continue;
    const Case& c = cases[ci];
    SCOPED_TRACE("hd " + std::to_string(c.hd) + " block " + std::to_string(c.block_size) +
                 " heads " + std::to_string(c.q_heads) + "/" + std::to_string(c.kv_heads) +
                 " seqs " + std::to_string(c.nq.size()) + " first[0] " +
                 std::to_string(c.first[0]));
    std::vector<std::int32_t> ctx, begin;
    std::int32_t rows = 0;
    for (std::size_t s = 0; s < c.nq.size(); ++s) {
      ctx.push_back(c.first[s] + c.nq[s]);
      begin.push_back(rows);
      rows += c.nq[s];
    }
    PagedFixture f(rng, c.block_size, c.kv_heads, c.hd, ctx);
    const std::vector<float> q = RandomBf16(rng, rows * c.q_heads * c.hd);
    const std::vector<k::PrefillTile> tiles = k::plan_prefill_tiles(c.nq);
    const std::vector<k::PrefillTile> wide_tiles =
        k::plan_prefill_tiles(c.nq, k::prefill_tile_rows(k::PrefillKernel::kFa2Wide));
    const std::vector<k::PrefillTile> packed_tiles =
        k::plan_prefill_tiles(c.nq, k::prefill_tile_rows(k::PrefillKernel::kFa2Gqa));
    DeviceBuffer d_q = Upload(ToBits(q)), d_begin = Upload(begin), d_nq = Upload(c.nq),
                 d_first = Upload(c.first), d_tiles = Upload(tiles),
                 d_wide_tiles = Upload(wide_tiles), d_packed_tiles = Upload(packed_tiles);
    const bool packs = (c.q_heads / c.kv_heads) % 4 == 0;  // kFa2Gqa's 4 heads a CTA
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    std::vector<float> want(q.size());
    for (std::size_t s = 0; s < c.nq.size(); ++s) {
      for (std::int32_t i = 0; i < c.nq[s]; ++i) {
        for (std::int32_t h = 0; h < c.q_heads; ++h) {
          const std::int64_t off = ((std::int64_t{begin[s]} + i) * c.q_heads + h) * c.hd;
          ReferenceAttention(f, static_cast<std::int32_t>(s), q.data() + off, h, c.q_heads,
                             c.first[s] + i, scale, want.data() + off);
        }
      }
    }
    std::int64_t longest = 0;
    for (std::size_t s = 0; s < ctx.size(); ++s) longest = std::max<std::int64_t>(longest, ctx[s]);
    const auto ntiles = static_cast<std::int32_t>(tiles.size());
    auto tiles_of = [&](k::PrefillKernel kernel) {
      const std::int32_t rows = k::prefill_tile_rows(kernel);
      return static_cast<std::int32_t>((rows == 128  ? wide_tiles
                                        : rows == 16 ? packed_tiles
                                                     : tiles)
                                           .size());
    };
    DeviceBuffer out = Poisoned(q.size() * 2);
    auto args = [&](k::PrefillKernel kernel, const k::PrefillSplitPlan& plan, float* ws) {
      const std::int32_t rows = k::prefill_tile_rows(kernel);
      return k::PrefillAttentionArgs{f.view(),
                                     d_q.as<k::Bf16>(),
                                     out.as<k::Bf16>(),
                                     d_begin.as<std::int32_t>(),
                                     d_nq.as<std::int32_t>(),
                                     d_first.as<std::int32_t>(),
                                     (rows == 128  ? d_wide_tiles
                                      : rows == 16 ? d_packed_tiles
                                                   : d_tiles)
                                         .as<k::PrefillTile>(),
                                     tiles_of(kernel),
                                     c.q_heads,
                                     scale,
                                     kernel,
                                     plan,
                                     ws,
                                     longest};
    };
    // Two launches into a poisoned output: close to the reference, and bit-identical. On the
    // emulator one: it runs a launch's threads in a fixed order, so a second run cannot differ
    // (and the emulated prefill kernels are this suite's most expensive part).
#if defined(SERVELAB_CUDA_EMU)
    constexpr int kRuns = 1;
#else
    constexpr int kRuns = 2;
#endif
    auto check_twice = [&](const k::PrefillAttentionArgs& a, const char* what) {
      std::vector<std::uint16_t> runs[2];
      for (int run = 0; run < kRuns; ++run) {
        std::vector<std::uint16_t>& bits = runs[run];
        out = Poisoned(q.size() * 2);
        k::PrefillAttentionArgs launch = a;
        launch.out = out.as<k::Bf16>();
        k::paged_prefill_attention(launch, nullptr);
        bits = Download<std::uint16_t>(out, q.size());
      }
      ExpectClose(FromBits(runs[0]), want, 4e-3, 1e-2, what);
      if (kRuns == 2) {
        EXPECT_TRUE(runs[0] == runs[1]) << "two runs of the same launch differ";
      }
      return runs[0];
    };
#if defined(SERVELAB_CUDA_EMU)
    const bool wgmma_is_fa2 = true;  // the emulator's wgmma rounds as its mma.sync
#else
    const bool wgmma_is_fa2 = false;
#endif
    // Whether `kernel`'s outputs must be fa2's bit for bit.
    auto same_bits_as_fa2 = [&](k::PrefillKernel kernel) {
      return kernel == k::PrefillKernel::kFa2Wide || kernel == k::PrefillKernel::kFa2Gqa ||
             (kernel == k::PrefillKernel::kWgmma && wgmma_is_fa2);
    };
    if (!packs) {  // the GQA group is no multiple of the 4 heads fa2_gqa packs: refused
      EXPECT_THROW(
          k::paged_prefill_attention(args(k::PrefillKernel::kFa2Gqa, {}, nullptr), nullptr),
          std::invalid_argument);
    }
    std::vector<std::uint16_t> fa2_bits;
    for (k::PrefillKernel kernel :
         {k::PrefillKernel::kFa2, k::PrefillKernel::kWmma, k::PrefillKernel::kFa2Wide,
          k::PrefillKernel::kWgmma, k::PrefillKernel::kFa2Gqa}) {
      if (!k::prefill_kernel_built(kernel)) continue;  // wgmma in a build without sm_90a
      if (kernel == k::PrefillKernel::kFa2Gqa && !packs) continue;
      SCOPED_TRACE(k::prefill_kernel_name(kernel));
      const std::vector<std::uint16_t> bits = check_twice(args(kernel, {}, nullptr), "prefill");
      if (kernel == k::PrefillKernel::kFa2) fa2_bits = bits;
      if (same_bits_as_fa2(kernel)) {
        EXPECT_TRUE(bits == fa2_bits) << k::prefill_kernel_name(kernel) << " differs from fa2";
      }
    }
    // Split-KV (fa2): key ranges of one and three key tiles (every tile of a long prefix in
    // its own CTA; splits past a short sequence's positions empty), and the planner's plan for
    // a device of 8 resident CTAs.
    std::vector<k::PrefillSplitPlan> plans;
    for (std::int32_t keys : {64, 192}) {
      plans.push_back({keys, static_cast<std::int32_t>((longest + keys - 1) / keys)});
    }
    plans.push_back(k::plan_prefill_splits(ntiles, c.q_heads, longest, 8, 64));
    if (ReducedRun()) plans.resize(1);  // the sanitizer build: one-tile splits only
    for (const k::PrefillSplitPlan& plan : plans) {
      if (!plan.split()) continue;
      SCOPED_TRACE("split " + std::to_string(plan.kv_splits) + " x " +
                   std::to_string(plan.split_tokens));
      std::vector<std::uint16_t> narrow_bits;
      for (k::PrefillKernel kernel : {k::PrefillKernel::kFa2, k::PrefillKernel::kFa2Wide,
                                      k::PrefillKernel::kWgmma, k::PrefillKernel::kFa2Gqa}) {
        if (!k::prefill_kernel_built(kernel)) continue;
        if (kernel == k::PrefillKernel::kFa2Gqa && !packs) continue;
        SCOPED_TRACE(k::prefill_kernel_name(kernel));
        DeviceBuffer ws(
            static_cast<std::size_t>(k::prefill_workspace_floats(
                tiles_of(kernel), c.q_heads, c.hd, plan.kv_splits, k::prefill_tile_rows(kernel))) *
            sizeof(float));
        const std::vector<std::uint16_t> bits =
            check_twice(args(kernel, plan, ws.as<float>()), "prefill split");
        if (kernel == k::PrefillKernel::kFa2) {
          narrow_bits = bits;
        } else if (same_bits_as_fa2(kernel)) {
          EXPECT_TRUE(bits == narrow_bits)
              << "split " << k::prefill_kernel_name(kernel) << " differs from split fa2";
        }
      }
    }
    if (ci == 0) {
      // Refused: a split with the wmma kernel, without a workspace, or short of the range.
      DeviceBuffer ws(
          static_cast<std::size_t>(k::prefill_workspace_floats(ntiles, c.q_heads, c.hd, 64)) *
          sizeof(float));
      const k::PrefillSplitPlan covering{64, static_cast<std::int32_t>((longest + 63) / 64)};
      k::PrefillAttentionArgs a = args(k::PrefillKernel::kWmma, covering, ws.as<float>());
      EXPECT_THROW(k::paged_prefill_attention(a, nullptr), std::invalid_argument);
      a.kernel = k::PrefillKernel::kFa2;
      a.workspace = nullptr;
      EXPECT_THROW(k::paged_prefill_attention(a, nullptr), std::invalid_argument);
      a.workspace = ws.as<float>();
      a.split.kv_splits -= 1;
      EXPECT_THROW(k::paged_prefill_attention(a, nullptr), std::invalid_argument);
    }
  }
#endif
}

// fp8 KV (kernels/cache_ops.h, rope.h): kv_write stores exactly the host reference's codes of
// bf16 value / scale (saturating: the 1e4 values), nothing else changes; the fused kernel's
// codes, rounded once from fp32, equal the unfused pair's (rounded from bf16) except where the
// double rounding lands on a tie (at most 1 %, one fp8 step apart), and decode to within half an
// fp8 step of CpuExecutor's apply_rope; its Q is the bf16 run's bit for bit.
TEST(GpuKernels, Fp8KvWriteRoundsAsTheHostReference) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  Rng rng = Rng::stream(31, "gpu_kernels.fp8_write");
  for (k::FloatFormat fmt : {k::FloatFormat::kFp8E4m3, k::FloatFormat::kFp8E5m2}) {
    for (std::int32_t bs : {1, 16}) {
      SCOPED_TRACE(std::string(k::format_name(fmt)) + " block size " + std::to_string(bs));
      const std::int32_t hd = 64, qh = 4, kvh = 2, T = 6, layer = 1, row = kvh * hd;
      const k::KvCacheLayout l{2, bs, kvh, hd, 1};
      const std::int32_t blocks = 32 / bs + 2;
      const float ks = 0.05f, vs = 2.0f;
      std::vector<float> kin = RandomBf16(rng, T * row, 4.0), vin = RandomBf16(rng, T * row, 4.0);
      kin[5] = 1e4f;  // beyond e4m3's 448 x k_scale: saturates
      vin[7] = -1e6f;
      std::vector<std::int64_t> slots;
      for (std::int32_t t = 0; t < T; ++t)
        slots.push_back(t == 2 ? -1 : (t * 7 + 1) % (blocks * bs));
      std::vector<std::uint8_t> before(static_cast<std::size_t>(blocks * l.block_stride()));
      for (std::uint8_t& b : before) b = static_cast<std::uint8_t>(rng.uniform_int(0, 255));
      DeviceBuffer cache = Upload(before), d_k = Upload(ToBits(kin)), d_v = Upload(ToBits(vin)),
                   d_s = Upload(slots);
      unsigned char* base = cache.as<unsigned char>();
      k::kv_write({d_k.as<k::Bf16>(), d_v.as<k::Bf16>(), d_s.as<std::int64_t>(), T,
                   base + l.layer_base(layer, 0), base + l.layer_base(layer, 1), l.block_stride(),
                   bs, kvh, hd, fmt, ks, vs},
                  nullptr);
      std::vector<std::uint8_t> want = before;
      for (std::int32_t t = 0; t < T; ++t) {
        if (slots[t] < 0) continue;
        for (std::int32_t i = 0; i < row; ++i) {
          const std::int64_t b = slots[t] / bs, slot = slots[t] % bs;
          want[l.offset(b, layer, 0, slot, 0, i)] = Fp8Code(kin[t * row + i] / ks, fmt);
          want[l.offset(b, layer, 1, slot, 0, i)] = Fp8Code(vin[t * row + i] / vs, fmt);
        }
      }
      const std::vector<std::uint8_t> got = Download<std::uint8_t>(cache, want.size());
      EXPECT_EQ(got, want) << "kv_write codes";
      EXPECT_EQ(Fp8Value(got[l.offset(slots[0] / bs, layer, 0, slots[0] % bs, 0, 5)], fmt),
                k::format_max(fmt))
          << "saturated";

      // The fused kernel against the unfused pair and the fp32 reference.
      LlamaConfig c;
      c.model.head_dim = hd;
      c.model.rope_theta = 10000.0;
      const std::vector<double> inv_freq = rope_inv_freq(c);
      const std::int32_t width = (qh + 2 * kvh) * hd, rows = 512;
      const std::vector<float> table = k::rope_cos_sin_table(inv_freq, rows);
      std::vector<float> qkv(T * width);
      for (float& x : qkv) x = static_cast<float>(rng.normal(0.0, 1.0));
      std::vector<std::int32_t> pos(T);
      for (std::int32_t& p : pos) p = static_cast<std::int32_t>(rng.uniform_int(0, rows - 1));
      DeviceBuffer d_qkv = Upload(qkv), d_pos = Upload(pos), d_tab = Upload(table);
      DeviceBuffer q1 = Poisoned(T * qh * hd * 2), kk = Poisoned(T * row * 2),
                   vv = Poisoned(T * row * 2), cache1 = Upload(before);
      k::qkv_rope({d_qkv.as<float>(), nullptr, d_pos.as<std::int32_t>(), d_tab.as<float>(), T, qh,
                   kvh, hd, q1.as<k::Bf16>(), kk.as<k::Bf16>(), vv.as<k::Bf16>()},
                  nullptr);
      unsigned char* base1 = cache1.as<unsigned char>();
      k::kv_write({kk.as<k::Bf16>(), vv.as<k::Bf16>(), d_s.as<std::int64_t>(), T,
                   base1 + l.layer_base(layer, 0), base1 + l.layer_base(layer, 1), l.block_stride(),
                   bs, kvh, hd, fmt, ks, vs},
                  nullptr);
      DeviceBuffer q2 = Poisoned(T * qh * hd * 2), cache2 = Upload(before);
      unsigned char* base2 = cache2.as<unsigned char>();
      k::qkv_rope_kv_write(
          {d_qkv.as<float>(), nullptr, d_pos.as<std::int32_t>(), d_tab.as<float>(), T, qh, kvh, hd,
           q2.as<k::Bf16>(), d_s.as<std::int64_t>(), base2 + l.layer_base(layer, 0),
           base2 + l.layer_base(layer, 1), l.block_stride(), bs, fmt, ks, vs},
          nullptr);
      EXPECT_EQ(Download<std::uint16_t>(q2, T * qh * hd), Download<std::uint16_t>(q1, T * qh * hd))
          << "q bits";
      const std::vector<std::uint8_t> fused = Download<std::uint8_t>(cache2, before.size());
      const std::vector<std::uint8_t> unfused = Download<std::uint8_t>(cache1, before.size());
      std::int64_t differ = 0, written = 0;
      std::vector<float> got_kv, want_kv;
      const double step = fmt == k::FloatFormat::kFp8E5m2 ? 0.25 : 0.125;  // relative ulp
      for (std::int32_t t = 0; t < T; ++t) {
        if (slots[t] < 0) continue;
        std::vector<float> r(qkv.begin() + t * width, qkv.begin() + (t + 1) * width);
        apply_rope(r.data() + qh * hd, kvh, hd, inv_freq, pos[t]);
        for (std::int32_t kv = 0; kv < 2; ++kv) {
          for (std::int32_t i = 0; i < row; ++i) {
            const std::int64_t o = l.offset(slots[t] / bs, layer, kv, slots[t] % bs, 0, i);
            const float s = kv == 0 ? ks : vs;
            ++written;
            if (fused[o] != unfused[o]) {
              ++differ;
              // Adjacent codes: same sign, magnitudes (the low 7 bits, monotonic) one apart.
              const int fa = fused[o], ua = unfused[o];
              EXPECT_TRUE(((fa ^ ua) & 0x80) == 0 && std::abs((fa & 0x7f) - (ua & 0x7f)) == 1)
                  << "fused code " << fa << " and unfused " << ua << " more than one step apart";
            }
            got_kv.push_back(Fp8Value(fused[o], fmt) * s);
            want_kv.push_back(r[(qh + kv * kvh) * hd + i]);
          }
        }
      }
      // A double rounding differs where the bf16 value is an fp8 tie: about 2^-(7 - mantissa
      // bits) / 2 of the values (3 % for e4m3, 1.6 % for e5m2).
      EXPECT_LE(differ * 100, written * 5) << differ << " of " << written << " codes differ";
      // Half a step relative, plus half the smallest subnormal step (x the scale) absolute.
      const double tiny =
          fmt == k::FloatFormat::kFp8E5m2 ? std::ldexp(1.0, -17) : std::ldexp(1.0, -10);
      for (std::size_t i = 0; i < got_kv.size(); ++i) {
        const double s = (i / row) % 2 == 0 ? ks : vs;
        const double err = std::fabs(double{got_kv[i]} - want_kv[i]);
        EXPECT_LE(err, s * tiny + (step / 2) * std::fabs(want_kv[i]) * 1.001)
            << "fused fp8 " << ((i / row) % 2 == 0 ? "k" : "v") << " element " << i << ": got "
            << got_kv[i] << " want " << want_kv[i];
      }
      for (std::size_t i = 0; i < before.size(); ++i) {
        if (fused[i] != before[i] && unfused[i] == before[i] && want[i] == before[i]) {
          ADD_FAILURE() << "fused kernel wrote outside the slots at " << i;
          break;
        }
      }
    }
  }
#endif
}

// fp8 KV read by the pipelined decode kernel (unsplit and split plans) and the fa2 prefill kernel
// (chunked, over a cached prefix) against the fp32 reference over the dequantized values (code x
// scale), same tolerance as bf16; the fallback kernels (tiled, wmma) and bad scales are refused.
TEST(GpuKernels, Fp8PagedAttentionMatchesReference) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  Rng rng = Rng::stream(32, "gpu_kernels.fp8_attention");
  std::size_t case_index = 0;
  for (k::FloatFormat fmt : {k::FloatFormat::kFp8E4m3, k::FloatFormat::kFp8E5m2}) {
    for (std::int32_t hd : {64, 128}) {
      for (std::int32_t bs : {16, 7}) {
        if (SkippedInReducedRun(case_index++) && !(hd == 128 && bs == 16)) continue;
        SCOPED_TRACE(std::string(k::format_name(fmt)) + " hd " + std::to_string(hd) + " block " +
                     std::to_string(bs));
        const std::int32_t q_heads = 8, kv_heads = 2;
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        // Decode: 3 sequences, the longest 700 tokens; GQA groups of 4 and of 18 (two CTAs of
        // up to 16 query heads per KV head, the second with 2).
        for (const auto& [dq, dkv] : {std::pair<std::int32_t, std::int32_t>{q_heads, kv_heads},
                                      std::pair<std::int32_t, std::int32_t>{18, 1}}) {
          SCOPED_TRACE("decode heads " + std::to_string(dq) + "/" + std::to_string(dkv));
          const std::vector<std::int32_t> ctx = {700, 65, 1};
          PagedFixture f(rng, bs, dkv, hd, ctx, fmt);
          const std::int32_t seqs = 3;
          const std::vector<float> q = RandomBf16(rng, seqs * dq * hd);
          const std::vector<std::int32_t> q_rows = {2, 0, 1};
          const std::vector<float> want = ReferenceDecode(f, q, q_rows, ctx, dq, scale);
          DeviceBuffer d_q = Upload(ToBits(q)), d_rows = Upload(q_rows), d_ctx = Upload(ctx);
          const k::DecodeKernel kernel = k::DecodeKernel::kPipelined;
          const std::int32_t per_seq = k::decode_ctas_per_seq(kernel, dq, dkv);
          for (const k::DecodeSplitPlan& plan :
               {k::DecodeSplitPlan{704, 1}, k::plan_decode_splits(ctx, per_seq, 1 << 20, 64)}) {
            SCOPED_TRACE("partition " + std::to_string(plan.partition_tokens) + " x " +
                         std::to_string(plan.max_splits));
            DeviceBuffer out = Poisoned(q.size() * 2);
            DeviceBuffer ws =
                Poisoned(k::decode_workspace_floats(seqs, dq, hd, plan.max_splits) * 4);
            k::DecodeAttentionArgs a{f.view(),
                                     d_q.as<k::Bf16>(),
                                     out.as<k::Bf16>(),
                                     d_rows.as<std::int32_t>(),
                                     d_ctx.as<std::int32_t>(),
                                     seqs,
                                     dq,
                                     scale,
                                     plan,
                                     ws.as<float>(),
                                     700,
                                     kernel};
            k::paged_decode_attention(a, nullptr);
            ExpectClose(FromBits(Download<std::uint16_t>(out, q.size())), want, 4e-3, 1e-2,
                        "fp8 decode");
            a.kernel = k::DecodeKernel::kTiled;
            EXPECT_THROW(k::paged_decode_attention(a, nullptr), std::invalid_argument);
            a.kernel = kernel;
            a.kv.v_scale = 0.0f;
            EXPECT_THROW(k::paged_decode_attention(a, nullptr), std::invalid_argument);
          }
        }
        // Prefill: a chunk over a cached prefix, a fresh prompt, a one-token chunk.
        {
          const std::vector<std::int32_t> first = {300, 0, 90}, nq = {100, 70, 1};
          std::vector<std::int32_t> ctx, begin;
          std::int32_t rows = 0;
          for (std::size_t s = 0; s < nq.size(); ++s) {
            ctx.push_back(first[s] + nq[s]);
            begin.push_back(rows);
            rows += nq[s];
          }
          PagedFixture f(rng, bs, kv_heads, hd, ctx, fmt);
          const std::vector<float> q = RandomBf16(rng, rows * q_heads * hd);
          const std::vector<k::PrefillTile> tiles = k::plan_prefill_tiles(nq);
          DeviceBuffer d_q = Upload(ToBits(q)), d_begin = Upload(begin), d_nq = Upload(nq),
                       d_first = Upload(first), d_tiles = Upload(tiles);
          std::vector<float> want(q.size());
          for (std::size_t s = 0; s < nq.size(); ++s) {
            for (std::int32_t i = 0; i < nq[s]; ++i) {
              for (std::int32_t h = 0; h < q_heads; ++h) {
                const std::int64_t off = ((std::int64_t{begin[s]} + i) * q_heads + h) * hd;
                ReferenceAttention(f, static_cast<std::int32_t>(s), q.data() + off, h, q_heads,
                                   first[s] + i, scale, want.data() + off);
              }
            }
          }
          DeviceBuffer out = Poisoned(q.size() * 2);
          k::PrefillAttentionArgs a{f.view(),
                                    d_q.as<k::Bf16>(),
                                    out.as<k::Bf16>(),
                                    d_begin.as<std::int32_t>(),
                                    d_nq.as<std::int32_t>(),
                                    d_first.as<std::int32_t>(),
                                    d_tiles.as<k::PrefillTile>(),
                                    static_cast<std::int32_t>(tiles.size()),
                                    q_heads,
                                    scale,
                                    k::PrefillKernel::kFa2,
                                    {},
                                    nullptr,
                                    0};
          k::paged_prefill_attention(a, nullptr);
          ExpectClose(FromBits(Download<std::uint16_t>(out, q.size())), want, 4e-3, 1e-2,
                      "fp8 prefill");
          // Split-KV over the fp8 cache: two-tile splits (400 keys: 4 splits; v_scale applied
          // before the merge).
          DeviceBuffer ws(static_cast<std::size_t>(k::prefill_workspace_floats(
                              static_cast<std::int32_t>(tiles.size()), q_heads, hd, 4)) *
                          sizeof(float));
          a.split = {128, 4};
          a.workspace = ws.as<float>();
          a.longest_keys = 400;
          out = Poisoned(q.size() * 2);
          a.out = out.as<k::Bf16>();
          k::paged_prefill_attention(a, nullptr);
          const std::vector<std::uint16_t> split_bits = Download<std::uint16_t>(out, q.size());
          ExpectClose(FromBits(split_bits), want, 4e-3, 1e-2, "fp8 prefill, split");
          // The 128-row fa2 kernel, the head-packing one (4 heads x 16 rows) and wgmma over the
          // same cache: fa2's bits split (wgmma's on the emulator only, whose wgmma rounds as its
          // mma.sync), the reference's values unsplit.
          for (const k::PrefillKernel wide :
               {k::PrefillKernel::kFa2Wide, k::PrefillKernel::kFa2Gqa, k::PrefillKernel::kWgmma}) {
            if (!k::prefill_kernel_built(wide)) continue;
            SCOPED_TRACE(k::prefill_kernel_name(wide));
#if defined(SERVELAB_CUDA_EMU)
            const bool same_bits = true;
#else
            const bool same_bits = wide != k::PrefillKernel::kWgmma;
#endif
            const std::vector<k::PrefillTile> wt =
                k::plan_prefill_tiles(nq, k::prefill_tile_rows(wide));
            DeviceBuffer d_wt = Upload(wt);
            DeviceBuffer wws(static_cast<std::size_t>(k::prefill_workspace_floats(
                                 static_cast<std::int32_t>(wt.size()), q_heads, hd, 4,
                                 k::prefill_tile_rows(wide))) *
                             sizeof(float));
            k::PrefillAttentionArgs w = a;
            w.kernel = wide;
            w.tiles = d_wt.as<k::PrefillTile>();
            w.num_tiles = static_cast<std::int32_t>(wt.size());
            w.workspace = wws.as<float>();
            out = Poisoned(q.size() * 2);
            w.out = out.as<k::Bf16>();
            k::paged_prefill_attention(w, nullptr);
            const std::vector<std::uint16_t> wide_bits = Download<std::uint16_t>(out, q.size());
            ExpectClose(FromBits(wide_bits), want, 4e-3, 1e-2, "fp8 prefill, split");
            if (same_bits) {
              EXPECT_TRUE(wide_bits == split_bits)
                  << "fp8 prefill, split: " << k::prefill_kernel_name(wide) << " differs from fa2";
            }
            w.split = {};
            w.workspace = nullptr;
            out = Poisoned(q.size() * 2);
            w.out = out.as<k::Bf16>();
            k::paged_prefill_attention(w, nullptr);
            ExpectClose(FromBits(Download<std::uint16_t>(out, q.size())), want, 4e-3, 1e-2,
                        "fp8 prefill, unsplit");
          }
          a.kernel = k::PrefillKernel::kWmma;
          EXPECT_THROW(k::paged_prefill_attention(a, nullptr), std::invalid_argument);
        }
      }
    }
  }
#endif
}

TEST(GpuKernels, GemmMatchesFp32) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  Rng rng = Rng::stream(9, "gpu_kernels");
  const std::int32_t T = 5, in = 256, out = 96;
  const std::vector<float> x = RandomBf16(rng, T * in), w = RandomBf16(rng, out * in);
  DeviceBuffer d_x = Upload(ToBits(x)), d_w = Upload(ToBits(w));
  std::vector<float> base(T * out, 0.5f);
  DeviceBuffer y32 = Upload(base), y16 = Poisoned(T * out * 2);
  k::Gemm gemm;
  gemm.linear(d_x.as<k::Bf16>(), d_w.as<k::Bf16>(), y32.get(), k::Gemm::Out::kF32, T, in, out, 1.0f,
              nullptr);
  gemm.linear(d_x.as<k::Bf16>(), d_w.as<k::Bf16>(), y16.get(), k::Gemm::Out::kBf16, T, in, out,
              0.0f, nullptr);
  const std::vector<float> want = ReferenceLinear(x, w, T, in, out);
  std::vector<float> want_acc(want);
  for (float& v : want_acc) v += 0.5f;
  ExpectClose(Download<float>(y32, want.size()), want_acc, 1e-3, 1e-4, "gemm fp32 accumulate");
  ExpectClose(FromBits(Download<std::uint16_t>(y16, want.size())), want, 1e-2, 8e-3, "gemm bf16");
#endif
}

// The skinny decode GEMM (kernels/gemm_skinny.h) on shapes that reach every path: 1, 8, 16 and
// 32 tokens (one, two and four 8-token tiles, partly empty ones among them), `out` not a multiple
// of the 128-row block (40, 300), `in` of 1 to 16 chunks; each with one split (no workspace), the
// plan's splits (with a workspace) and forced ones: 3 (chunk ranges of unequal length), 16
// (more splits than chunks: clamped). Against the double-precision reference: fp32 y
// accumulated into (beta 1), fp32 y over NaN with beta 0 (never read), bf16 y; the same launch
// twice gives the same bits, and every row-block counter is zero again after each launch (a
// counter left behind would make the next launch's sum early or never).
TEST(GpuKernels, SkinnyGemmMatchesReference) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  Rng rng = Rng::stream(19, "gpu_kernels.skinny");
  struct Shape {
    std::int32_t tokens, in, out;
  };
  const std::vector<Shape> shapes = {{1, 256, 64}, {5, 512, 96},   {8, 288, 300}, {13, 256, 64},
                                     {16, 32, 33}, {32, 512, 160}, {27, 160, 16}, {3, 96, 40}};
  constexpr std::int32_t kCounters = 8;
  DeviceBuffer partials = Poisoned(std::size_t{1} << 20), counters(kCounters * 4);
  k::fill_bytes(counters.get(), 0, counters.bytes());
  for (std::size_t ci = 0; ci < shapes.size(); ++ci) {
    const auto [T, in, out] = shapes[ci];
    const std::vector<float> x = RandomBf16(rng, T * in), w = RandomBf16(rng, out * in);
    DeviceBuffer d_x = Upload(ToBits(x)), d_w = Upload(ToBits(w));
    const std::vector<float> want = ReferenceLinear(x, w, T, in, out);
    std::vector<float> base(T * out);
    for (std::size_t i = 0; i < base.size(); ++i) base[i] = 0.25f * static_cast<float>(i % 7);
    std::vector<float> want_acc(want);
    for (std::size_t i = 0; i < want_acc.size(); ++i) want_acc[i] += base[i];
    for (const std::int32_t forced : {-1, 0, 3, 16}) {  // -1: no workspace
      SCOPED_TRACE("tokens " + std::to_string(T) + " in " + std::to_string(in) + " out " +
                   std::to_string(out) + " forced splits " + std::to_string(forced));
      DeviceBuffer acc = Upload(base), nan32 = Poisoned(T * out * 4), y16 = Poisoned(T * out * 2);
      k::SkinnyGemmArgs a{
          d_x.as<k::Bf16>(), d_w.as<k::Bf16>(), acc.get(), true, T, in, out, 1.0f, false};
      if (forced >= 0) {
        a.partials = partials.as<float>();
        a.partial_bytes = partials.bytes();
        a.counters = counters.as<unsigned>();
        a.counter_count = kCounters;
        a.forced_splits = forced;
      }
      ASSERT_TRUE(k::skinny_gemm_fits(a));
      const k::SkinnyPlan plan = k::skinny_plan_for(a);
      const std::int32_t chunks = in / 32;
      EXPECT_EQ(plan.splits, forced < 0 ? 1 : forced == 0 ? plan.splits : std::min(forced, chunks));
      k::skinny_linear(a, nullptr);
      a.y = nan32.get();
      a.beta = 0.0f;
      k::skinny_linear(a, nullptr);
      a.y = y16.get();
      a.y_f32 = false;
      k::skinny_linear(a, nullptr);
      ExpectClose(Download<float>(acc, want.size()), want_acc, 1e-3, 1e-4, "fp32, beta 1");
      const std::vector<float> y32 = Download<float>(nan32, want.size());
      ExpectClose(y32, want, 1e-3, 1e-4, "fp32, beta 0 over NaN");
      ExpectClose(FromBits(Download<std::uint16_t>(y16, want.size())), want, 1e-2, 8e-3, "bf16");
      DeviceBuffer again = Poisoned(T * out * 4);
      a.y = again.get();
      a.y_f32 = true;
      k::skinny_linear(a, nullptr);
      const std::vector<float> y32b = Download<float>(again, want.size());
      EXPECT_EQ(std::memcmp(y32.data(), y32b.data(), y32.size() * 4), 0) << "not deterministic";
      for (const unsigned c : Download<unsigned>(counters, kCounters)) EXPECT_EQ(c, 0U);
    }
  }
#endif
}

// swiglu: the skinny kernel reading gate_up itself gives silu_mul-then-linear's bits exactly
// (both round silu(g) * u to bf16 the same way), and Gemm::swiglu_linear through cuBLAS agrees
// within the GEMM tolerance. Gemm with the skinny kernel chosen still runs cuBLAS where the
// skinny one does not fit (40 tokens; in = 48), with the same results.
TEST(GpuKernels, SkinnyGemmFusedSwigluAndFallback) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  Rng rng = Rng::stream(20, "gpu_kernels.skinny_swiglu");
  for (const std::int32_t T : {3, 24}) {
    SCOPED_TRACE("tokens " + std::to_string(T));
    const std::int32_t in = 192, out = 72;
    const std::vector<float> gu = RandomBf16(rng, T * 2 * in, 2.0), w = RandomBf16(rng, out * in);
    DeviceBuffer d_gu = Upload(ToBits(gu)), d_w = Upload(ToBits(w)), act = Poisoned(T * in * 2);
    k::silu_mul(d_gu.as<k::Bf16>(), act.as<k::Bf16>(), T, in, nullptr);
    DeviceBuffer two_step = Poisoned(T * out * 4), fused = Poisoned(T * out * 4);
    k::skinny_linear(
        {act.as<k::Bf16>(), d_w.as<k::Bf16>(), two_step.get(), true, T, in, out, 0.0f, false},
        nullptr);
    k::Gemm skinny;
    skinny.set_kernel(k::GemmKernel::kSkinny);
    const std::optional<k::SkinnyPlan> plan = skinny.skinny_plan(T, in, out, true);
    ASSERT_TRUE(plan.has_value());
    EXPECT_EQ(plan->row_blocks, 1);
    EXPECT_EQ(plan->chunks, in / 32);
    EXPECT_EQ(plan->splits, 1) << "no workspace: one split";
    DeviceBuffer unused = Poisoned(16);
    skinny.swiglu_linear(d_gu.as<k::Bf16>(), unused.as<k::Bf16>(), d_w.as<k::Bf16>(), fused.get(),
                         k::Gemm::Out::kF32, T, in, out, 0.0f, nullptr);
    const std::vector<float> a = Download<float>(two_step, T * out),
                             b = Download<float>(fused, T * out);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "fused swiglu differs";
    k::Gemm cublas;
    DeviceBuffer act2 = Poisoned(T * in * 2), via_cublas = Poisoned(T * out * 4);
    cublas.swiglu_linear(d_gu.as<k::Bf16>(), act2.as<k::Bf16>(), d_w.as<k::Bf16>(),
                         via_cublas.get(), k::Gemm::Out::kF32, T, in, out, 0.0f, nullptr);
    ExpectClose(Download<float>(via_cublas, T * out), b, 1e-3, 1e-4, "cuBLAS against skinny");
  }
  for (const auto& [T, in] : {std::pair{40, 256}, std::pair{4, 48}}) {
    SCOPED_TRACE("fallback: tokens " + std::to_string(T) + " in " + std::to_string(in));
    const std::int32_t out = 24;
    const std::vector<float> x = RandomBf16(rng, T * in), w = RandomBf16(rng, out * in);
    DeviceBuffer d_x = Upload(ToBits(x)), d_w = Upload(ToBits(w));
    EXPECT_FALSE(k::skinny_gemm_fits(
        {d_x.as<k::Bf16>(), d_w.as<k::Bf16>(), nullptr, true, T, in, out, 0.0f, false}));
    EXPECT_THROW(k::skinny_linear(
                     {d_x.as<k::Bf16>(), d_w.as<k::Bf16>(), nullptr, true, T, in, out, 0.0f, false},
                     nullptr),
                 std::invalid_argument);
    DeviceBuffer y1 = Poisoned(T * out * 4), y2 = Poisoned(T * out * 4);
    k::Gemm skinny, cublas;
    skinny.set_kernel(k::GemmKernel::kSkinny);
    EXPECT_FALSE(skinny.skinny_plan(T, in, out, false).has_value()) << "the skinny kernel's plan";
    EXPECT_FALSE(cublas.skinny_plan(4, 256, out, false).has_value()) << "cuBLAS chosen";
    skinny.linear(d_x.as<k::Bf16>(), d_w.as<k::Bf16>(), y1.get(), k::Gemm::Out::kF32, T, in, out,
                  0.0f, nullptr);
    cublas.linear(d_x.as<k::Bf16>(), d_w.as<k::Bf16>(), y2.get(), k::Gemm::Out::kF32, T, in, out,
                  0.0f, nullptr);
    const std::vector<float> a = Download<float>(y1, T * out), b = Download<float>(y2, T * out);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "fallback is not cuBLAS";
  }
#endif
}

// cuBLASLt with timed algorithms (kernels/gemm_lt.h, GemmKernel::kCublasLt): the token counts
// named by set_lt_tokens take it, each (tokens, in, out, output type, beta != 0) shape tuned once
// on its first call (every candidate timed, the chosen one no slower than the heuristic's first)
// without accumulating into the caller's y; other counts run cuBLAS, bit for bit. Against the
// reference: fp32 accumulated into, fp32 over NaN, bf16. A second call of a shape reuses its
// algorithm (same bits), and so does another Gemm of the process (nothing timed again); an input
// less aligned than the deciding call's runs cuBLAS. A shape
// first met during stream capture keeps the heuristic's first candidate untimed, and the
// replayed graph and an eager call after it give the same bits. Skipped under compute-sanitizer
// on a GPU (below).
TEST(GpuKernels, CublasLtGemmTunesEachShapeOnce) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
#if !SERVELAB_CUDA_EMU
  // compute-sanitizer (gpu-check's reduced run) checks the project's kernels; this test runs only
  // cuBLASLt's (16 candidates a shape, some of which may synchronise through their workspace in
  // ways racecheck reports), and its host logic runs under the emulator's sanitizer stage.
  if (ReducedRun()) GTEST_SKIP() << "SERVELAB_SANITIZER_RUN: cuBLASLt's own kernels only";
#endif
  Rng rng = Rng::stream(23, "gpu_kernels.lt");
  const std::int32_t in = 256, out = 96;
  k::DeviceBuffer workspace(k::Gemm::kRecommendedWorkspaceBytes);
  k::Gemm lt, cublas;
  lt.set_workspace(workspace.get(), workspace.bytes());
  cublas.set_workspace(workspace.get(), workspace.bytes());
  lt.set_kernel(k::GemmKernel::kCublasLt);
  lt.set_lt_tokens({8, 1, 2});
  const std::int64_t tunings_before = k::LtGemm::process_tunings();
  const std::vector<float> w = RandomBf16(rng, out * in);
  DeviceBuffer d_w = Upload(ToBits(w));
  for (const std::int32_t T : {1, 8, 5}) {
    SCOPED_TRACE("tokens " + std::to_string(T));
    const std::vector<float> x = RandomBf16(rng, T * in);
    DeviceBuffer d_x = Upload(ToBits(x));
    const std::vector<float> first = CheckLinearThreeWays(lt, x, d_x, w, d_w, T, in, out);
    const auto run = [&](k::Gemm& g, void* y) {
      g.linear(d_x.as<k::Bf16>(), d_w.as<k::Bf16>(), y, k::Gemm::Out::kF32, T, in, out, 0.0f,
               nullptr);
    };
    DeviceBuffer again = Poisoned(T * out * 4), plain = Poisoned(T * out * 4);
    run(lt, again.get());
    run(cublas, plain.get());
    const std::vector<float> second = Download<float>(again, first.size()),
                             via_cublas = Download<float>(plain, first.size());
    EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * 4), 0)
        << "a shape's second call differs";
    if (T == 5) {
      EXPECT_EQ(std::memcmp(first.data(), via_cublas.data(), first.size() * 4), 0)
          << "a count outside set_lt_tokens must run cuBLAS";
    }
  }
  const std::vector<k::LtChoice> tuned = lt.lt_choices();
  ASSERT_EQ(tuned.size(), 6u) << "tokens 1 and 8 x (fp32 accumulate, fp32, bf16)";
  EXPECT_EQ(k::LtGemm::process_tunings() - tunings_before, 6);
  for (const k::LtChoice& c : tuned) {
    SCOPED_TRACE("tokens " + std::to_string(c.shape.tokens) +
                 (c.shape.out_f32 ? " fp32" : " bf16") +
                 (c.shape.accumulate ? " beta 1" : " beta 0"));
    EXPECT_NE(c.shape.tokens, 5);
    EXPECT_TRUE(c.tuned);
    EXPECT_GE(c.candidates, 1);
    EXPECT_EQ(c.timed, c.candidates);
    EXPECT_GE(c.chosen, 0);
    EXPECT_LT(c.chosen, c.candidates);
    EXPECT_GT(c.first_us, 0.0f);
    EXPECT_LE(c.chosen_us, c.first_us);
    EXPECT_GE(c.split_k, 1);
  }

  {  // Another Gemm of the process takes the decisions made: the same bits, nothing timed.
    const std::int32_t T = 8;
    const std::vector<float> x = RandomBf16(rng, T * in);
    DeviceBuffer d_x = Upload(ToBits(x)), y1 = Poisoned(T * out * 4), y2 = Poisoned(T * out * 4);
    k::Gemm other;
    other.set_workspace(workspace.get(), workspace.bytes());
    other.set_kernel(k::GemmKernel::kCublasLt);
    other.linear(d_x.as<k::Bf16>(), d_w.as<k::Bf16>(), y1.get(), k::Gemm::Out::kF32, T, in, out,
                 0.0f, nullptr);
    lt.linear(d_x.as<k::Bf16>(), d_w.as<k::Bf16>(), y2.get(), k::Gemm::Out::kF32, T, in, out, 0.0f,
              nullptr);
    const std::vector<float> a = Download<float>(y1, T * out), b = Download<float>(y2, T * out);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "two Gemms chose differently";
    EXPECT_EQ(k::LtGemm::process_tunings() - tunings_before, 6);
    ASSERT_EQ(other.lt_choices().size(), 1u);
    EXPECT_TRUE(other.lt_choices()[0].tuned);
    // An input less aligned than the decision's (2 bytes: one bf16 in) runs cuBLAS: its bits.
    std::vector<std::uint16_t> shifted = ToBits(x);
    shifted.insert(shifted.begin(), 0);
    DeviceBuffer d_shifted = Upload(shifted), y3 = Poisoned(T * out * 4),
                 y4 = Poisoned(T * out * 4);
    other.linear(d_shifted.as<k::Bf16>() + 1, d_w.as<k::Bf16>(), y3.get(), k::Gemm::Out::kF32, T,
                 in, out, 0.0f, nullptr);
    cublas.linear(d_shifted.as<k::Bf16>() + 1, d_w.as<k::Bf16>(), y4.get(), k::Gemm::Out::kF32, T,
                  in, out, 0.0f, nullptr);
    const std::vector<float> c = Download<float>(y3, T * out), e = Download<float>(y4, T * out);
    EXPECT_EQ(std::memcmp(c.data(), e.data(), c.size() * 4), 0) << "misaligned: not cuBLAS";
    ExpectClose(c, ReferenceLinear(x, w, T, in, out), 1e-3, 1e-4, "misaligned input");
  }

  // Tokens 2, met first inside a capture: untimed, candidate 0; replay == eager after it.
  const std::int32_t T = 2;
  const std::vector<float> x = RandomBf16(rng, T * in);
  DeviceBuffer d_x = Upload(ToBits(x)), graph_y = Poisoned(T * out * 4),
               eager_y = Poisoned(T * out * 4);
  k::OwnedStream stream = k::OwnedStream::create();
  k::CudaGraph graph;
  graph.begin_capture(stream.get());
  lt.linear(d_x.as<k::Bf16>(), d_w.as<k::Bf16>(), graph_y.get(), k::Gemm::Out::kF32, T, in, out,
            0.0f, stream.get());
  graph.end_capture();
  graph.launch(stream.get());
  lt.linear(d_x.as<k::Bf16>(), d_w.as<k::Bf16>(), eager_y.get(), k::Gemm::Out::kF32, T, in, out,
            0.0f, stream.get());
  k::synchronize(stream.get());
  const std::vector<float> replayed = Download<float>(graph_y, T * out),
                           eager = Download<float>(eager_y, T * out);
  ExpectClose(replayed, ReferenceLinear(x, w, T, in, out), 1e-3, 1e-4, "replayed");
  EXPECT_EQ(std::memcmp(replayed.data(), eager.data(), eager.size() * 4), 0)
      << "the graph and the eager call after it ran different algorithms";
  const std::vector<k::LtChoice> after = lt.lt_choices();
  ASSERT_EQ(after.size(), 7u);
  const auto captured = std::find_if(after.begin(), after.end(),
                                     [](const k::LtChoice& c) { return c.shape.tokens == 2; });
  ASSERT_NE(captured, after.end());
  EXPECT_FALSE(captured->tuned);
  EXPECT_EQ(captured->chosen, 0);
  EXPECT_EQ(captured->timed, 0);

  // The decisions as a file: a header, this process's device and cuBLASLt, a line a shape (29
  // fields, naming lt); loading it adds nothing here (every shape is decided); a file from another
  // device, of the cuBLASLt-only format before it, or with a malformed line is refused, naming the
  // file and the line.
  const std::string file = ::testing::TempDir() + "servelab_lt_decisions.txt";
  k::LtGemm::save_decisions(file);
  std::vector<std::string> lines;
  {
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  ASSERT_GE(lines.size(), 2u + after.size());
  EXPECT_EQ(lines[0], "# servelab GEMM decisions v2");
  EXPECT_EQ(lines[1].rfind("device ", 0), 0u) << lines[1];
  for (std::size_t i = 2; i < lines.size(); ++i) {
    std::istringstream f(lines[i]);
    std::vector<std::string> fields{std::istream_iterator<std::string>(f), {}};
    ASSERT_EQ(fields.size(), 29u) << lines[i];
    if (fields[6] == "0") {
      EXPECT_EQ(fields[17], "lt") << lines[i];
    }
  }
  EXPECT_EQ(k::LtGemm::load_decisions(file), 0);
  const auto refused = [&](const std::vector<std::string>& text, const std::string& want) {
    {
      std::ofstream out(file, std::ios::trunc);
      for (const std::string& l : text) out << l << "\n";
    }
    try {
      k::LtGemm::load_decisions(file);
      ADD_FAILURE() << "accepted a file wanting '" << want << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  refused({lines[0], "device elsewhere | cublaslt 1"}, "delete it to time the shapes again");
  refused({"# another file"}, file + ": line 1: expected");
  refused({"# servelab cuBLASLt decisions v1"}, "older servelab");
  refused({lines[0], lines[1], lines[2].substr(0, lines[2].rfind(' '))}, file + ": line 3:");
  std::remove(file.c_str());
#endif
}

// GemmKernel::kAuto (kernels/gemm.h, kernels/gemm_lt.h decide_auto): for the tuned token counts
// each shape (the SwiGLU down projection apart) goes to the fastest of cuBLAS, cuBLASLt's
// candidates and the skinny kernel's split counts, timed once: every family timed, the winner's
// time the lowest, the results those of the reference (fp32 accumulated into, fp32 over NaN,
// bf16, SwiGLU) and of the kernel named (cuBLAS's and the skinny kernel's bits), a second call the
// same bits. A decisions file names the kernel of a shape not yet decided and the calls follow
// it (skinny at 3 splits, cuBLAS); a shape first met during capture runs cuBLAS, untimed. The
// emulator's timings are the CPU's: which kernel wins here says nothing of a GPU.
TEST(GpuKernels, AutoGemmRunsTheFastestKernelOfEachShape) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
#if !SERVELAB_CUDA_EMU
  if (ReducedRun()) GTEST_SKIP() << "SERVELAB_SANITIZER_RUN: cuBLASLt's own kernels only";
#endif
  Rng rng = Rng::stream(24, "gpu_kernels.auto");
  const std::int32_t in = 256, out = 96;
  k::DeviceBuffer workspace(k::Gemm::kRecommendedWorkspaceBytes);
  k::DeviceBuffer counters(sizeof(unsigned) * k::Gemm::kSkinnyCounters);
  k::fill_bytes(counters.get(), 0, counters.bytes());
  k::Gemm tuned, cublas;
  tuned.set_workspace(workspace.get(), workspace.bytes());
  cublas.set_workspace(workspace.get(), workspace.bytes());
  tuned.set_kernel(k::GemmKernel::kAuto);
  tuned.set_lt_tokens({1, 8, 2, 4, 3});
  const std::vector<float> w = RandomBf16(rng, out * in);
  DeviceBuffer d_w = Upload(ToBits(w));
  // The bits of one kernel: cuBLAS, or the skinny kernel at `splits` with the Gemm's workspace.
  const auto cublas_bits = [&](const DeviceBuffer& x, std::int32_t T) {
    DeviceBuffer y = Poisoned(T * out * 4);
    cublas.linear(x.as<k::Bf16>(), d_w.as<k::Bf16>(), y.get(), k::Gemm::Out::kF32, T, in, out, 0.0f,
                  nullptr);
    return Download<float>(y, T * out);
  };
  const auto skinny_bits = [&](const DeviceBuffer& x, std::int32_t T, std::int32_t splits) {
    DeviceBuffer y = Poisoned(T * out * 4);
    k::SkinnyGemmArgs a{x.as<k::Bf16>(), d_w.as<k::Bf16>(), y.get(), true, T, in, out, 0.0f, false};
    a.partials = workspace.as<float>();
    a.partial_bytes = workspace.bytes();
    a.counters = counters.as<unsigned>();
    a.counter_count = k::Gemm::kSkinnyCounters;
    a.forced_splits = splits;
    k::skinny_linear(a, nullptr);
    return Download<float>(y, T * out);
  };
  const auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
  };
  const std::int64_t tunings_before = k::LtGemm::process_tunings();
  for (const std::int32_t T : {1, 8}) {
    SCOPED_TRACE("tokens " + std::to_string(T));
    const std::vector<float> x = RandomBf16(rng, T * in);
    DeviceBuffer d_x = Upload(ToBits(x));
    const std::vector<float> first = CheckLinearThreeWays(tuned, x, d_x, w, d_w, T, in, out);
    DeviceBuffer again = Poisoned(T * out * 4);
    tuned.linear(d_x.as<k::Bf16>(), d_w.as<k::Bf16>(), again.get(), k::Gemm::Out::kF32, T, in, out,
                 0.0f, nullptr);
    EXPECT_TRUE(same(first, Download<float>(again, first.size()))) << "a second call differs";
    const std::vector<k::LtChoice> choices = tuned.lt_choices();
    const auto c = std::find_if(choices.begin(), choices.end(), [&](const k::LtChoice& c) {
      return c.shape.tokens == T && c.shape.out_f32 && !c.shape.accumulate;
    });
    ASSERT_NE(c, choices.end());
    if (c->kernel == k::TunedKernel::kCublas) {
      EXPECT_TRUE(same(first, cublas_bits(d_x, T)));
    }
    if (c->kernel == k::TunedKernel::kSkinny) {
      EXPECT_TRUE(same(first, skinny_bits(d_x, T, c->skinny_splits)));
    }
  }
  // SwiGLU: gate_up [T][2 in] into the down projection, decided apart from the plain shape.
  const std::int32_t T = 8;
  const std::vector<float> gu = RandomBf16(rng, T * 2 * in, 2.0);
  DeviceBuffer d_gu = Upload(ToBits(gu)), act = Poisoned(T * in * 2), fused = Poisoned(T * out * 4);
  tuned.swiglu_linear(d_gu.as<k::Bf16>(), act.as<k::Bf16>(), d_w.as<k::Bf16>(), fused.get(),
                      k::Gemm::Out::kF32, T, in, out, 0.0f, nullptr);
  {
    DeviceBuffer act2 = Poisoned(T * in * 2), y = Poisoned(T * out * 4);
    cublas.swiglu_linear(d_gu.as<k::Bf16>(), act2.as<k::Bf16>(), d_w.as<k::Bf16>(), y.get(),
                         k::Gemm::Out::kF32, T, in, out, 0.0f, nullptr);
    ExpectClose(Download<float>(fused, T * out), Download<float>(y, T * out), 1e-3, 1e-4,
                "SwiGLU against cuBLAS's");
  }
  const std::vector<k::LtChoice> choices = tuned.lt_choices();
  ASSERT_EQ(choices.size(), 7u) << "tokens 1 and 8 x (fp32 accumulate, fp32, bf16), SwiGLU";
  EXPECT_EQ(k::LtGemm::process_tunings() - tunings_before, 7);
  for (const k::LtChoice& c : choices) {
    SCOPED_TRACE("tokens " + std::to_string(c.shape.tokens) + (c.shape.swiglu ? " swiglu" : "") +
                 (c.shape.out_f32 ? " fp32" : " bf16") + (c.shape.accumulate ? " beta 1" : ""));
    EXPECT_TRUE(c.shape.any_kernel);
    EXPECT_TRUE(c.tuned);
    EXPECT_GE(c.candidates, 1);
    EXPECT_EQ(c.timed, c.candidates);
    EXPECT_GT(c.chosen_us, 0.0f);
    EXPECT_GT(c.cublas_us, 0.0f);
    EXPECT_GT(c.skinny_us, 0.0f);
    const float best = std::min({c.chosen_us, c.cublas_us, c.skinny_us});
    const float winner = c.kernel == k::TunedKernel::kCublasLt ? c.chosen_us
                         : c.kernel == k::TunedKernel::kCublas ? c.cublas_us
                                                               : c.skinny_us;
    EXPECT_EQ(winner, best) << k::tuned_kernel_name(c.kernel) << " is not the fastest";
    EXPECT_EQ(c.skinny_splits >= 1, c.kernel == k::TunedKernel::kSkinny);
    EXPECT_LE(c.skinny_splits, in / 32);
  }

  // A decisions file names the kernels of tokens 2 (skinny, 3 splits) and 4 (cuBLAS).
  const std::string file = ::testing::TempDir() + "servelab_auto_decisions.txt";
  k::LtGemm::save_decisions(file);
  std::vector<std::string> lines;
  {
    std::ifstream f(file);
    for (std::string line; std::getline(f, line);) lines.push_back(line);
  }
  ASSERT_GE(lines.size(), 2u + choices.size()) << "every decision of the process";
  const std::string tail = " 0 1 " + std::to_string(workspace.bytes()) + " 256 0 1 0 0 -1 1 0 0 ";
  std::string algo;
  for (int i = 0; i < 8; ++i) algo += " 0000000000000000";
  {
    std::ofstream f(file, std::ios::trunc);
    f << lines[0] << "\n" << lines[1] << "\n";
    f << "2 " << in << " " << out << " f32 0" << tail << "skinny 3 0 0" << algo << "\n";
    f << "4 " << in << " " << out << " f32 0" << tail << "cublas 0 0 0" << algo << "\n";
  }
  EXPECT_EQ(k::LtGemm::load_decisions(file), 2);
  std::remove(file.c_str());
  for (const auto& [n, kernel] :
       {std::pair{2, k::TunedKernel::kSkinny}, std::pair{4, k::TunedKernel::kCublas}}) {
    SCOPED_TRACE("tokens " + std::to_string(n) + " from the file");
    const std::vector<float> x = RandomBf16(rng, n * in);
    DeviceBuffer d_x = Upload(ToBits(x)), y = Poisoned(n * out * 4);
    tuned.linear(d_x.as<k::Bf16>(), d_w.as<k::Bf16>(), y.get(), k::Gemm::Out::kF32, n, in, out,
                 0.0f, nullptr);
    const std::vector<float> got = Download<float>(y, n * out);
    EXPECT_TRUE(same(
        got, kernel == k::TunedKernel::kSkinny ? skinny_bits(d_x, n, 3) : cublas_bits(d_x, n)));
    ExpectClose(got, ReferenceLinear(x, w, n, in, out), 1e-3, 1e-4, "from the file");
  }
  EXPECT_EQ(k::LtGemm::process_tunings() - tunings_before, 7) << "loaded shapes are not timed";

  // Tokens 3, met first inside a capture: cuBLAS, untimed; the replay and an eager call agree.
  const std::vector<float> x = RandomBf16(rng, 3 * in);
  DeviceBuffer d_x = Upload(ToBits(x)), graph_y = Poisoned(3 * out * 4);
  k::OwnedStream stream = k::OwnedStream::create();
  k::CudaGraph graph;
  graph.begin_capture(stream.get());
  tuned.linear(d_x.as<k::Bf16>(), d_w.as<k::Bf16>(), graph_y.get(), k::Gemm::Out::kF32, 3, in, out,
               0.0f, stream.get());
  graph.end_capture();
  graph.launch(stream.get());
  k::synchronize(stream.get());
  EXPECT_TRUE(same(Download<float>(graph_y, 3 * out), cublas_bits(d_x, 3)));
  const std::vector<k::LtChoice> after = tuned.lt_choices();
  const auto captured = std::find_if(after.begin(), after.end(),
                                     [](const k::LtChoice& c) { return c.shape.tokens == 3; });
  ASSERT_NE(captured, after.end());
  EXPECT_FALSE(captured->tuned);
  EXPECT_EQ(captured->kernel, k::TunedKernel::kCublas);
#endif
}

// The LoRA gather kernels (kernels/lora.h) over a step where rows of three adapters (ranks 8, 4
// and 12: the 16-byte and the scalar B paths) interleave with rows under none, on each group the
// executor launches: q, k, v from a strided input into fp32 column slices; gate, up into a bf16
// output; down alone into an fp32 output at a column offset. Against the double-precision
// reference: adapted rows get base + delta, the others keep their bits; the same launches twice
// give the same bits; the launchers refuse bad groups.
TEST(GpuKernels, LoraGatherMatchesReference) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  Rng rng = Rng::stream(23, "gpu_kernels.lora");
  const std::int32_t H = 64, Q = 64, KV = 32, I = 96, layers = 2, layer = 1, T = 7;
  const k::LoraShape shape = k::llama_lora_shape(H, Q, KV, I);
  const std::int32_t ranks[3] = {8, 4, 12};
  std::vector<std::vector<float>> adapters;
  std::vector<DeviceBuffer> d_adapters;
  for (const std::int32_t r : ranks) {
    adapters.push_back(RandomBf16(rng, static_cast<std::size_t>(shape.elements(r, layers)), 0.3));
    d_adapters.push_back(Upload(ToBits(adapters.back())));
  }
  // (row, adapter): rows 1 and 4 have none.
  const std::vector<std::pair<std::int32_t, int>> placed = {{0, 0}, {2, 1}, {3, 0}, {5, 2}, {6, 0}};
  std::vector<k::LoraRow> rows;
  for (const auto& [row, a] : placed) rows.push_back({d_adapters[a].as<k::Bf16>(), row, ranks[a]});
  DeviceBuffer d_rows = Upload(rows);
  DeviceBuffer tmp(static_cast<std::size_t>(rows.size()) * 3 * 12 * sizeof(float));
  struct Group {
    int first, count;
    std::int32_t ld_in, ld_out, col0;
    bool f32;
  };
  const Group groups[] = {
      {0, 3, H + 8, Q + 2 * KV, 0, true}, {4, 2, H, 2 * I, 0, false}, {6, 1, I, H + 16, 8, true}};
  for (const Group& gr : groups) {
    SCOPED_TRACE("targets from " + std::to_string(gr.first));
    const std::int32_t in_dim = shape.in[gr.first];
    const std::vector<float> x = RandomBf16(rng, static_cast<std::size_t>(T) * gr.ld_in);
    std::vector<float> base = RandomBf16(rng, static_cast<std::size_t>(T) * gr.ld_out);
    DeviceBuffer d_x = Upload(ToBits(x));
    std::vector<float> want = base;
    for (const auto& [row, a] : placed) {
      const std::vector<float>& w = adapters[static_cast<std::size_t>(a)];
      const std::int32_t r = ranks[a];
      std::int32_t col = gr.col0;
      for (int t = gr.first; t < gr.first + gr.count; ++t) {
        const float* A = w.data() + shape.a_offset(r, layer, t);
        const float* B = w.data() + shape.b_offset(r, layer, t);
        std::vector<double> v(static_cast<std::size_t>(r));
        for (std::int32_t j = 0; j < r; ++j) {
          for (std::int32_t c = 0; c < in_dim; ++c) {
            v[j] += double{x[static_cast<std::size_t>(row) * gr.ld_in + c]} * A[j * in_dim + c];
          }
        }
        for (std::int32_t n = 0; n < shape.out[t]; ++n) {
          double d = 0;
          for (std::int32_t j = 0; j < r; ++j) d += v[j] * B[n * r + j];
          want[static_cast<std::size_t>(row) * gr.ld_out + col + n] += static_cast<float>(d);
        }
        col += shape.out[t];
      }
    }
    k::LoraGroupArgs g;
    g.rows = d_rows.as<k::LoraRow>();
    g.num_rows = static_cast<std::int32_t>(rows.size());
    g.shape = shape;
    g.layer = layer;
    g.first_target = gr.first;
    g.num_targets = gr.count;
    g.tmp = tmp.as<float>();
    g.max_rank = 12;
    std::vector<std::vector<std::uint8_t>> runs;
    for (int run = 0; run < 2; ++run) {
      DeviceBuffer out = gr.f32 ? Upload(base) : Upload(ToBits(base));
      k::lora_shrink(g, d_x.as<k::Bf16>(), gr.ld_in, nullptr);
      k::lora_expand(g, out.get(), gr.f32, gr.ld_out, gr.col0, nullptr);
      const std::vector<float> got = gr.f32 ? Download<float>(out, base.size())
                                            : FromBits(Download<std::uint16_t>(out, base.size()));
      if (gr.f32) {
        ExpectClose(got, want, 1e-3, 1e-4, "fp32 output");
      } else {
        ExpectClose(got, want, 1e-2, 8e-3, "bf16 output");
      }
      for (const std::int32_t untouched : {1, 4}) {
        for (std::int32_t c = 0; c < gr.ld_out; ++c) {
          const std::size_t at = static_cast<std::size_t>(untouched) * gr.ld_out + c;
          ASSERT_EQ(got[at], base[at]) << "row " << untouched << " column " << c << " changed";
        }
      }
      runs.emplace_back(reinterpret_cast<const std::uint8_t*>(got.data()),
                        reinterpret_cast<const std::uint8_t*>(got.data() + got.size()));
    }
    EXPECT_EQ(runs[0], runs[1]) << "not deterministic";
  }
  k::LoraGroupArgs bad;
  bad.rows = d_rows.as<k::LoraRow>();
  bad.num_rows = 1;
  bad.shape = shape;
  bad.tmp = tmp.as<float>();
  bad.max_rank = 8;
  DeviceBuffer d_x = Upload(ToBits(RandomBf16(rng, static_cast<std::size_t>(T) * H)));
  bad.num_targets = 4;
  EXPECT_THROW(k::lora_shrink(bad, d_x.as<k::Bf16>(), H, nullptr), std::invalid_argument);
  bad.num_targets = 3;
  bad.max_rank = 0;
  EXPECT_THROW(k::lora_shrink(bad, d_x.as<k::Bf16>(), H, nullptr), std::invalid_argument);
  bad.max_rank = 8;
  bad.first_target = 5;  // up and down read inputs of different widths
  bad.num_targets = 2;
  EXPECT_THROW(k::lora_shrink(bad, d_x.as<k::Bf16>(), H, nullptr), std::invalid_argument);
  bad.first_target = 3;
  bad.num_targets = 1;
  EXPECT_THROW(k::lora_expand(bad, d_x.get(), true, H, 8, nullptr), std::invalid_argument);
  bad.shape.out[3] = 60;  // not a multiple of 8
  EXPECT_THROW(k::lora_expand(bad, d_x.get(), true, 64, 0, nullptr), std::invalid_argument);
#endif
}

// mask_logits (kernels/sampling.h): exactly the listed (row, token) logits become -inf; a token
// outside the vocabulary is skipped.
TEST(GpuKernels, MaskLogitsSetsTheListedTokensToMinusInfinity) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const std::int32_t rows = 3, vocab = 50;
  std::vector<float> logits(rows * vocab);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 17) - 8.0f;
  const std::vector<std::int32_t> r = {0, 2, 2, 1}, t = {5, 7, 49, 50};
  DeviceBuffer d = Upload(logits), dr = Upload(r), dt = Upload(t);
  k::mask_logits(d.as<float>(), vocab, dr.as<std::int32_t>(), dt.as<std::int32_t>(), 4, nullptr);
  std::vector<float> want = logits;
  for (const std::size_t i : {std::size_t{5}, std::size_t{2 * 50 + 7}, std::size_t{2 * 50 + 49}}) {
    want[i] = -std::numeric_limits<float>::infinity();
  }
  EXPECT_EQ(Download<float>(d, logits.size()), want);
#endif
}

// keep_allowed_logits (kernels/sampling.h): the listed rows keep the logits of the tokens their
// mask allows and lose every other (-inf), across the CTAs that split a row (4,096 tokens each;
// the last word of the 9,000 partly past the vocabulary, its bits there set and ignored); rows
// not listed are untouched; a row whose every logit is -inf then draws token 0, greedy or sampled.
TEST(GpuKernels, KeepAllowedLogitsKeepsWhatEachRowsMaskAllows) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const std::int32_t rows = 4, vocab = 9000, words = (vocab + 31) / 32;
  std::vector<float> logits(rows * vocab);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 29) - 9.0f;
  // Rows 3 and 1 (in that order) keep {0, 5, 4100, 8999} and {17}; row 2 keeps nothing.
  const std::vector<std::int32_t> r = {3, 1, 2};
  const std::vector<std::vector<std::int32_t>> kept = {{0, 5, 4100, 8999, 9001, 9023}, {17}, {}};
  std::vector<std::uint32_t> masks(static_cast<std::size_t>(3 * words), 0u);
  for (std::size_t i = 0; i < kept.size(); ++i) {
    for (const std::int32_t t : kept[i]) masks[i * words + t / 32] |= 1u << (t % 32);
  }
  DeviceBuffer d = Upload(logits), dr = Upload(r), dm = Upload(masks);
  k::keep_allowed_logits(d.as<float>(), vocab, dr.as<std::int32_t>(), dm.as<std::uint32_t>(), words,
                         3, nullptr);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> want = logits;
  for (std::int32_t row = 1; row < rows; ++row) {
    for (std::int32_t v = 0; v < vocab; ++v) {
      const bool keeps =
          (row == 3 && (v == 0 || v == 5 || v == 4100 || v == 8999)) || (row == 1 && v == 17);
      if (!keeps) want[static_cast<std::size_t>(row * vocab + v)] = -inf;
    }
  }
  EXPECT_EQ(Download<float>(d, logits.size()), want);
  // The rows' draws: row 1 and 3 from what they keep, row 2 (nothing kept) token 0.
  std::vector<float> params = {0, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 0.5f, 0, 0};
  const std::vector<float> u = {0.3f, 0.6f, 0.9f, 0.99f};
  DeviceBuffer dp = Upload(params), du = Upload(u), scratch(rows * vocab * 4);
  DeviceBuffer out = Poisoned(rows * 4), greedy = Poisoned(rows * 4);
  k::sample_rows(d.as<float>(), rows, vocab, dp.as<float>(), du.as<float>(), scratch.as<float>(),
                 out.as<std::int32_t>(), nullptr);
  k::greedy_sample(d.as<float>(), rows, vocab, greedy.as<std::int32_t>(), nullptr);
  const std::vector<std::int32_t> drawn = Download<std::int32_t>(out, rows);
  const std::vector<std::int32_t> argmax = Download<std::int32_t>(greedy, rows);
  EXPECT_EQ(drawn[1], 17);
  EXPECT_EQ(drawn[2], 0);
  EXPECT_EQ(argmax[2], 0);
  EXPECT_TRUE(drawn[3] == 0 || drawn[3] == 5 || drawn[3] == 4100 || drawn[3] == 8999) << drawn[3];
  for (std::int32_t row = 1; row < rows; ++row) {
    const std::span<const float> one(want.data() + row * vocab, static_cast<std::size_t>(vocab));
    EXPECT_EQ(argmax[static_cast<std::size_t>(row)], kernels::greedy_reference(one)) << row;
    EXPECT_EQ(drawn[static_cast<std::size_t>(row)],
              kernels::sample_bisect(one, 1.0f, {row == 3 ? 0.5 : 1.0, 0, 0.0},
                                     u[static_cast<std::size_t>(row)]))
        << row;
  }
#endif
}

TEST(GpuKernels, GreedyAndTopPSampling) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  Rng rng = Rng::stream(10, "gpu_kernels");
  const std::int32_t rows = 64, vocab = 32000;
  std::vector<float> logits(rows * vocab);
  for (float& x : logits) x = static_cast<float>(rng.normal(0.0, 3.0));
  logits[5 * vocab + 9] = logits[5 * vocab + 4] = 50.0f;  // an exact tie: the lower id wins
  std::vector<float> u(rows);
  for (float& x : u) x = static_cast<float>(rng.uniform());
  DeviceBuffer d_l = Upload(logits), d_u = Upload(u), scratch(rows * vocab * 4);
  DeviceBuffer greedy = Poisoned(rows * 4), top_p = Poisoned(rows * 4);
  k::greedy_sample(d_l.as<float>(), rows, vocab, greedy.as<std::int32_t>(), nullptr);
  k::top_p_sample(d_l.as<float>(), rows, vocab, 0.8f, 0.9f, d_u.as<float>(), scratch.as<float>(),
                  top_p.as<std::int32_t>(), nullptr);
  const std::vector<std::int32_t> g = Download<std::int32_t>(greedy, rows);
  const std::vector<std::int32_t> p = Download<std::int32_t>(top_p, rows);
  int agree = 0;
  for (std::int32_t r = 0; r < rows; ++r) {
    const std::span<const float> row(logits.data() + r * vocab, vocab);
    EXPECT_EQ(g[r], kernels::greedy_reference(row)) << "row " << r;
    ASSERT_GE(p[r], 0);
    ASSERT_LT(p[r], vocab);
    agree += p[r] == kernels::sample_reference(row, 0.8, {0.9, 0, 0.0}, u[r]);
  }
  EXPECT_EQ(g[5], 4);
  EXPECT_GE(agree * 100, rows * 98) << agree << " of " << rows;
#endif
}

// sample_rows: each row with its own (temperature, top_p, top_k, min_p); a row at temperature 0
// is the argmax (exactly), the others agree with sample_reference at their own parameters (up to
// fp32 rounding at a boundary, as top_p_sample); a row with top_k 1 or min_p 1 is the argmax too.
TEST(GpuKernels, SampleRowsTakesEachRowsOwnParameters) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  Rng rng = Rng::stream(11, "gpu_kernels");
  const std::int32_t rows = 48, vocab = 4096;
  std::vector<float> logits(rows * vocab);
  for (float& x : logits) x = static_cast<float>(rng.normal(0.0, 3.0));
  logits[3 * vocab + 17] = logits[3 * vocab + 11] = 60.0f;  // row 3 is greedy: the lower id wins
  std::vector<float> u(rows), params(4 * rows);
  for (std::int32_t r = 0; r < rows; ++r) {
    u[r] = static_cast<float>(rng.uniform());
    float* p = params.data() + 4 * r;
    p[0] = r % 3 == 0 ? 0.0f : 0.3f + 0.1f * static_cast<float>(r % 7);   // temperature
    p[1] = r % 4 == 1 ? 1.0f : 0.5f + 0.05f * static_cast<float>(r % 9);  // top_p
    p[2] = r % 5 == 2 ? static_cast<float>(1 + r % 13) : 0.0f;            // top_k
    p[3] = r % 5 == 4 ? 0.02f * static_cast<float>(r % 6) : 0.0f;         // min_p
  }
  const float greedy_k[4] = {1.5f, 1.0f, 1.0f, 0.0f}, greedy_min_p[4] = {1.5f, 1.0f, 0.0f, 1.0f};
  std::copy(greedy_k, greedy_k + 4, params.data() + 4 * 46);
  std::copy(greedy_min_p, greedy_min_p + 4, params.data() + 4 * 47);
  DeviceBuffer d_l = Upload(logits), d_u = Upload(u), d_p = Upload(params),
               scratch(rows * vocab * 4), out = Poisoned(rows * 4);
  k::sample_rows(d_l.as<float>(), rows, vocab, d_p.as<float>(), d_u.as<float>(),
                 scratch.as<float>(), out.as<std::int32_t>(), nullptr);
  const std::vector<std::int32_t> got = Download<std::int32_t>(out, rows);
  int agree = 0, sampled = 0;
  for (std::int32_t r = 0; r < rows; ++r) {
    const std::span<const float> row(logits.data() + r * vocab, vocab);
    const float* p = params.data() + 4 * r;
    if (p[0] == 0.0f) {
      EXPECT_EQ(got[r], kernels::greedy_reference(row)) << "row " << r;
      continue;
    }
    ++sampled;
    ASSERT_GE(got[r], 0);
    ASSERT_LT(got[r], vocab);
    const kernels::Truncation keep{p[1], static_cast<std::int32_t>(p[2]), p[3]};
    agree += got[r] == kernels::sample_reference(row, p[0], keep, u[r]);
  }
  EXPECT_EQ(got[3], 11);
  EXPECT_EQ(got[46], kernels::greedy_reference({logits.data() + 46 * vocab, std::size_t{vocab}}));
  EXPECT_EQ(got[47], kernels::greedy_reference({logits.data() + 47 * vocab, std::size_t{vocab}}));
  EXPECT_GE(agree * 100, sampled * 95) << agree << " of " << sampled;
#endif
}

// adjust_logits (kernels/sampling.h): each listed (row, token) logit becomes engine/
// sample_stream.h's adjust_logit of it, bit for bit (bias, then the repetition factor by the
// sign, then the delta); a token outside the vocabulary is skipped; nothing else changes.
TEST(GpuKernels, AdjustLogitsAsTheHostDoes) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const std::int32_t rows = 3, vocab = 50;
  std::vector<float> logits(rows * vocab);
  for (std::size_t i = 0; i < logits.size(); ++i)
    logits[i] = 0.37f * static_cast<float>(i % 17) - 3.1f;
  const std::vector<std::int32_t> r = {0, 0, 2, 1, 1};
  const std::vector<std::int32_t> t = {5, 13, 7, 50, 2};
  const std::vector<LogitAdjustment> a = {{5, 0.0f, 1.3f, 0.0f},
                                          {13, 0.0f, 1.3f, -2.5f},
                                          {7, 1.25f, 0.7f, 0.0f},
                                          {50, 9.0f, 1.0f, 0.0f},
                                          {2, -100.0f, 2.0f, 0.5f}};
  std::vector<float> adjust;
  for (const LogitAdjustment& x : a) adjust.insert(adjust.end(), {x.bias, x.factor, x.delta});
  DeviceBuffer d = Upload(logits), dr = Upload(r), dt = Upload(t), da = Upload(adjust);
  k::adjust_logits(d.as<float>(), vocab, dr.as<std::int32_t>(), dt.as<std::int32_t>(),
                   da.as<float>(), 5, nullptr);
  std::vector<float> want = logits;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (t[i] >= vocab) continue;
    const std::size_t at = static_cast<std::size_t>(r[i] * vocab + t[i]);
    want[at] = adjust_logit(logits[at], a[i]);
  }
  EXPECT_EQ(Download<float>(d, logits.size()), want);
  EXPECT_NE(want[5], logits[5]);  // 5 and 13 straddle 0: one divided, one multiplied
  EXPECT_NE(want[13], logits[13]);
#endif
}

}  // namespace
}  // namespace servelab
