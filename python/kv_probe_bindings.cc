// servelab.compare_kv_dtypes: the CPU engine's accuracy cost of each KV-cache dtype against bf16
// KV, teacher-forced (engine/kv_dtype_probe.h), on a catalogue model's random weights (the tiny
// model in docs/lessons/fp8-kv.md). A format is a model.kv_cache_dtype value (fp32 added, the
// reference's own rounding); the suffix ":computed_scales" computes fp8's per-tensor scales from
// the data instead of using 1. servelab.compare_weight_quantizations: the same for each
// model.quantization against the unquantized weights (engine/weight_quant_probe.h;
// docs/lessons/quantized-weights.md).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/config_error.h"
#include "engine/kv_dtype_probe.h"
#include "engine/weight_quant_probe.h"
#include "python/bindings.h"
#include "python/python_plugins.h"
#include "serving/interrupt.h"
#include "serving/model_config.h"

namespace py = pybind11;

namespace servelab::python {

namespace {

KvProbeCase parse_case(const std::string& text, std::size_t i) {
  KvProbeCase c;
  c.name = text;
  std::string dtype = text;
  const std::string suffix = ":computed_scales";
  if (dtype.size() > suffix.size() &&
      dtype.compare(dtype.size() - suffix.size(), suffix.size(), suffix) == 0) {
    c.compute_scales = true;
    dtype.resize(dtype.size() - suffix.size());
  }
  using kernels::FloatFormat;
  if (dtype == "fp32") {
    c.format = FloatFormat::kFp32;
  } else if (dtype == "bf16") {
    c.format = FloatFormat::kBf16;
  } else if (dtype == "fp16") {
    c.format = FloatFormat::kFp16;
  } else if (dtype == "fp8" || dtype == "fp8_e4m3") {
    c.format = FloatFormat::kFp8E4m3;
  } else if (dtype == "fp8_e5m2") {
    c.format = FloatFormat::kFp8E5m2;
  } else {
    throw ConfigError("compare_kv_dtypes: formats[" + std::to_string(i) +
                      "]: expected fp32, bf16, fp16, fp8, fp8_e4m3 or fp8_e5m2 (fp8 ones "
                      "optionally with :computed_scales), got '" +
                      text + "'");
  }
  if (c.compute_scales && c.format != FloatFormat::kFp8E4m3 && c.format != FloatFormat::kFp8E5m2) {
    throw ConfigError("compare_kv_dtypes: formats[" + std::to_string(i) +
                      "]: computed scales apply to fp8 formats only, got '" + text + "'");
  }
  return c;
}

// The probe's setup from the functions' arguments, each count checked (`function` names the
// caller in the errors).
KvProbeSetup probe_setup(const char* function, std::int64_t requests, std::int64_t prompt_len,
                         std::int64_t decode_tokens, std::int64_t block_size) {
  auto check = [&](const char* name, std::int64_t value, std::int64_t max) {
    if (value < 1 || value > max) {
      throw ConfigError(std::string(function) + ": " + name + ": expected 1 to " +
                        std::to_string(max) + ", got " + std::to_string(value));
    }
    return static_cast<std::int32_t>(value);
  };
  KvProbeSetup setup;
  setup.requests = check("requests", requests, 1024);
  setup.prompt_len = check("prompt_len", prompt_len, 1 << 16);
  setup.decode_tokens = check("decode_tokens", decode_tokens, 1 << 16);
  setup.block_size = check("block_size", block_size, 1024);
  return setup;
}

// One dict per difference; `key` names the compared format's column.
py::list rows(const std::vector<KvProbeDifference>& diffs, const char* key) {
  py::list out;
  for (const KvProbeDifference& d : diffs) {
    py::dict row;
    row[key] = d.name;
    row["max_logit_diff"] = d.max_abs;
    row["max_logit"] = d.max_logit;
    row["tokens_differing"] = d.differing;
    row["steps"] = d.steps;
    out.append(row);
  }
  return out;
}

py::list compare(const std::string& model, std::uint64_t seed, std::int64_t requests,
                 std::int64_t prompt_len, std::int64_t decode_tokens, std::int64_t block_size,
                 const std::vector<std::string>& formats) {
  const KvProbeSetup setup =
      probe_setup("compare_kv_dtypes", requests, prompt_len, decode_tokens, block_size);
  if (formats.empty()) throw ConfigError("compare_kv_dtypes: formats: expected at least one");
  std::vector<KvProbeCase> cases;
  for (std::size_t i = 0; i < formats.size(); ++i) cases.push_back(parse_case(formats[i], i));
  const LlamaConfig config = load_llama_config(model, default_catalog_dir());
  std::vector<KvProbeDifference> diffs;
  {
    const RegistryReaders registry_readers;  // see python_plugins.h
    py::gil_scoped_release release;
    ScopedInterruptHandler interrupt;  // Ctrl-C stops between steps
    diffs = compare_kv_dtypes(LlamaWeights::random(config, seed), setup, cases);
  }
  return rows(diffs, "format");
}

py::list compare_weights(const std::string& model, std::uint64_t seed, std::int64_t requests,
                         std::int64_t prompt_len, std::int64_t decode_tokens,
                         std::int64_t block_size, const std::vector<std::string>& quantizations) {
  const KvProbeSetup setup =
      probe_setup("compare_weight_quantizations", requests, prompt_len, decode_tokens, block_size);
  if (quantizations.empty()) {
    throw ConfigError("compare_weight_quantizations: quantizations: expected at least one");
  }
  for (std::size_t i = 0; i < quantizations.size(); ++i) {
    const std::string& q = quantizations[i];
    if (std::find(std::begin(kQuantizations), std::end(kQuantizations), q) ==
        std::end(kQuantizations)) {
      throw ConfigError("compare_weight_quantizations: quantizations[" + std::to_string(i) +
                        "]: expected none, fp8, awq or awq_marlin, got '" + q + "'");
    }
  }
  const LlamaConfig config = load_llama_config(model, default_catalog_dir());
  std::vector<KvProbeDifference> diffs;
  {
    const RegistryReaders registry_readers;  // see python_plugins.h
    py::gil_scoped_release release;
    ScopedInterruptHandler interrupt;  // Ctrl-C stops between steps
    try {
      diffs =
          compare_weight_quantizations(LlamaWeights::random(config, seed), setup, quantizations);
    } catch (const ConfigError& e) {
      throw ConfigError(std::string("compare_weight_quantizations: ") + e.what());
    }
  }
  return rows(diffs, "quantization");
}

}  // namespace

void bind_kv_probe(py::module_& m) {
  m.def("compare_kv_dtypes", &compare, py::arg("model"), py::arg("seed"), py::arg("requests"),
        py::arg("prompt_len"), py::arg("decode_tokens"), py::arg("block_size"), py::arg("formats"),
        "Each KV format against bf16 KV on the CPU engine, teacher-forced; returns a list of "
        "dicts.");
  m.def("compare_weight_quantizations", &compare_weights, py::arg("model"), py::arg("seed"),
        py::arg("requests"), py::arg("prompt_len"), py::arg("decode_tokens"), py::arg("block_size"),
        py::arg("quantizations"),
        "Each weight quantization against the unquantized weights on the CPU engine, "
        "teacher-forced; returns a list of dicts.");
}

}  // namespace servelab::python
