// HardwareConfig: what the roofline needs to know about one accelerator.
//
// Read from experiments/catalog/hardware/<name>.yaml (or a .yaml path). The file states peaks in
// datasheet units (TFLOP/s, GB/s, GiB, microseconds); the struct holds SI base units (FLOP/s,
// B/s, bytes, seconds). Efficiency factors scale the peaks down to what kernels reach in
// practice; their defaults and the evidence behind them are in docs/cost-model.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "serving/interconnect.h"

namespace servelab {

class ConfigNode;

// The board power of one GPU (the entry's `power:` mapping; docs/cost-model.md, "Power and
// energy"), in watts. While a step runs the GPU draws
//   min(max_w, idle_w + compute_w * u_flops + memory_w * u_bytes)
// where u_flops and u_bytes are the step's FLOP rate and device-memory byte rate over the peaks
// (each clamped to [0, 1]); between steps it draws idle_w. known() is false when the entry has
// no `power:` (no energy is reported then).
struct PowerSpec {
  double idle_w = 0;     // powered, context up, nothing running
  double max_w = 0;      // the board power limit (TDP)
  double compute_w = 0;  // added at the full tensor-core rate
  double memory_w = 0;   // added at the full memory bandwidth
  bool known() const { return max_w > 0; }
};

struct HardwareConfig {
  std::string name;
  std::string source;          // the file it was read from ("" when built in code)
  double peak_flops = 0;       // dense BF16/FP16 tensor-core FLOP/s (no 2:4 sparsity)
  double peak_flops_fp32 = 0;  // FP32 FLOP/s (used for fp32 models)
  // Dense FP8 tensor-core FLOP/s (no 2:4 sparsity); 0 when the GPU has no FP8 tensor cores
  // (Ampere and older). With it, fp8 weights run as W8A8 (activations quantized per token, the
  // GEMM at this rate); without it as W8A16 (weights widened to the model's dtype in the
  // kernel, the GEMM at peak_flops): docs/cost-model.md, "KV-cache dtype and weight quantization".
  double peak_flops_fp8 = 0;
  double hbm_bandwidth = 0;        // device memory bandwidth, B/s
  std::int64_t memory_bytes = 0;   // device memory capacity
  double host_link_bandwidth = 0;  // host <-> device, one direction, B/s (PCIe)
  // Sequential read of the node's local NVMe storage, B/s (0: unknown); the disk tier of KV
  // offload (`kv_offload.disk`) reads at this rate unless the experiment states its own.
  double nvme_read_bandwidth = 0;
  // GPUs the entry describes: always 1 (an entry is one GPU; tensor and pipeline parallelism are
  // the experiment's `parallel:` section, serving/parallel_config.h).
  std::int32_t tensor_parallel = 1;
  // The GPU's links to other GPUs (`interconnect:`; empty when the entry has none).
  InterconnectSpec interconnect;
  // Board power (`power:`; unknown when the entry has none).
  PowerSpec power;

  // Fractions of peak reached in practice, each in (0, 1]. The bandwidth efficiencies of
  // GEMM weight streaming and of each elementwise kind may be 0, meaning
  // memory_bandwidth_efficiency's value. The defaults are the classic roofline (hard max, no
  // per-launch times, one bandwidth efficiency); the shipped catalogue holds values fitted to
  // measured kernels (docs/cost-model.md, sim/operator_time.h).
  double gemm_flops_efficiency = 0.65;       // GEMMs, of peak_flops
  double attention_flops_efficiency = 0.5;   // prefill attention, of peak_flops
  double memory_bandwidth_efficiency = 0.7;  // streaming KV (attention) and copies
  double host_link_efficiency = 0.8;         // pinned-memory copies, of host_link_bandwidth
  double gemm_bandwidth_efficiency = 0;      // GEMM weight and activation traffic
  double norm_bandwidth_efficiency = 0;      // elementwise kinds (sim/operator_time.h)
  double rope_bandwidth_efficiency = 0;
  double activation_bandwidth_efficiency = 0;
  double residual_bandwidth_efficiency = 0;
  // How compute and memory time of one launch combine: a p-norm exponent >= 1 (1: they add;
  // larger: they overlap more), or 0 for the hard max.
  double gemm_overlap = 0;
  double elementwise_overlap = 0;
  double gemm_min_s = 0;         // added to every GEMM launch
  double elementwise_min_s = 0;  // the least an elementwise launch takes

  // Host time of a step (scheduling, input preparation, sampling, detokenisation, output
  // processing): a fixed part for every non-empty step plus a part per sampled sequence.
  double step_overhead_s = 500e-6;
  double sequence_overhead_s = 0;

  // Block-table indirection of paged attention: time per KV block an attention kernel visits,
  // per layer (looking up the block id, a gather that starts a new memory stream, the loop's
  // per-block bookkeeping), added to prefill and decode attention. 0 (the default) charges
  // nothing, as a kernel that stages page ids in shared memory does (FlashInfer); the vLLM
  // paper's PagedAttention kernel is 20-26 % slower than a contiguous one, the basis of the
  // values docs/cost-model.md ("Block-table indirection") derives.
  double block_indirection_s = 0;

  // peak_flops for bf16/fp16, peak_flops_fp32 for fp32.
  double peak_flops_for(std::string_view dtype) const {
    return dtype == "fp32" ? peak_flops_fp32 : peak_flops;
  }
  bool has_fp8_tensor_cores() const { return peak_flops_fp8 > 0; }
  // Throws ConfigError (naming `source` and the field) when a value is out of range or
  // tensor_parallel is not 1.
  void validate() const;
  // This entry with its kernel parameters reset to the classic roofline (the defaults above:
  // GEMM efficiency 0.65, hard max, no per-launch times, memory_bandwidth_efficiency for all
  // traffic, no per-sequence host time). Peaks, attention, host link and step overhead are kept.
  // What `sim calibrate --vidur` reports as "before" and what docs/cost-model.md's worked
  // example uses.
  HardwareConfig classic_roofline() const;
};

// A hardware entry from a YAML mapping; `name` defaults to `default_name`. Strict: unknown keys,
// missing required keys and out-of-range values are ConfigErrors with FILE:LINE:COL and the key.
HardwareConfig parse_hardware(const ConfigNode& node, const std::string& default_name);

// A `power:` mapping: idle_w, max_w, compute_w, memory_w, all required (watts, idle_w >= 0,
// max_w > idle_w, compute_w and memory_w >= 0). Unknown keys, missing keys and out-of-range
// values are ConfigErrors with the location.
PowerSpec parse_power(const ConfigNode& node);

// An `interconnect:` mapping: gpus_per_node, efficiency (default 1), and for each link kind K
// (nvlink, pcie, infiniband, ethernet) K_gbps (GB/s each way, > 0) with an optional K_latency_us
// (per hop, default 0). Absent kinds have bandwidth 0. Unknown keys and out-of-range values are
// ConfigErrors with the location.
InterconnectSpec parse_interconnect(const ConfigNode& node);

// `name_or_path` is a path ending in .yaml/.yml, or a catalogue name looked up as
// catalog_dir/hardware/<name>.yaml (case-sensitive; an unknown name is a ConfigError listing
// the names the catalogue has).
HardwareConfig load_hardware(const std::string& name_or_path, const std::string& catalog_dir);

}  // namespace servelab
