#include "core/scheduler.h"

#include <algorithm>
#include <cassert>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "core/config_error.h"
#include "core/length_cap.h"
#include "core/stop_conditions.h"
#include "core/vllm_batch_formation.h"

namespace servelab {

namespace {

// Whether r's last sampled token ended it: max_output_tokens reached, or a stop condition
// (core/stop_conditions.h). REQUIRES: r has an output token.
inline bool reached_stop(const Request& r) {
  if (r.num_output_tokens() >= r.spec.max_output_tokens) return true;
  return r.spec.stop != nullptr && check_stop(r.spec, r.output_tokens) == StopReason::kStop;
}

std::int64_t cdiv(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// vLLM v1's policies: what a SchedulerConfig without policy objects means.
const VllmBatchFormation kVllmBatch;
const LastRunningVictim kLastRunningVictim;
const RecomputePreemption kRecompute;

// The prefix cache as a cache-aware queue order sees it (core/waiting_queue.h).
class KvPrefixProbe final : public PrefixProbe {
 public:
  explicit KvPrefixProbe(KvCacheManager& kv) : kv_(kv) {}
  std::int32_t block_size() const override { return kv_.block_size(); }
  std::span<const BlockHash> hashes(Request& r) override { return kv_.hit_candidate_hashes(r); }
  std::int32_t cached_blocks(Request& r) override {
    return kv_.num_cached_prefix_blocks(r, /*refresh=*/true);
  }

 private:
  KvCacheManager& kv_;
};

// Puts r at index `at` of `list`, or at its end when `at` is past it (AdmissionRule::insert_at).
void insert_running(std::vector<Request*>& list, Request& r, std::size_t at) {
  if (at < list.size()) [[unlikely]] {
    list.insert(list.begin() + static_cast<std::ptrdiff_t>(at), &r);
  } else {
    list.push_back(&r);
  }
}

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager& kv, SchedulerObserver* observer,
                     std::unique_ptr<WaitingQueue> waiting)
    : config_(config),
      batch_(config.batch != nullptr ? config.batch.get() : &kVllmBatch),
      victim_(config.victim != nullptr ? config.victim.get() : &kLastRunningVictim),
      preemption_(config.preemption != nullptr ? config.preemption.get() : &kRecompute),
      kv_(kv),
      observer_(observer),
      waiting_(std::move(waiting)) {
  if (!waiting_ && config_.make_waiting_queue) waiting_ = config_.make_waiting_queue();
  if (!waiting_) waiting_ = std::make_unique<FcfsWaitingQueue>();
  report_service_ = waiting_->counts_service();
  reorders_ = waiting_->reorders();
  times_service_ = waiting_->times_service();
  batch_state_ = batch_->make_state();
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
  if (config_.long_prefill_token_threshold < 0) {
    throw std::invalid_argument("Scheduler: long_prefill_token_threshold must be >= 0");
  }
  if (config_.num_scheduler_steps < 1) {
    throw std::invalid_argument("Scheduler: num_scheduler_steps must be >= 1");
  }
  // Rounds need every decode's lookahead slots, which only some formations reserve.
  if (config_.num_scheduler_steps > 1 && !batch_->supports_multi_step()) {
    throw std::invalid_argument("Scheduler: batch formation '" + std::string(batch_->name()) +
                                "' does not support num_scheduler_steps > 1");
  }
  lookahead_ = config_.num_scheduler_steps - 1;
  if (config_.lora.max_loras < 0 || config_.lora.max_lora_rank < 1) {
    throw std::invalid_argument("Scheduler: max_loras must be >= 0 and max_lora_rank >= 1");
  }
  const SpeculativeConfig& sp = config_.speculative;
  if (sp.num_speculative_tokens < 0) {
    throw std::invalid_argument("Scheduler: num_speculative_tokens must be >= 0");
  }
  if (sp.enabled()) {
    // Verify entries and rollback are written into vLLM v1's running phase only.
    if (batch_->name() != kVllmBatch.name()) {
      throw std::invalid_argument(
          "Scheduler: speculative decoding needs the vllm batch formation, "
          "not '" +
          std::string(batch_->name()) + "'");
    }
    if (config_.num_scheduler_steps > 1) {
      throw std::invalid_argument(
          "Scheduler: speculative decoding and num_scheduler_steps > 1 do not combine");
    }
    spec_k_ = sp.num_speculative_tokens;
    counters_.num_accepted_tokens_per_pos.assign(static_cast<std::size_t>(spec_k_), 0);
    spec_lookahead_ = sp.lookahead_slots();
  }
  if (config_.async_scheduling) {
    // The placeholders are written into vLLM v1's running phase, complete()'s one-step path and
    // recompute preemption only (vLLM v1 has neither swap nor multi-step rounds; ServeLab's
    // verify steps and forks need the previous step's tokens when the next plan is formed).
    const auto refuse = [](const std::string& why) {
      throw std::invalid_argument("Scheduler: async_scheduling " + why);
    };
    if (batch_->name() != kVllmBatch.name()) {
      refuse("needs the vllm batch formation, not '" + std::string(batch_->name()) + "'");
    }
    if (config_.num_scheduler_steps > 1) refuse("does not combine with num_scheduler_steps > 1");
    if (sp.enabled()) refuse("does not combine with speculative decoding");
    if (times_service_) {
      refuse("does not combine with queue order '" + std::string(waiting_->name()) +
             "', which charges requests for the duration of the steps they ran in");
    }
    if (preemption_->uses_host_memory()) {
      refuse("needs recompute preemption, not '" + std::string(preemption_->name()) + "'");
    }
    async_ = true;
  }
  if (batch_->needs_ranked_queue() && !waiting_->ranks()) {
    throw std::invalid_argument("Scheduler: batch formation '" + std::string(batch_->name()) +
                                "' needs a queue order that ranks requests, not '" +
                                waiting_->name() + "'");
  }
  // A formation without the swap-in pass would strand swapped victims.
  if (preemption_->uses_host_memory() && !batch_->resumes_swapped()) {
    throw std::invalid_argument("Scheduler: preemption '" + std::string(preemption_->name()) +
                                "' needs a batch formation that resumes swapped requests (vllm), "
                                "not '" +
                                std::string(batch_->name()) + "'");
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
  kv_.set_load_sink(&plan_.tier_loads);
  kv_.set_store_sink(&plan_.tier_stores);
}

Scheduler::~Scheduler() {
  release_done_groups();
  // Async scheduling: requests that ended while a pending plan named them (never completed).
  if (async_) {
    std::vector<Request*> ended;
    for (Request* r : plan_requests_) ended.push_back(r);
    for (Request* r : other_requests_) ended.push_back(r);
    std::erase_if(ended, [](const Request* r) {
      return r->status != RequestStatus::kFinished && r->status != RequestStatus::kAborted;
    });
    std::sort(ended.begin(), ended.end());
    ended.erase(std::unique(ended.begin(), ended.end()), ended.end());
    for (Request* r : ended) delete r;
  }
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
  kv_.set_load_sink(nullptr);
  kv_.set_store_sink(nullptr);
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
  if (spec.n != 1) {
    if (spec.n < 1 || spec.n > kMaxSamples) {
      return "n must be in [1, " + std::to_string(kMaxSamples) + "] (got " +
             std::to_string(spec.n) + ")";
    }
    if (!batch_->supports_parallel_sampling() || kv_.contiguous()) {
      return "parallel sampling (n > 1) needs on-demand paged allocation (batch vllm, sarathi "
             "or prefill-first; allocation paged)";
    }
    if (spec_k_ > 0) return "parallel sampling (n > 1) with speculative decoding is not supported";
    if (async_) return "parallel sampling (n > 1) with async scheduling is not supported";
    if (spec.n > config_.max_num_seqs) {
      return "n = " + std::to_string(spec.n) + " samples need more seats than max_num_seqs " +
             std::to_string(config_.max_num_seqs);
    }
  }
  if (spec.lora_id != 0) {
    // vLLM refuses a LoRA request when LoRA is off, and an adapter above max_lora_rank.
    if (!config_.lora.enabled()) {
      return "runs under LoRA adapter " + std::to_string(spec.lora_id) +
             " but LoRA is not enabled (serving.lora)";
    }
    if (spec.lora_rank < 1 || spec.lora_rank > config_.lora.max_lora_rank) {
      return "LoRA adapter " + std::to_string(spec.lora_id) + " has rank " +
             std::to_string(spec.lora_rank) + ", outside [1, max_lora_rank " +
             std::to_string(config_.lora.max_lora_rank) + "]";
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
  // Pinned prefixes (KvCacheManager::pin_prefix) hold their blocks for good: conservatively,
  // they are not part of the capacity (even if the request would share some of them).
  const std::int32_t usable = kv_.pool().num_usable_blocks() - kv_.num_pinned_blocks();
  if (blocks > usable) {
    return "needs " + std::to_string(blocks) + " KV blocks, more than the cache's capacity of " +
           std::to_string(usable) + " blocks" +
           (kv_.num_pinned_blocks() > 0
                ? " (" + std::to_string(kv_.num_pinned_blocks()) + " more are pinned)"
                : std::string());
  }
  return batch_->rejection_reason(req, *this);
}

void Scheduler::add_request(RequestSpec spec, TimeNs now) {
  (void)admit(std::move(spec), now, false);
}

std::int32_t Scheduler::add_prefill_only_request(RequestSpec spec, TimeNs now) {
  if (spec.n != 1 || spec.max_output_tokens < 2) {
    throw std::invalid_argument("add_prefill_only_request: request " + std::to_string(spec.id) +
                                " needs n == 1 and max_output_tokens >= 2");
  }
  return admit(std::move(spec), now, true);
}

std::int32_t Scheduler::admit(RequestSpec spec, TimeNs now, bool prefill_only) {
  ++counters_.num_arrived;
  // Owned here until the waiting queue takes it: a policy that throws (a Python admission rule
  // or length cap) leaks nothing.
  auto r = std::make_unique<Request>(std::move(spec));
  prompt_logprobs_seen_ = prompt_logprobs_seen_ || r->spec.prompt_logprobs >= 0;
  std::string reason = rejection_reason(*r);
  if (reason.empty()) {
    if ((config_.admission || config_.length_cap) && apply_overload_control(r, now)) return 0;
    const std::int32_t max_tokens = r->spec.max_output_tokens;
    if (prefill_only) r->spec.max_output_tokens = 1;
    // One allocation for the request's life instead of regrowth during decode.
    r->output_tokens.reserve(static_cast<std::size_t>(r->spec.max_output_tokens));
    queue_back(*r.release());
    return max_tokens;
  }
  turn_away(std::move(r), RequestStatus::kRejected, std::move(reason), now);
  return 0;
}

void Scheduler::turn_away(std::unique_ptr<Request> r, RequestStatus status, std::string reason,
                          TimeNs now) {
  r->status = status;
  r->finish_reason = std::move(reason);
  r->finish_ns = now;
  ++(status == RequestStatus::kShed ? counters_.num_shed : counters_.num_rejected);
  if (observer_ != nullptr) observer_->on_reject(*r, now);
}

void Scheduler::queue_back(Request& r) {
  r.queued_tokens_ = r.num_tokens() - r.external_tokens_;
  waiting_tokens_ += r.queued_tokens_;
  waiting_->push_back(&r);
}

void Scheduler::queue_front(Request& r) {
  r.queued_tokens_ = r.num_tokens() - r.external_tokens_;
  waiting_tokens_ += r.queued_tokens_;
  waiting_->push_front(&r);
}

void Scheduler::unqueue(Request& r) {
  waiting_tokens_ -= r.queued_tokens_;
  r.queued_tokens_ = 0;
}

bool Scheduler::apply_overload_control(std::unique_ptr<Request>& r, TimeNs now) {
  const AdmissionLoad load = admission_load(now);
  if (config_.admission) {
    std::string reason = config_.admission->shed_reason(r->spec, load);
    if (!reason.empty()) {
      turn_away(std::move(r), RequestStatus::kShed, std::move(reason), now);
      return true;
    }
  }
  if (config_.length_cap) {
    const std::int32_t cap = config_.length_cap->cap(r->spec, load);
    if (cap >= 1 && cap < r->spec.max_output_tokens) {
      r->capped_from_tokens = r->spec.max_output_tokens;
      r->spec.max_output_tokens = cap;
      ++counters_.num_capped;
    }
  }
  return false;
}

void Scheduler::add_prefilled_request(RequestSpec spec, const PrefilledState& state, TimeNs now) {
  if (spec.n != 1 || spec.max_output_tokens < 2) {
    throw std::invalid_argument("add_prefilled_request: request " + std::to_string(spec.id) +
                                " needs n == 1 and max_output_tokens >= 2");
  }
  ++counters_.num_arrived;
  auto r = std::make_unique<Request>(std::move(spec));
  prompt_logprobs_seen_ = prompt_logprobs_seen_ || r->spec.prompt_logprobs >= 0;
  std::string reason = rejection_reason(*r);
  r->first_scheduled_ns = state.first_scheduled_ns;
  r->first_token_ns = r->last_token_ns = state.first_token_ns;
  r->num_cached_tokens = state.num_cached_tokens;
  r->num_preemptions = state.num_preemptions;
  r->num_recomputed_tokens = state.num_recomputed_tokens;
  r->capped_from_tokens = state.capped_from_tokens;
  if (reason.empty()) {
    r->output_tokens.reserve(static_cast<std::size_t>(r->spec.max_output_tokens));
    r->output_tokens.push_back(0);  // the first token, sampled on the prefill replica
    r->external_tokens_ = r->spec.prompt_len;
    queue_back(*r.release());
    return;
  }
  turn_away(std::move(r), RequestStatus::kRejected, std::move(reason), now);
}

bool Scheduler::in_plan(const Request& r) const {
  return std::find(plan_requests_.begin(), plan_requests_.end(), &r) != plan_requests_.end();
}

std::int32_t Scheduler::watermark_blocks(double fraction) const {
  // vLLM v0: watermark_blocks = int(watermark * num_gpu_blocks).
  return static_cast<std::int32_t>(fraction * kv_.pool().num_usable_blocks());
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
  if (k < plan_.draft_tokens.size()) [[unlikely]] {
    const auto d = static_cast<std::int32_t>(plan_.draft_tokens[k].size());
    plan_.num_draft_tokens -= d;
    if (d > 0) plan_.totals.verify_extra_pairs -= causal_pairs(e.first_token, n) - e.context_len();
    plan_.draft_tokens.erase(plan_.draft_tokens.begin() + static_cast<std::ptrdiff_t>(k));
  }
  if (report_service_) {
    waiting_->on_tokens_scheduled(r, e.is_prefill ? -n : 0, e.is_prefill ? 0 : -n);
  }
  Request& m = *plan_requests_[k];
  const std::int32_t undo_max = m.undo_max_computed_tokens_;
  // As add_to_plan counted it, from the high-water mark before the entry.
  const std::int32_t recomputed = std::max(0, std::min(e.context_len(), undo_max) - e.first_token);
  m.num_computed_tokens = e.first_token;  // preempt() resets it anyway
  m.max_computed_tokens_ = undo_max;
  m.num_recomputed_tokens -= recomputed;
  counters_.num_recomputed_tokens -= recomputed;
  m.num_computed_total_ -= n;
  m.first_scheduled_ns = m.undo_first_scheduled_ns_;
  plan_.requests.erase(plan_.requests.begin() + static_cast<std::ptrdiff_t>(k));
  plan_requests_.erase(plan_requests_.begin() + static_cast<std::ptrdiff_t>(k));
  return n;
}

bool Scheduler::should_swap(const Request& victim) const {
  // Short of host space the victim is recomputed, and in a step that swapped a request in
  // (documented in scheduler.h).
  return preemption_->swap(victim, config_) && plan_.swap_in.empty() && kv_.can_swap_out(victim);
}

void Scheduler::preempt(Request& victim, TimeNs now) {
  if (victim.will_fork()) {
    fork_seats_ -= static_cast<std::size_t>(victim.spec.n - 1);
  }
  ++victim.num_preemptions;
  ++counters_.num_preemptions;
  victim.spec_token_ids.clear();  // drafts are proposed again after the request resumes
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
    if (!give_up) queue_front(victim);
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
  // Async scheduling: a plan in flight still names it. Its token came before this preemption in
  // the synchronous loop, so that plan's complete() keeps it, reports the finish and deletes it.
  if (async_ && held_by_other_plan(&r)) {
    r.abort_awaits_plan = true;
    return;
  }
  if (observer_ != nullptr) observer_->on_finish(r, now);
  delete &r;
}

bool Scheduler::reset_prefix_cache() {
  if (num_pending_plans() > (async_ ? 1 : 0)) {
    throw std::logic_error("Scheduler::reset_prefix_cache: a plan awaits complete()");
  }
  return kv_.reset_prefix_cache();
}

bool Scheduler::held_by_pending_plan(const Request* r) const {
  return (plan_pending_ && in_plan(*r)) || held_by_other_plan(r);
}

Request* Scheduler::find_unfinished(const char* who,
                                    const std::function<bool(const Request&)>& matches) const {
  if (num_pending_plans() > (async_ ? 1 : 0)) {
    throw std::logic_error(std::string("Scheduler::") + who + ": a plan awaits complete()");
  }
  for (Request* r : running_) {
    if (matches(*r)) return r;
  }
  for (Request* r : swapped_) {
    if (matches(*r)) return r;
  }
  for (Request* r : waiting_->snapshot()) {
    if (matches(*r)) return r;
  }
  return nullptr;
}

bool Scheduler::abort(RequestId id, TimeNs now, const std::string& reason) {
  Request* const found =
      find_unfinished("abort", [id](const Request& r) { return base_request_id(r.id()) == id; });
  if (found == nullptr) return false;
  if (found->group == nullptr) {
    abort_sequence(*found, now, reason);
    return true;
  }
  // A forked request: every sample still unfinished goes; the group is reported by the last.
  const std::vector<Request*> samples = found->group->samples;
  for (Request* s : samples) {
    if (s->status == RequestStatus::kFinished || s->status == RequestStatus::kAborted) continue;
    abort_sequence(*s, now, reason);
  }
  release_done_groups();
  return true;
}

bool Scheduler::stop_sample(RequestId id, TimeNs now) {
  Request* const found = find_unfinished(
      "stop_sample", [id](const Request& r) { return r.id() == id && r.group != nullptr; });
  if (found == nullptr) return false;
  unlink(*found);
  found->status = RequestStatus::kFinished;
  found->finish_ns = now;
  found->finish_reason = "stop";
  sample_done(*found, now);
  release_done_groups();
  return true;
}

void Scheduler::unlink(Request& r) {
  switch (r.status) {
    case RequestStatus::kRunning:
      running_.erase(std::find(running_.begin(), running_.end(), &r));
      if (r.will_fork()) fork_seats_ -= static_cast<std::size_t>(r.spec.n - 1);
      break;
    case RequestStatus::kSwapped:
      swapped_.erase(std::find(swapped_.begin(), swapped_.end(), &r));
      break;
    default:  // kWaiting, kPreempted
      if (waiting_->erase(&r)) unqueue(r);
      break;
  }
  kv_.free(r);
}

void Scheduler::abort_sequence(Request& r, TimeNs now, const std::string& reason) {
  unlink(r);
  r.status = RequestStatus::kAborted;
  r.finish_ns = now;
  r.finish_reason = reason;
  if (r.group != nullptr) {
    sample_done(r, now);
    return;
  }
  ++counters_.num_aborted;
  if (observer_ != nullptr) observer_->on_finish(r, now);
  // Async scheduling: the plan in flight still names it; that plan's complete() discards its
  // entry and deletes it.
  if (async_ && held_by_pending_plan(&r)) return;
  delete &r;
}

Scheduler::Room Scheduler::make_room(std::size_t i, std::int32_t n, std::int32_t budget,
                                     TimeNs now) {
  Request* r = running_[i];
  const std::int32_t slots = n + decode_lookahead(*r, n) + spec_lookahead(*r, n);
  while (!kv_.allocate_slots(*r, slots)) {
    const std::size_t v = victim_->pick(running_);
    assert(v < running_.size());
    Request* victim = running_[v];
    if (victim->group != nullptr) {
      if (preempt_group(*victim, i, budget, r, now)) return {i, budget, false};
      continue;
    }
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(v));
    if (in_plan(*victim)) budget += unschedule(*victim);
    if (v < i) --i;
    preempt(*victim, now);  // may delete the victim: compare pointers only from here on
    if (victim == r) return {i, budget, false};
  }
  return {i, budget, true};
}

void Scheduler::admit_front(Request& r, const PrefixHit& hit, std::size_t insert_at) {
  waiting_->pop_front();
  unqueue(r);
  insert_running(running_, r, insert_at);
  ++admitted_in_step_;
  if (r.will_fork()) fork_seats_ += static_cast<std::size_t>(r.spec.n - 1);
  r.status = RequestStatus::kRunning;
  r.num_computed_tokens = hit.num_tokens;
  r.max_computed_tokens_ = std::max(r.max_computed_tokens_, hit.num_tokens);
  if (r.num_cached_tokens < 0) r.num_cached_tokens = hit.num_tokens;
}

const StepPlan& Scheduler::schedule(TimeNs now) {
  if (async_) [[unlikely]] {
    if (plan_pending_ && other_pending_) {
      throw std::logic_error("Scheduler::schedule: two plans await complete() already");
    }
    if (plan_pending_) {  // the last plan is in flight: it becomes the other pending plan
      std::swap(plan_, other_plan_);
      std::swap(plan_requests_, other_requests_);
      plan_pending_ = false;
      other_pending_ = true;
    }
  }
  assert(!plan_pending_ && "schedule() called before the previous plan was completed");
  plan_.clear();
  plan_requests_.clear();
  plan_.step_index = next_step_++;
  plan_start_ns_ = now;
  plan_.totals.valid = true;  // kept by add_entry and unschedule
  admitted_in_step_ = 0;
  if (reorders_ && !waiting_->empty()) [[unlikely]] {
    KvPrefixProbe probe(kv_);
    waiting_->reorder(kv_.prefix_caching() ? &probe : nullptr, now);
  }
  batch_->fill(*this, now, /*admit=*/true);
  // A victim other than the last running one can be the request being scheduled while others
  // still run, which leaves an empty plan; vLLM's engine loop then simply schedules again (an
  // empty step runs no model), so do that here: an empty plan keeps meaning "nothing can run".
  // A pass either schedules something, preempts one more running request or changes nothing
  // (async scheduling: every request left running has its last token, or all its tokens, in the
  // plan in flight), and the loop stops at the first pass that changes nothing, so it ends. The
  // extra passes admit nobody, so "a plan that preempted admits nobody" holds (vLLM's next step
  // could admit; the difference is one step of admission delay in this rare case). Never taken
  // with last-running victims (a request preempts itself only when it is the last one running).
  for (std::size_t preempted = 0;
       plan_.requests.empty() && plan_.preempted.size() > preempted && !running_.empty();) {
    preempted = plan_.preempted.size();
    batch_->fill(*this, now, /*admit=*/false);
  }

  assert(plan_.num_tokens() <= config_.max_num_batched_tokens);
  assert(running_.size() <= static_cast<std::size_t>(config_.max_num_seqs));
  // Parallel sampling: entries that sample the first token of a request that will fork draw n
  // tokens. Marked here, once the plan is final, and only while such a request runs.
  if (fork_seats_ > 0) {
    for (std::size_t k = 0; k < plan_.requests.size(); ++k) {
      ScheduledRequest& e = plan_.requests[k];
      const Request& r = *plan_requests_[k];
      if (e.samples && r.will_fork()) {
        e.num_samples = static_cast<std::uint16_t>(r.spec.n);
        plan_.num_fork_tokens += r.spec.n - 1;
      }
    }
  }
  if (lookahead_ > 0) mark_round();
  if (config_.lora.enabled()) [[unlikely]]
    count_plan_loras();
  if (prompt_logprobs_seen_) [[unlikely]] {
    for (const ScheduledRequest& e : plan_.requests) {
      plan_.totals.prompt_logprob_rows += prompt_logprob_rows(e);
    }
  }
  if (async_) [[unlikely]] {
    // vLLM's AsyncScheduler._update_after_schedule: every entry that samples will yield a token
    // the next plan cannot see yet.
    plan_.pipelined = other_pending_;  // formed while an older plan is in flight
    for (std::size_t k = 0; k < plan_.requests.size(); ++k) {
      if (plan_.requests[k].samples) ++plan_requests_[k]->num_output_placeholders;
    }
  }
  plan_pending_ = !plan_.empty();
  if (!done_groups_.empty()) release_done_groups();  // groups ended by aborts
  return plan_;
}

std::int32_t Scheduler::admit_waiting(std::int32_t budget, const AdmissionRule& rule, TimeNs now) {
  const auto max_seqs = static_cast<std::size_t>(config_.max_num_seqs);
  std::int32_t admitted = 0;
  std::size_t insert_at = rule.insert_at;  // past the end: append
  const bool lora = config_.lora.enabled();
  if (lora) [[unlikely]]
    collect_active_loras();
  while (!waiting_->empty() && (budget > 0 || !rule.stop_when_budget_spent) &&
         seats_taken() < max_seqs && (rule.max_admissions <= 0 || admitted < rule.max_admissions)) {
    Request& r = *waiting_->front();
    if (r.will_fork() && seats_taken() + r.spec.n > max_seqs) break;
    // vLLM v1: a request whose adapter would be one more than max_loras is skipped (it keeps its
    // place in the queue; later requests may still be admitted).
    if (lora && r.spec.lora_id != 0 && !lora_active(r.spec.lora_id) &&
        active_loras_.size() >= static_cast<std::size_t>(config_.lora.max_loras)) [[unlikely]] {
      if (!rule.skip_lora_blocked) break;
      waiting_->pop_front();
      lora_skipped_.push_back(&r);
      continue;
    }
    if (rule.ignore_past > 0 && r.num_tokens() > rule.ignore_past) [[unlikely]] {
      abort_sequence(r, now,
                     "ignored: its prompt and outputs (" + std::to_string(r.num_tokens()) +
                         " tokens) exceed the prompt limit, max_num_batched_tokens " +
                         std::to_string(rule.ignore_past) + " (vLLM v0 FINISHED_IGNORED)");
      continue;
    }
    // Every admission looks up the prefix cache: a resumed request usually finds its own
    // earlier full blocks there.
    PrefixHit hit = kv_.get_computed_blocks(r);
    // Transferred KV (add_prefilled_request) beyond the local hit: allocated, not computed.
    const std::int32_t external = std::max(0, r.external_tokens_ - hit.num_tokens);
    std::int32_t n = r.num_tokens() - hit.num_tokens - external;
    if (rule.token_cap > 0 && n > rule.token_cap) n = rule.token_cap;
    if (rule.whole_prompt && n > budget) break;  // no skipping ahead
    if (rule.watermark_blocks >= 0 &&
        kv_.num_blocks_to_allocate(r, n + external, &hit) + rule.watermark_blocks >
            kv_.num_free_blocks()) {
      break;
    }
    if (rule.reserve_tokens != nullptr) [[unlikely]] {
      // A request preempted near its end can need the whole cache (prompt + outputs so far +
      // min(outputs left, clip) grows to prompt + max_output_tokens): it waits for a free cache,
      // then starts (held to "strictly below the cache" it would never start again).
      const std::int64_t need = std::min(
          std::int64_t{n} + external +
              std::min(r.spec.max_output_tokens - r.num_output_tokens(), rule.reserve_clip),
          std::int64_t{kv_.pool().num_usable_blocks()} * config_.block_size - 1);
      if (need >= *rule.reserve_tokens) break;
      *rule.reserve_tokens -= need;  // if the allocation below fails, the loop stops anyway
    }
    n = std::min(n, budget);
    // A reservation covers the request's whole maximum length (all or nothing); otherwise the
    // blocks for this step's n tokens. Either way a request that cannot get them waits at the
    // head (head-of-line blocking on KV space too).
    std::int32_t slots =
        rule.reserve_max_length ? r.spec.total_tokens() - hit.num_tokens : n + external;
    // EAGLE: from the position after the hit, for a request that computed tokens before (vLLM's
    // effective_lookahead_tokens: 0 while num_computed_tokens == 0, so a new or recompute-resumed
    // request reserves none at admission, only from its first running step).
    if (spec_lookahead_ > 0 && r.num_computed_tokens > 0) [[unlikely]] {
      slots += std::clamp(r.spec.total_tokens() - 1 - hit.num_tokens - slots, 0, spec_lookahead_);
    }
    if (!kv_.allocate_slots(r, slots, &hit)) break;
    admit_front(r, hit, insert_at);
    if (insert_at < running_.size()) ++insert_at;  // the next admission goes after this one
    if (lora && r.spec.lora_id != 0 && !lora_active(r.spec.lora_id)) [[unlikely]] {
      active_loras_.push_back(r.spec.lora_id);
    }
    if (r.external_tokens_ > 0) [[unlikely]] {
      r.num_computed_tokens += external;
      r.max_computed_tokens_ = std::max(r.max_computed_tokens_, r.num_computed_tokens);
      r.external_tokens_ = 0;
    }
    ++admitted;
    if (!rule.schedule) continue;
    add_to_plan(r, n, hit.num_tokens, now);
    budget -= n;
  }
  if (!lora_skipped_.empty()) [[unlikely]] {
    // The skipped requests go back in front, in their order (vLLM's prepend_requests).
    for (auto it = lora_skipped_.rbegin(); it != lora_skipped_.rend(); ++it) {
      waiting_->push_front(*it);
    }
    lora_skipped_.clear();
  }
  return budget;
}

void Scheduler::collect_active_loras() {
  active_loras_.clear();
  for (const Request* r : running_) {
    if (r->spec.lora_id != 0 && !lora_active(r->spec.lora_id)) {
      active_loras_.push_back(r->spec.lora_id);
    }
  }
  // Swapped requests hold KV under their adapter and resume without an admission check.
  for (const Request* r : swapped_) {
    if (r->spec.lora_id != 0 && !lora_active(r->spec.lora_id)) {
      active_loras_.push_back(r->spec.lora_id);
    }
  }
}

void Scheduler::count_plan_loras() {
  std::int32_t tokens = 0;
  active_loras_.clear();
  for (const ScheduledRequest& e : plan_.requests) {
    const std::uint32_t a = e.spec->lora_id;
    if (a == 0) continue;
    tokens += e.num_tokens;
    if (!lora_active(a)) active_loras_.push_back(a);
  }
  plan_.num_lora_tokens = tokens;
  plan_.num_loras = static_cast<std::int32_t>(active_loras_.size());
}

std::int32_t Scheduler::swap_in_phase(std::int32_t budget, TimeNs now, std::size_t max_resumes,
                                      std::size_t insert_at) {
  const std::int32_t threshold = config_.long_prefill_token_threshold;
  const auto max_seqs = static_cast<std::size_t>(config_.max_num_seqs);
  std::size_t resumed = 0;
  while (!swapped_.empty() && budget > 0 && seats_taken() < max_seqs &&
         (max_resumes == 0 || resumed < max_resumes)) {
    Request& r = *swapped_.front();
    if (r.will_fork() && seats_taken() + r.spec.n > max_seqs) break;
    // Usually one decode token; more when the victim was swapped out mid-prefill.
    std::int32_t n = r.num_tokens() - r.num_computed_tokens;
    if (threshold > 0 && n > threshold) n = threshold;
    if (!config_.enable_chunked_prefill && n > budget) break;
    n = std::min(n, budget);
    // A decode's lookahead slots come back with it (vLLM v0 can_swap_in with lookahead).
    const std::int32_t slots =
        std::max(n, 0) + decode_lookahead(r, n) + spec_lookahead(r, std::max(n, 0));
    if (!kv_.can_swap_in(r, slots)) break;  // head-of-line, as vLLM v0's swapped queue
    bool ok = kv_.swap_in(r, plan_.swap_in);
    if (slots > 0) ok = ok && kv_.allocate_slots(r, slots);  // can_swap_in covered both
    assert(ok);
    (void)ok;
    swapped_.pop_front();
    ++resumed;
    insert_running(running_, r, insert_at);
    if (insert_at < running_.size()) ++insert_at;  // the next resume goes after this one
    if (r.will_fork()) fork_seats_ += static_cast<std::size_t>(r.spec.n - 1);
    r.status = RequestStatus::kRunning;
    if (n <= 0) continue;  // nothing to compute yet (only off the synchronous loop)
    add_to_plan(r, n, 0, now);
    budget -= n;
  }
  return budget;
}

void Scheduler::finish(Request& r, TimeNs now) {
  if (r.status == RequestStatus::kSwapped) {
    // As below, for a request swapped out after this plan was formed.
    std::erase(swapped_, &r);
  } else if (r.status != RequestStatus::kRunning) {
    // Only a request preempted after this plan was formed can get here; in the synchronous
    // loop that never happens, but the token still counts (vLLM test_preempt_during_execution).
    if (waiting_->erase(&r)) unqueue(r);
  }
  r.status = RequestStatus::kFinished;
  r.finish_ns = now;
  if (check_stop(r.spec, r.output_tokens) == StopReason::kStop) {
    r.finish_reason = "stop";
  } else {
    r.finish_reason = r.capped_from_tokens > 0
                          ? "length (capped from " + std::to_string(r.capped_from_tokens) + ")"
                          : "length";
  }
  kv_.free(r);
  if (r.group != nullptr) {
    sample_done(r, now);
    return;
  }
  ++counters_.num_finished;
  if (observer_ != nullptr) observer_->on_finish(r, now);
}

void Scheduler::add_running_entry(Request& r, std::int32_t n, TimeNs now) {
  const auto drafts = static_cast<std::int32_t>(r.spec_token_ids.size());
  const std::int32_t first = r.num_computed_tokens;
  if (drafts == 0 || n < 2 || first + 1 != r.num_tokens()) {
    // Not a verify entry; drafts the budget left no room for go (vLLM trims them too).
    r.spec_token_ids.clear();
    add_to_plan(r, n, 0, now);
    return;
  }
  const std::int32_t d = std::min(drafts, n - 1);
  r.spec_token_ids.resize(static_cast<std::size_t>(d));
  add_entry(r, 1 + d, 0, now, /*is_prefill=*/false, /*samples=*/true);
  plan_.draft_tokens.resize(plan_.requests.size());
  plan_.draft_tokens.back() = r.spec_token_ids;
  plan_.num_draft_tokens += d;
  plan_.totals.verify_extra_pairs += causal_pairs(first, 1 + d) - (first + 1 + d);
}

void Scheduler::complete_spec(const StepResult& result, TimeNs now) {
  const std::size_t entries = plan_.requests.size();
  if (result.sampled_tokens.size() < entries) {
    throw std::invalid_argument(
        "Scheduler::complete: " + std::to_string(result.sampled_tokens.size()) +
        " sampled tokens for a plan of " + std::to_string(entries) + " entries");
  }
  if (plan_.num_draft_tokens > 0 && result.num_accepted.size() < entries) {
    throw std::invalid_argument(
        "Scheduler::complete: " + std::to_string(result.num_accepted.size()) +
        " acceptance counts for a plan of " + std::to_string(entries) +
        " entries with draft tokens");
  }
  const bool proposals = !result.num_proposed.empty();
  if (proposals && result.num_proposed.size() < entries) {
    throw std::invalid_argument(
        "Scheduler::complete: " + std::to_string(result.num_proposed.size()) +
        " proposal counts for a plan of " + std::to_string(entries));
  }
  // Every sampling entry's new tokens: its accepted drafts, then the verifier's token.
  // new_tokens[t] counts them for got[t]; rollback first (it depends on the plan only).
  if (token_requests_.size() < entries) {
    token_requests_.resize(entries);
    token_prev_ns_.resize(entries);
  }
  Request** const got = token_requests_.data();
  TimeNs* const prev = token_prev_ns_.data();
  spec_new_.assign(entries, 0);
  spec_acc_.assign(entries, 0);
  spec_entry_.assign(entries, 0);
  std::size_t num_got = 0;
  std::int32_t most = 0;
  for (std::size_t k = 0; k < entries; ++k) {
    if (!plan_.requests[k].samples) continue;
    Request& r = *plan_requests_[k];
    const auto d = static_cast<std::int32_t>(plan_.drafts_of(k).size());
    std::int32_t accepted = 0;
    if (d > 0) {
      accepted = result.num_accepted[k];
      if (accepted < 0 || accepted > d) {
        throw std::invalid_argument("Scheduler::complete: entry " + std::to_string(k) +
                                    " accepted " + std::to_string(accepted) + " of " +
                                    std::to_string(d) + " draft tokens");
      }
      // Rollback: the rejected drafts' KV slots are free for the next tokens.
      r.num_computed_tokens -= d - accepted;
      r.max_computed_tokens_ = std::max(r.undo_max_computed_tokens_, r.num_computed_tokens);
      kv_.rollback_slots(r);
      counters_.num_draft_tokens += d;
      counters_.num_accepted_tokens += accepted;
      ++counters_.num_drafts;
      std::vector<std::int64_t>& per_pos = counters_.num_accepted_tokens_per_pos;
      if (per_pos.size() < static_cast<std::size_t>(accepted)) per_pos.resize(accepted, 0);
      for (std::int32_t i = 0; i < accepted; ++i) ++per_pos[static_cast<std::size_t>(i)];
    }
    // Past a stop (the output length) the surplus is trimmed, as vLLM does.
    const std::int32_t room = r.spec.max_output_tokens - r.num_output_tokens();
    spec_new_[num_got] = std::min(accepted + 1, room);
    spec_acc_[num_got] = accepted;
    spec_entry_[num_got] = k;
    most = std::max(most, spec_new_[num_got]);
    got[num_got] = &r;
    prev[num_got] = r.last_token_ns;
    ++num_got;
  }
  // Token by token, like a round's passes: the j-th new token of every entry that has one.
  if (spec_got_.size() < num_got) {
    spec_got_.resize(num_got);
    spec_prev_.resize(num_got);
  }
  for (std::int32_t j = 0; j < most; ++j) {
    std::size_t m = 0;
    for (std::size_t t = 0; t < num_got; ++t) {
      if (j >= spec_new_[t]) continue;
      Request& r = *got[t];
      const std::size_t k = spec_entry_[t];
      r.output_tokens.push_back(j < spec_acc_[t]
                                    ? plan_.draft_tokens[k][static_cast<std::size_t>(j)]
                                    : result.sampled_tokens[k]);
      // A stop token among the accepted drafts ends the request there (vLLM trims the rest).
      if (r.spec.stop != nullptr && reached_stop(r)) spec_new_[t] = j + 1;
      spec_got_[m] = &r;
      spec_prev_[m] = j == 0 ? prev[t] : now;
      ++m;
      if (r.first_token_ns < 0) r.first_token_ns = now;
      r.last_token_ns = now;
    }
    if (observer_ != nullptr && m > 0) {
      observer_->on_step_tokens(std::span<const Request* const>(spec_got_.data(), m),
                                std::span<const TimeNs>(spec_prev_.data(), m), now);
    }
  }
  // The next step's drafts, then the finishes, in plan order.
  std::size_t at = 0;  // next unused proposal
  bool any_finished = false;
  for (std::size_t k = 0; k < entries; ++k) {
    const std::int32_t proposed = proposals ? result.num_proposed[k] : 0;
    if (proposed < 0 || at + static_cast<std::size_t>(proposed) > result.proposed_tokens.size()) {
      throw std::invalid_argument("Scheduler::complete: entry " + std::to_string(k) +
                                  " proposes more tokens than StepResult::proposed_tokens holds");
    }
    Request& r = *plan_requests_[k];
    r.spec_token_ids.clear();
    if (plan_.requests[k].samples && r.num_output_tokens() < r.spec.max_output_tokens) {
      const std::int32_t keep =
          std::min({proposed, spec_k_, r.spec.max_output_tokens - r.num_output_tokens() - 1});
      r.spec_token_ids.assign(
          result.proposed_tokens.begin() + static_cast<std::ptrdiff_t>(at),
          result.proposed_tokens.begin() + static_cast<std::ptrdiff_t>(at + std::max(keep, 0)));
    }
    at += static_cast<std::size_t>(proposed);
  }
  for (std::size_t t = 0; t < num_got; ++t) {
    Request* const r = got[t];
    if (reached_stop(*r)) {
      r->spec_token_ids.clear();
      finish(*r, now);
      any_finished = true;
    }
  }
  end_of_step(any_finished);
}

void Scheduler::rank_running() {
  assert(plan_.requests.empty());
  const WaitingQueue& q = *waiting_;
  // Sorted on a copy: a rank that throws (a Python queue order's key) leaves the list whole.
  std::vector<Request*> ranked = running_;
  std::stable_sort(ranked.begin(), ranked.end(),
                   [&q](const Request* a, const Request* b) { return q.ranks_before(*a, *b); });
  running_.swap(ranked);
}

void Scheduler::rank_swapped() {
  const WaitingQueue& q = *waiting_;
  std::deque<Request*> ranked = swapped_;  // as in rank_running
  std::stable_sort(ranked.begin(), ranked.end(),
                   [&q](const Request* a, const Request* b) { return q.ranks_before(*a, *b); });
  swapped_.swap(ranked);
}

void Scheduler::preempt_last_running(TimeNs now) {
  Request& victim = *running_.back();
  assert(victim.group == nullptr && !in_plan(victim));
  running_.pop_back();
  preempt(victim, now);
}

void Scheduler::complete(const StepResult& result, TimeNs now) {
  if (plan_.num_decode_tokens > 0 || plan_.totals.num_sampled > 0) {
    steps_without_token_ = 0;
  } else if (++steps_without_token_ > 100000 + 4 * std::int64_t{config_.max_model_len})
      [[unlikely]] {
    throw ConfigError(
        "policies.preemption: no request sampled a token in the last " +
        std::to_string(steps_without_token_) + " steps (" + std::to_string(running_.size()) +
        " running, " + std::to_string(num_waiting()) + " waiting, " +
        std::to_string(counters_.num_preemptions) +
        " preemptions so far): the requests preempt each other in turn before any finishes its "
        "prefill (victim rule '" +
        std::string(victim_rule().name()) +
        "'); give policies.preemption a max_preemptions cap, or use another victim rule or a "
        "larger KV cache");
  }
  if (times_service_) [[unlikely]] {
    waiting_->on_step_completed(plan_requests_, plan_.num_prefill_tokens, plan_start_ns_, now);
  }
  if ((config_.admission || config_.length_cap) && plan_.num_prefill_tokens > 0 &&
      now > plan_start_ns_) {
    // The newest step weighs 1/4 (AdmissionLoad::prefill_tokens_per_s).
    const double rate = static_cast<double>(plan_.num_prefill_tokens) /
                        (static_cast<double>(now - plan_start_ns_) * 1e-9);
    prefill_tokens_per_s_ =
        prefill_tokens_per_s_ > 0 ? 0.75 * prefill_tokens_per_s_ + 0.25 * rate : rate;
  }
  if (plan_.num_steps > 1) {
    complete_round(result, now);
    return;
  }
  if (spec_k_ > 0) [[unlikely]] {
    complete_spec(result, now);
    return;
  }
  if (async_) [[unlikely]] {
    if (other_pending_) {
      complete_older(result, now);
      return;
    }
    if (!plan_pending_) throw std::logic_error("Scheduler::complete: no plan awaits complete()");
  }
  complete_step(result, now);
}

void Scheduler::complete_older(const StepResult& result, TimeNs now) {
  // The older plan is the other one: complete it in plan_'s place, the newer one aside.
  const bool newer_pending = plan_pending_;
  std::swap(plan_, other_plan_);
  std::swap(plan_requests_, other_requests_);
  plan_pending_ = true;
  other_pending_ = newer_pending;
  complete_step(result, now);
  std::swap(plan_, other_plan_);
  std::swap(plan_requests_, other_requests_);
  plan_pending_ = newer_pending;
  other_pending_ = false;
}

void Scheduler::complete_step(const StepResult& result, TimeNs now) {
  if (result.sampled_tokens.size() < plan_.requests.size()) {
    throw std::invalid_argument(
        "Scheduler::complete: " + std::to_string(result.sampled_tokens.size()) +
        " sampled tokens for a plan of " + std::to_string(plan_.requests.size()) + " entries");
  }
  if (async_) [[unlikely]] {
    for (std::size_t k = 0; k < plan_.requests.size(); ++k) {
      ScheduledRequest& e = plan_.requests[k];
      if (!e.samples) continue;
      Request& r = *plan_requests_[k];
      --r.num_output_placeholders;
      // Finished (a stop seen by the previous complete()) or aborted while this plan was in
      // flight: its token is discarded, as vLLM's update_from_output skips finished requests.
      // The plan ran already; the entry is kept out of the pass below.
      if (r.status == RequestStatus::kFinished ||
          (r.status == RequestStatus::kAborted && !r.abort_awaits_plan)) {
        e.samples = false;
      }
    }
  }
  // Forks first (they need nothing of the parent's new token), so the loop below stays as it
  // is for n = 1.
  bool any_finished = false;
  if (plan_.num_fork_tokens > 0) any_finished = fork_pass(result, now);
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
    any_done = any_done || (r.status != RequestStatus::kAborted && reached_stop(r));
  }
  if (observer_ != nullptr && num_got > 0) {
    observer_->on_step_tokens(std::span<const Request* const>(got, num_got),
                              std::span<const TimeNs>(prev, num_got), now);
  }
  if (async_) [[unlikely]] {
    // Aborted (max_preemptions) while this plan was in flight: its token is in; now it ends.
    for (Request* r : plan_requests_) {
      if (!r->abort_awaits_plan) continue;
      r->abort_awaits_plan = false;
      r->finish_ns = now;
      if (observer_ != nullptr) observer_->on_finish(*r, now);
    }
  }
  for (std::size_t t = 0; any_done && t < num_got; ++t) {
    Request* const r = got[t];
    if (r->status != RequestStatus::kAborted && reached_stop(*r)) {
      finish(*r, now);
      any_finished = true;
    }
  }
  end_of_step(any_finished);
}

void Scheduler::end_of_step(bool any_finished) {
  if (any_finished) {
    // One pass keeps the others' order and costs O(running) however many finished. A group's
    // sample 0 that finished last reports the group, as kAborted when a sibling was given up
    // (sample_done): it leaves the running list too (its group is deleted below).
    std::erase_if(running_, [](const Request* r) {
      return r->status == RequestStatus::kFinished || r->status == RequestStatus::kAborted;
    });
    if (!async_) {
      for (Request* r : plan_requests_) {
        if (r->status == RequestStatus::kFinished && r->group == nullptr) delete r;
      }
    }
  }
  if (async_) [[unlikely]] {
    // Requests that ended while a plan named them are deleted once no pending plan does.
    for (Request* r : plan_requests_) {
      if ((r->status == RequestStatus::kFinished || r->status == RequestStatus::kAborted) &&
          r->group == nullptr && !held_by_other_plan(r)) {
        delete r;
      }
    }
  }
  if (!done_groups_.empty()) release_done_groups();
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
      // Samples whose first token ends them (a single output token, or a stop token) are done
      // at once (sample 0 in complete()).
      for (std::size_t s = 1; s < r.group->samples.size(); ++s) {
        Request& sample = *r.group->samples[s];
        if (reached_stop(sample)) {
          finish(sample, now);
          any_finished = true;
        }
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
    c->max_computed_tokens_ = r.num_computed_tokens;
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
  if (observer_ != nullptr) observer_->on_sample_end(r, now);  // its blocks are freed
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

void Scheduler::mark_round() {
  // Prefill, admissions and forks run as single steps (vLLM v0.6: a prompt's step is a single
  // step; the scheduler's next call admits and forks).
  if (plan_.requests.empty() || plan_.num_prefill_tokens > 0 || plan_.num_fork_tokens > 0 ||
      admitted_in_step_ > 0) {
    return;
  }
  const std::int32_t steps = config_.num_scheduler_steps;
  const std::size_t entries = plan_.requests.size();
  for (std::size_t k = 0; k < entries; ++k) {
    const ScheduledRequest& e = plan_.requests[k];
    // A first token ends the request's prompt phase: that step is single.
    if (!e.samples || e.output_tokens.empty()) return;
  }
  for (std::size_t k = 0; k < entries; ++k) {
    const ScheduledRequest& e = plan_.requests[k];
    const std::int64_t need =
        std::min<std::int64_t>(e.first_token + steps, plan_requests_[k]->spec.total_tokens() - 1);
    if (static_cast<std::int64_t>(e.block_table.size()) * config_.block_size < need) {
      throw std::logic_error("Scheduler: batch formation '" + std::string(batch_->name()) +
                             "' did not reserve the lookahead slots of request " +
                             std::to_string(e.id) + " for a multi-step round");
    }
  }
  plan_.num_steps = steps;
  if (report_service_) {
    for (const Request* r : plan_requests_) waiting_->on_tokens_scheduled(*r, 0, steps - 1);
  }
}

void Scheduler::complete_round(const StepResult& result, TimeNs now) {
  const std::size_t entries = plan_.requests.size();
  const auto steps = static_cast<std::size_t>(plan_.num_steps);
  if (result.sampled_tokens.size() < entries * steps) {
    throw std::invalid_argument(
        "Scheduler::complete: " + std::to_string(result.sampled_tokens.size()) +
        " sampled tokens for a round of " + std::to_string(steps) + " passes over " +
        std::to_string(entries) + " entries");
  }
  if (token_requests_.size() < entries) {
    token_requests_.resize(entries);
    token_prev_ns_.resize(entries);
  }
  Request** const got = token_requests_.data();
  TimeNs* const prev = token_prev_ns_.data();
  // Pass by pass, the tokens of the sequences still producing; all delivered at the round's end.
  for (std::size_t p = 0; p < steps; ++p) {
    std::size_t num_got = 0;
    for (std::size_t k = 0; k < entries; ++k) {
      Request& r = *plan_requests_[k];
      if (!r.output_tokens.empty() && reached_stop(r)) continue;  // done earlier this round
      got[num_got] = &r;
      prev[num_got] = r.last_token_ns;
      ++num_got;
      r.output_tokens.push_back(result.sampled_tokens[p * entries + k]);
      r.last_token_ns = now;  // (first_token_ns was set: a round never samples a first token)
    }
    if (observer_ != nullptr && num_got > 0) {
      observer_->on_step_tokens(std::span<const Request* const>(got, num_got),
                                std::span<const TimeNs>(prev, num_got), now);
    }
  }
  // Progress: pass p computed position first_token + p of every entry, as far as the request's
  // tokens and its KV positions (the last token's KV is never computed) go.
  bool any_finished = false;
  for (std::size_t k = 0; k < entries; ++k) {
    Request& r = *plan_requests_[k];
    const std::int32_t computed = std::min({plan_.requests[k].first_token + plan_.num_steps,
                                            r.num_tokens(), r.spec.total_tokens() - 1});
    r.num_computed_total_ += plan_.num_steps - 1;
    r.num_computed_tokens = std::max(r.num_computed_tokens, computed);
    r.max_computed_tokens_ = std::max(r.max_computed_tokens_, r.num_computed_tokens);
    kv_.register_computed_blocks(r);
    any_finished = any_finished || reached_stop(r);
  }
  // Then the finishes, in plan order.
  if (any_finished) {
    for (Request* r : plan_requests_) {
      if (reached_stop(*r)) finish(*r, now);
    }
  }
  end_of_step(any_finished);
}

}  // namespace servelab
