#include "kernels/float_formats.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace servelab::kernels {

namespace {

// A binary format of 1 sign bit, `exp_bits` exponent bits and `man_bits` mantissa bits.
struct Format {
  int exp_bits;
  int man_bits;
  int bias;
  bool ieee_specials;  // all-ones exponent = infinity (mantissa 0) or NaN; else only S.1..1.1..1
                       // is NaN and the all-ones exponent holds finite values
  bool saturate;       // out of range -> largest finite value (else infinity)

  std::uint32_t exp_mask() const { return (1u << exp_bits) - 1; }
  std::uint32_t man_mask() const { return (1u << man_bits) - 1; }
  std::uint32_t sign_bit() const { return 1u << (exp_bits + man_bits); }
  // Largest finite magnitude's code (sign clear).
  std::uint32_t max_code() const {
    return ieee_specials ? ((exp_mask() - 1) << man_bits) | man_mask()
                         : (exp_mask() << man_bits) | (man_mask() - 1);
  }
  std::uint32_t inf_code() const { return exp_mask() << man_bits; }
  std::uint32_t nan_code() const {
    return ieee_specials ? (exp_mask() << man_bits) | (1u << (man_bits - 1))
                         : (exp_mask() << man_bits) | man_mask();
  }
};

constexpr Format kE4m3{4, 3, 7, false, true};
constexpr Format kE5m2{5, 2, 15, true, true};
constexpr Format kHalf{5, 10, 15, true, false};
constexpr Format kBfloat{8, 7, 127, true, false};

double decode(const Format& f, std::uint32_t code) {
  const bool negative = (code & f.sign_bit()) != 0;
  const std::uint32_t e = (code >> f.man_bits) & f.exp_mask();
  const std::uint32_t m = code & f.man_mask();
  double v;
  if (f.ieee_specials && e == f.exp_mask()) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (!f.ieee_specials && e == f.exp_mask() && m == f.man_mask()) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - f.bias - f.man_bits);  // subnormal
  } else {
    v = std::ldexp(static_cast<double>(m | (1u << f.man_bits)),
                   static_cast<int>(e) - f.bias - f.man_bits);
  }
  return negative ? -v : v;
}

// Rounds r >= 0 to the nearest integer, ties to the even one (independent of the FPU's mode).
double round_half_even(double r) {
  const double lo = std::floor(r);
  const double frac = r - lo;
  if (frac > 0.5) return lo + 1;
  if (frac < 0.5) return lo;
  return std::fmod(lo, 2.0) == 0 ? lo : lo + 1;
}

std::uint32_t encode(const Format& f, float x) {
  const std::uint32_t sign = std::signbit(x) ? f.sign_bit() : 0;
  if (std::isnan(x)) return sign | f.nan_code();
  const double a = std::fabs(static_cast<double>(x));
  const double max_finite = decode(f, f.max_code());
  if (std::isinf(a)) return sign | (f.saturate ? f.max_code() : f.inf_code());
  if (a == 0) return sign;
  // a = frac * 2^exp with frac in [0.5, 1): floor(log2 a) = exp - 1. Below the smallest normal
  // exponent the spacing stays that of the subnormals.
  int exp = 0;
  (void)std::frexp(a, &exp);
  int e = std::max(exp - 1, 1 - f.bias);
  // Units of the spacing at exponent e (exact: a has 24 significant bits, the scale is a power
  // of two), rounded to an integer number of them.
  double q = round_half_even(std::ldexp(a, f.man_bits - e));
  const double v = std::ldexp(q, e - f.man_bits);
  if (v > max_finite) return sign | (f.saturate ? f.max_code() : f.inf_code());
  const double implicit = std::ldexp(1.0, f.man_bits);
  if (q < implicit) return sign | static_cast<std::uint32_t>(q);  // subnormal (or zero)
  if (q >= 2 * implicit) {  // rounded up to the next power of two
    q /= 2;
    ++e;
  }
  const auto e_field = static_cast<std::uint32_t>(e + f.bias);
  return sign | (e_field << f.man_bits) | static_cast<std::uint32_t>(q - implicit);
}

}  // namespace

std::uint8_t float_to_fp8_e4m3(float x) { return static_cast<std::uint8_t>(encode(kE4m3, x)); }
float fp8_e4m3_to_float(std::uint8_t code) { return static_cast<float>(decode(kE4m3, code)); }
std::uint8_t float_to_fp8_e5m2(float x) { return static_cast<std::uint8_t>(encode(kE5m2, x)); }
float fp8_e5m2_to_float(std::uint8_t code) { return static_cast<float>(decode(kE5m2, code)); }
std::uint16_t float_to_bf16(float x) { return static_cast<std::uint16_t>(encode(kBfloat, x)); }
float bf16_to_float(std::uint16_t code) { return static_cast<float>(decode(kBfloat, code)); }
std::uint16_t float_to_fp16(float x) { return static_cast<std::uint16_t>(encode(kHalf, x)); }
float fp16_to_float(std::uint16_t code) { return static_cast<float>(decode(kHalf, code)); }

float round_to_format(float x, FloatFormat format) {
  switch (format) {
    case FloatFormat::kFp32:
      return x;
    case FloatFormat::kBf16:
      return bf16_to_float(float_to_bf16(x));
    case FloatFormat::kFp16:
      return fp16_to_float(float_to_fp16(x));
    case FloatFormat::kFp8E4m3:
      return fp8_e4m3_to_float(float_to_fp8_e4m3(x));
    case FloatFormat::kFp8E5m2:
      return fp8_e5m2_to_float(float_to_fp8_e5m2(x));
  }
  return x;
}

float format_max(FloatFormat format) {
  switch (format) {
    case FloatFormat::kFp32:
      return std::numeric_limits<float>::max();
    case FloatFormat::kBf16:
      return static_cast<float>(decode(kBfloat, kBfloat.max_code()));
    case FloatFormat::kFp16:
      return static_cast<float>(decode(kHalf, kHalf.max_code()));
    case FloatFormat::kFp8E4m3:
      return kFp8E4m3Max;
    case FloatFormat::kFp8E5m2:
      return kFp8E5m2Max;
  }
  return 0;
}

int format_bytes(FloatFormat format) {
  switch (format) {
    case FloatFormat::kFp32:
      return 4;
    case FloatFormat::kBf16:
    case FloatFormat::kFp16:
      return 2;
    case FloatFormat::kFp8E4m3:
    case FloatFormat::kFp8E5m2:
      return 1;
  }
  return 4;
}

std::string_view format_name(FloatFormat format) {
  switch (format) {
    case FloatFormat::kFp32:
      return "fp32";
    case FloatFormat::kBf16:
      return "bf16";
    case FloatFormat::kFp16:
      return "fp16";
    case FloatFormat::kFp8E4m3:
      return "fp8_e4m3";
    case FloatFormat::kFp8E5m2:
      return "fp8_e5m2";
  }
  return "?";
}

}  // namespace servelab::kernels
