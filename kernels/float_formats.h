// Narrow floating-point formats of the KV cache (bf16, fp16, fp8 e4m3 and e5m2): conversion
// from fp32 and back, on the host. The CPU executor stores K and V through these functions
// (engine/cpu_executor.h), and they are the reference a GPU KV-write kernel is tested against.
//
// Formats (sign, exponent bits, mantissa bits, exponent bias):
//   bf16      1, 8, 7, 127   IEEE-like: infinities and NaNs; max finite 3.3895e38
//   fp16      1, 5, 10, 15   IEEE binary16; max finite 65504
//   fp8 e4m3  1, 4, 3, 7     the "fn" variant (OCP FP8, NVIDIA's __nv_fp8_e4m3): no
//                            infinities, the only NaN codes are S.1111.111; max finite 448
//   fp8 e5m2  1, 5, 2, 15    IEEE-like: infinities and NaNs; max finite 57344
// Every conversion from fp32 rounds to nearest, ties to even, subnormals included. Out-of-range
// values: bf16 and fp16 overflow to infinity (the IEEE rule); the fp8 conversions saturate, as
// the conversion a KV-cache kernel uses does (CUDA's __NV_SATFINITE): a finite value or an
// infinity beyond the largest finite value becomes that value, with its sign. NaN stays NaN
// (sign kept; code 0x7F/0xFF for e4m3, 0x7E/0xFE for e5m2, a quiet NaN for bf16 and fp16).
// Decoding is exact: every code of these formats is a float.
#pragma once

#include <cstdint>
#include <string_view>

namespace servelab::kernels {

enum class FloatFormat { kFp32, kBf16, kFp16, kFp8E4m3, kFp8E5m2 };

inline constexpr float kFp8E4m3Max = 448.0f;
inline constexpr float kFp8E5m2Max = 57344.0f;

std::uint8_t float_to_fp8_e4m3(float x);
float fp8_e4m3_to_float(std::uint8_t code);
std::uint8_t float_to_fp8_e5m2(float x);
float fp8_e5m2_to_float(std::uint8_t code);
std::uint16_t float_to_bf16(float x);
float bf16_to_float(std::uint16_t code);
std::uint16_t float_to_fp16(float x);
float fp16_to_float(std::uint16_t code);

// x stored in `format` and read back: decode(encode(x)); x itself for kFp32.
float round_to_format(float x, FloatFormat format);
// Largest finite value of the format.
float format_max(FloatFormat format);
// Bytes per element: 4, 2, 2, 1, 1.
int format_bytes(FloatFormat format);
// "fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2".
std::string_view format_name(FloatFormat format);

}  // namespace servelab::kernels
