// Batch formation `prefill-first`: vLLM v0's default policy without chunked prefill
// (vllm/core/scheduler.py _schedule_default). If the head of the waiting queue can be admitted
// (its whole prompt, or prompt + outputs after a preemption, minus prefix hits, fits the budget;
// its blocks leave the watermark free; a seat is free) the step is prefill-only: requests are
// admitted from the head while they fit (head-of-line). Otherwise the step decodes every running
// request, preempting victims by recompute when one cannot append. Prefill and decode never mix.
// The prompt limit is the budget (vLLM v0's min(max_model_len, max_num_batched_tokens)): a longer
// prompt is rejected at arrival, and a resumed request whose prompt and outputs pass it is
// aborted when it reaches the head ("ignored", v0's FINISHED_IGNORED), never left to block.
#include <algorithm>

#include "core/batch_formation.h"
#include "core/scheduler.h"
#include "policies/registry.h"
#include "policies/watermark.h"

namespace servelab {
namespace {

class PrefillFirstBatchFormation final : public BatchFormation {
 public:
  // Throws std::invalid_argument on a watermark outside [0, 1).
  explicit PrefillFirstBatchFormation(double watermark) : watermark_(watermark) {
    check_watermark(watermark_);
  }
  std::string_view name() const override { return "prefill-first"; }
  bool supports_multi_step() const override { return true; }  // decodes go through make_room

  void fill(Scheduler& s, TimeNs now, bool admit) const override {
    std::int32_t budget = s.config().max_num_batched_tokens;
    if (admit) {
      // Prefill step: vLLM v0 _schedule_prefills computes a candidate's tokens before its budget
      // check, so the head is looked at even when the budget is spent.
      Scheduler::AdmissionRule rule;
      rule.whole_prompt = true;
      rule.watermark_blocks = s.watermark_blocks(watermark_);
      rule.stop_when_budget_spent = false;
      rule.ignore_past = s.config().max_num_batched_tokens;
      budget = s.admit_waiting(budget, rule, now);
    }
    if (!s.plan().requests.empty()) return;  // prefill-only: running requests skip this step
    // Decode step over every running request, preempting victims when one cannot append.
    s.schedule_running(budget, now, Scheduler::OnSelfPreemption::kNext,
                       [](const Request& r, std::int32_t left) {
                         return std::min(r.num_tokens() - r.num_computed_tokens, left);
                       });
  }

  std::string rejection_reason(const Request& r, const Scheduler& s) const override {
    std::string reason = watermark_rejection(r, s, watermark_);
    if (!reason.empty()) return reason;
    // vLLM v0's prompt limit (min(max_model_len, max_num_batched_tokens) without chunking): a
    // longer prompt is ignored. A request resumed by recompute whose prompt and outputs pass it
    // is ignored then (AdmissionRule::ignore_past), as v0 does.
    const std::int32_t budget = s.config().max_num_batched_tokens;
    if (r.spec.prompt_len <= budget) return {};
    return "its prompt of " + std::to_string(r.spec.prompt_len) +
           " tokens exceeds the prompt limit, max_num_batched_tokens " + std::to_string(budget) +
           " (prefill-first admits whole prompts; vLLM v0 ignores it)";
  }

 private:
  double watermark_;
};

const PolicyRegistrar kRegistrar(
    {PolicyKind::kBatch,
     "prefill-first",
     "a step is prefill-only when the waiting head can be admitted whole (head-of-line), "
     "else decode-only over all running requests; never mixed, no chunking",
     "vLLM v0 _schedule_default (vllm/core/scheduler.py, chunked prefill off)",
     {watermark_param()},
     [](const PolicySpec& spec, PolicyTarget& t) {
       t.scheduler->batch =
           std::make_shared<const PrefillFirstBatchFormation>(spec.get_double("watermark"));
     },
     /*rank=*/4});

}  // namespace
}  // namespace servelab
