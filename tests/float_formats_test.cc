// The KV-cache float formats (kernels/float_formats.h): every fp8 code round-trips, rounding is
// to nearest with ties to even (checked against a brute-force nearest-code search and, for bf16,
// against the bit-trick every framework uses), fp8 saturates, bf16/fp16 overflow to infinity,
// NaN stays NaN.
#include "kernels/float_formats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/rng.h"

namespace servelab::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Fp8 {
  const char* name;
  std::uint8_t (*encode)(float);
  float (*decode)(std::uint8_t);
  float max;
};
const Fp8 kFp8[] = {{"e4m3", float_to_fp8_e4m3, fp8_e4m3_to_float, kFp8E4m3Max},
                    {"e5m2", float_to_fp8_e5m2, fp8_e5m2_to_float, kFp8E5m2Max}};

TEST(FloatFormatsTest, EveryFp8CodeRoundTrips) {
  for (const Fp8& f : kFp8) {
    SCOPED_TRACE(f.name);
    int nans = 0, infs = 0;
    for (int c = 0; c < 256; ++c) {
      const auto code = static_cast<std::uint8_t>(c);
      const float v = f.decode(code);
      if (std::isnan(v)) {
        ++nans;
        EXPECT_TRUE(std::isnan(f.decode(f.encode(v)))) << c;
        continue;
      }
      if (std::isinf(v)) {
        ++infs;
        continue;  // saturating conversion: see SaturatesAtTheLargestFiniteValue
      }
      EXPECT_EQ(f.encode(v), code) << "code " << c << " value " << v;
      EXPECT_LE(std::fabs(v), f.max) << c;
      EXPECT_EQ(std::signbit(v), c >= 128) << c;
    }
    // e4m3fn: two NaN codes (S.1111.111), no infinity; e5m2: six NaNs and two infinities.
    EXPECT_EQ(nans, f.max == kFp8E4m3Max ? 2 : 6);
    EXPECT_EQ(infs, f.max == kFp8E4m3Max ? 0 : 2);
  }
}

TEST(FloatFormatsTest, KnownFp8Codes) {
  EXPECT_EQ(float_to_fp8_e4m3(1.0f), 0x38);
  EXPECT_EQ(float_to_fp8_e4m3(-2.0f), 0xC0);
  EXPECT_EQ(float_to_fp8_e4m3(448.0f), 0x7E);
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.0f, -9)), 0x01);  // smallest subnormal
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.0f, -6)), 0x08);  // smallest normal
  EXPECT_EQ(fp8_e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(float_to_fp8_e5m2(1.0f), 0x3C);
  EXPECT_EQ(float_to_fp8_e5m2(57344.0f), 0x7B);
  EXPECT_EQ(float_to_fp8_e5m2(std::ldexp(1.0f, -16)), 0x01);
  EXPECT_EQ(fp8_e5m2_to_float(0x7C), kInf);
  EXPECT_EQ(fp8_e5m2_to_float(0xFC), -kInf);
  EXPECT_EQ(float_to_fp8_e4m3(-0.0f), 0x80);
  EXPECT_EQ(float_to_fp8_e5m2(0.0f), 0x00);
}

TEST(FloatFormatsTest, TiesRoundToEven) {
  // e4m3 near 1: spacing 1/8. 1 + 1/16 lies between 0x38 (even) and 0x39.
  EXPECT_EQ(float_to_fp8_e4m3(1.0625f), 0x38);
  EXPECT_EQ(float_to_fp8_e4m3(1.1875f), 0x3A);  // between 0x39 and 0x3A (even)
  EXPECT_EQ(float_to_fp8_e4m3(std::nextafter(1.0625f, 2.0f)), 0x39);
  EXPECT_EQ(float_to_fp8_e4m3(std::nextafter(1.0625f, 0.0f)), 0x38);
  EXPECT_EQ(float_to_fp8_e4m3(-1.0625f), 0xB8);
  // Subnormal ties: half the smallest subnormal goes to zero, 1.5 of it to 2.
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(float_to_fp8_e4m3(3 * std::ldexp(1.0f, -10)), 0x02);
  // A tie that carries into the next binade: 1.9375 is halfway between 1.875 (0x3F) and 2.
  EXPECT_EQ(float_to_fp8_e4m3(1.9375f), 0x40);
  // e5m2 near 1: spacing 1/4.
  EXPECT_EQ(float_to_fp8_e5m2(1.125f), 0x3C);
  EXPECT_EQ(float_to_fp8_e5m2(1.375f), 0x3E);
  // bf16 near 1: spacing 2^-7.
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  // fp16 near 1: spacing 2^-10.
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(float_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
}

TEST(FloatFormatsTest, SaturatesAtTheLargestFiniteValue) {
  // e4m3: 448 is the top; 464 (halfway to the would-be 480) and anything larger give 448.
  for (float x : {449.0f, 464.0f, 480.0f, 1e6f, 3e38f, kInf}) {
    EXPECT_EQ(float_to_fp8_e4m3(x), 0x7E) << x;
    EXPECT_EQ(float_to_fp8_e4m3(-x), 0xFE) << x;
    EXPECT_EQ(round_to_format(x, FloatFormat::kFp8E4m3), 448.0f) << x;
  }
  for (float x : {57345.0f, 61440.0f, 1e9f, kInf}) {
    EXPECT_EQ(float_to_fp8_e5m2(x), 0x7B) << x;
    EXPECT_EQ(float_to_fp8_e5m2(-x), 0xFB) << x;
  }
  // bf16 and fp16 follow IEEE: overflow to infinity past max + half a spacing.
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_fp16(65519.0f), 0x7BFF);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7C00);  // the tie rounds to even: 2^16, out of range
  EXPECT_EQ(float_to_fp16(-1e9f), 0xFC00);
  EXPECT_EQ(float_to_bf16(kInf), 0x7F80);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(format_max(FloatFormat::kFp16), 65504.0f);
}

TEST(FloatFormatsTest, NanStaysNan) {
  EXPECT_EQ(float_to_fp8_e4m3(kNaN), 0x7F);
  EXPECT_EQ(float_to_fp8_e4m3(-kNaN), 0xFF);
  EXPECT_EQ(float_to_fp8_e5m2(kNaN), 0x7E);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0xFF)));
  EXPECT_FALSE(std::isnan(fp8_e4m3_to_float(0x7E)));
  for (int c : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}) {
    EXPECT_TRUE(std::isnan(fp8_e5m2_to_float(static_cast<std::uint8_t>(c)))) << c;
  }
  for (FloatFormat f :
       {FloatFormat::kBf16, FloatFormat::kFp16, FloatFormat::kFp8E4m3, FloatFormat::kFp8E5m2}) {
    EXPECT_TRUE(std::isnan(round_to_format(kNaN, f))) << format_name(f);
  }
}

// Random floats over the formats' ranges: the conversion picks the nearest code (the even one
// on a tie), found here by brute force over all 256 codes.
TEST(FloatFormatsTest, Fp8IsTheNearestCode) {
  Rng rng(42);
  for (const Fp8& f : kFp8) {
    SCOPED_TRACE(f.name);
    std::vector<float> values;
    for (int c = 0; c < 256; ++c) {
      const float v = f.decode(static_cast<std::uint8_t>(c));
      if (std::isfinite(v)) values.push_back(v);
    }
    for (int i = 0; i < 20000; ++i) {
      // Log-uniform magnitudes from below the subnormals to the top, either sign.
      const double e = -20.0 + rng.uniform() * (std::log2(f.max) + 20.0);
      const float x = static_cast<float>((rng.uniform() < 0.5 ? -1 : 1) * std::exp2(e));
      const float got = f.decode(f.encode(x));
      double best = kInf;
      for (float v : values) best = std::min(best, std::fabs(static_cast<double>(v) - x));
      ASSERT_EQ(std::fabs(static_cast<double>(got) - x), best) << x << " -> " << got;
    }
  }
}

// bf16 against the bit trick (add 0x7FFF plus the kept lowest bit, truncate), and every fp16
// code round-trips.
TEST(FloatFormatsTest, Bf16AndFp16AgreeWithIndependentRoundings) {
  Rng rng(7);
  for (int i = 0; i < 100000; ++i) {
    const auto bits = static_cast<std::uint32_t>(rng.next_u64());
    const float x = std::bit_cast<float>(bits);
    if (std::isnan(x)) continue;
    const std::uint32_t want = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
    ASSERT_EQ(float_to_bf16(x), want) << std::hex << bits;
  }
  for (std::uint32_t c = 0; c < 65536; ++c) {
    const float v = fp16_to_float(static_cast<std::uint16_t>(c));
    if (std::isnan(v)) continue;
    ASSERT_EQ(float_to_fp16(v), c) << c;
  }
  EXPECT_EQ(fp16_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);
}

}  // namespace
}  // namespace servelab::kernels
