#include "core/lora_slots.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace servelab {

LoraSlots::LoraSlots(std::int32_t num_slots) {
  if (num_slots < 1) {
    throw std::invalid_argument("LoraSlots: needs at least one slot, got " +
                                std::to_string(num_slots));
  }
  slots_.resize(static_cast<std::size_t>(num_slots));
}

std::uint32_t LoraSlots::adapter_in(std::int32_t slot) const {
  return slots_.at(static_cast<std::size_t>(slot)).id;
}

std::int32_t LoraSlots::slot_of(std::uint32_t id) const {
  if (id == 0) return -1;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].id == id) return static_cast<std::int32_t>(i);
  }
  return -1;
}

void step_adapters(const StepPlan& plan, std::vector<std::uint32_t>& out) {
  out.clear();
  for (const ScheduledRequest& e : plan.requests) {
    if (e.num_tokens <= 0 || e.spec == nullptr || e.spec->lora_id == 0) continue;
    if (std::find(out.begin(), out.end(), e.spec->lora_id) == out.end()) {
      out.push_back(e.spec->lora_id);
    }
  }
}

std::vector<LoraSlots::Placement> LoraSlots::place(std::span<const std::uint32_t> ids) {
  std::vector<Placement> out;
  place(ids, out);
  return out;
}

void LoraSlots::place(std::span<const std::uint32_t> ids, std::vector<Placement>& out) {
  if (ids.size() > slots_.size()) {
    throw std::invalid_argument("LoraSlots: a step under " + std::to_string(ids.size()) +
                                " adapters, more than the " + std::to_string(slots_.size()) +
                                " slots (max_loras)");
  }
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == 0) throw std::invalid_argument("LoraSlots: adapter id 0 is the base model");
    if (std::find(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(i), ids[i]) !=
        ids.begin() + static_cast<std::ptrdiff_t>(i)) {
      throw std::invalid_argument("LoraSlots: adapter " + std::to_string(ids[i]) +
                                  " listed twice in one step");
    }
  }
  const std::int64_t now = ++calls_;
  out.resize(ids.size());
  // Residents first, so that no adapter of this step is evicted for another of it.
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int32_t s = slot_of(ids[i]);
    out[i] = {s, false};
    if (s >= 0) slots_[static_cast<std::size_t>(s)].last_use = now;
  }
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (out[i].slot >= 0) continue;
    // The lowest empty slot, else the least recently used one this step has not claimed.
    std::int32_t best = -1;
    for (std::size_t s = 0; s < slots_.size(); ++s) {
      const Slot& c = slots_[s];
      if (c.last_use == now) continue;
      if (c.id == 0) {
        best = static_cast<std::int32_t>(s);
        break;
      }
      if (best < 0 || c.last_use < slots_[static_cast<std::size_t>(best)].last_use) {
        best = static_cast<std::int32_t>(s);
      }
    }
    // ids.size() <= slots, and each placement claims one slot: one is always left.
    Slot& c = slots_[static_cast<std::size_t>(best)];
    c.id = ids[i];
    c.last_use = now;
    out[i] = {best, true};
    ++loads_;
  }
}

}  // namespace servelab
