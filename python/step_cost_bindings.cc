// servelab.step_cost: what one step costs under an experiment's cost model (the roofline of its
// model and hardware, or its calibrated profile; its block size, KV dtype, parallelism and
// cost_model settings such as block_indirection_ns), per operator: the same prices the
// simulator charges (sim/cost_model.h StepCostBreakdown). The step is described by its entries
// alone, not by a run: decode entries by their context length (each verifying `drafts` draft
// tokens of speculative decoding when drafts > 0, as a verify entry of core/step_plan.h),
// prefill entries by the tokens already cached and the tokens computed; every entry samples.
// The drafting itself (draft_model, EAGLE: sim/speculation.h) is not part of the step's price.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config_error.h"
#include "core/step_plan.h"
#include "python/bindings.h"
#include "serving/experiment.h"
#include "serving/parallel_config.h"
#include "sim/roofline_cost_model.h"
#include "sim/run.h"

namespace py = pybind11;

namespace servelab::python {

namespace {

constexpr double kMs = 1e3;

py::dict step_cost(const std::string& name, const std::optional<std::string>& text,
                   const std::string& base_dir, const std::vector<std::string>& overrides,
                   const std::vector<std::int64_t>& decode,
                   const std::vector<std::pair<std::int64_t, std::int64_t>>& prefill,
                   std::int64_t drafts) {
  const ExperimentConfig config =
      text ? load_experiment_text(*text, name, base_dir, "experiment", overrides)
           : load_experiment(name, overrides);
  if (decode.empty() && prefill.empty()) {
    throw ConfigError("step_cost: expected at least one entry in decode or prefill");
  }
  if (drafts < 0 || drafts > 64) {
    throw ConfigError("step_cost: drafts: expected 0 to 64 draft tokens per decode entry, got " +
                      std::to_string(drafts));
  }
  // The entries: each decode computes the token at position context - 1 over `context` tokens
  // of KV, and its `drafts` draft tokens after it; each prefill computes `tokens` tokens after
  // `cached` ones.
  StepPlan plan;
  for (std::size_t i = 0; i < decode.size(); ++i) {
    if (decode[i] < 1 || decode[i] > (std::int64_t{1} << 30)) {
      throw ConfigError("step_cost: decode[" + std::to_string(i) +
                        "]: expected a context length from 1 to 2^30, got " +
                        std::to_string(decode[i]));
    }
    ScheduledRequest r;
    r.first_token = static_cast<std::int32_t>(decode[i] - 1);
    r.num_tokens = 1 + static_cast<std::int32_t>(drafts);
    r.samples = true;
    plan.requests.push_back(r);
    plan.num_decode_tokens += r.num_tokens;
    plan.num_draft_tokens += static_cast<std::int32_t>(drafts);
  }
  for (std::size_t i = 0; i < prefill.size(); ++i) {
    const auto [cached, tokens] = prefill[i];
    if (cached < 0 || tokens < 1 || cached + tokens > (std::int64_t{1} << 30)) {
      throw ConfigError("step_cost: prefill[" + std::to_string(i) +
                        "]: expected (cached >= 0, tokens >= 1), at most 2^30 in all, got (" +
                        std::to_string(cached) + ", " + std::to_string(tokens) + ")");
    }
    ScheduledRequest r;
    r.first_token = static_cast<std::int32_t>(cached);
    r.num_tokens = static_cast<std::int32_t>(tokens);
    r.samples = true;
    r.is_prefill = true;
    plan.requests.push_back(r);
    plan.num_prefill_tokens += static_cast<std::int32_t>(tokens);
  }

  // The cost model sim run builds (sim/run.cc).
  const std::string catalog = default_catalog_dir();
  ModelConfig model = load_model(config.model, catalog);
  apply_model_storage(config, model);
  const HardwareConfig hardware =
      config.cost_model.with_host_time(load_hardware(config.hardware, catalog));
  const ParallelConfig parallel = resolve_parallel(config.parallel, model, hardware);
  const RooflineCostModel roofline(model, hardware, config.scheduler.block_size, parallel);
  const std::unique_ptr<const CalibratedCostModel> calibrated =
      make_calibrated_cost_model(config, model);
  const CostModel& cost = calibrated ? static_cast<const CostModel&>(*calibrated)
                                     : static_cast<const CostModel&>(roofline);
  const StepCostBreakdown b = cost.breakdown(plan);
  py::dict out;
  out["model"] = std::string(cost.name());
  out["gemm_ms"] = b.gemm * kMs;
  out["elementwise_ms"] = b.elementwise * kMs;
  out["prefill_attention_ms"] = b.prefill_attention * kMs;
  out["decode_attention_ms"] = b.decode_attention * kMs;
  out["lm_head_ms"] = b.lm_head * kMs;
  out["swap_ms"] = b.swap * kMs;
  out["copy_ms"] = b.copy * kMs;
  out["overhead_ms"] = b.overhead * kMs;
  out["communication_ms"] = b.communication * kMs;
  out["pipeline_ms"] = b.pipeline * kMs;
  out["total_ms"] = b.total() * kMs;
  out["step_ms"] = static_cast<double>(cost.step_time(plan)) / 1e6;
  out["flops"] = b.flops;
  out["bytes"] = b.bytes;
  return out;
}

}  // namespace

void bind_step_cost(py::module_& m) {
  m.def("step_cost", &step_cost, py::arg("name"), py::arg("text"), py::arg("base_dir"),
        py::arg("overrides"), py::arg("decode"), py::arg("prefill"), py::arg("drafts"),
        "Prices one step under an experiment's cost model; returns {operator_ms: ...}.");
}

}  // namespace servelab::python
