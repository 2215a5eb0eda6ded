// LoraSlots: which LoRA adapter occupies which of an executor's fixed adapter slots, as vLLM's
// LoRAModelManager keeps them (vllm/lora/model_manager.py: `max_loras` GPU slots allocated with
// the model at `max_lora_rank`, an adapter activated into a free slot, the least recently used
// one deactivated when none is free). The CUDA executor allocates the slots before it sizes its
// KV cache, so they take device memory from the cache as vLLM's do (serving/kv_capacity.h
// lora_slot_bytes gives the simulator the same figure).
//
// The simulator keeps the same table (sim/sim_backend.h: each load priced as the adapter's bytes
// over the host link, as vLLM copies it from its CPU cache) and so does the run's Recorder
// (summary.json lora.adapter_loads, for either backend).
//
// place() is called once per step with the step's distinct adapters (step_adapters()): an adapter
// already in a slot stays there; each other one takes the lowest free slot, else the slot whose
// adapter was used longest ago among those the step does not use (a slot's use is the last step
// that placed it; of adapters last used by the same step, the lowest slot's goes first). The caller
// loads the adapter into each placement marked `load` before the step's kernels read it.
// Deterministic: the result depends only on the sequence of calls.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/step_plan.h"

namespace servelab {

// The distinct adapters (spec->lora_id > 0) of `plan`'s entries that compute tokens, in the order
// of their first entry, into `out` (cleared first; no allocation once it has grown).
void step_adapters(const StepPlan& plan, std::vector<std::uint32_t>& out);

class LoraSlots {
 public:
  // REQUIRES: num_slots >= 1 (std::invalid_argument otherwise).
  explicit LoraSlots(std::int32_t num_slots);

  struct Placement {
    std::int32_t slot = 0;
    bool load = false;  // the slot did not hold this adapter: the caller must (re)load it
  };
  // One placement per id, in the order given. Throws std::invalid_argument when `ids` holds a 0
  // (the base model takes no slot), a repeated id, or more ids than slots (the scheduler admits
  // at most max_loras adapters to a step, so an executor with max_loras slots never sees that);
  // nothing changes then.
  std::vector<Placement> place(std::span<const std::uint32_t> ids);
  // The same into `out` (resized to ids.size(); no allocation once it has grown).
  void place(std::span<const std::uint32_t> ids, std::vector<Placement>& out);

  // The adapter in `slot` (0: empty) and the slot holding `id` (-1: none).
  std::uint32_t adapter_in(std::int32_t slot) const;
  std::int32_t slot_of(std::uint32_t id) const;
  std::int32_t num_slots() const { return static_cast<std::int32_t>(slots_.size()); }
  // Loads so far (placements marked `load`): how often adapters were brought in.
  std::int64_t loads() const { return loads_; }

 private:
  struct Slot {
    std::uint32_t id = 0;       // 0: empty
    std::int64_t last_use = 0;  // the place() call that last placed it
  };
  std::vector<Slot> slots_;
  std::int64_t calls_ = 0;
  std::int64_t loads_ = 0;
};

}  // namespace servelab
