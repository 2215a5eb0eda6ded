#include "core/scheduler.h"

#include <algorithm>
#include <cassert>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

namespace servelab {

namespace {

std::int64_t cdiv(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager& kv, SchedulerObserver* observer,
                     std::unique_ptr<WaitingQueue> waiting)
    : config_(config), kv_(kv), observer_(observer), waiting_(std::move(waiting)) {
  if (!waiting_ && config_.make_waiting_queue) waiting_ = config_.make_waiting_queue();
  if (!waiting_) waiting_ = std::make_unique<FcfsWaitingQueue>();
  report_service_ = waiting_->counts_service();
  if (config_.max_num_batched_tokens < 1) {
    throw std::invalid_argument("Scheduler: max_num_batched_tokens must be >= 1");
  }
  if (config_.max_num_seqs < 1) throw std::invalid_argument("Scheduler: max_num_seqs must be >= 1");
  if (config_.max_model_len < 1) {
    throw std::invalid_argument("Scheduler: max_model_len must be >= 1");
  }
  if (config_.max_preemptions < 0) {
    throw std::invalid_argument("Scheduler: max_preemptions must be >= 0");
  }
  if (config_.sarathi_chunk_size < 0) {
    throw std::invalid_argument("Scheduler: sarathi_chunk_size must be >= 0");
  }
  if (!(config_.admission_watermark >= 0.0 && config_.admission_watermark < 1.0)) {
    throw std::invalid_argument("Scheduler: admission_watermark must be in [0, 1)");
  }
  if (config_.long_prefill_token_threshold < 0) {
    throw std::invalid_argument("Scheduler: long_prefill_token_threshold must be >= 0");
  }
  // The swap-in pass exists in the kVllm formation only; the others would strand swapped victims.
  if (config_.preemption_mode != PreemptionMode::kRecompute &&
      (config_.batch_formation == BatchFormation::kSarathi ||
       config_.batch_formation == BatchFormation::kPrefillFirst)) {
    throw std::invalid_argument(
        "Scheduler: swap preemption needs the vllm batch formation (static and orca never "
        "preempt)");
  }
  // Two sources for one fact would let the scheduler's capacity checks and the manager's
  // allocations silently disagree.
  if (config_.block_size != kv_.block_size()) {
    throw std::invalid_argument("Scheduler: block_size " + std::to_string(config_.block_size) +
                                " differs from the KV cache manager's " +
                                std::to_string(kv_.block_size()));
  }
  if (config_.enable_prefix_caching != kv_.prefix_caching()) {
    throw std::invalid_argument(
        "Scheduler: enable_prefix_caching differs from the KV cache manager's");
  }
  // Steady-state steps then never grow these.
  const auto seats = static_cast<std::size_t>(config_.max_num_seqs);
  running_.reserve(seats);
  plan_.requests.reserve(seats);
  plan_requests_.reserve(seats);
  kv_.set_copy_sink(&plan_.copies);
}

Scheduler::~Scheduler() {
  release_done_groups();
  // Finished samples of unfinished groups are reachable only through their group.
  auto drop_done_samples = [](Request* r) {
    if (r->group == nullptr) return;
    for (Request*& s : r->group->samples) {
      if (s != nullptr &&
          (s->status == RequestStatus::kFinished || s->status == RequestStatus::kAborted)) {
        delete s;
        s = nullptr;
      }
    }
  };
  for (Request* r : running_) drop_done_samples(r);
  for (Request* r : swapped_) drop_done_samples(r);
  for (Request* r : waiting_->snapshot()) drop_done_samples(r);
  kv_.set_copy_sink(nullptr);
  for (Request* r : running_) {
    kv_.free(*r);
    delete r;
  }
  for (Request* r : swapped_) {
    kv_.free(*r);  // returns its host blocks
    delete r;
  }
  for (Request* r : waiting_->snapshot()) delete r;  // waiting requests hold no blocks
}

std::string Scheduler::rejection_reason(const Request& req) const {
  const RequestSpec& spec = req.spec;
  const std::int64_t total = static_cast<std::int64_t>(spec.prompt_len) + spec.max_output_tokens;
  if (spec.prompt_len < 1) return "empty prompt";
  if (spec.n != 1) [[unlikely]] {
    if (spec.n < 1 || spec.n > kMaxSamples) {
      return "n must be in [1, " + std::to_string(kMaxSamples) + "] (got " +
             std::to_string(spec.n) + ")";
    }
    if (config_.batch_formation == BatchFormation::kStatic ||
        config_.batch_formation == BatchFormation::kOrca || kv_.contiguous()) {
      return "parallel sampling (n > 1) needs on-demand paged allocation (batch vllm, sarathi "
             "or prefill-first; allocation paged)";
    }
    if (spec.n > config_.max_num_seqs) {
      return "n = " + std::to_string(spec.n) + " samples need more seats than max_num_seqs " +
             std::to_string(config_.max_num_seqs);
    }
  }
  if (spec.max_output_tokens < 1) {
    return "max_output_tokens must be >= 1 (got " + std::to_string(spec.max_output_tokens) + ")";
  }
  if (total > config_.max_model_len) {
    return "exceeds max_model_len (" + std::to_string(total) + " > " +
           std::to_string(config_.max_model_len) + ")";
  }
  // Alone in the cache a request always gets its blocks, so fitting the whole pool is enough to
  // guarantee progress. (A contiguous allocation reserves more than the request's length.)
  const std::int64_t blocks =
      std::max<std::int64_t>(cdiv(total, config_.block_size), kv_.reservation_blocks(req));
  const std::int32_t usable = kv_.pool().num_usable_blocks();
  if (blocks > usable) {
    return "needs " + std::to_string(blocks) + " KV blocks, more than the cache's capacity of " +
           std::to_string(usable) + " blocks";
  }
  const BatchFormation bf = config_.batch_formation;
  if (bf == BatchFormation::kSarathi || bf == BatchFormation::kPrefillFirst) {
    // Admission must leave the watermark free (vLLM v0 can_allocate answers NEVER otherwise); a
    // resumed request is admitted with up to total - 1 tokens.
    const std::int64_t need = cdiv(total - 1, config_.block_size) + watermark_blocks();
    if (need > usable) {
      return "needs " + std::to_string(cdiv(total - 1, config_.block_size)) +
             " KV blocks plus a watermark of " + std::to_string(watermark_blocks()) +
             ", more than the cache's capacity of " + std::to_string(usable) + " blocks";
    }
  }
  if (bf == BatchFormation::kOrca || bf == BatchFormation::kPrefillFirst) {
    // Whole prompts only: Orca never preempts, so a prompt is the most one step asks for; a
    // prefill-first request resumed after a preemption asks for up to total - 1.
    const std::int64_t worst = bf == BatchFormation::kOrca ? spec.prompt_len : total - 1;
    if (worst > config_.max_num_batched_tokens) {
      return "may need " + std::to_string(worst) +
             " tokens in one step, more than max_num_batched_tokens " +
             std::to_string(config_.max_num_batched_tokens) + " with " +
             (bf == BatchFormation::kOrca ? "orca" : "prefill-first") + " batching (no chunking)";
    }
  }
  if (bf == BatchFormation::kVllm && !config_.enable_chunked_prefill) {
    // A waiting request asks for num_tokens - hit tokens in one step; num_tokens reaches
    // total - 1 before the last token is sampled (a request resumed after a preemption).
    std::int64_t worst = total - 1;
    if (config_.long_prefill_token_threshold > 0) {
      worst = std::min<std::int64_t>(worst, config_.long_prefill_token_threshold);
    }
    if (worst > config_.max_num_batched_tokens) {
      return "may need " + std::to_string(worst) +
             " tokens in one step, more than max_num_batched_tokens " +
             std::to_string(config_.max_num_batched_tokens) + " with chunked prefill off";
    }
  }
  return {};
}

void Scheduler::add_request(RequestSpec spec, TimeNs now) {
  ++counters_.num_arrived;
  auto* r = new Request(std::move(spec));
  std::string reason = rejection_reason(*r);
  if (reason.empty()) {
    // One allocation for the request's life instead of regrowth during decode.
    r->output_tokens.reserve(static_cast<std::size_t>(r->spec.max_output_tokens));
    waiting_->push_back(r);
    return;
  }
  r->status = RequestStatus::kRejected;
  r->finish_reason = std::move(reason);
  r->finish_ns = now;
  ++counters_.num_rejected;
  if (observer_ != nullptr) observer_->on_reject(*r, now);
  delete r;
}

// Inlined into every fill_plan variant: it runs once per scheduled request per step.
[[gnu::always_inline]] inline void Scheduler::add_to_plan(Request& r, std::int32_t n,
                                                          std::int32_t cached_now, TimeNs now) {
  assert(n >= 1);
  const std::int32_t end = r.num_computed_tokens + n;
  const std::int32_t known = r.num_tokens();
  // Anything but a single last-token step computes known tokens whose KV is missing.
  add_entry(r, n, cached_now, now, /*is_prefill=*/end < known || n > 1, /*samples=*/end == known);
}

[[gnu::always_inline]] inline void Scheduler::add_entry(Request& r, std::int32_t n,
                                                        std::int32_t cached_now, TimeNs now,
                                                        bool is_prefill, bool samples) {
  const std::int32_t first = r.num_computed_tokens;
  const std::int32_t end = first + n;
  ScheduledRequest& e = plan_.requests.emplace_back();
  e.id = r.id();
  e.spec = &r.spec;
  e.output_tokens = r.output_tokens;
  e.first_token = first;
  e.num_tokens = n;
  e.num_cached_prefix = cached_now;
  e.is_prefill = is_prefill;
  e.samples = samples;
  e.block_table = r.block_table;
  plan_requests_.push_back(&r);
  if (is_prefill) {
    plan_.num_prefill_tokens += n;
    plan_.totals.prefill_pairs += causal_pairs(first, n);
    plan_.totals.prefill_context_tokens += end;
  } else {
    plan_.num_decode_tokens += n;
    plan_.totals.decode_context_tokens += end;
  }
  plan_.totals.num_sampled += samples ? 1 : 0;

  // Positions below the high-water mark had KV before a preemption dropped it.
  const std::int32_t max_computed = r.max_computed_tokens;
  r.undo_max_computed_tokens = max_computed;
  r.undo_first_scheduled_ns = r.first_scheduled_ns;
  if (report_service_) waiting_->on_tokens_scheduled(r, is_prefill ? n : 0, is_prefill ? 0 : n);
  if (max_computed > first) [[unlikely]] {
    // Recomputing KV a preemption dropped.
    const std::int32_t recomputed = std::min(end, max_computed) - first;
    r.num_recomputed_tokens += recomputed;
    counters_.num_recomputed_tokens += recomputed;
  }
  r.num_computed_tokens = end;
  if (end > max_computed) r.max_computed_tokens = end;
  r.num_computed_total += n;
  if (r.first_scheduled_ns < 0) [[unlikely]] {
    r.first_scheduled_ns = now;
  }
}

std::size_t Scheduler::pick_victim() const {
  std::size_t best = 0;
  switch (config_.preemption_victim) {
    case PreemptionVictim::kLastRunning:
      return running_.size() - 1;
    case PreemptionVictim::kLowestPriority:
      // vLLM: max(running, key=(priority, arrival_time)); Python's max keeps the first of equals.
      for (std::size_t k = 1; k < running_.size(); ++k) {
        const RequestSpec& a = running_[k]->spec;
        const RequestSpec& b = running_[best]->spec;
        if (std::tie(a.priority, a.arrival_ns) > std::tie(b.priority, b.arrival_ns)) best = k;
      }
      return best;
    case PreemptionVictim::kFewestComputed:
      // SGLang retract_decode: sort by (len(output_ids), -len(input_ids)) descending (a stable
      // sort), pop from the end: the fewest outputs, then the longest prompt, then the later one
      // in running order. Losing the least decode work is cheapest to redo.
      for (std::size_t k = 1; k < running_.size(); ++k) {
        const Request& a = *running_[k];
        const Request& b = *running_[best];
        const auto ka = std::make_tuple(a.num_output_tokens(), -a.spec.prompt_len);
        const auto kb = std::make_tuple(b.num_output_tokens(), -b.spec.prompt_len);
        if (ka <= kb) best = k;
      }
      return best;
    case PreemptionVictim::kMostBlocks:
      // Frees the most memory per preemption; ties go to the later arrival (then the larger id),
      // which has waited least.
      for (std::size_t k = 1; k < running_.size(); ++k) {
        const Request& a = *running_[k];
        const Request& b = *running_[best];
        if (std::make_tuple(a.block_table.size(), a.spec.arrival_ns, a.id()) >
            std::make_tuple(b.block_table.size(), b.spec.arrival_ns, b.id())) {
          best = k;
        }
      }
      return best;
  }
  return running_.size() - 1;
}

bool Scheduler::in_plan(const Request& r) const {
  return std::find(plan_requests_.begin(), plan_requests_.end(), &r) != plan_requests_.end();
}

std::int32_t Scheduler::watermark_blocks() const {
  // vLLM v0: watermark_blocks = int(watermark * num_gpu_blocks).
  return static_cast<std::int32_t>(config_.admission_watermark * kv_.pool().num_usable_blocks());
}

std::int32_t Scheduler::unschedule(const Request& r) {
  std::size_t k = 0;
  while (plan_requests_[k] != &r) ++k;  // REQUIRES: r has an entry
  const ScheduledRequest& e = plan_.requests[k];
  const std::int32_t n = e.num_tokens;
  if (e.is_prefill) {
    plan_.num_prefill_tokens -= n;
    plan_.totals.prefill_pairs -= causal_pairs(e.first_token, n);
    plan_.totals.prefill_context_tokens -= e.context_len();
  } else {
    plan_.num_decode_tokens -= n;
    plan_.totals.decode_context_tokens -= e.context_len();
  }
  plan_.totals.num_sampled -= e.samples ? 1 : 0;
  if (report_service_) {
    waiting_->on_tokens_scheduled(r, e.is_prefill ? -n : 0, e.is_prefill ? 0 : -n);
  }
  Request& m = *plan_requests_[k];
  const std::int32_t undo_max = m.undo_max_computed_tokens;
  // As add_to_plan counted it, from the high-water mark before the entry.
  const std::int32_t recomputed = std::max(0, std::min(e.context_len(), undo_max) - e.first_token);
  m.num_computed_tokens = e.first_token;  // preempt() resets it anyway
  m.max_computed_tokens = undo_max;
  m.num_recomputed_tokens -= recomputed;
  counters_.num_recomputed_tokens -= recomputed;
  m.num_computed_total -= n;
  m.first_scheduled_ns = m.undo_first_scheduled_ns;
  plan_.requests.erase(plan_.requests.begin() + static_cast<std::ptrdiff_t>(k));
  plan_requests_.erase(plan_requests_.begin() + static_cast<std::ptrdiff_t>(k));
  return n;
}

bool Scheduler::should_swap(const Request& victim) const {
  switch (config_.preemption_mode) {
    case PreemptionMode::kRecompute:
      return false;
    case PreemptionMode::kSwap:
      break;
    case PreemptionMode::kAuto:
      if (!config_.prefer_swap || !config_.prefer_swap(victim)) return false;
      break;
  }
  // Short of host space the victim is recomputed (documented in scheduler.h).
  return kv_.can_swap_out(victim);
}

void Scheduler::preempt(Request& victim, TimeNs now) {
  if (victim.will_fork()) [[unlikely]] {
    fork_seats_ -= static_cast<std::size_t>(victim.spec.n - 1);
  }
  ++victim.num_preemptions;
  ++counters_.num_preemptions;
  // Past the cap the request is given up instead of thrashing forever (a livelock guard); its
  // KV is dropped rather than moved to the host for nothing.
  const bool give_up =
      config_.max_preemptions > 0 && victim.num_preemptions > config_.max_preemptions;
  if (!give_up && should_swap(victim)) {
    // Swap: the KV moves to host blocks, so num_computed_tokens stays (nothing is recomputed).
    kv_.swap_out(victim, plan_.swap_out);
    victim.status = RequestStatus::kSwapped;
    swapped_.push_back(&victim);
  } else {
    // Recompute: the KV goes (full blocks stay cached until evicted), the outputs stay.
    kv_.free(victim);
    victim.status = RequestStatus::kPreempted;
    victim.num_computed_tokens = 0;
    if (!give_up) waiting_->push_front(&victim);
  }
  plan_.preempted.push_back(victim.id());
  if (observer_ != nullptr) observer_->on_preempt(victim, now);
  if (give_up) abort_request(victim, now);
}

void Scheduler::abort_request(Request& r, TimeNs now) {
  kv_.free(r);  // a no-op after preempt(); keeps the contract for other callers
  r.status = RequestStatus::kAborted;
  r.finish_ns = now;
  r.finish_reason = "preempted " + std::to_string(r.num_preemptions) + " times (max_preemptions " +
                    std::to_string(config_.max_preemptions) + ")";
  if (r.group != nullptr) {  // deleted with its group
    sample_done(r, now);
    return;
  }
  ++counters_.num_aborted;
  if (observer_ != nullptr) observer_->on_finish(r, now);
  delete &r;
}

bool Scheduler::make_room(std::size_t& i, std::int32_t n, std::int32_t& budget, TimeNs now) {
  Request* r = running_[i];
  while (!kv_.allocate_slots(*r, n)) {
    const std::size_t v = pick_victim();
    Request* victim = running_[v];
    if (victim->group != nullptr) [[unlikely]] {
      if (preempt_group(*victim, i, budget, r, now)) return false;
      continue;
    }
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(v));
    if (in_plan(*victim)) budget += unschedule(*victim);
    if (v < i) --i;
    preempt(*victim, now);  // may delete the victim: compare pointers only from here on
    if (victim == r) return false;
  }
  return true;
}

void Scheduler::admit_front(Request& r, const PrefixHit& hit) {
  waiting_->pop_front();
  running_.push_back(&r);
  if (r.will_fork()) [[unlikely]] {
    fork_seats_ += static_cast<std::size_t>(r.spec.n - 1);
  }
  r.status = RequestStatus::kRunning;
  r.num_computed_tokens = hit.num_tokens;
  r.max_computed_tokens = std::max(r.max_computed_tokens, hit.num_tokens);
  if (r.num_cached_tokens < 0) r.num_cached_tokens = hit.num_tokens;
}

const StepPlan& Scheduler::schedule(TimeNs now) {
  assert(!plan_pending_ && "schedule() called before the previous plan was completed");
  plan_.clear();
  plan_requests_.clear();
  plan_.step_index = next_step_++;
  plan_.totals.valid = true;  // kept by add_entry and unschedule
  switch (config_.batch_formation) {
    case BatchFormation::kVllm:
      fill_plan(now, /*admit=*/true);
      break;
    case BatchFormation::kStatic:
      fill_plan_static(now);
      break;
    case BatchFormation::kOrca:
      fill_plan_orca(now);
      break;
    case BatchFormation::kSarathi:
      fill_plan_sarathi(now, /*admit=*/true);
      break;
    case BatchFormation::kPrefillFirst:
      fill_plan_prefill_first(now, /*admit=*/true);
      break;
  }
  // A lowest-priority victim can be the request being scheduled while others still run, which
  // leaves an empty plan; vLLM's engine loop then simply schedules again (an empty step runs no
  // model), so do that here: an empty plan keeps meaning "nothing can run". Each pass either
  // schedules something or preempts one more running request, so this ends. The extra passes
  // admit nobody, so "a plan that preempted admits nobody" holds (vLLM's next step could admit;
  // the difference is one step of admission delay in this rare case). Never taken with
  // last-running victims (a request preempts itself only when it is the last one running).
  while (plan_.requests.empty() && !plan_.preempted.empty() && !running_.empty()) {
    if (config_.batch_formation == BatchFormation::kSarathi) {
      fill_plan_sarathi(now, /*admit=*/false);
    } else if (config_.batch_formation == BatchFormation::kPrefillFirst) {
      fill_plan_prefill_first(now, /*admit=*/false);
    } else {
      fill_plan(now, /*admit=*/false);  // static and orca never preempt
    }
  }

  assert(plan_.num_tokens() <= config_.max_num_batched_tokens);
  assert(running_.size() <= static_cast<std::size_t>(config_.max_num_seqs));
  // Parallel sampling: entries that sample the first token of a request that will fork draw n
  // tokens. Marked here, once the plan is final, and only while such a request runs.
  if (fork_seats_ > 0) [[unlikely]] {
    for (std::size_t k = 0; k < plan_.requests.size(); ++k) {
      ScheduledRequest& e = plan_.requests[k];
      const Request& r = *plan_requests_[k];
      if (e.samples && r.will_fork()) {
        e.num_samples = static_cast<std::uint16_t>(r.spec.n);
        plan_.num_fork_tokens += r.spec.n - 1;
      }
    }
  }
  plan_pending_ = !plan_.empty();
  if (!done_groups_.empty()) [[unlikely]]
    release_done_groups();  // groups ended by aborts
  return plan_;
}

void Scheduler::fill_plan(TimeNs now, bool admit) {
  std::int32_t budget = config_.max_num_batched_tokens;
  const std::int32_t threshold = config_.long_prefill_token_threshold;
  // The per-request cap of phase 1 (the threshold, when set; the budget caps it too).
  const std::int32_t cap = threshold > 0 ? threshold : std::numeric_limits<std::int32_t>::max();

  // Phase 1: running requests in list order.
  bool preempted = false;
  std::size_t i = 0;
  while (i < running_.size() && budget > 0) {
    Request& r = *running_[i];
    const std::int32_t remaining = r.num_tokens() - r.num_computed_tokens;
    // The common case first, a decode (one token) that fits the blocks the request can get: the
    // same calls as below with n = 1, which the compiler specialises. A failed allocation
    // changes nothing, so the general path below simply tries again and preempts.
    if (remaining == 1 && kv_.allocate_slots(r, 1)) [[likely]] {
      add_entry(r, 1, 0, now, /*is_prefill=*/false, /*samples=*/true);
      budget -= 1;
      ++i;
      continue;
    }
    const std::int32_t n = std::min({remaining, cap, budget});
    if (n <= 0) {  // nothing to do this step; it keeps its place
      ++i;
      continue;
    }
    bool allocated = kv_.allocate_slots(r, n);
    while (!allocated) {
      // The last running request was not scheduled yet in this step (those lie before i), so
      // nothing has to be undone; a lowest-priority victim may lie before i.
      const std::size_t v = pick_victim();
      Request* victim = running_[v];
      if (victim->group != nullptr) [[unlikely]] {
        preempted = true;
        // Copies, so that i and budget are not address-taken in this hot loop.
        std::size_t gi = i;
        std::int32_t gb = budget;
        const bool self = preempt_group(*victim, gi, gb, &r, now);
        i = gi;
        budget = gb;
        if (self) break;
        allocated = kv_.allocate_slots(r, n);
        continue;
      }
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(v));
      if (v < i) {
        // Requests given 0 tokens lie before i too, without a plan entry.
        if (in_plan(*victim)) budget += unschedule(*victim);
        --i;
      }
      preempt(*victim, now);
      preempted = true;
      if (victim == &r) break;
      allocated = kv_.allocate_slots(r, n);
    }
    if (!allocated) break;  // r preempted itself: nothing after it is left to schedule
    add_to_plan(r, n, 0, now);
    budget -= n;
    ++i;
  }

  // Phase 2: swapped requests resume (never in a step that preempted, so never in one that
  // swapped out); while any stays swapped nobody new is admitted.
  if (admit && !preempted && !swapped_.empty()) budget = swap_in_phase(budget, now);

  // Phase 3: waiting requests in queue order, unless this step preempted (the freed blocks
  // would otherwise go straight to newcomers while the victims wait).
  const auto max_seqs = static_cast<std::size_t>(config_.max_num_seqs);
  while (admit && !preempted && swapped_.empty() && !waiting_->empty() && budget > 0 &&
         seats_taken() < max_seqs) {
    Request& r = *waiting_->front();
    if (r.will_fork() && seats_taken() + r.spec.n > max_seqs) [[unlikely]] {
      break;
    }
    // Every admission looks up the prefix cache: a resumed request usually finds its own
    // earlier full blocks there.
    PrefixHit hit = kv_.get_computed_blocks(r);
    std::int32_t n = r.num_tokens() - hit.num_tokens;
    if (threshold > 0 && n > threshold) n = threshold;
    if (!config_.enable_chunked_prefill && n > budget) break;  // no skipping ahead
    n = std::min(n, budget);
    if (!kv_.allocate_slots(r, n, &hit)) break;  // head-of-line blocking on KV space too
    admit_front(r, hit);
    add_to_plan(r, n, hit.num_tokens, now);
    budget -= n;
  }
}

std::int32_t Scheduler::swap_in_phase(std::int32_t budget, TimeNs now) {
  const std::int32_t threshold = config_.long_prefill_token_threshold;
  const auto max_seqs = static_cast<std::size_t>(config_.max_num_seqs);
  while (!swapped_.empty() && budget > 0 && seats_taken() < max_seqs) {
    Request& r = *swapped_.front();
    if (r.will_fork() && seats_taken() + r.spec.n > max_seqs) [[unlikely]] {
      break;
    }
    // Usually one decode token; more when the victim was swapped out mid-prefill.
    std::int32_t n = r.num_tokens() - r.num_computed_tokens;
    if (threshold > 0 && n > threshold) n = threshold;
    if (!config_.enable_chunked_prefill && n > budget) break;
    n = std::min(n, budget);
    if (!kv_.can_swap_in(r, std::max(n, 0))) break;  // head-of-line, as vLLM v0's swapped queue
    bool ok = kv_.swap_in(r, plan_.swap_in);
    if (n > 0) ok = ok && kv_.allocate_slots(r, n);  // can_swap_in covered both
    assert(ok);
    (void)ok;
    swapped_.pop_front();
    running_.push_back(&r);
    if (r.will_fork()) [[unlikely]] {
      fork_seats_ += static_cast<std::size_t>(r.spec.n - 1);
    }
    r.status = RequestStatus::kRunning;
    if (n <= 0) continue;  // nothing to compute yet (only off the synchronous loop)
    add_to_plan(r, n, 0, now);
    budget -= n;
  }
  return budget;
}

void Scheduler::fill_plan_static(TimeNs now) {
  std::int32_t budget = config_.max_num_batched_tokens;
  if (running_.empty()) {
    // Form the next batch from the head of the queue. Each member reserves blocks for its
    // maximum length now, so the batch can never run out of memory (static batching sizes the
    // batch for the worst case); the first member that does not fit ends the batch.
    const auto max_seqs = static_cast<std::size_t>(config_.max_num_seqs);
    while (!waiting_->empty() && running_.size() < max_seqs) {
      Request& r = *waiting_->front();
      PrefixHit hit = kv_.get_computed_blocks(r);
      if (!kv_.allocate_slots(r, r.spec.total_tokens() - hit.num_tokens, &hit)) break;
      admit_front(r, hit);
    }
  }
  // Lockstep: while any member's prompt is unfinished the step only prefills (chunked under the
  // budget, members in order); members that finished theirs wait for the others, as one padded
  // batch would. Then every member decodes each step until the longest is done.
  bool prefilling = false;
  for (const Request* r : running_) prefilling = prefilling || prefill_pending(*r);
  for (std::size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Request& r = *running_[i];
    if (prefilling != prefill_pending(r)) continue;
    const std::int32_t n = std::min(r.num_tokens() - r.num_computed_tokens, budget);
    if (n <= 0) continue;
    // Within the reservation: never fails (it only registers newly full blocks).
    const bool ok = kv_.allocate_slots(r, n);
    assert(ok);
    (void)ok;
    add_to_plan(r, n, r.first_scheduled_ns < 0 ? r.num_computed_tokens : 0, now);
    budget -= n;
  }
}

void Scheduler::fill_plan_orca(TimeNs now) {
  std::int32_t budget = config_.max_num_batched_tokens;
  // Every running request decodes (its prompt went whole at admission, and its blocks were
  // reserved then, so this never preempts).
  for (std::size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Request& r = *running_[i];
    const std::int32_t n = std::min(r.num_tokens() - r.num_computed_tokens, budget);
    if (n <= 0) continue;
    const bool ok = kv_.allocate_slots(r, n);
    assert(ok);
    (void)ok;
    add_to_plan(r, n, 0, now);
    budget -= n;
  }
  // New requests join while the whole prompt fits the remaining budget (no chunking: the head
  // waits if it does not) and blocks for prompt + max_output_tokens can be reserved.
  const auto max_seqs = static_cast<std::size_t>(config_.max_num_seqs);
  while (!waiting_->empty() && budget > 0 && running_.size() < max_seqs) {
    Request& r = *waiting_->front();
    PrefixHit hit = kv_.get_computed_blocks(r);
    const std::int32_t n = r.num_tokens() - hit.num_tokens;
    if (n > budget) break;
    // The whole prompt is computed in this step, so registering its full blocks now is exact.
    if (!kv_.allocate_slots(r, r.spec.total_tokens() - hit.num_tokens, &hit)) break;
    admit_front(r, hit);
    add_to_plan(r, n, hit.num_tokens, now);
    budget -= n;
  }
}

void Scheduler::fill_plan_sarathi(TimeNs now, bool admit) {
  const std::int32_t tau = config_.sarathi_chunk_size > 0 ? std::min(config_.sarathi_chunk_size,
                                                                     config_.max_num_batched_tokens)
                                                          : config_.max_num_batched_tokens;
  std::int32_t budget = tau;
  bool preempted = false;
  // 1. Decodes, 1 token each, so none ever stalls behind a prefill.
  std::size_t i = 0;
  while (i < running_.size() && budget > 0) {
    Request& r = *running_[i];
    if (prefill_pending(r) || r.num_tokens() - r.num_computed_tokens <= 0) {
      ++i;
      continue;
    }
    const std::size_t before = plan_.preempted.size();
    const bool ok = make_room(i, 1, budget, now);
    preempted = preempted || plan_.preempted.size() != before;
    if (!ok) continue;  // r preempted itself; i now names the next request
    add_to_plan(r, 1, 0, now);
    budget -= 1;
    ++i;
  }
  // 2. Ongoing partial prefills (admitted earlier, or refunded above), each chunked to what is
  // left of tau.
  i = 0;
  while (i < running_.size() && budget > 0) {
    Request& r = *running_[i];
    if (!prefill_pending(r)) {
      ++i;
      continue;
    }
    const std::int32_t n = std::min(r.num_tokens() - r.num_computed_tokens, budget);
    const std::size_t before = plan_.preempted.size();
    const bool ok = make_room(i, n, budget, now);
    preempted = preempted || plan_.preempted.size() != before;
    if (!ok) continue;
    add_to_plan(r, n, 0, now);
    budget -= n;
    ++i;
  }
  // 3. New requests while the whole prompt's blocks fit above the watermark (Sarathi's
  // can_allocate) and a seat is free. Blocks are then taken chunk by chunk, so none is
  // registered in the prefix cache before its KV is computed. Nobody is admitted in a step that
  // preempted: the freed blocks are the victims'.
  const auto max_seqs = static_cast<std::size_t>(config_.max_num_seqs);
  const std::int32_t watermark = watermark_blocks();
  while (admit && !preempted && !waiting_->empty() && budget > 0 && seats_taken() < max_seqs) {
    Request& r = *waiting_->front();
    if (r.will_fork() && seats_taken() + r.spec.n > max_seqs) [[unlikely]] {
      break;
    }
    PrefixHit hit = kv_.get_computed_blocks(r);
    const std::int32_t prompt = r.num_tokens() - hit.num_tokens;
    if (kv_.num_blocks_to_allocate(r, prompt, &hit) + watermark > kv_.num_free_blocks()) {
      break;
    }
    const std::int32_t n = std::min(prompt, budget);
    const bool ok = kv_.allocate_slots(r, n, &hit);
    assert(ok);
    (void)ok;
    admit_front(r, hit);
    add_to_plan(r, n, hit.num_tokens, now);
    budget -= n;
  }
}

void Scheduler::fill_plan_prefill_first(TimeNs now, bool admit) {
  std::int32_t budget = config_.max_num_batched_tokens;
  // Prefill step: admit from the head while the whole prompt fits the budget, its blocks leave
  // the watermark free and a seat is free (vLLM v0 _schedule_prefills, head-of-line).
  const auto max_seqs = static_cast<std::size_t>(config_.max_num_seqs);
  const std::int32_t watermark = watermark_blocks();
  while (admit && !waiting_->empty() && seats_taken() < max_seqs) {
    Request& r = *waiting_->front();
    if (r.will_fork() && seats_taken() + r.spec.n > max_seqs) [[unlikely]] {
      break;
    }
    PrefixHit hit = kv_.get_computed_blocks(r);
    const std::int32_t n = r.num_tokens() - hit.num_tokens;
    if (n > budget) break;
    if (kv_.num_blocks_to_allocate(r, n, &hit) + watermark > kv_.num_free_blocks()) break;
    const bool ok = kv_.allocate_slots(r, n, &hit);
    assert(ok);
    (void)ok;
    admit_front(r, hit);
    add_to_plan(r, n, hit.num_tokens, now);
    budget -= n;
  }
  if (!plan_.requests.empty()) return;  // prefill-only: running requests skip this step
  // Decode step over every running request, preempting victims when one cannot append.
  std::size_t i = 0;
  while (i < running_.size() && budget > 0) {
    Request& r = *running_[i];
    const std::int32_t n = std::min(r.num_tokens() - r.num_computed_tokens, budget);
    if (n <= 0) {
      ++i;
      continue;
    }
    if (!make_room(i, n, budget, now)) continue;
    add_to_plan(r, n, 0, now);
    budget -= n;
    ++i;
  }
}

void Scheduler::finish(Request& r, TimeNs now) {
  if (r.status == RequestStatus::kSwapped) {
    // As below, for a request swapped out after this plan was formed.
    std::erase(swapped_, &r);
  } else if (r.status != RequestStatus::kRunning) {
    // Only a request preempted after this plan was formed can get here; in the synchronous
    // loop that never happens, but the token still counts (vLLM test_preempt_during_execution).
    waiting_->erase(&r);
  }
  r.status = RequestStatus::kFinished;
  r.finish_ns = now;
  r.finish_reason = "length";
  kv_.free(r);
  if (r.group != nullptr) [[unlikely]] {
    sample_done(r, now);
    return;
  }
  ++counters_.num_finished;
  if (observer_ != nullptr) observer_->on_finish(r, now);
}

void Scheduler::complete(const StepResult& result, TimeNs now) {
  if (result.sampled_tokens.size() < plan_.requests.size()) {
    throw std::invalid_argument(
        "Scheduler::complete: " + std::to_string(result.sampled_tokens.size()) +
        " sampled tokens for a plan of " + std::to_string(plan_.requests.size()) + " entries");
  }
  // Forks first (they need nothing of the parent's new token), so the loop below stays as it
  // is for n = 1.
  bool any_finished = false;
  if (plan_.num_fork_tokens > 0) [[unlikely]] {
    any_finished = fork_pass(result, now);
  }
  // The step's tokens first (reported together), then its finishes, both in plan order.
  const std::size_t entries = plan_.requests.size();
  if (token_requests_.size() < entries) {  // grows to the largest plan, then never again
    token_requests_.resize(entries);
    token_prev_ns_.resize(entries);
  }
  Request** const got = token_requests_.data();
  TimeNs* const prev = token_prev_ns_.data();
  std::size_t num_got = 0;
  bool any_done = false;
  for (std::size_t k = 0; k < entries; ++k) {
    if (!plan_.requests[k].samples) continue;  // a partial prefill chunk yields no token
    Request& r = *plan_requests_[k];
    got[num_got] = &r;
    prev[num_got] = r.last_token_ns;
    ++num_got;
    r.output_tokens.push_back(result.sampled_tokens[k]);
    if (r.first_token_ns < 0) r.first_token_ns = now;
    r.last_token_ns = now;
    any_done = any_done || r.num_output_tokens() >= r.spec.max_output_tokens;
  }
  if (observer_ != nullptr && num_got > 0) {
    observer_->on_step_tokens(std::span<const Request* const>(got, num_got),
                              std::span<const TimeNs>(prev, num_got), now);
  }
  for (std::size_t t = 0; any_done && t < num_got; ++t) {
    Request* const r = got[t];
    if (r->num_output_tokens() >= r->spec.max_output_tokens) {
      finish(*r, now);
      any_finished = true;
    }
  }
  if (any_finished) {
    // One pass keeps the others' order and costs O(running) however many finished.
    std::erase_if(running_, [](const Request* r) { return r->status == RequestStatus::kFinished; });
    for (Request* r : plan_requests_) {
      if (r->status == RequestStatus::kFinished && r->group == nullptr) delete r;
    }
  }
  if (!done_groups_.empty()) [[unlikely]] {
    release_done_groups();
  }
  plan_requests_.clear();
  plan_pending_ = false;
}

bool Scheduler::fork_pass(const StepResult& result, TimeNs now) {
  if (result.fork_tokens.size() < static_cast<std::size_t>(plan_.num_fork_tokens)) {
    throw std::invalid_argument(
        "Scheduler::complete: " + std::to_string(result.fork_tokens.size()) + " fork tokens for " +
        std::to_string(plan_.num_fork_tokens));
  }
  bool any_finished = false;
  std::size_t at = 0;  // next unused entry of result.fork_tokens
  for (std::size_t k = 0; k < plan_.requests.size(); ++k) {
    const ScheduledRequest& e = plan_.requests[k];
    if (e.num_samples <= 1) continue;
    Request& r = *plan_requests_[k];
    if (r.status == RequestStatus::kRunning && r.will_fork()) {
      fork_request(r, result.fork_tokens.data() + at, now);
      // Samples with a single output token are done at once (sample 0 in complete()).
      if (r.spec.max_output_tokens <= 1) {
        for (std::size_t s = 1; s < r.group->samples.size(); ++s) {
          finish(*r.group->samples[s], now);
        }
        any_finished = true;
      }
    }
    at += static_cast<std::size_t>(e.num_samples - 1);
  }
  return any_finished;
}

void Scheduler::fork_request(Request& r, const std::int32_t* tokens, TimeNs now) {
  const std::int32_t n = r.spec.n;
  fork_seats_ -= static_cast<std::size_t>(n - 1);  // the reserved seats are taken now
  auto group = std::make_shared<SampleGroup>();
  group->samples.reserve(static_cast<std::size_t>(n));
  group->samples.push_back(&r);
  group->unfinished = n;
  r.group = group;
  std::vector<Request*> children;
  children.reserve(static_cast<std::size_t>(n - 1));
  for (std::int32_t k = 1; k < n; ++k) {
    RequestSpec spec = r.spec;
    spec.id = sample_request_id(r.id(), k);
    spec.sample = k;
    auto* c = new Request(std::move(spec));
    c->group = group;
    c->status = RequestStatus::kRunning;
    c->num_computed_tokens = r.num_computed_tokens;
    c->max_computed_tokens = r.num_computed_tokens;
    c->num_cached_tokens = r.num_cached_tokens;
    c->first_scheduled_ns = r.first_scheduled_ns;
    c->output_tokens.reserve(static_cast<std::size_t>(c->spec.max_output_tokens));
    c->output_tokens.push_back(tokens[k - 1]);
    c->first_token_ns = c->last_token_ns = now;
    kv_.fork(r, *c);
    group->samples.push_back(c);
    children.push_back(c);
    if (observer_ != nullptr) observer_->on_token(*c, -1, now);
  }
  const auto at = std::find(running_.begin(), running_.end(), &r) + 1;
  running_.insert(at, children.begin(), children.end());
}

bool Scheduler::preempt_group(Request& victim, std::size_t& i, std::int32_t& budget,
                              const Request* self, TimeNs now) {
  const std::shared_ptr<SampleGroup> group = victim.group;  // preempt() may end the group
  // The requester never goes with its siblings: it is preempted only when it is the victim and
  // none of them runs any more (as a lone request preempts itself), so the running list never
  // empties for a request that fits the cache alone.
  bool siblings = false;
  for (const Request* s : group->samples) {
    siblings = siblings || (s != self && s->status == RequestStatus::kRunning);
  }
  const bool take_self = &victim == self && !siblings;
  bool hit_self = false;
  for (auto it = group->samples.rbegin(); it != group->samples.rend(); ++it) {
    Request* s = *it;
    if (s->status != RequestStatus::kRunning || (s == self && !take_self)) continue;
    const auto pos = std::find(running_.begin(), running_.end(), s);
    const auto v = static_cast<std::size_t>(pos - running_.begin());
    running_.erase(pos);
    if (in_plan(*s)) budget += unschedule(*s);
    if (v < i) --i;
    hit_self = hit_self || s == self;
    preempt(*s, now);  // an aborted sample stays alive until release_done_groups()
  }
  return hit_self;
}

void Scheduler::sample_done(Request& r, TimeNs now) {
  SampleGroup& g = *r.group;
  if (--g.unfinished > 0) return;
  // The group is reported once, through sample 0, with the samples' totals.
  Request& head = *g.samples[0];
  const Request* aborted = nullptr;
  std::int32_t preemptions = 0;
  std::int64_t recomputed = 0;
  for (const Request* s : g.samples) {
    if (aborted == nullptr && s->status == RequestStatus::kAborted) aborted = s;
    preemptions += s->num_preemptions;
    recomputed += s->num_recomputed_tokens;
  }
  head.finish_ns = now;
  head.num_preemptions = preemptions;
  head.num_recomputed_tokens = recomputed;
  if (aborted != nullptr) {
    if (aborted != &head) {
      head.finish_reason =
          "sample " + std::to_string(aborted->spec.sample) + " " + aborted->finish_reason;
    }
    head.status = RequestStatus::kAborted;
    ++counters_.num_aborted;
  } else {
    head.status = RequestStatus::kFinished;
    ++counters_.num_finished;
  }
  if (observer_ != nullptr) observer_->on_finish(head, now);
  done_groups_.push_back(r.group);
}

void Scheduler::release_done_groups() {
  for (const std::shared_ptr<SampleGroup>& g : done_groups_) {
    const std::vector<Request*> samples = g->samples;
    for (Request* s : samples) delete s;
  }
  done_groups_.clear();
}

}  // namespace servelab
