// The checks both executors (CpuExecutor, CudaExecutor) make on a StepPlan before it changes
// any state, so a scheduler bug is an exception naming the request, never a wild memory access.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string_view>

#include "core/step_plan.h"

namespace servelab {

// What an executor holds: KV blocks on the device and in host swap space, tokens per block,
// and the longest context it can compute (RoPE table rows; no limit by default).
struct PlanLimits {
  std::int32_t num_blocks = 0;
  std::int32_t num_host_blocks = 0;
  std::int32_t block_size = 1;
  std::int64_t max_context = std::numeric_limits<std::int64_t>::max();
};

// Throws std::invalid_argument("<who>: <what>") on the first violation, in this order: a swap
// out (device -> host), swap in (host -> device) or copy (device -> device) block out of range;
// then per scheduled request ("request ID: ..."): an empty entry (no spec, no tokens or a
// negative first token), a block table shorter than the context, a block id out of range
// among the blocks the context covers, positions beyond the prompt and the tokens sampled so
// far, a context longer than `max_context` ("context beyond max_model_len").
void check_plan(const StepPlan& plan, const PlanLimits& limits, std::string_view who);

// The KV offload host tier's moves (core/step_plan.h TierStore, TierLoad): throws
// std::invalid_argument("<who>: ...") for a store from a block outside [1, num_blocks) or into a
// slot outside [0, num_tier_slots), a load not from the host tier, from a slot out of range or
// into a block outside [1, num_blocks), or loads whose stores_before decrease or exceed the
// plan's stores.
void check_tier_moves(const StepPlan& plan, std::int32_t num_blocks, std::int32_t num_tier_slots,
                      std::string_view who);

// LoRA entries: throws std::invalid_argument("<who>: ...") for an entry under an adapter
// (spec->lora_id > 0) when `enable_lora` is off, or asked with a rank below 1 or other than the
// one the adapter was built with (`built_rank(id)`: 0 for an adapter not built yet).
void check_lora_entries(const StepPlan& plan, bool enable_lora,
                        const std::function<std::int32_t(std::uint32_t)>& built_rank,
                        std::string_view who);

}  // namespace servelab
