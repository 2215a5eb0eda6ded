// PreemptionMode: what preempting a victim does to its KV (the `preemption` plugin kind).
//
// The scheduler asks swap(victim) once per preemption (rarely, so virtual dispatch is free): true
// moves the victim's KV to host blocks (vLLM v0 preemption_mode=swap; it keeps its
// num_computed_tokens and joins the swapped list), false drops it (recompute: blocks freed with
// their hashes kept, num_computed_tokens reset, back to the waiting queue). Even when swap()
// says yes the scheduler recomputes a victim the host pool cannot take, or one past the
// preemption cap (see core/scheduler.h).
//
// Contract: immutable after construction, deterministic. A mode whose uses_host_memory() is
// true needs a HostBlockPool in the KvCacheManager and a batch formation whose
// resumes_swapped() is true.
//
// RecomputePreemption is vLLM v1's only mode and the scheduler's default, so it lives here; swap
// and auto are plugins in policies/.
#pragma once

#include <string_view>

namespace servelab {

struct Request;
struct SchedulerConfig;

class PreemptionMode {
 public:
  virtual ~PreemptionMode() = default;
  // The registry name ("recompute", "swap", "auto"), for messages.
  virtual std::string_view name() const = 0;
  // Whether this mode may ever swap (the driver then gives the KV cache manager host blocks).
  virtual bool uses_host_memory() const = 0;
  // Whether `victim` should be swapped out rather than recomputed. `config` carries the
  // driver's cost oracle (SchedulerConfig::prefer_swap).
  virtual bool swap(const Request& victim, const SchedulerConfig& config) const = 0;
};

// vLLM v1: free the KV, recompute prompt + outputs on resume.
class RecomputePreemption final : public PreemptionMode {
 public:
  std::string_view name() const override { return "recompute"; }
  bool uses_host_memory() const override { return false; }
  bool swap(const Request&, const SchedulerConfig&) const override { return false; }
};

}  // namespace servelab
