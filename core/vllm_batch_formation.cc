#include "core/vllm_batch_formation.h"

#include <algorithm>
#include <limits>

#include "core/scheduler.h"

namespace servelab {

namespace {

// Phase 1: running requests in list order; returns the budget left. Lookahead (multi-step
// scheduling) is a template argument so that the one-step decode fast path keeps its constant
// one-slot allocation, which the compiler specialises. So is speculative decoding (Spec): a
// request's draft tokens count in its remaining tokens, and its entry verifies them.
// Async scheduling (Async) counts a request's output placeholders as known tokens, and skips a
// request whose pending token is certain to be its last (vLLM's check in Scheduler.schedule).
template <bool Lookahead, bool Spec, bool Async = false>
std::int32_t schedule_running_phase(Scheduler& s, std::int32_t budget, std::int32_t cap,
                                    TimeNs now) {
  KvCacheManager& kv = s.kv();
  const std::vector<Request*>& running = s.running();
  std::size_t i = 0;
  while (i < running.size() && budget > 0) {
    Request& r = *running[i];
    if constexpr (Async) {
      if (r.num_output_placeholders > 0 &&
          r.num_computed_tokens + 2 - r.num_output_placeholders >= r.spec.total_tokens()) {
        ++i;  // its pending plan samples its last token: no step after it is needed
        continue;
      }
    }
    const std::int32_t remaining = (Spec ? r.num_tokens_with_spec() : r.num_tokens()) +
                                   (Async ? r.num_output_placeholders : 0) - r.num_computed_tokens;
    // The common case first, a decode (one token, plus its lookahead slots with multi-step) that
    // fits the blocks the request can get: the same calls as below with n = 1. A failed
    // allocation changes nothing, so the general path below simply tries again and preempts.
    if (remaining == 1 && kv.allocate_slots(r, Lookahead ? 1 + s.decode_lookahead(r, 1)
                                               : Spec    ? 1 + s.spec_lookahead(r, 1)
                                                         : 1)) {
      s.add_entry(r, 1, 0, now, /*is_prefill=*/false, /*samples=*/true);
      budget -= 1;
      ++i;
      continue;
    }
    const std::int32_t n = std::min({remaining, cap, budget});
    if (n <= 0) {  // nothing to do this step; it keeps its place
      ++i;
      continue;
    }
    const Scheduler::Room room = s.make_room(i, n, budget, now);
    i = room.i;
    budget = room.budget;
    if (!room.ok) break;  // r preempted itself: nothing after it is left to schedule
    if constexpr (Spec) {
      s.add_running_entry(r, n, now);
    } else {
      s.add_to_plan(r, n, 0, now);
    }
    budget -= n;
    ++i;
  }
  return budget;
}

// Async scheduling's running phase, out of line so that fill()'s inlined synchronous phase
// compiles as it did before it existed (the simulator's hot path).
[[gnu::noinline]] std::int32_t schedule_running_phase_async(Scheduler& s, std::int32_t budget,
                                                            std::int32_t cap, TimeNs now) {
  return schedule_running_phase<false, false, true>(s, budget, cap, now);
}

}  // namespace

void VllmBatchFormation::fill(Scheduler& s, TimeNs now, bool admit) const {
  const SchedulerConfig& config = s.config();
  std::int32_t budget = config.max_num_batched_tokens;
  const std::int32_t threshold = config.long_prefill_token_threshold;
  // The per-request cap of phase 1 (the threshold, when set; the budget caps it too).
  const std::int32_t cap = threshold > 0 ? threshold : std::numeric_limits<std::int32_t>::max();
  const std::size_t preempted_before = s.plan().preempted.size();

  // Phase 1: running requests in list order (multi-step: decodes reserve their round's slots).
  if (s.lookahead_slots() > 0) {
    budget = schedule_running_phase<true, false>(s, budget, cap, now);
  } else if (s.speculative()) {
    budget = schedule_running_phase<false, true>(s, budget, cap, now);
  } else if (config.async_scheduling) [[unlikely]] {
    budget = schedule_running_phase_async(s, budget, cap, now);
  } else {
    budget = schedule_running_phase<false, false>(s, budget, cap, now);
  }
  // Phases 2 and 3 never run in a step that preempted (the freed blocks would otherwise go
  // straight to newcomers while the victims wait).
  if (!admit || s.plan().preempted.size() != preempted_before) return;
  // Phase 2: swapped requests resume; while any stays swapped nobody new is admitted.
  if (s.num_swapped() > 0) budget = s.swap_in_phase(budget, now);
  if (s.num_swapped() > 0) return;
  // Phase 3: waiting requests in queue order.
  Scheduler::AdmissionRule rule;
  rule.token_cap = threshold;
  rule.whole_prompt = !config.enable_chunked_prefill;  // no skipping ahead
  s.admit_waiting(budget, rule, now);
}

std::string VllmBatchFormation::rejection_reason(const Request& r, const Scheduler& s) const {
  const SchedulerConfig& config = s.config();
  if (config.enable_chunked_prefill) return {};
  // A waiting request asks for num_tokens - hit tokens in one step; num_tokens reaches
  // total - 1 before the last token is sampled (a request resumed after a preemption).
  std::int64_t worst = static_cast<std::int64_t>(r.spec.prompt_len) + r.spec.max_output_tokens - 1;
  if (config.long_prefill_token_threshold > 0) {
    worst = std::min<std::int64_t>(worst, config.long_prefill_token_threshold);
  }
  if (worst > config.max_num_batched_tokens) {
    return "may need " + std::to_string(worst) +
           " tokens in one step, more than max_num_batched_tokens " +
           std::to_string(config.max_num_batched_tokens) + " with chunked prefill off";
  }
  return {};
}

}  // namespace servelab
