// Batch formation `preemptive`: the schedule is recomputed from the queue order's rank at every
// step, as FastServe (Wu et al., arXiv 2305.05920) and vllm-ltr's preemptive SJF (Fu et al.,
// arXiv 2408.15792) do, so a request that ranks first runs first even if others were admitted
// before it. The candidates from outside the running list are the best swapped-out request and
// the head of the waiting queue, whichever ranks first. Each step:
// 1. The running requests and the swapped ones are sorted by rank (Scheduler::rank_running,
//    rank_swapped), best first.
// 2. Displacement: while the candidate outranks the last (worst) running request and could not
//    start as things stand (no seat free, or fewer free blocks than it needs for its KV and its
//    next chunk, a waiting request's cached prefix counted as taken) but would once the running
//    requests it outranks are gone, that last running request is preempted by the preemption
//    mode: recomputed (back to the waiting queue by its key) or, with swap and auto, swapped out
//    (FastServe's offload of paused jobs).
// 3. One pass in rank order over the running requests and the candidates together, under the
//    token budget: at each point the better of the next running request and the candidate goes
//    next. A running request gets min(remaining, long_prefill_token_threshold, budget) tokens,
//    preempting from the tail (the lowest ranked; by the victim rule) when it cannot get slots,
//    as vLLM v1's running phase does; a swapped candidate is swapped in, a waiting one admitted
//    (prefix lookup, threshold, whole prompts with chunked prefill off), into the running list
//    at its rank. The first candidate that cannot start stops starting for the step
//    (head-of-line), and so does a preemption in this pass (the freed blocks go to the victims
//    first), but not the displacements of step 2, which are for the candidates. A request
//    preempted in this step does not start again in it. So a step may swap victims out (step 2)
//    and then a candidate in, never the reverse (a victim after a swap-in is recomputed).
// With LoRA (serving.lora) an adapter slot is one more thing a candidate may lack: a waiting
// request whose adapter would exceed max_loras is not skipped (as vLLM's admission skips it)
// but waits at the head, and displaces the lower-ranked requests whose adapters hold the slots
// when recomputing them would free one (a swapped-out request keeps its adapter counted). When
// no displacement can free one, the best swapped request is the candidate instead: swapped
// requests may hold the slots, and only resuming them gives the slots back (nothing ran
// otherwise, for ever, once every slot was held by swapped requests).
// With sjf the rank is shortest-remaining-first (SRTF), with predicted-sjf vllm-ltr's, with
// priority preemptive priorities (equal priorities: arrival order), with mlfq FastServe. One
// sample per request, one scheduler step; the queue order must rank (fcfs, fair and SGLang's
// orders do not). Displaced requests go back by their key, so they rank after the request that
// displaced them.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/batch_formation.h"
#include "core/scheduler.h"
#include "core/vllm_batch_formation.h"
#include "policies/registry.h"

namespace servelab {
namespace {

class PreemptiveBatchFormation final : public BatchFormation {
 public:
  std::string_view name() const override { return "preemptive"; }
  bool supports_parallel_sampling() const override { return false; }
  bool resumes_swapped() const override { return true; }
  bool needs_ranked_queue() const override { return true; }
  // vllm's: with chunked prefill off, a request that might need more tokens in one step than
  // the budget (a displaced one resumes with prompt + outputs) would block the queue forever.
  std::string rejection_reason(const Request& r, const Scheduler& s) const override {
    return VllmBatchFormation().rejection_reason(r, s);
  }

  void fill(Scheduler& s, TimeNs now, bool admit) const override {
    const SchedulerConfig& config = s.config();
    std::int32_t budget = config.max_num_batched_tokens;
    const std::int32_t threshold = config.long_prefill_token_threshold;
    const std::int32_t cap = threshold > 0 ? threshold : std::numeric_limits<std::int32_t>::max();
    if (admit) {
      s.rank_running();
      if (s.num_swapped() > 1) s.rank_swapped();
      displace(s, cap, budget, now);
    }
    const std::size_t preempted_before = s.plan().preempted.size();
    const WaitingQueue& q = s.waiting_queue();
    const std::vector<Request*>& running = s.running();
    Scheduler::AdmissionRule rule;
    rule.token_cap = threshold;
    rule.whole_prompt = !config.enable_chunked_prefill;
    rule.max_admissions = 1;
    rule.skip_lora_blocked = false;  // a head waiting for an adapter slot keeps its rank
    bool admitting = admit;
    std::size_t i = 0;
    while (budget > 0) {
      const Request* next = nullptr;
      if (admitting && s.plan().preempted.size() == preempted_before) {
        next = candidate(s);
        admitting = next != nullptr && !preempted_now(s, *next);
      } else {
        admitting = false;
      }
      if (admitting && (i >= running.size() || q.ranks_before(*next, *running[i]))) {
        const std::size_t before = running.size();
        if (next->status == RequestStatus::kSwapped) {
          budget = s.swap_in_phase(budget, now, /*max_resumes=*/1, /*insert_at=*/i);
        } else {
          rule.insert_at = i;
          budget = s.admit_waiting(budget, rule, now);
        }
        if (running.size() == before) {
          admitting = false;  // it cannot get in: nobody ranked after it may (head-of-line)
        } else {
          ++i;
        }
        continue;
      }
      if (i >= running.size()) break;
      Request& r = *running[i];
      const std::int32_t n = std::min({r.num_tokens() - r.num_computed_tokens, cap, budget});
      if (n <= 0) {  // nothing to do this step; it keeps its place
        ++i;
        continue;
      }
      const Scheduler::Room room = s.make_room(i, n, budget, now);
      i = room.i;
      budget = room.budget;
      if (!room.ok) break;  // r preempted itself: it was the last, nobody after it is left
      s.add_to_plan(r, n, 0, now);
      budget -= n;
      ++i;
    }
  }

 private:
  // The best-ranked request not running: the first swapped one (the list is ranked) or the
  // head of the waiting queue, whichever ranks first; null when there is neither. A waiting
  // head that waits for an adapter slot no displacement can free yields to the swapped one.
  static Request* candidate(const Scheduler& s) {
    const WaitingQueue& q = s.waiting_queue();
    Request* w = q.empty() ? nullptr : q.front();
    Request* sw = s.swapped().empty() ? nullptr : s.swapped().front();
    if (sw == nullptr) return w;
    if (w == nullptr || q.ranks_before(*sw, *w)) return sw;
    return lacks_adapter(s, *w) && !adapter_freeable(s, *w) ? sw : w;
  }
  // Whether `r` was preempted in this step: it does not start again in it (a displaced request
  // would be recomputed or moved back for nothing).
  static bool preempted_now(const Scheduler& s, const Request& r) {
    const std::vector<RequestId>& p = s.plan().preempted;
    return std::find(p.begin(), p.end(), r.id()) != p.end();
  }
  // LoRA (serving.lora): the distinct adapters of the running requests `keep` accepts and of
  // every swapped one (a swapped request keeps its adapter counted, as admission counts it).
  template <typename Keep>
  static std::vector<std::uint32_t> adapters(const Scheduler& s, Keep keep) {
    std::vector<std::uint32_t> ids;
    auto add = [&ids](const Request& r) {
      const std::uint32_t a = r.spec.lora_id;
      if (a != 0 && std::find(ids.begin(), ids.end(), a) == ids.end()) ids.push_back(a);
    };
    for (const Request* r : s.running()) {
      if (keep(*r)) add(*r);
    }
    for (const Request* r : s.swapped()) add(*r);
    return ids;
  }
  // Whether `c` waits for an adapter slot: LoRA on, its adapter not among the running and
  // swapped requests', and max_loras of them already (admission would not take it).
  static bool lacks_adapter(const Scheduler& s, const Request& c) {
    const LoraConfig& lora = s.config().lora;
    if (!lora.enabled() || c.spec.lora_id == 0) return false;
    const std::vector<std::uint32_t> ids = adapters(s, [](const Request&) { return true; });
    return std::find(ids.begin(), ids.end(), c.spec.lora_id) == ids.end() &&
           ids.size() >= static_cast<std::size_t>(lora.max_loras);
  }
  // Whether displacing the running requests `c` outranks would free a slot for its adapter:
  // those it does not outrank keep theirs, and so would any the preemption mode swaps out.
  static bool adapter_freeable(const Scheduler& s, const Request& c) {
    const WaitingQueue& q = s.waiting_queue();
    const std::vector<std::uint32_t> ids = adapters(s, [&](const Request& r) {
      return !q.ranks_before(c, r) || s.preemption_mode().swap(r, s.config());
    });
    return ids.size() < static_cast<std::size_t>(s.config().lora.max_loras);
  }
  // Step 2 (see the file comment). The candidate's next chunk is capped at `cap` (the
  // threshold) and the step's `budget`.
  static void displace(Scheduler& s, std::int32_t cap, std::int32_t budget, TimeNs now) {
    const WaitingQueue& q = s.waiting_queue();
    KvCacheManager& kv = s.kv();
    const auto max_seqs = static_cast<std::size_t>(s.config().max_num_seqs);
    const std::int32_t bs = kv.block_size();
    while (!s.running().empty()) {
      Request* c = candidate(s);
      // Nothing is displaced for a request preempted in this step: it may not start in it.
      if (c == nullptr || preempted_now(s, *c)) return;
      const std::vector<Request*>& running = s.running();
      if (!q.ranks_before(*c, *running.back())) return;
      // Tokens it will hold KV for before this step (a swapped request's; a waiting one's
      // cached prefix, whose blocks count as taken from the free ones: they are when no running
      // request holds them, an over-estimate at worst, so that the start the displacement is
      // for does not then fail for want of blocks).
      std::int32_t held = c->num_computed_tokens;
      if (c->status != RequestStatus::kSwapped) {
        held = kv.prefix_caching() ? kv.num_cached_prefix_blocks(*c) * bs : 0;
      }
      const std::int32_t todo = c->num_tokens() - held;
      // With chunked prefill off a prompt longer than the budget waits anyway.
      if (!s.config().enable_chunked_prefill && std::min(todo, cap) > budget) return;
      const std::int32_t need = (held + std::min({todo, cap, budget}) + bs - 1) / bs;
      const bool seat = s.seats_taken() < max_seqs;
      const bool blocks = need <= kv.num_free_blocks();
      const bool adapter = !lacks_adapter(s, *c);
      if (seat && blocks && adapter) return;
      if (!adapter && !adapter_freeable(s, *c)) return;
      if (!blocks) {
        // Only worth it if what the requests it outranks hold would make room.
        std::int64_t freeable = kv.num_free_blocks();
        for (auto it = running.rbegin(); it != running.rend() && q.ranks_before(*c, **it); ++it) {
          freeable += kv.num_blocks(**it);
        }
        if (freeable < need) return;
      }
      s.preempt_last_running(now);
      // A victim swapped out joins the back of the list; keep it ranked for candidate().
      if (s.num_swapped() > 1) s.rank_swapped();
    }
  }
};

const PolicyRegistrar kRegistrar(
    {PolicyKind::kBatch,
     "preemptive",
     "the schedule recomputed by rank every step: running requests sorted by the queue order, a "
     "waiting or swapped request that outranks running ones displaces the lowest ranked when it "
     "needs their seat or blocks (by the preemption mode: recompute, swap); preemptive sjf "
     "(SRTF), priority, or FastServe with queue: mlfq",
     "FastServe (Wu et al., arXiv 2305.05920) and vllm-ltr's preemptive SJF (Fu et al., arXiv "
     "2408.15792)",
     {},
     [](const PolicySpec&, PolicyTarget& t) {
       t.scheduler->batch = std::make_shared<PreemptiveBatchFormation>();
     },
     /*rank=*/6});

}  // namespace
}  // namespace servelab
