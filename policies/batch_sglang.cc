// Batch formation `sglang`: SGLang's scheduler loop (python/sglang/srt/managers/scheduler.py
// get_next_batch_to_run, PrefillAdder in schedule_policy.py, retract_decode; reference
// schedulers.md section 4.2), with mixed chunks off (its default):
// - Prefill first. A step is a prefill batch when one can be formed: the running request whose
//   prompt is partly computed (the chunked request) continues first, then waiting requests are
//   admitted in queue order under the chunk budget (`chunked_prefill_size`); the last one
//   admitted may be cut to a chunk and continue next step. Otherwise the step decodes every
//   running request.
// - Admission reserves future decode tokens. A candidate needs its uncached tokens plus
//   min(its remaining outputs, `clip_max_new_tokens`) strictly below the KV tokens left, which
//   start at (free + evictable blocks) x block size minus, for every running request,
//   new_token_ratio x min(its remaining outputs, clip); an admitted request takes its share. A
//   need of the whole cache or more (a request preempted near its end) counts as the cache less
//   one token (Scheduler::AdmissionRule::reserve_tokens), so it starts once the cache is free.
// - new_token_ratio starts at min(0.7 x `schedule_conservativeness`, 1) (SGLang caps it), falls by
// (start - floor) / 600
//   after every decode step that preempted nobody, down to floor = start x 0.14, and after a
//   decode step that preempted (SGLang's retraction) becomes, over the requests still running,
//   min(1, (outputs so far + `retract_decode_steps` x requests) / (sum of max outputs + 1)).
// - Decode out of memory: victims are preempted by recompute until the running requests fit;
//   SGLang's victim is the request with the fewest outputs, longest prompt on a tie: pair this
//   formation with `preemption: {name: recompute, victim: fewest-computed}` for that (the
//   victim rule stays its own choice, as for the other formations).
// Not modelled: max_prefill_tokens (16,384 by default, above the usual chunk size), priority
// preemption on behalf of waiting requests, SGLang's token-granular pages (blocks here).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "core/batch_formation.h"
#include "core/scheduler.h"
#include "policies/registry.h"

namespace servelab {
namespace {

struct SglangState final : BatchFormationState {
  double ratio = 0;
};

class SglangBatchFormation final : public BatchFormation {
 public:
  SglangBatchFormation(double conservativeness, std::int32_t chunk, std::int32_t clip,
                       std::int32_t retract_steps)
      : init_(std::min(0.7 * conservativeness, 1.0)),
        floor_(std::min(init_ * 0.14, 1.0)),
        decay_((init_ - floor_) / 600),
        chunk_(chunk),
        clip_(clip),
        retract_steps_(retract_steps) {}
  std::string_view name() const override { return "sglang"; }

  std::unique_ptr<BatchFormationState> make_state() const override {
    auto st = std::make_unique<SglangState>();
    st->ratio = init_;
    return st;
  }

  void fill(Scheduler& s, TimeNs now, bool admit) const override {
    auto& st = static_cast<SglangState&>(*s.batch_state());
    const std::int32_t max_tokens = s.config().max_num_batched_tokens;
    if (admit) {
      std::int32_t budget = chunk_ > 0 ? std::min(chunk_, max_tokens) : max_tokens;
      // The chunked request(s) first: running requests with prompt left to compute.
      budget = s.schedule_running(
          budget, now, Scheduler::OnSelfPreemption::kNext, [](const Request& r, std::int32_t left) {
            return Scheduler::prefill_pending(r)
                       ? std::min(r.num_tokens() - r.num_computed_tokens, left)
                       : 0;
          });
      // Then admissions under the reservation of the running requests' future outputs (none in
      // a step whose chunk had to preempt: the freed blocks are the victim's).
      if (s.plan().preempted.empty()) {
        std::int64_t reserve = std::int64_t{s.kv().num_free_blocks()} * s.config().block_size;
        for (const Request* r : s.running()) {
          reserve -= static_cast<std::int64_t>(st.ratio * remaining_outputs(*r));
        }
        Scheduler::AdmissionRule rule;
        rule.reserve_tokens = &reserve;
        rule.reserve_clip = clip_;
        s.admit_waiting(budget, rule, now);
      }
      if (!s.plan().requests.empty()) return;  // a prefill batch: nobody decodes this step
    }
    // A decode step over every running request.
    const std::size_t preempted_before = s.plan().preempted.size();
    s.schedule_running(max_tokens, now, Scheduler::OnSelfPreemption::kNext,
                       [](const Request& r, std::int32_t left) {
                         return std::min(r.num_tokens() - r.num_computed_tokens, left);
                       });
    if (s.plan().preempted.size() > preempted_before) {
      // Retraction: the ratio from what the survivors have decoded of their maximum.
      double decoded = 0, max_new = 0;
      for (const Request* r : s.running()) {
        decoded += r->num_output_tokens();
        max_new += r->spec.max_output_tokens;
      }
      decoded += static_cast<double>(retract_steps_) * static_cast<double>(s.running().size());
      st.ratio = std::min(1.0, decoded / (max_new + 1));
    } else if (admit && !s.plan().requests.empty()) {
      st.ratio = std::max(st.ratio - decay_, floor_);
    }
  }

  std::string rejection_reason(const Request& r, const Scheduler& s) const override {
    // With nothing running the whole cache is free; a request that needs more can never start.
    const std::int64_t need =
        std::int64_t{r.spec.prompt_len} + std::min(r.spec.max_output_tokens, clip_);
    const std::int64_t cache =
        std::int64_t{s.kv().pool().num_usable_blocks()} * s.config().block_size;
    if (need < cache) return {};
    return "needs " + std::to_string(need) +
           " KV tokens (prompt plus min(max_output_tokens, clip_max_new_tokens)) to be admitted "
           "by the sglang batch formation, not below the cache's " +
           std::to_string(cache);
  }

 private:
  std::int32_t remaining_outputs(const Request& r) const {
    return std::clamp(r.spec.max_output_tokens - r.num_output_tokens(), 0, clip_);
  }

  double init_, floor_, decay_;
  std::int32_t chunk_, clip_, retract_steps_;
};

const PolicyRegistrar kRegistrar(
    {PolicyKind::kBatch,
     "sglang",
     "prefill first: the chunked request, then admissions that fit after reserving "
     "new_token_ratio of the running requests' remaining outputs; else a decode step; the ratio "
     "decays per decode step and is reset by a preemption",
     "SGLang scheduler (get_next_batch_to_run, PrefillAdder, new_token_ratio, retract_decode)",
     {{"schedule_conservativeness",
       ParamType::kDouble,
       1.0,
       0.01,
       100.0,
       {},
       "scales the initial new_token_ratio (0.7 x this)"},
      {"chunked_prefill_size",
       ParamType::kInt,
       std::int64_t{0},
       0,
       1 << 24,
       {},
       "prefill tokens per step (0: max_num_batched_tokens; capped by it)"},
      {"clip_max_new_tokens",
       ParamType::kInt,
       std::int64_t{4096},
       1,
       1 << 24,
       {},
       "a request's remaining outputs count at most this much in the reservation"},
      {"retract_decode_steps",
       ParamType::kInt,
       std::int64_t{20},
       0,
       1 << 20,
       {},
       "decode steps each survivor is assumed to have ahead when a preemption resets the ratio"}},
     [](const PolicySpec& spec, PolicyTarget& t) {
       t.scheduler->batch = std::make_shared<const SglangBatchFormation>(
           spec.get_double("schedule_conservativeness"),
           static_cast<std::int32_t>(spec.get_int("chunked_prefill_size")),
           static_cast<std::int32_t>(spec.get_int("clip_max_new_tokens")),
           static_cast<std::int32_t>(spec.get_int("retract_decode_steps")));
     },
     /*rank=*/5});

}  // namespace
}  // namespace servelab
