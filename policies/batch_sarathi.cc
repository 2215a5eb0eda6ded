// Batch formation `sarathi`: stall-free batching (Agrawal et al., "Sarathi-Serve", OSDI'24;
// sarathi/core/scheduler/sarathi_scheduler.py). Each step has a token budget tau (chunk_size;
// 0 = max_num_batched_tokens, larger values capped by it). In order: (1) every running decode,
// one token each, preempting a victim (by recompute) when one cannot get a slot; (2) ongoing
// partial prefills, each getting min(remaining, tau - used); (3) new requests while their whole
// prompt's blocks can be allocated leaving the watermark free, a seat is free and budget is left,
// each getting min(prompt, tau - used). Nobody is admitted in a step that preempted. Admission
// checks the whole prompt's blocks (Sarathi's can_allocate) but blocks are taken chunk by chunk,
// so no block enters the prefix cache before its KV is computed.
#include <algorithm>
#include <stdexcept>

#include "core/batch_formation.h"
#include "core/scheduler.h"
#include "policies/registry.h"
#include "policies/watermark.h"

namespace servelab {
namespace {

class SarathiBatchFormation final : public BatchFormation {
 public:
  // Throws std::invalid_argument on a negative chunk size or a watermark outside [0, 1).
  SarathiBatchFormation(std::int32_t chunk_size, double watermark)
      : chunk_size_(chunk_size), watermark_(watermark) {
    if (chunk_size_ < 0) throw std::invalid_argument("sarathi: chunk_size must be >= 0");
    check_watermark(watermark_);
  }
  std::string_view name() const override { return "sarathi"; }
  bool supports_multi_step() const override { return true; }  // decodes go through make_room

  void fill(Scheduler& s, TimeNs now, bool admit) const override {
    const std::int32_t max_tokens = s.config().max_num_batched_tokens;
    const std::int32_t tau = chunk_size_ > 0 ? std::min(chunk_size_, max_tokens) : max_tokens;
    std::int32_t budget = tau;
    const std::size_t preempted_before = s.plan().preempted.size();
    using OnSelf = Scheduler::OnSelfPreemption;
    // 1. Decodes, 1 token each, so none ever stalls behind a prefill.
    budget = s.schedule_running(budget, now, OnSelf::kNext, [](const Request& r, std::int32_t) {
      return Scheduler::prefill_pending(r) || r.num_tokens() <= r.num_computed_tokens ? 0 : 1;
    });
    // 2. Ongoing partial prefills (admitted earlier, or refunded above), each chunked to what
    // is left of tau.
    budget =
        s.schedule_running(budget, now, OnSelf::kNext, [](const Request& r, std::int32_t left) {
          return Scheduler::prefill_pending(r)
                     ? std::min(r.num_tokens() - r.num_computed_tokens, left)
                     : 0;
        });
    // 3. New requests while the whole prompt's blocks fit above the watermark and a seat is
    // free; nobody in a step that preempted (the freed blocks are the victims').
    if (!admit || s.plan().preempted.size() != preempted_before) return;
    Scheduler::AdmissionRule rule;
    rule.watermark_blocks = s.watermark_blocks(watermark_);
    s.admit_waiting(budget, rule, now);
  }

  std::string rejection_reason(const Request& r, const Scheduler& s) const override {
    return watermark_rejection(r, s, watermark_);
  }

 private:
  std::int32_t chunk_size_;
  double watermark_;
};

const PolicyRegistrar kRegistrar(
    {PolicyKind::kBatch,
     "sarathi",
     "stall-free batching: decodes first, then ongoing partial prefills, then new prompts, "
     "chunked to a per-step token budget tau",
     "Sarathi-Serve (Agrawal et al., OSDI'24; sarathi/core/scheduler/sarathi_scheduler.py)",
     {{"chunk_size",
       ParamType::kInt,
       std::int64_t{0},
       0,
       1 << 24,
       {},
       "the token budget tau per step (0: max_num_batched_tokens; capped by it)"},
      watermark_param()},
     [](const PolicySpec& spec, PolicyTarget& t) {
       t.scheduler->batch = std::make_shared<const SarathiBatchFormation>(
           static_cast<std::int32_t>(spec.get_int("chunk_size")), spec.get_double("watermark"));
     },
     /*rank=*/3});

}  // namespace
}  // namespace servelab
