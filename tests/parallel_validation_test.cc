// Tensor parallelism against Vidur's measurements (data/profiles/vidur, docs/validation.md
// section 8): the ring all-reduce model (serving/collectives.h) over the catalogue's H100 and
// A100 nodes against NCCL all-reduces on a DGX H100 and a DGX A100, and the roofline's linear
// layers on one GPU's tensor shard (serving/parallel_config.h, sim/operator_time.h) against
// Llama-2-70B's linear layers on H100 at tensor parallelism 1, 2, 4 and 8. Prints the error
// tables docs/validation.md reports.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "serving/collectives.h"
#include "serving/hardware_config.h"
#include "serving/home.h"
#include "serving/model_config.h"
#include "serving/parallel_config.h"
#include "sim/operator_time.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using namespace servelab::test_util;

struct Errors {
  std::vector<double> large;  // relative errors, sizes >= 1 MiB
  std::vector<double> all;
};

double median_abs(std::vector<double> v) {
  for (double& x : v) x = std::fabs(x);
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
double p90_abs(std::vector<double> v) {
  for (double& x : v) x = std::fabs(x);
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[static_cast<std::size_t>(0.9 * static_cast<double>(v.size()))];
}
double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// Relative error (model - measured) / measured by group size, for one system's file.
std::map<int, Errors> errors_for(const std::string& system, const std::string& hardware) {
  const HardwareConfig hw = load_hardware(hardware, default_catalog_dir());
  UniformTopologySpec spec;
  spec.gpus_per_node = hw.interconnect.gpus_per_node;
  const Topology node = build_uniform_topology(spec, hw.interconnect, hw.name);
  const auto rows =
      read_csv(servelab_home() / "data/profiles/vidur/network" / system / "all_reduce.csv");
  std::map<int, Errors> out;
  for (const auto& r : rows) {
    const int n = std::stoi(r.at("num_workers"));
    const double bytes = std::stod(r.at("size"));
    const double measured = std::stod(r.at("time_stats.all_reduce.median")) * 1e-3;
    std::vector<GpuId> group;
    for (int i = 0; i < n; ++i) group.push_back(i);
    const double model = ring_all_reduce(node, group).seconds(bytes);
    const double e = (model - measured) / measured;
    out[n].all.push_back(e);
    if (bytes >= (1 << 20)) out[n].large.push_back(e);
  }
  return out;
}

void check(const std::string& system, const std::string& hardware) {
  const std::map<int, Errors> errors = errors_for(system, hardware);
  ASSERT_EQ(errors.size(), 3u) << "2, 4 and 8 GPUs";
  std::printf(
      "%s on %s: GPUs, sizes >= 1 MiB: rows, mean signed, median |err|, p90 |err|; "
      "all sizes: rows, median |err|\n",
      system.c_str(), hardware.c_str());
  for (const auto& [n, e] : errors) {
    std::printf("  %d  %zu  %+.3f  %.3f  %.3f   %zu  %.3f\n", n, e.large.size(), mean(e.large),
                median_abs(e.large), p90_abs(e.large), e.all.size(), median_abs(e.all));
    EXPECT_GT(e.large.size(), 100u);
    // The fitted link efficiency keeps the typical error of large all-reduces within 25 %.
    EXPECT_LT(median_abs(e.large), 0.25) << system << " n=" << n;
    EXPECT_LT(std::fabs(mean(e.large)), 0.25) << system << " n=" << n;
  }
}

TEST(CollectivesValidation, RingAllReduceAgainstVidurDgxH100) { check("h100_dgx", "H100-SXM"); }
TEST(CollectivesValidation, RingAllReduceAgainstVidurDgxA100) { check("a100_dgx", "A100-80GB"); }

// Llama-2-70B's four linear layers per layer (QKV, O, gate/up, down) at each token count and
// tensor-parallel degree: the roofline on the shard against the sum of Vidur's medians.
TEST(ParallelValidation, ShardedLinearLayersAgainstVidurLlama2_70bOnH100) {
  const HardwareConfig hw = load_hardware("H100-SXM", default_catalog_dir());
  const auto rows = read_csv(servelab_home() /
                             "data/profiles/vidur/compute/h100/meta-llama/Llama-2-70b-hf/mlp.csv");
  // Llama-2-70B's shape as the rows state it (vocabulary and norms do not enter the linears).
  ModelConfig m;
  m.name = "Llama-2-70B";
  m.num_layers = 80;
  m.vocab_size = 32000;
  m.dtype = "fp16";
  m.dtype_bytes = 2;
  const OperatorTime op(hw, m.dtype);
  std::map<int, std::map<long, double>> measured, predicted;  // tp -> tokens -> seconds
  for (const auto& r : rows) {
    m.hidden_size = std::stoi(r.at("n_embd"));
    m.num_heads = std::stoi(r.at("n_head"));
    m.num_kv_heads = std::stoi(r.at("n_kv_head"));
    m.head_dim = m.hidden_size / m.num_heads;
    m.intermediate_size = std::stoi(r.at("n_expanded_embd"));
    const int tp = std::stoi(r.at("num_tensor_parallel_workers"));
    const long tokens = std::stol(r.at("num_tokens"));
    const ModelConfig s = tensor_shard(m, tp);
    const double t = static_cast<double>(tokens), h = s.hidden_size, d = s.dtype_bytes;
    const double q = static_cast<double>(s.q_size()), kv = static_cast<double>(s.kv_size()),
                 inter = s.intermediate_size;
    predicted[tp][tokens] = op.gemm(t, q + 2 * kv, h, d) + op.gemm(t, h, q, d) +
                            op.gemm(t, 2 * inter, h, d) + op.gemm(t, h, inter, d);
    double sum = 0;
    for (const char* name : {"attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"}) {
      sum += std::stod(r.at(std::string("time_stats.") + name + ".median")) * 1e-3;
    }
    measured[tp][tokens] = sum;
  }
  ASSERT_EQ(measured.size(), 4u) << "tensor parallelism 1, 2, 4 and 8";
  std::printf(
      "Llama-2-70B linear layers on H100-SXM: tp, rows, MAE, bias; the TP/TP1 ratio's "
      "MAE, bias\n");
  for (const auto& [tp, by_tokens] : measured) {
    std::vector<double> err, ratio;
    for (const auto& [tokens, m_s] : by_tokens) {
      const double p_s = predicted[tp][tokens];
      err.push_back((p_s - m_s) / m_s);
      if (measured[1].count(tokens)) {
        ratio.push_back((p_s / predicted[1][tokens]) / (m_s / measured[1][tokens]) - 1);
      }
    }
    double mae = 0, rmae = 0;
    for (double e : err) mae += std::fabs(e);
    for (double e : ratio) rmae += std::fabs(e);
    mae /= static_cast<double>(err.size());
    rmae /= static_cast<double>(ratio.size());
    std::printf("  %d  %zu  %.3f  %+.3f   %.3f  %+.3f\n", tp, err.size(), mae, mean(err), rmae,
                mean(ratio));
    EXPECT_GT(err.size(), 200u);
    // The shard's linears within 25 % on average, and how they scale with tp within 15 %.
    EXPECT_LT(mae, 0.25) << "tp " << tp;
    EXPECT_LT(rmae, 0.15) << "tp " << tp;
  }
}

}  // namespace
}  // namespace servelab
