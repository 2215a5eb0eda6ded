// Fitting the roofline's kernel parameters to Vidur-format operator profiles
// (`sim calibrate --vidur`; the profiles are in data/profiles/vidur/, docs/validation.md has the
// method and the errors).
//
// A Vidur compute profile (Vidur's data/profiling/compute/<gpu>/<model>/mlp.csv) holds, per
// token count and tensor-parallel degree, the measured time (columns
// `time_stats.<op>.median`, milliseconds) of each non-attention operator of one transformer
// layer: the four linear layers (attn_pre_proj = fused QKV, attn_post_proj = O, mlp_up_proj =
// fused gate/up, mlp_down_proj = down) and the elementwise kernels (input_layernorm,
// post_attention_layernorm, attn_rope, mlp_act, add), with the model's shape in columns n_head,
// n_kv_head, n_embd, n_expanded_embd, use_gated_mlp. Only rows at tensor parallelism 1 are used
// (the roofline has no communication term); a gated MLP (SwiGLU) is required. Elements are
// 16-bit (bf16/fp16).
//
// Each operator is priced by OperatorTime (sim/operator_time.h), exactly as the roofline prices
// it: the linear layers by gemm(M = tokens, N, K); RMSNorm (2h bytes per token: unfused, unlike
// vLLM's fused add + norm), RoPE (2(q + kv)), SiLU-mul (3i) and the residual add (3h) by
// elementwise() of their kind. A layer has two norms and two adds.
//
// The fit: the GEMM parameters (gemm_flops, gemm_bandwidth, gemm_overlap, kernel_min_us.gemm)
// and the elementwise parameters (kernel_min_us.elementwise, elementwise_overlap and the four
// kinds' bandwidth efficiencies) are fitted separately by Nelder-Mead on the mean squared log
// ratio of predicted to measured time, over the training points: the training profiles' rows
// whose token count is at an even position in the sorted list of their distinct token counts.
// The other token counts of those profiles, and every row of the held-out profiles (another
// model), are never seen by the fit; errors are reported on them.
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "serving/hardware_config.h"
#include "sim/operator_time.h"
#include "sim/validate.h"

namespace servelab {

enum VidurOp : int {
  kVidurQkv,
  kVidurO,
  kVidurUp,
  kVidurDown,
  kVidurInputNorm,
  kVidurPostNorm,
  kVidurRope,
  kVidurAct,
  kVidurAdd,
  kVidurNumOps
};
// The profile's column stem of each operator (attn_pre_proj, ...).
const char* vidur_op_name(VidurOp op);

struct VidurRow {
  std::int64_t num_tokens = 0;
  std::int64_t line = 0;
  std::array<double, kVidurNumOps> seconds{};  // measured medians
};

struct VidurProfile {
  std::string file;
  std::int64_t heads = 0, kv_heads = 0, hidden = 0, intermediate = 0;
  std::vector<VidurRow> rows;  // tensor parallelism 1, in file order
};

// Throws ConfigError naming PATH:LINE for an unreadable file, a missing column, a malformed or
// non-positive value, a shape that changes between rows, a non-gated MLP, or no rows at
// tensor parallelism 1.
VidurProfile read_vidur_profile(const std::string& path);

// Predicted seconds of `op` at `tokens` tokens for the profile's shape, priced by `time`
// (OperatorTime(hw, "bf16") of the hardware in question).
double vidur_predict(const OperatorTime& time, const VidurProfile& profile, VidurOp op,
                     std::int64_t tokens);

// Errors as sim/validate.h's ErrorStats of predicted / measured - 1.
struct VidurErrors {
  std::string file;
  std::string subset;  // "held-out tokens" or "held-out model"
  ErrorStats linear;   // each linear layer at each token count
  std::array<ErrorStats, 4> linear_by_op;
  std::array<ErrorStats, 4> linear_by_range;  // tokens < 128, 128-512, 513-1024, > 1024
  ErrorStats elementwise;  // per token count, the sum of the layer's six elementwise launches
  ErrorStats layer;        // per token count, the sum of all ten launches
};

// Errors of `hw` on the rows of `profile` whose token count is in `tokens` (sorted).
VidurErrors vidur_errors(const HardwareConfig& hw, const VidurProfile& profile,
                         const std::vector<std::int64_t>& tokens);

struct VidurFit {
  HardwareConfig hardware;            // the base entry with the fitted parameters
  std::vector<VidurErrors> errors;    // held-out tokens of each training profile, then each
                                      // held-out profile
  std::vector<VidurErrors> baseline;  // the same for base.classic_roofline() ("before")
};

// Fits `base`'s kernel parameters on `train` (see above) and reports errors on held-out data.
// Throws ConfigError when `train` is empty.
VidurFit fit_vidur(const HardwareConfig& base, const std::vector<VidurProfile>& train,
                   const std::vector<VidurProfile>& held_out);

// A hardware catalogue entry: `base`'s fields with the fitted ones and a `fitted:` provenance
// section (yaml-cpp emitter; loads back with load_hardware).
std::string vidur_hardware_yaml(const VidurFit& fit, const std::vector<std::string>& train_files,
                                const std::vector<std::string>& held_out_files);

// The error tables `sim calibrate --vidur` prints (markdown).
void print_vidur_fit(std::FILE* out, const VidurFit& fit);

}  // namespace servelab
