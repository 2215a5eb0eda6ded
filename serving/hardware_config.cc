#include "serving/hardware_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "core/strings.h"
#include "serving/config_node.h"
#include "serving/model_config.h"

namespace servelab {

namespace fs = std::filesystem;

namespace {

HardwareConfig load_file(const std::string& path) {
  const ConfigNode node = ConfigNode::load_file(path);
  HardwareConfig hw = parse_hardware(node, fs::path(path).stem().string());
  hw.source = path;
  return hw;
}

}  // namespace

InterconnectSpec parse_interconnect(const ConfigNode& node) {
  std::vector<std::string> keys = {"gpus_per_node", "efficiency"};
  for (LinkKind k : kLinkKinds) {
    keys.push_back(std::string(to_string(k)) + "_gbps");
    keys.push_back(std::string(to_string(k)) + "_latency_us");
  }
  node.allow_keys(keys);
  InterconnectSpec ic;
  ic.gpus_per_node = static_cast<std::int32_t>(node.get_int("gpus_per_node", 0, 1, 1 << 16));
  ic.efficiency = node.get_double("efficiency", 1.0, 1e-3, 1.0);
  for (LinkKind k : kLinkKinds) {
    const std::string gbps = std::string(to_string(k)) + "_gbps";
    const std::string latency = std::string(to_string(k)) + "_latency_us";
    // GB/s (1e9 B/s) each way, and microseconds per hop; a latency needs its bandwidth.
    if (!node.has(gbps)) {
      if (node.has(latency)) node.at(latency).fail_message("given without " + gbps);
      continue;
    }
    ic[k].bandwidth = node.get_double(gbps, 1e-3, 1e6) * 1e9;
    ic[k].latency_s = node.get_double(latency, 0.0, 0.0, 1e6) * 1e-6;
  }
  return ic;
}

PowerSpec parse_power(const ConfigNode& node) {
  node.allow_keys({"idle_w", "max_w", "compute_w", "memory_w"});
  PowerSpec p;
  p.idle_w = node.get_double("idle_w", 0.0, 1e5);
  p.max_w = node.get_double("max_w", 1e-3, 1e5);
  if (p.max_w <= p.idle_w) {
    node.at("max_w").fail(format_text("more than idle_w (%g W)", p.idle_w));
  }
  p.compute_w = node.get_double("compute_w", 0.0, 1e5);
  p.memory_w = node.get_double("memory_w", 0.0, 1e5);
  return p;
}

HardwareConfig HardwareConfig::classic_roofline() const {
  const HardwareConfig classic;
  HardwareConfig hw = *this;
  hw.gemm_flops_efficiency = classic.gemm_flops_efficiency;
  hw.gemm_bandwidth_efficiency = classic.gemm_bandwidth_efficiency;
  hw.norm_bandwidth_efficiency = classic.norm_bandwidth_efficiency;
  hw.rope_bandwidth_efficiency = classic.rope_bandwidth_efficiency;
  hw.activation_bandwidth_efficiency = classic.activation_bandwidth_efficiency;
  hw.residual_bandwidth_efficiency = classic.residual_bandwidth_efficiency;
  hw.gemm_overlap = classic.gemm_overlap;
  hw.elementwise_overlap = classic.elementwise_overlap;
  hw.gemm_min_s = classic.gemm_min_s;
  hw.elementwise_min_s = classic.elementwise_min_s;
  hw.sequence_overhead_s = classic.sequence_overhead_s;
  return hw;
}

void HardwareConfig::validate() const {
  const std::string where = (source.empty() ? "hardware '" + name + "'" : source) + ": key '";
  auto check = [&](bool ok, const char* key, const char* what) {
    if (!ok) throw ConfigError(where + key + "': " + what);
  };
  check(peak_flops > 0 && std::isfinite(peak_flops), "peak_flops", "must be positive");
  check(peak_flops_fp32 > 0 && std::isfinite(peak_flops_fp32), "peak_flops_fp32",
        "must be positive");
  check(peak_flops_fp8 >= 0 && std::isfinite(peak_flops_fp8), "peak_flops_fp8",
        "must be positive, or 0 for a GPU without FP8 tensor cores");
  check(hbm_bandwidth > 0 && std::isfinite(hbm_bandwidth), "hbm_bandwidth", "must be positive");
  check(memory_bytes > 0, "memory_bytes", "must be positive");
  check(host_link_bandwidth > 0 && std::isfinite(host_link_bandwidth), "host_link_bandwidth",
        "must be positive");
  check(tensor_parallel == 1, "tensor_parallel", "only 1 is supported for now");
  auto fraction = [](double f) { return f > 0 && f <= 1; };
  check(fraction(gemm_flops_efficiency), "gemm_flops_efficiency", "must be in (0, 1]");
  check(fraction(attention_flops_efficiency), "attention_flops_efficiency", "must be in (0, 1]");
  check(fraction(memory_bandwidth_efficiency), "memory_bandwidth_efficiency", "must be in (0, 1]");
  check(fraction(host_link_efficiency), "host_link_efficiency", "must be in (0, 1]");
  auto fraction_or_zero = [](double f) { return f >= 0 && f <= 1; };
  check(fraction_or_zero(gemm_bandwidth_efficiency), "gemm_bandwidth_efficiency",
        "must be in [0, 1]");
  check(fraction_or_zero(norm_bandwidth_efficiency), "norm_bandwidth_efficiency",
        "must be in [0, 1]");
  check(fraction_or_zero(rope_bandwidth_efficiency), "rope_bandwidth_efficiency",
        "must be in [0, 1]");
  check(fraction_or_zero(activation_bandwidth_efficiency), "activation_bandwidth_efficiency",
        "must be in [0, 1]");
  check(fraction_or_zero(residual_bandwidth_efficiency), "residual_bandwidth_efficiency",
        "must be in [0, 1]");
  auto overlap = [](double k) { return k == 0 || (k >= 1 && k <= 64); };
  check(overlap(gemm_overlap), "gemm_overlap", "must be 0 (hard max) or in [1, 64]");
  check(overlap(elementwise_overlap), "elementwise_overlap", "must be 0 (hard max) or in [1, 64]");
  check(gemm_min_s >= 0 && gemm_min_s < 1, "gemm_min_s", "must be in [0, 1)");
  check(elementwise_min_s >= 0 && elementwise_min_s < 1, "elementwise_min_s", "must be in [0, 1)");
  check(step_overhead_s >= 0 && step_overhead_s < 10, "step_overhead_s", "must be in [0, 10)");
  check(sequence_overhead_s >= 0 && sequence_overhead_s < 1, "sequence_overhead_s",
        "must be in [0, 1)");
  check(block_indirection_s >= 0 && block_indirection_s < 1e-3, "block_indirection_s",
        "must be in [0, 1 ms)");
  if (power.known()) {
    check(power.idle_w >= 0 && power.idle_w < power.max_w, "power.idle_w", "must be in [0, max_w)");
    check(power.compute_w >= 0 && std::isfinite(power.compute_w), "power.compute_w",
          "must be >= 0");
    check(power.memory_w >= 0 && std::isfinite(power.memory_w), "power.memory_w", "must be >= 0");
  }
}

HardwareConfig parse_hardware(const ConfigNode& node, const std::string& default_name) {
  node.allow_keys({"name", "description", "peak_tflops", "peak_tflops_fp32", "peak_tflops_fp8",
                   "hbm_bandwidth_gbps", "memory_gib", "host_link_gbps", "tensor_parallel",
                   "efficiency", "kernel_min_us", "step_overhead_us", "sequence_overhead_us",
                   "block_indirection_ns", "fitted", "interconnect", "nvme_read_gbps", "power"});
  HardwareConfig hw;
  hw.name = node.get_string("name", default_name);
  hw.source = node.file();
  (void)node.get_string("description", "");  // checks it is a string when present
  // Units in the file are the datasheet's: TFLOP/s, GB/s (1e9 B/s), GiB, microseconds.
  hw.peak_flops = node.get_double("peak_tflops", 1e-3, 1e6) * 1e12;
  hw.peak_flops_fp32 = node.get_double("peak_tflops_fp32", 1e-3, 1e6) * 1e12;
  // Optional: absent on GPUs without FP8 tensor cores.
  hw.peak_flops_fp8 = node.get_double("peak_tflops_fp8", 0.0, 1e-3, 1e6) * 1e12;
  hw.hbm_bandwidth = node.get_double("hbm_bandwidth_gbps", 1e-3, 1e7) * 1e9;
  hw.memory_bytes = std::llround(node.get_double("memory_gib", 1e-3, 1e6) * 1073741824.0);
  hw.host_link_bandwidth = node.get_double("host_link_gbps", 1e-3, 1e6) * 1e9;
  hw.nvme_read_bandwidth = node.get_double("nvme_read_gbps", 0.0, 1e-3, 1e5) * 1e9;
  hw.tensor_parallel = static_cast<std::int32_t>(node.get_int("tensor_parallel", 1, 1, 1));
  if (const auto eff = node.find("efficiency")) {
    eff->allow_keys({"gemm_flops", "attention_flops", "memory_bandwidth", "host_link",
                     "gemm_bandwidth", "norm_bandwidth", "rope_bandwidth", "activation_bandwidth",
                     "residual_bandwidth", "gemm_overlap", "elementwise_overlap"});
    hw.gemm_flops_efficiency = eff->get_double("gemm_flops", hw.gemm_flops_efficiency, 1e-6, 1.0);
    hw.attention_flops_efficiency =
        eff->get_double("attention_flops", hw.attention_flops_efficiency, 1e-6, 1.0);
    hw.memory_bandwidth_efficiency =
        eff->get_double("memory_bandwidth", hw.memory_bandwidth_efficiency, 1e-6, 1.0);
    hw.host_link_efficiency = eff->get_double("host_link", hw.host_link_efficiency, 1e-6, 1.0);
    hw.gemm_bandwidth_efficiency = eff->get_double("gemm_bandwidth", 0.0, 1e-6, 1.0);
    hw.norm_bandwidth_efficiency = eff->get_double("norm_bandwidth", 0.0, 1e-6, 1.0);
    hw.rope_bandwidth_efficiency = eff->get_double("rope_bandwidth", 0.0, 1e-6, 1.0);
    hw.activation_bandwidth_efficiency = eff->get_double("activation_bandwidth", 0.0, 1e-6, 1.0);
    hw.residual_bandwidth_efficiency = eff->get_double("residual_bandwidth", 0.0, 1e-6, 1.0);
    hw.gemm_overlap = eff->get_double("gemm_overlap", 0.0, 1.0, 64.0);
    hw.elementwise_overlap = eff->get_double("elementwise_overlap", 0.0, 1.0, 64.0);
  }
  if (const auto mins = node.find("kernel_min_us")) {
    mins->allow_keys({"gemm", "elementwise"});
    hw.gemm_min_s = mins->get_double("gemm", 0.0, 0.0, 1e5) * 1e-6;
    hw.elementwise_min_s = mins->get_double("elementwise", 0.0, 0.0, 1e5) * 1e-6;
  }
  if (const auto fitted = node.find("fitted")) {
    // Provenance of fitted values (`sim calibrate --vidur` writes it): free-form strings.
    fitted->allow_keys({"from", "method", "held_out"});
    (void)fitted->get_string("from", "");
    (void)fitted->get_string("method", "");
    (void)fitted->get_string("held_out", "");
  }
  if (const auto ic = node.find("interconnect")) hw.interconnect = parse_interconnect(*ic);
  if (const auto power = node.find("power")) hw.power = parse_power(*power);
  hw.step_overhead_s =
      node.get_double("step_overhead_us", hw.step_overhead_s * 1e6, 0.0, 1e7 - 1) * 1e-6;
  hw.sequence_overhead_s = node.get_double("sequence_overhead_us", 0.0, 0.0, 1e6 - 1) * 1e-6;
  hw.block_indirection_s = node.get_double("block_indirection_ns", 0.0, 0.0, 1e6 - 1) * 1e-9;
  return hw;
}

HardwareConfig load_hardware(const std::string& name_or_path, const std::string& catalog_dir) {
  if (ends_with(name_or_path, ".yaml") || ends_with(name_or_path, ".yml")) {
    return load_file(name_or_path);
  }
  const std::vector<std::string> names = catalog_names(catalog_dir, "hardware");
  if (name_or_path.find('/') != std::string::npos ||
      std::find(names.begin(), names.end(), name_or_path) == names.end()) {
    throw ConfigError("unknown hardware '" + name_or_path + "': the catalogue " +
                      (fs::path(catalog_dir) / "hardware").string() + " has " +
                      (names.empty() ? std::string("no hardware") : join(names)));
  }
  return load_file((fs::path(catalog_dir) / "hardware" / (name_or_path + ".yaml")).string());
}

}  // namespace servelab
