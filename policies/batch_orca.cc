// Batch formation `orca`: iteration-level scheduling (Yu et al., "Orca", OSDI'22; the
// orca_scheduler.py baseline of Sarathi-Serve). Every running request decodes one token per
// step; then waiting requests join in queue order while (a) the whole prompt (after prefix hits)
// fits the budget left (no chunking; a prompt that does not fit waits at the head), (b) blocks
// for prompt + max_output_tokens can be reserved and (c) a seat is free. The reservation means it
// never preempts. Requests whose prompt exceeds the budget, and parallel sampling, are refused.
#include <algorithm>
#include <cassert>

#include "core/batch_formation.h"
#include "core/scheduler.h"
#include "policies/registry.h"

namespace servelab {
namespace {

class OrcaBatchFormation final : public BatchFormation {
 public:
  std::string_view name() const override { return "orca"; }
  bool resumes_swapped() const override { return true; }  // never preempts: swap is a no-op
  bool supports_parallel_sampling() const override { return false; }
  bool supports_multi_step() const override { return true; }

  void fill(Scheduler& s, TimeNs now, bool /*admit: never preempts*/) const override {
    std::int32_t budget = s.config().max_num_batched_tokens;
    // Every running request decodes (its prompt went whole at admission and its blocks were
    // reserved then, so this never preempts).
    const std::vector<Request*>& running = s.running();
    for (std::size_t i = 0; i < running.size() && budget > 0; ++i) {
      Request& r = *running[i];
      const std::int32_t n = std::min(r.num_tokens() - r.num_computed_tokens, budget);
      if (n <= 0) continue;
      const bool ok = s.kv().allocate_slots(r, n + s.decode_lookahead(r, n));
      assert(ok);
      (void)ok;
      s.add_to_plan(r, n, 0, now);
      budget -= n;
    }
    // New requests join whole. The whole prompt is computed in this step, so registering its
    // full blocks at once is exact.
    Scheduler::AdmissionRule rule;
    rule.whole_prompt = true;
    rule.reserve_max_length = true;
    s.admit_waiting(budget, rule, now);
  }

  // Whole prompts only: Orca never preempts, so a prompt is the most one step asks for.
  std::string rejection_reason(const Request& r, const Scheduler& s) const override {
    const std::int32_t budget = s.config().max_num_batched_tokens;
    if (r.spec.prompt_len <= budget) return {};
    return "may need " + std::to_string(r.spec.prompt_len) +
           " tokens in one step, more than max_num_batched_tokens " + std::to_string(budget) +
           " with orca batching (no chunking)";
  }
};

const PolicyRegistrar kRegistrar(
    {PolicyKind::kBatch,
     "orca",
     "iteration-level scheduling: running requests decode every step, new ones join whole "
     "(no chunking, head-of-line) when blocks for prompt + max_output_tokens can be reserved",
     "Orca (Yu et al., OSDI'22); Sarathi-Serve's orca_scheduler.py baseline",
     {},
     batch_factory<OrcaBatchFormation>(),
     /*rank=*/2});

}  // namespace
}  // namespace servelab
