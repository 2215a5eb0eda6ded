// Fixtures of the cost-model tests: a ConfigError expectation, step plans of decode and prefill
// entries, and a model and a machine where the roofline's arithmetic is easy to do by hand.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/config_error.h"
#include "core/step_plan.h"
#include "serving/hardware_config.h"
#include "serving/model_config.h"

namespace servelab::test_util {

// Expects `fn` to throw ConfigError whose message contains every one of `parts`.
template <typename Fn>
inline void expect_config_error(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) {
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    }
  }
}

inline ScheduledRequest entry(std::int32_t first_token, std::int32_t num_tokens, bool is_prefill,
                              bool samples) {
  ScheduledRequest r;
  r.first_token = first_token;
  r.num_tokens = num_tokens;
  r.is_prefill = is_prefill;
  r.samples = samples;
  return r;
}

// `batch` decode entries, each computing the token at position context - 1 and sampling.
inline StepPlan decode_plan(int batch, std::int32_t context) {
  StepPlan plan;
  for (int i = 0; i < batch; ++i) {
    plan.requests.push_back(entry(context - 1, 1, false, true));
    plan.requests.back().id = static_cast<RequestId>(i);
  }
  plan.num_decode_tokens = batch;
  return plan;
}

inline StepPlan prefill_plan(std::int32_t first_token, std::int32_t num_tokens, bool samples) {
  StepPlan plan;
  plan.requests.push_back(entry(first_token, num_tokens, true, samples));
  plan.num_prefill_tokens = num_tokens;
  return plan;
}

// A model and a machine where the arithmetic is easy:
//   hidden = q_size = kv_size = intermediate = vocab = 1000, 10 layers, bf16.
//   linear params per layer = 2*h*q + 2*h*kv + 3*h*inter = 2e6 + 2e6 + 3e6 = 7e6; x10 = 7e7.
//   GEMM activation bytes per token = (4h + 2q + 2kv + 3 inter) * 2 B * 10 layers = 220,000.
//   KV bytes per token = 2 * 10 layers * 1000 * 2 B = 40,000; Q+O per token = 2*1000*2*10 = 40,000.
//   attention FLOPs per pair = 4 * head_dim 100 * heads 10 * layers 10 = 40,000.
//   elementwise bytes per token = (8h + 2q + 2kv + 3 inter) * 2 B * 10 + embedding 2h * 2 B
//     = 300,000 + 4,000 = 304,000.
//   peak 1e12 FLOP/s (GEMM efficiency 1, attention 0.5), 1e11 B/s, host link 1e9 B/s,
//   overhead 100 us.
inline ModelConfig easy_model() {
  ModelConfig m;
  m.name = "easy";
  m.num_layers = 10;
  m.hidden_size = 1000;
  m.num_heads = 10;
  m.num_kv_heads = 10;
  m.head_dim = 100;
  m.intermediate_size = 1000;
  m.vocab_size = 1000;
  m.dtype = "bf16";
  m.dtype_bytes = 2;
  return m;
}

inline HardwareConfig easy_hardware() {
  HardwareConfig hw;
  hw.name = "easy";
  hw.peak_flops = 1e12;
  hw.peak_flops_fp32 = 1e11;
  hw.hbm_bandwidth = 1e11;
  hw.memory_bytes = std::int64_t{1} << 30;
  hw.host_link_bandwidth = 1e9;
  hw.gemm_flops_efficiency = 1.0;
  hw.attention_flops_efficiency = 0.5;
  hw.memory_bandwidth_efficiency = 1.0;
  hw.host_link_efficiency = 1.0;
  hw.step_overhead_s = 100e-6;
  return hw;
}

}  // namespace servelab::test_util
