// Batch formation `static`: request-level (static) batching as servers did before Orca
// (FasterTransformer, TF Serving style batching). When nothing runs, a batch is formed from the
// head of the waiting queue: up to max_num_seqs requests, each reserving blocks for its maximum
// length (prompt + max_output_tokens) at admission, so the batch never runs out of memory and
// never preempts; the first request whose reservation does not fit ends the batch. The batch then
// runs in lockstep: while any member's prompt is unfinished, steps only prefill (chunked under the
// token budget, members in order; a member whose prompt is done waits, as in one padded batch);
// then every member decodes one token per step. Finished members leave, nobody joins until all
// end. Parallel sampling is refused (no on-demand allocation).
#include <algorithm>
#include <cassert>

#include "core/batch_formation.h"
#include "core/scheduler.h"
#include "policies/registry.h"

namespace servelab {
namespace {

class StaticBatchFormation final : public BatchFormation {
 public:
  std::string_view name() const override { return "static"; }
  bool resumes_swapped() const override { return true; }  // never preempts: swap is a no-op
  bool supports_parallel_sampling() const override { return false; }
  bool supports_multi_step() const override { return true; }

  void fill(Scheduler& s, TimeNs now, bool /*admit: never preempts*/) const override {
    std::int32_t budget = s.config().max_num_batched_tokens;
    const std::vector<Request*>& running = s.running();
    if (running.empty()) {
      // Form the next batch: reservations only, nothing scheduled in the admission itself.
      Scheduler::AdmissionRule rule;
      rule.reserve_max_length = true;
      rule.schedule = false;
      s.admit_waiting(budget, rule, now);
    }
    // Lockstep: while any member's prompt is unfinished the step only prefills (chunked under
    // the budget, members in order); members that finished theirs wait for the others, as one
    // padded batch would. Then every member decodes each step until the longest is done.
    bool prefilling = false;
    for (const Request* r : running) prefilling = prefilling || Scheduler::prefill_pending(*r);
    for (std::size_t i = 0; i < running.size() && budget > 0; ++i) {
      Request& r = *running[i];
      if (prefilling != Scheduler::prefill_pending(r)) continue;
      const std::int32_t n = std::min(r.num_tokens() - r.num_computed_tokens, budget);
      if (n <= 0) continue;
      // Within the reservation: never fails (it only registers newly full blocks).
      const bool ok = s.kv().allocate_slots(r, n + s.decode_lookahead(r, n));
      assert(ok);
      (void)ok;
      s.add_to_plan(r, n, r.first_scheduled_ns < 0 ? r.num_computed_tokens : 0, now);
      budget -= n;
    }
  }
};

const PolicyRegistrar kRegistrar(
    {PolicyKind::kBatch,
     "static",
     "static batching: a batch forms only when nothing runs, reserves every member's maximum "
     "length, prefills (chunked) then decodes in lockstep; nobody joins until all finish",
     "request-level batching of pre-Orca servers (e.g. FasterTransformer, TF Serving)",
     {},
     batch_factory<StaticBatchFormation>(),
     /*rank=*/1});

}  // namespace
}  // namespace servelab
