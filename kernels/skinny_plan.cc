#include "kernels/skinny_plan.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/gemm_kernel.h"

namespace servelab::kernels {

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

std::size_t partial_bytes(std::int32_t splits, std::int32_t row_blocks, std::int32_t tokens) {
  if (splits <= 1) return 0;
  return static_cast<std::size_t>(splits) * static_cast<std::size_t>(row_blocks) *
         static_cast<std::size_t>(tokens) * kSkinnyCtaRows * sizeof(float);
}

double predicted_us(std::int32_t splits, std::int32_t row_blocks, std::int32_t chunks,
                    std::int32_t tokens, std::int32_t in, std::int32_t out,
                    const SkinnyMachine& m) {
  const double weights = 2.0 * in * out;
  const std::int64_t ctas = std::int64_t{row_blocks} * splits;
  const std::int64_t per_sm = ceil_div(ctas, m.sms);
  const double cta_bytes = kSkinnyCtaRows * 64.0 * static_cast<double>(ceil_div(chunks, splits));
  // bytes per us = GB/s * 1e3
  const double sm_rate = static_cast<double>(std::min<std::int64_t>(per_sm, m.ctas_per_sm)) *
                         kSkinnyCtaInflightBytes / m.latency_us;
  const double stream = std::max(weights / (m.bandwidth_gbps * 1e3),
                                 static_cast<double>(per_sm) * cta_bytes / sm_rate);
  if (splits == 1) return stream;
  const double tile = static_cast<double>(kSkinnyCtaRows) * tokens * sizeof(float);
  return stream + m.latency_us + (splits + 1) * tile / (m.l2_gbps_per_sm * 1e3);
}

}  // namespace

SkinnyPlan plan_skinny(std::int32_t tokens, std::int32_t in, std::int32_t out,
                       const SkinnyMachine& machine, std::size_t partial_capacity,
                       std::int32_t counters, std::int32_t forced_splits) {
  if (tokens < 1 || tokens > kSkinnyMaxTokens || in <= 0 || in % kSkinnyChunk != 0 || out <= 0 ||
      machine.sms <= 0 || machine.ctas_per_sm <= 0) {
    throw std::invalid_argument(
        "plan_skinny: needs 1.." + std::to_string(kSkinnyMaxTokens) +
        " tokens, in a positive multiple of " + std::to_string(kSkinnyChunk) +
        ", out > 0, sms > 0 and ctas_per_sm > 0 (got tokens " + std::to_string(tokens) + ", in " +
        std::to_string(in) + ", out " + std::to_string(out) + ", sms " +
        std::to_string(machine.sms) + ", ctas_per_sm " + std::to_string(machine.ctas_per_sm) + ")");
  }
  SkinnyPlan p;
  p.row_blocks = static_cast<std::int32_t>(ceil_div(out, kSkinnyCtaRows));
  p.chunks = in / kSkinnyChunk;
  const std::int32_t most = std::min(p.chunks, kSkinnyMaxSplits);
  const auto fits = [&](std::int32_t s) {
    return s == 1 ||
           (p.row_blocks <= counters && partial_bytes(s, p.row_blocks, tokens) <= partial_capacity);
  };
  if (forced_splits > 0) {
    const std::int32_t s = std::min(forced_splits, most);
    p.splits = fits(s) ? s : 1;
  } else {
    double best = predicted_us(1, p.row_blocks, p.chunks, tokens, in, out, machine);
    for (std::int32_t s = 2; s <= most; ++s) {
      if (!fits(s)) continue;
      const double t = predicted_us(s, p.row_blocks, p.chunks, tokens, in, out, machine);
      if (t < best) {
        best = t;
        p.splits = s;
      }
    }
  }
  p.partial_bytes = partial_bytes(p.splits, p.row_blocks, tokens);
  p.predicted_us = predicted_us(p.splits, p.row_blocks, p.chunks, tokens, in, out, machine);
  return p;
}

}  // namespace servelab::kernels
