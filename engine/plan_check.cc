#include "engine/plan_check.h"

#include <stdexcept>
#include <string>

#include "core/kv_offload_tiers.h"

namespace servelab {

void check_plan(const StepPlan& plan, const PlanLimits& limits, std::string_view who) {
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(std::string(who) + ": " + what);
  };
  auto device = [&](BlockId b) { return b >= 0 && b < limits.num_blocks; };
  auto host = [&](BlockId b) { return b >= 0 && b < limits.num_host_blocks; };
  for (const BlockMove& m : plan.swap_out) {
    check(device(m.src) && host(m.dst), "swap_out block out of range");
  }
  for (const BlockMove& m : plan.swap_in) {
    check(host(m.src) && device(m.dst), "swap_in block out of range");
  }
  for (const BlockMove& m : plan.copies) {
    check(device(m.src) && device(m.dst), "copy block out of range");
  }
  const std::int32_t bs = limits.block_size;
  for (std::size_t k = 0; k < plan.requests.size(); ++k) {
    const ScheduledRequest& e = plan.requests[k];
    const std::string id = "request " + std::to_string(e.id);
    check(e.spec != nullptr && e.num_tokens >= 1 && e.first_token >= 0, id + ": empty entry");
    check(static_cast<std::int64_t>(e.block_table.size()) * bs >= e.context_len(),
          id + ": block table too short");
    for (std::int32_t b = 0; b * bs < e.context_len(); ++b) {
      check(device(e.block_table[b]), id + ": block id out of range");
    }
    // Known tokens, plus the draft tokens a verify entry checks (speculative decoding), plus in
    // a pipelined plan the previous step's token of a one-token decode (async scheduling).
    const std::int64_t known =
        e.spec->prompt_len + static_cast<std::int64_t>(e.output_tokens.size());
    const bool takes_previous = plan.pipelined && e.num_tokens == 1 && e.first_token == known;
    check(e.context_len() <= known + static_cast<std::int64_t>(plan.drafts_of(k).size()) +
                                 (takes_previous ? 1 : 0),
          id + ": positions beyond the known tokens");
    check(e.context_len() <= limits.max_context, id + ": context beyond max_model_len");
  }
}

void check_tier_moves(const StepPlan& plan, std::int32_t num_blocks, std::int32_t num_tier_slots,
                      std::string_view who) {
  const std::int32_t nd = num_blocks, nt = num_tier_slots;
  auto bad = [who](const std::string& what) {
    throw std::invalid_argument(std::string(who) + ": " + what);
  };
  for (const TierStore& st : plan.tier_stores) {
    if (st.src <= 0 || st.src >= nd || st.dst_slot < 0 || st.dst_slot >= nt) {
      bad("tier store from block " + std::to_string(st.src) + " to slot " +
          std::to_string(st.dst_slot) + " is out of range (" + std::to_string(nt) + " slots)");
    }
  }
  std::int32_t before = 0;
  for (const TierLoad& l : plan.tier_loads) {
    if (l.tier != kHostTier || l.src < 0 || l.src >= nt || l.dst <= 0 || l.dst >= nd ||
        l.stores_before < before ||
        l.stores_before > static_cast<std::int32_t>(plan.tier_stores.size())) {
      bad("tier load from tier " + std::to_string(l.tier) + " slot " + std::to_string(l.src) +
          " to block " + std::to_string(l.dst) + " is out of range or order (" +
          std::to_string(nt) + " host-tier slots)");
    }
    before = l.stores_before;
  }
}

void check_lora_entries(const StepPlan& plan, bool enable_lora,
                        const std::function<std::int32_t(std::uint32_t)>& built_rank,
                        std::string_view who) {
  for (const ScheduledRequest& e : plan.requests) {
    const std::uint32_t id = e.spec->lora_id;
    if (id == 0) continue;
    if (!enable_lora) {
      throw std::invalid_argument(std::string(who) + ": request " + std::to_string(e.id) +
                                  " runs under LoRA adapter " + std::to_string(id) +
                                  " but LoRA is not enabled");
    }
    const std::int32_t built = built_rank(id);
    if (e.spec->lora_rank < 1 || (built != 0 && built != e.spec->lora_rank)) {
      throw std::invalid_argument(std::string(who) + ": LoRA adapter " + std::to_string(id) +
                                  " asked with rank " + std::to_string(e.spec->lora_rank));
    }
  }
}

}  // namespace servelab
