// MixWorkload: several workloads served together, each a request class (a tenant, a priority
// level, an application), merged into one stream by arrival time.
//
// YAML (the `workload:` section; every key is checked):
//
//   workload:
//     type: mix
//     parts:
//       - class: chat               # the class's name: letters, digits, '-', '_', '.'; unique
//         tenant: 0                 # optional: every request's tenant (default: the part's index,
//                                   # 0, 1, 2, ...); `workload` keeps the tenant the part's
//                                   # workload gives (a trace's tenant column)
//         priority: 0               # optional: every request's priority (smaller is served first);
//                                   # default: the part's workload's (0 for synthetic ones)
//         workload: {type: synthetic, duration_s: 60, arrival: {process: poisson, rate: 4}, ...}
//       - class: batch
//         workload: {type: azure, path: traces/azure2023/AzureLLMInferenceTrace_code.csv, ...}
//     # and, applied to the merged stream, the keys every type takes: transforms, sampling,
//     # cache_salt, multimodal, lora
//
// A part's `workload` is any open-loop workload: every type but multiturn and sessions (whose
// arrivals depend on finishes) and mix. Its random streams and content ids
// derive from the experiment seed and the class name (part_seed), so adding, removing or
// reordering parts leaves every other part's requests as they were, and two parts never share
// prompt content (even with the same shared_prefix settings; a trace part's content ids, read
// from its file, are moved into a namespace of the part's, so two files' hash ids 0, 1, ... or
// two converted traces' segments are different prompts, and so are two parts of one file).
//
// Merging: the request arriving first comes first; at equal arrival times the earlier part
// first, then its own order. Requests are renumbered 0, 1, 2, ... in merged order and carry their
// part's index as RequestSpec::request_class, so every metric can be split by class
// (docs/metrics.md "Request classes").
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "traces/workload.h"

namespace servelab {

// The class names of a `workload:` section: its parts' `class` values in order for type mix
// (checked: present, well formed, unique; ConfigError naming the key otherwise), empty for every
// other type. Reads nothing but the names, so an experiment can check `slo.classes` against
// them before any workload is built.
std::vector<std::string> request_class_names(const ConfigNode& workload_section);

// Whether the `workload:` section, or for type mix one of its parts' workloads, gives `key` (a
// driver asks for "sampling": stop conditions may then end requests).
bool workload_gives(const ConfigNode& workload_section, std::string_view key);

// The seed of the mix part named `class_name` in an experiment with seed `seed`.
std::uint64_t part_seed(std::uint64_t seed, const std::string& class_name);

struct MixPart {
  std::string class_name;
  std::unique_ptr<Workload> workload;    // open loop (dependent() false)
  std::optional<std::uint32_t> tenant;   // replaces every request's tenant
  std::optional<std::int32_t> priority;  // replaces every request's priority
  std::string
      where;  // "FILE:LINE:COL: key 'workload.parts[i].workload'", for errors ("": the name)
  // Nonzero: every prompt segment's content id is moved into this part's own namespace (a
  // trace part: a file's content ids, Mooncake hash ids or a ServeLab trace's segments, are the
  // same numbers in every file, and two parts would share prompt content they do not share).
  std::uint64_t content_namespace = 0;
};

class MixWorkload : public Workload {
 public:
  // REQUIRES: parts non-empty, no part's workload dependent().
  explicit MixWorkload(std::vector<MixPart> parts);

  std::optional<RequestSpec> next() override;
  std::string describe() const override;
  std::int64_t skipped_rows() const override;
  std::int64_t filtered_rows() const override;

 private:
  std::vector<MixPart> parts_;
  std::vector<std::optional<RequestSpec>> heads_;  // each part's next request
  bool started_ = false;
  RequestId next_id_ = 0;
};

// Builds the workload of a `type: mix` section (the decorating keys are the caller's: see
// make_workload). Throws ConfigError for any invalid key, value or file.
std::unique_ptr<Workload> make_mix_workload(const ConfigNode& section, std::uint64_t seed,
                                            const std::string& base_dir);

}  // namespace servelab
