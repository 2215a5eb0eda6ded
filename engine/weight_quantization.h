// Quantized weights on the CPU executor (model.quantization): each projection matrix of every
// layer (q, k, v, o, gate, up, down) is replaced by the values a quantized kernel multiplies by,
// stored back in fp32, so `engine run` computes with them exactly and the CPU executor needs no
// other change. Embeddings, the LM head, norms and biases stay as they are (as vLLM's fp8 and AWQ
// methods leave them). Weight-only: activations are not quantized (W8A16, as vLLM runs fp8 on a
// GPU without FP8 tensor cores; an H100's W8A8 also rounds each GEMM's input per token).
//
//   fp8  one e4m3 code per weight and one fp32 scale per matrix, s = max|W| / 448 (vLLM's
//        per-tensor dynamic scale): W' = e4m3(W / s) * s (round to nearest even, saturating).
//   awq  AWQ's storage: int4 codes in groups of 128 consecutive input columns of an output row,
//        with an fp16 scale and an int4 zero point per group. The codes here come from
//        round-to-nearest over each group's range, widened to include 0 (min <= 0 <= max, so
//        the zero point is always representable): scale = (max - min) / 15 rounded to fp16,
//        zero = round(-min / scale) in [0, 15], q = clamp(round(W / scale) + zero, 0, 15),
//        W' = (q - zero) * scale. AWQ's format without its activation-aware scaling search,
//        which needs calibration data this engine does not have; an all-zero group stays zero.
//        `in` must be a multiple of 128 (vLLM's AWQ kernels require it too).
// Deterministic; the result does not depend on anything but the weights.
#pragma once

#include <string>

#include "engine/llama_weights.h"
#include "serving/model_config.h"

namespace servelab {

// `w` ([out, in], row-major) as fp8 e4m3 weights with one per-tensor scale, read back in fp32.
void quantize_fp8_per_tensor(RowMatrix& w);
// `w` as AWQ int4 weights (groups of kAwqGroupSize, serving/model_config.h, along a row), read
// back in fp32. Throws std::invalid_argument when w.cols() is not a multiple of kAwqGroupSize.
void quantize_awq_int4(RowMatrix& w);

// Every layer's seven projection matrices stored as `quantization` ("none": unchanged, "fp8",
// "awq" or "awq_marlin": the same int4 storage, whichever kernel multiplies it). Throws ConfigError
// (a message for the key model.quantization) for another value, or for awq when a projection's
// input width is not a multiple of 128 (naming the model and the matrix).
void quantize_weights(LlamaWeights& weights, const std::string& quantization);

}  // namespace servelab
