// Scheduler: continuous batching with vLLM v1 semantics (vllm/v1/core/sched/scheduler.py).
//
// Each iteration: schedule(now) forms a StepPlan, a backend executes it, complete(result, t)
// applies the sampled tokens at the step's end time t. schedule():
// 1. Running requests first, in list order, under one token budget (max_num_batched_tokens):
//    n = min(remaining, long_prefill_token_threshold if set, budget). A request that cannot get
//    slots preempts a victim (by recompute: blocks freed tail first with their hashes kept,
//    num_computed_tokens reset, outputs kept, back to the waiting queue with push_front),
//    repeatedly, until it fits or it has preempted itself. The victim is the last running
//    request, or with the lowest-priority victim rule the max over running of (priority,
//    arrival), first in list order on ties; if that one was already scheduled in this step its
//    plan entry is removed, its tokens go back to the budget and its progress is undone (vLLM
//    v1 priority mode). A request given 0 tokens keeps its place.
// 2. If nothing was preempted, waiting requests in the WaitingQueue's order (FCFS unless
//    config.make_waiting_queue says otherwise) while the budget lasts and
//    running < max_num_seqs: prefix lookup (first admission or resume), n = remaining after the
//    hit (threshold-capped); with chunking off a request over the budget stops admission; a
//    request that cannot get blocks stops admission (no skipping).
// 3. Every scheduled request's num_computed_tokens advances by its n.
// Policies are objects (config.batch, config.victim, config.preemption; core/batch_formation.h,
// core/victim_rule.h, core/preemption_mode.h). The steps above are VllmBatchFormation, the
// default; the other formations (policies/: static, orca, sarathi, prefill-first, sglang, and
// preemptive, which re-ranks the running requests every step by the queue order; see
// docs/policies.md) form their plans with the same step-building operations (below), and every
// admission goes through the one loop admit_waiting(). A victim (config.victim: last running
// by default, or a plugin: lowest priority, SGLang's retract order, most blocks) already in
// this step's plan is refunded. With config.max_preemptions > 0, a request preempted more than
// that many times is aborted (kAborted, reported through on_finish, then deleted).
// Swap (a PreemptionMode whose swap(victim) is true: `swap`, or `auto` when
// config.prefer_swap(victim) says so; vLLM v0 preemption_mode=swap), only with a formation that
// resumes swapped requests (vllm, preemptive): a victim whose device blocks the host pool can
// take (kv.can_swap_out) is swapped out instead of recomputed: its moves go to plan.swap_out,
// it becomes kSwapped, keeps num_computed_tokens and joins the swapped list (FIFO). When the
// host pool is short the victim is recomputed instead (vLLM v0 aborts the request with "lack of
// CPU swap space"; a fallback keeps the run going and is what a real engine would rather do).
// A victim past the preemption cap is aborted without being swapped. In a step that preempted
// nothing, after the running phase and before any admission, swapped requests are resumed in
// FIFO order (swap_in_phase): while the budget and a seat last and kv.can_swap_in(r, n) holds
// for its next n tokens, r is swapped in (plan.swap_in) and scheduled; the first that does not
// fit stops the pass (head-of-line). While any request remains swapped nobody is admitted from
// the waiting queue (vLLM v0: swapped requests go before new prefills). So a request is never
// swapped in and out in the same step, and no step both swaps in and swaps out. (The preemptive
// formation resumes in rank order instead: it may swap victims out to make room for a swapped
// request and swap that one in in the same step, which StepPlan's order, swap-outs first, makes
// sound; a running request may need a victim after a resume, and a victim in a step that
// swapped a request in is recomputed, so no step swaps out after swapping in.)
// Overload control (config.admission, config.length_cap; core/admission_policy.h,
// core/length_cap.h): an arrival that passes the rejection checks below is shown to the admission
// policy, which may shed it (kShed: reported through on_reject, counted in num_shed, never
// queued), then to the length cap, which may lower its max_output_tokens (counted in num_capped).
// Both see the load as admission_load() describes it. Prefilled requests skip both.
// Requests whose prompt + output exceed max_model_len, or that could never fit in the whole
// cache, are rejected at arrival (counted, never scheduled). So are empty prompts, requests for
// no output, and whatever the batch formation says it could never schedule
// (BatchFormation::rejection_reason; e.g. vllm with chunked prefill off refuses requests that
// might one day need more tokens in one step than max_num_batched_tokens allows, as vLLM refuses
// such configurations outright; here a request like that would block the queue forever).
//
// Parallel sampling (RequestSpec::n > 1; formations that support it (vllm, sarathi,
// prefill-first) with paged allocation; rejected at arrival otherwise): a request is prefilled
// once; the step that samples its first token draws n tokens (ScheduledRequest::num_samples) and
// the request forks into n samples (sample 0 is the request itself, sample k has id
// sample_request_id(id, k)) that share its blocks (KvCacheManager::fork, copy-on-write of the
// shared partial block into plan.copies). Each sample is then a sequence of its own in running_ (a
// seat each; a request that will fork is admitted only with n seats free, and keeps n - 1 of them
// reserved until it forks). A victim that is a sample takes its whole group with it: every running
// sample is preempted (recomputed: back to the waiting queue one by one, each resuming on its own
// with prefix hits on the shared prompt; or swapped, each with its own host copy of the blocks),
// except the requester itself when the victim is its own sibling. The request finishes when its
// last sample does and is reported once, through sample 0.
//
// Multi-step scheduling (config.num_scheduler_steps = N > 1; vLLM v0.6's --num-scheduler-steps,
// docs/policies.md "Multi-step scheduling"): every decode reserves, besides the slot of its token,
// decode_lookahead() lookahead slots (N - 1, capped at the request's maximum length) when it gets
// its slots, so a victim is preempted for them as for any slot. A plan that admitted nobody from
// the waiting queue, has no prefill tokens and whose entries all decode running requests that
// already have an output token (no first token, hence no fork) is a round: plan.num_steps = N,
// the backend runs N forward passes over the same batch before complete(), and nobody is admitted
// or preempted in between. complete() of a round appends up to N tokens per entry, all at the
// round's end (delivered together: tokens come in chunks of N), reported pass by pass through
// on_step_tokens; a request that reaches its output length inside the round stops sampling there
// but keeps its seat and blocks until the round ends; then num_computed_tokens covers the KV the
// round computed and the blocks it filled are registered in the prefix cache. Any other plan is
// a single step, as with N = 1 (vLLM v0.6 runs prefill steps as single steps without chunked
// prefill). Formations that do not reserve lookahead slots (BatchFormation::supports_multi_step()
// false) are refused.
//
// Speculative decoding (config.speculative with num_speculative_tokens k > 0; vLLM v1's
// semantics, docs/policies.md "Speculative decoding"; vllm batch formation only, one scheduler
// step, n == 1): the backend proposes draft tokens for each entry that sampled (StepResult::
// num_proposed / proposed_tokens); a request keeps at most k of them, and at most
// max_output_tokens - outputs - 1, so a verify step never yields more than the request's
// remaining outputs and never needs a slot past its maximum length (vLLM proposes k and trims
// the surplus after a stop instead). In the running phase a request with d drafts asks for
// num_tokens_with_spec - num_computed_tokens = 1 + d tokens, counted in the budget; when the
// budget (or the threshold) gives it fewer, the drafts beyond are dropped. The entry is a decode
// of 1 + d tokens whose drafts the plan lists (StepPlan::draft_tokens); its slots are allocated
// like any (EAGLE: plus k lookahead slots in every allocation, capped at the request's maximum
// length, spec_lookahead()). complete() appends the accepted drafts, then the verifier's token,
// one token per on_step_tokens call (like a round's passes), and rolls the rejected drafts back:
// num_computed_tokens falls by d - accepted; the blocks stay in the table (vLLM v1 keeps them for
// the next steps' tokens) and only the slot accounting shrinks. Drafts are never registered in
// the prefix cache: allocate_slots registers only blocks full of known tokens, and a block fills
// with accepted ones when a later step's allocation covers it. A preemption drops the drafts
// (vLLM's _preempt_request clears spec_token_ids); a refunded victim's entry gives its 1 + d
// tokens back. counters().num_drafts / num_draft_tokens / num_accepted_tokens /
// num_accepted_tokens_per_pos count verify entries with drafts, drafts verified and accepted, and
// acceptances per draft position (vLLM's spec-decode counters).
//
// LoRA adapters (config.lora with max_loras > 0; vLLM's max_loras, core/lora_config.h,
// docs/policies.md "LoRA adapters"): admit_waiting() counts the distinct adapters of the running
// and swapped requests; a waiting request under an adapter not among them while they already
// number max_loras is skipped: taken out of the queue for the rest of the loop and put back in
// front, in order, when it ends (vLLM v1's skipped_waiting_requests), so later requests (the base
// model, or an adapter already running) may still be admitted. Every admission path goes
// through that loop and swapped requests count, so the running and swapped requests never hold
// more than max_loras adapters (vLLM v1 counts the adapters scheduled in the step; in its
// formation every running request is scheduled whenever admission runs, so the two agree).
// A request under an adapter is rejected at arrival when LoRA is off or its rank exceeds
// max_lora_rank. A plan counts its adapter tokens and adapters (StepPlan::num_lora_tokens,
// num_loras) for the cost models.
//
// Async scheduling (config.async_scheduling; vLLM v1's --async-scheduling, AsyncScheduler;
// docs/policies.md "Async scheduling"; vllm batch formation, recompute preemption, one scheduler
// step, no speculation, n == 1): schedule() may be called once more while one plan awaits
// complete(), as vLLM's engine core forms step N+1 while step N runs (a batch queue of two).
// The order is schedule(N), schedule(N+1), complete(N), schedule(N+2), complete(N+1), ...; a plan
// formed while another is pending is StepPlan::pipelined. Plan N+1 is formed before N's tokens
// are known: every entry that samples adds one output placeholder to its request
// (Request::num_output_placeholders), and the running phase counts them as known tokens, so a
// request decoding in N is scheduled in N+1 for the position of N's token (its value comes from
// the backend; see StepPlan::pipelined). complete() takes away a placeholder per token applied.
// A request is not scheduled again when the token of its pending plan is certain to be its last
// by length (num_computed_tokens + 2 - placeholders >= prompt_len + max_output_tokens, vLLM's
// check), so max_output_tokens never costs an extra step. A stop token (EOS, stop ids) is
// noticed only by complete(N), after N+1 was formed: the request finishes there (reported, its
// blocks freed), and N+1's entry for it is wasted work: complete(N+1) discards its token (vLLM
// skips finished requests in update_from_output); the Request is deleted once no pending plan
// names it. A request of the in-flight plan N+1 may be preempted while N+2 is formed (no
// admission in that step, as always); complete(N+1) still appends its token (vLLM
// test_preempt_during_execution), and that token may finish it while it waits. Prefill chunks
// add no placeholder: the chunk after a partial chunk is scheduled as in the synchronous loop.
// The returned plan reference stays valid until that plan's complete() or the second schedule()
// after it, whichever comes first. Parallel sampling (n > 1) is rejected at arrival.
//
// Ownership: the scheduler allocates a Request per arrival and deletes it right after
// observer->on_finish (or on_reject); the destructor frees the blocks of what remains.
#pragma once

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/admission_policy.h"
#include "core/batch_formation.h"
#include "core/kv_cache_manager.h"
#include "core/preemption_mode.h"
#include "core/scheduler_config.h"
#include "core/scheduler_observer.h"
#include "core/step_plan.h"
#include "core/victim_rule.h"
#include "core/waiting_queue.h"

namespace servelab {

struct SchedulerCounters {
  std::int64_t num_arrived = 0;
  std::int64_t num_rejected = 0;
  std::int64_t num_finished = 0;
  std::int64_t num_aborted = 0;
  std::int64_t num_preemptions = 0;
  std::int64_t num_recomputed_tokens = 0;
  std::int64_t num_shed = 0;          // refused at arrival by the admission policy (kShed)
  std::int64_t num_capped = 0;        // admitted with max_output_tokens lowered by the length cap
  std::int64_t num_draft_tokens = 0;  // speculative decoding: drafts verified
  std::int64_t num_accepted_tokens = 0;  // of those, accepted
  std::int64_t num_drafts = 0;           // verify entries that carried at least one draft
  // [i]: verify entries whose draft at position i was accepted (vLLM's
  // num_accepted_tokens_per_pos); num_speculative_tokens entries when speculation is on.
  std::vector<std::int64_t> num_accepted_tokens_per_pos;
};

class Scheduler {
 public:
  // `kv` and `observer` (may be null) must outlive the scheduler. Throws std::invalid_argument
  // on a config with a budget, seat count or max_model_len below 1, a negative threshold, or a
  // block size or prefix-caching switch that disagrees with `kv`'s, or a preemption mode that
  // uses host memory with a batch formation that does not resume swapped requests, or
  // num_scheduler_steps below 1 or above 1 with a formation that does not support multi-step
  // (BatchFormation::supports_multi_step). Null policy
  // objects in `config` mean vLLM v1's (see scheduler_config.h). The waiting queue is
  // `waiting` if given, else config.make_waiting_queue() if set, else FCFS.
  Scheduler(const SchedulerConfig& config, KvCacheManager& kv, SchedulerObserver* observer,
            std::unique_ptr<WaitingQueue> waiting = nullptr);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;
  ~Scheduler();

  // Queues a request that arrived at `now` (or rejects it; see above).
  void add_request(RequestSpec spec, TimeNs now);

  // Prefill/decode disaggregation, the prefill side: queues `spec` as add_request does (the
  // rejection checks and overload control see its real max_output_tokens, so a length cap
  // applies here, at its arrival), then runs it to its first output token only (its
  // max_output_tokens becomes 1). Returns the max_output_tokens it continues with on a decode
  // replica (the length cap's, if it capped it: the request then carries capped_from_tokens),
  // or 0 when it was turned away. REQUIRES: spec.n == 1 and spec.max_output_tokens >= 2.
  std::int32_t add_prefill_only_request(RequestSpec spec, TimeNs now);

  // Prefill/decode disaggregation: queues a request whose prompt was computed, and whose first
  // output token was sampled, on another replica, whose KV blocks were transferred here (the
  // cluster driver decides when they arrived). The request enters the waiting queue holding its
  // first output token; its first admission allocates blocks for the prompt's tokens (a local
  // prefix hit first, as always) and counts them as computed without scheduling them, so its
  // first step here computes the first output token's KV and samples the second (vLLM's KV
  // connector semantics: externally computed tokens). A preemption by recompute drops the
  // transferred KV like any other (the prompt is then recomputed here). `state` carries what the
  // prefill side observed, so the request's record (TTFT, cached tokens, preemptions) is the
  // request's, not this replica's part of it. REQUIRES: spec.n == 1 and
  // spec.max_output_tokens >= 2 (else std::invalid_argument). Rejected like add_request.
  struct PrefilledState {
    TimeNs first_scheduled_ns = -1;
    TimeNs first_token_ns = -1;
    std::int32_t num_cached_tokens = 0;
    std::int32_t num_preemptions = 0;
    std::int64_t num_recomputed_tokens = 0;
    std::int32_t capped_from_tokens = 0;  // the length cap lowered max_output_tokens from this
  };
  void add_prefilled_request(RequestSpec spec, const PrefilledState& state, TimeNs now);
  // Why add_request would reject `spec` now ("" if it would not).
  std::string rejection_reason_for(const RequestSpec& spec) const {
    const Request r(spec);
    return rejection_reason(r);
  }

  // Forms the next plan. The returned reference stays valid until complete() or the next
  // schedule() (async scheduling: see the file comment). The plan is empty when there is nothing
  // to run. REQUIRES: the previous plan was completed; with async scheduling, at most one plan
  // awaits complete() (std::logic_error otherwise).
  const StepPlan& schedule(TimeNs now);
  // Async scheduling: how many formed plans await complete() (0, 1 or 2; at most 1 otherwise).
  int num_pending_plans() const { return (plan_pending_ ? 1 : 0) + (other_pending_ ? 1 : 0); }

  // Applies the result of the oldest pending plan at time `now` (the step's end): appends sampled
  // tokens (reported to the observer together, through on_step_tokens, in plan order), then
  // finishes requests that reached their output length and frees their blocks (on_finish, plan
  // order). A multi-step round (plan.num_steps N > 1) appends up to N tokens per entry, all at
  // `now`, reported through on_step_tokens once per pass (see the file comment). Throws
  // std::invalid_argument when `result` holds fewer tokens than the plan needs. Throws ConfigError
  // when no step has sampled a token for 100,000 + 4 x max_model_len steps in a row (at least one
  // token budget per step finishes any prefill well within that): requests that preempt each
  // other in turn before any of them samples (a livelock of the victim rule and the cache size),
  // which would otherwise run until the clock overflows.
  void complete(const StepResult& result, TimeNs now);

  // Aborts the unfinished request `id` wherever it is (waiting, preempted, running or swapped),
  // as vLLM's finish_requests(FINISHED_ABORTED) does for a client that went away: its device and
  // host blocks are freed (full blocks keep their hashes, as after any free), its status becomes
  // kAborted with finish_reason `reason`, it is reported through on_finish at `now` and deleted.
  // A request with parallel samples is aborted whole (every unfinished sample; reported once).
  // Returns false when no unfinished request has that id (finished, rejected or unknown).
  // REQUIRES: no plan awaits complete() (std::logic_error otherwise): call between steps. With
  // async scheduling one may (the engine loop's state between complete() and the next
  // schedule(): the plan in flight has run, its tokens wait): a request it names is then kept
  // until its complete(), which discards the request's entry (as for a request a stop token
  // finished meanwhile) and deletes it; its blocks are freed at once, and a later plan may take
  // them (plans run in order, so the one in flight has written them by then).
  bool abort(RequestId id, TimeNs now, const std::string& reason);

  // Ends sample `id` (sample_request_id(request, k), or the request's own id for sample 0) of a
  // forked request as a stop condition would (kFinished, finish_reason "stop"), wherever it is,
  // and frees its blocks; its siblings go on. What vLLM does with one child of a parallel-sampling
  // request whose stop string its output processor found. Returns false when `id` is no
  // unfinished sample of a forked request (a request without samples: abort() it).
  // REQUIRES: as for abort() (std::logic_error otherwise).
  bool stop_sample(RequestId id, TimeNs now);

  // vLLM's Scheduler.reset_prefix_cache: KvCacheManager::reset_prefix_cache (false while any
  // request holds blocks). REQUIRES: as for abort() (std::logic_error otherwise).
  bool reset_prefix_cache();

  bool has_unfinished() const {
    return !waiting_->empty() || !running_.empty() || !swapped_.empty();
  }
  std::size_t num_waiting() const { return waiting_->size(); }
  std::size_t num_running() const { return running_.size(); }
  std::size_t num_swapped() const { return swapped_.size(); }
  // The swapped-out requests in resume order (oldest swap-out first).
  const std::deque<Request*>& swapped() const { return swapped_; }
  const std::vector<Request*>& running() const { return running_; }
  // The waiting requests in admission order (a copy: O(n), for tests and inspection).
  std::vector<Request*> waiting() const { return waiting_->snapshot(); }
  const WaitingQueue& waiting_queue() const { return *waiting_; }
  const SchedulerCounters& counters() const { return counters_; }
  // The load an arrival at `now` would see (core/admission_policy.h): O(1).
  AdmissionLoad admission_load(TimeNs now) const {
    return {now, static_cast<std::int64_t>(waiting_->size()),
            static_cast<std::int64_t>(running_.size()), waiting_tokens_, prefill_tokens_per_s_};
  }
  const SchedulerConfig& config() const { return config_; }
  KvCacheManager& kv() { return kv_; }
  const KvCacheManager& kv() const { return kv_; }
  // The policy objects in use (config's, or core's vLLM v1 defaults).
  const BatchFormation& batch_formation() const { return *batch_; }
  const VictimRule& victim_rule() const { return *victim_; }
  const PreemptionMode& preemption_mode() const { return *preemption_; }

  // ---- Step building: what a BatchFormation's fill() uses (core/batch_formation.h). Valid only
  // inside fill(), i.e. during schedule().

  // The plan being formed.
  const StepPlan& plan() const { return plan_; }
  // The batch formation's state for this scheduler (BatchFormation::make_state; null if none).
  BatchFormationState* batch_state() const { return batch_state_.get(); }
  // Seats in use: running requests plus the n - 1 seats reserved for each running request that
  // will fork (parallel sampling).
  std::size_t seats_taken() const { return running_.size() + fork_seats_; }
  // Whether r still has prompt (or, after a preemption, prompt + outputs) to prefill.
  static bool prefill_pending(const Request& r) {
    return r.num_computed_tokens < r.spec.prompt_len || r.num_tokens() - r.num_computed_tokens > 1;
  }
  // Multi-step scheduling: the lookahead slots (config.num_scheduler_steps - 1; 0 with one step).
  std::int32_t lookahead_slots() const { return lookahead_; }
  // The slots a formation reserves for r beyond the n it schedules: vLLM's lookahead slots, N - 1,
  // when the entry is a decode (n == 1 and r has exactly one token left to compute), capped at
  // r's maximum length (positions up to prompt + max_output_tokens - 2 ever hold KV), so a
  // request that fits the cache alone always fits its rounds; 0 otherwise and with one step.
  // make_room() and swap_in_phase() add it themselves; a formation that calls
  // kv().allocate_slots(r, n) directly must ask for n + decode_lookahead(r, n).
  std::int32_t decode_lookahead(const Request& r, std::int32_t n) const {
    if (lookahead_ == 0 || n != 1 || r.num_tokens() - r.num_computed_tokens != 1) return 0;
    const std::int32_t room = r.spec.total_tokens() - 2 - r.num_computed_tokens;
    return std::clamp(room, 0, lookahead_);
  }
  // Speculative decoding: whether it is on (config.speculative.enabled()).
  bool speculative() const { return spec_k_ > 0; }
  // EAGLE's lookahead slots for r beyond the n tokens it is given: k, capped so that r's slots
  // never pass its maximum length (prompt + max_output_tokens - 1 positions); 0 for other methods.
  std::int32_t spec_lookahead(const Request& r, std::int32_t n) const {
    if (spec_lookahead_ == 0) return 0;
    const std::int32_t room = r.spec.total_tokens() - 1 - r.num_computed_tokens - n;
    return std::clamp(room, 0, spec_lookahead_);
  }
  // Adds running r's entry of n tokens (see add_to_plan): with speculation, a request with draft
  // tokens that decodes gets a verify entry of 1 + min(d, n - 1) tokens, its other drafts dropped.
  void add_running_entry(Request& r, std::int32_t n, TimeNs now);
  // int(fraction * usable blocks): the blocks an admission must leave free (vLLM v0 watermark).
  std::int32_t watermark_blocks(double fraction) const;
  // What make_room did: `i` follows running()[i] when an earlier entry left, `budget` includes
  // the tokens of refunded victims, and ok is false when running()[i] preempted itself (it is
  // gone; i then indexes the next request).
  struct Room {
    std::size_t i;
    std::int32_t budget;
    bool ok;
  };
  // Allocates n slots (plus decode_lookahead) for running()[i], preempting victims (the
  // VictimRule's, by the PreemptionMode) until they fit; a victim already in the plan is
  // refunded. Values in and out rather than references, so a formation's hot loop keeps i and
  // budget in registers.
  Room make_room(std::size_t i, std::int32_t n, std::int32_t budget, TimeNs now);
  // What a running-phase loop does when a request preempts itself to make room.
  enum class OnSelfPreemption { kNext, kStop };
  // The running phase most formations share: running requests in list order while `budget`
  // lasts, each for n = tokens_for(r, budget) tokens (n <= 0: skipped, it keeps its place),
  // room made by make_room, the entry added with add_to_plan. When a request preempts itself the
  // loop goes on with the next one (kNext) or ends (kStop). Returns the budget left. (vLLM v1's
  // own loop, core/vllm_batch_formation.cc, adds a decode fast path in front of the same steps.)
  template <typename TokensFor>
  std::int32_t schedule_running(std::int32_t budget, TimeNs now, OnSelfPreemption on_self,
                                TokensFor tokens_for) {
    std::size_t i = 0;
    while (i < running_.size() && budget > 0) {
      Request& r = *running_[i];
      const std::int32_t n = tokens_for(static_cast<const Request&>(r), budget);
      if (n <= 0) {
        ++i;
        continue;
      }
      const Room room = make_room(i, n, budget, now);
      i = room.i;
      budget = room.budget;
      if (!room.ok) {
        if (on_self == OnSelfPreemption::kStop) break;
        continue;  // r is gone; i names the next request
      }
      add_to_plan(r, n, 0, now);
      budget -= n;
      ++i;
    }
    return budget;
  }
  // Appends r's entry (n tokens from r.num_computed_tokens; cached_now tokens hit in the prefix
  // cache at this admission) and advances r's progress. REQUIRES: n >= 1, r's slots allocated.
  void add_to_plan(Request& r, std::int32_t n, std::int32_t cached_now, TimeNs now);
  // add_to_plan with the entry's kind given: is_prefill = (end < known tokens || n > 1) and
  // samples = (end == known tokens), as add_to_plan derives them (a decode passes false, true).
  void add_entry(Request& r, std::int32_t n, std::int32_t cached_now, TimeNs now, bool is_prefill,
                 bool samples);
  // How admit_waiting() admits. Every formation's admissions are this one loop: from the
  // waiting queue's front, in its order, while a seat is free (n seats for a request that will
  // fork) and (if stop_when_budget_spent) budget is left; the first request that does not fit
  // stops it (head-of-line blocking, no skipping). Each candidate's prefix hit is looked up,
  // n = its tokens after the hit, capped at token_cap (if > 0), then at the budget.
  struct AdmissionRule {
    std::int32_t token_cap = 0;          // > 0: at most this many tokens per request (vLLM's
                                         // long_prefill_token_threshold)
    bool whole_prompt = false;           // n over the budget waits (no chunking)
    std::int32_t watermark_blocks = -1;  // >= 0: n's blocks plus this many must be free
    bool reserve_max_length = false;     // take blocks for prompt + max_output_tokens at once
    bool schedule = true;                // schedule the n tokens in this step's plan
    bool stop_when_budget_spent = true;  // false: look at the head even with no budget left
                                         // (vLLM v0 computes a candidate before its budget check)
    std::int32_t max_admissions = 0;     // > 0: at most this many admissions in this call
    // SGLang's PrefillAdder: non-null: KV tokens left after the running requests' reservations
    // (in/out). A candidate needs its tokens after the hit plus min(its remaining outputs,
    // reserve_clip) strictly below it, and takes that much from it when admitted; a need of the
    // whole cache or more (a request preempted near its end) counts as the cache less one token,
    // so it starts once the cache is free.
    std::int64_t* reserve_tokens = nullptr;
    std::int32_t reserve_clip = 4096;
    // Where an admitted request joins running(): at this index (keeping a ranked list in order;
    // the preemptive formation), or at the end when it is past the end (the default).
    std::size_t insert_at = static_cast<std::size_t>(-1);
    // LoRA: a request whose adapter would be one more than max_loras is skipped (vLLM v1, the
    // default) or, false, stops the loop like any head that cannot start (the preemptive
    // formation: nobody ranked after it goes first).
    bool skip_lora_blocked = true;
    // > 0: a head whose tokens (a resumed request's prompt and outputs so far) exceed this is
    // aborted and the loop goes on (vLLM v0's FINISHED_IGNORED past the prompt limit).
    std::int32_t ignore_past = 0;
  };
  // The admission loop (above); returns the budget left.
  std::int32_t admit_waiting(std::int32_t budget, const AdmissionRule& rule, TimeNs now);
  // Ranked formations (BatchFormation::needs_ranked_queue): sorts running() by the waiting
  // queue's rank (WaitingQueue::ranks_before; stable), so that running()[0] is the request the
  // queue would admit first and the last running one, the default victim, the one it would admit
  // last. REQUIRES: the plan has no entry yet and no running request belongs to a sample group.
  void rank_running();
  // Preempts the last running request by the preemption mode, as make_room would for a victim
  // (counted, listed in plan().preempted, requeued or swapped). REQUIRES: !running().empty(),
  // and the last running request has no plan entry.
  void preempt_last_running(TimeNs now);
  // The resume pass over the swapped list (see above), run by formations that resume swapped
  // requests, after their running phase in a step that preempted nothing; returns the budget
  // left. `max_resumes` > 0 stops the pass after that many resumes; `insert_at` places each
  // resumed request in running() as AdmissionRule::insert_at does (ranked formations).
  std::int32_t swap_in_phase(std::int32_t budget, TimeNs now, std::size_t max_resumes = 0,
                             std::size_t insert_at = static_cast<std::size_t>(-1));
  // Ranked formations: sorts the swapped list by the waiting queue's rank (stable), so that
  // swap_in_phase resumes the best-ranked first.
  void rank_swapped();

 private:
  // The reason a request must be refused at arrival, or "" if it can be queued.
  std::string rejection_reason(const Request& req) const;
  // Swaps the victim out to the swapped list or frees its KV and requeues it at the head (see
  // above for which), or aborts it past the preemption cap (the victim is then deleted).
  // REQUIRES: the victim was unlinked from running_ and unscheduled.
  void preempt(Request& victim, TimeNs now);
  // Whether preempt() would swap `victim` out rather than recompute it.
  bool should_swap(const Request& victim) const;
  // Gives up on `r` (unlinked, no plan entry, blocks freed here): reports and deletes it.
  void abort_request(Request& r, TimeNs now);
  // abort(): unlinks one unfinished sequence from its queue, frees its blocks and reports it
  // (a sample: through its group).
  void abort_sequence(Request& r, TimeNs now, const std::string& reason);
  // Takes the unfinished sequence r out of whichever queue holds it and frees its blocks.
  void unlink(Request& r);
  // abort() and stop_sample(): the first unfinished sequence (running, swapped, then waiting)
  // that `matches`, or null. Throws std::logic_error naming `who` when a plan awaits complete().
  Request* find_unfinished(const char* who,
                           const std::function<bool(const Request&)>& matches) const;
  // Moves the waiting queue's front `r` (which just got its blocks for `hit`) to running_.
  void admit_front(Request& r, const PrefixHit& hit, std::size_t insert_at);
  bool in_plan(const Request& r) const;
  // Removes the plan entry of `r` (scheduled earlier in this step), undoing its progress and
  // returning its tokens.
  std::int32_t unschedule(const Request& r);
  // Marks r finished, frees its blocks and reports it; the caller unlinks and deletes it (a
  // forked sample: its group is reported and deleted when its last sample is done).
  void finish(Request& r, TimeNs now);

  // ---- Parallel sampling (spec.n > 1; see the file comment) ----
  // Forks r into its group after its first-token step: samples 1 .. n-1 share r's blocks and
  // take their first tokens from `tokens` (n - 1 of them); they join running_ right after r.
  void fork_request(Request& r, const std::int32_t* tokens, TimeNs now);
  // The forks of the plan being completed (entries with num_samples > 1), before the tokens are
  // applied; returns whether a sample finished already (max_output_tokens 1).
  bool fork_pass(const StepResult& result, TimeNs now);
  // Preempts every running sample of victim's group (last sample first, so that sample 0 ends
  // up at the head of the waiting queue), refunding plan entries to `budget` and keeping `i`
  // on the same request. The requester `self` is spared while a sibling runs (see the .cc).
  // Returns whether `self` was preempted.
  bool preempt_group(Request& victim, std::size_t& i, std::int32_t& budget, const Request* self,
                     TimeNs now);
  // A forked sample finished or was aborted; when it was its group's last, the group is
  // reported through sample 0 and queued for deletion.
  void sample_done(Request& r, TimeNs now);
  // Deletes the samples of the groups sample_done completed.
  void release_done_groups();
  // The end of complete() (one step or a round): drops finished requests from the running list
  // (one pass, order kept) and deletes those outside a group when any_finished, releases groups
  // that ended, and clears the plan's request list.
  void end_of_step(bool any_finished);

  // ---- Multi-step scheduling (num_scheduler_steps > 1; see the file comment) ----
  // Makes the plan just formed a round (plan_.num_steps = N) when it qualifies. Throws
  // std::logic_error when a qualifying entry lacks its lookahead slots (a formation bug).
  void mark_round();
  // complete() for a round.
  void complete_round(const StepResult& result, TimeNs now);
  // complete() with speculative decoding on (see the file comment).
  void complete_spec(const StepResult& result, TimeNs now);

  SchedulerConfig config_;
  // config_'s policy objects, or core's defaults (never null).
  const BatchFormation* batch_ = nullptr;
  const VictimRule* victim_ = nullptr;
  const PreemptionMode* preemption_ = nullptr;
  KvCacheManager& kv_;
  SchedulerObserver* observer_;
  std::unique_ptr<WaitingQueue> waiting_;
  std::unique_ptr<BatchFormationState> batch_state_;  // batch_->make_state()
  bool report_service_ = false;                       // waiting_->counts_service(), asked once
  bool reorders_ = false;                             // waiting_->reorders(), asked once
  bool times_service_ = false;                        // waiting_->times_service(), asked once
  std::vector<Request*> running_;
  std::deque<Request*> swapped_;  // kSwapped requests, oldest swap-out first
  StepPlan plan_;
  std::vector<Request*> plan_requests_;  // the Request behind each plan entry
  // complete()'s scratch (sized to the largest plan): the requests that got a token and their
  // previous token times.
  std::vector<Request*> token_requests_;
  std::vector<TimeNs> token_prev_ns_;
  // complete_spec()'s scratch: per sampling entry its new tokens, accepted drafts and plan index;
  // the requests and previous times of one on_step_tokens call.
  std::vector<std::int32_t> spec_new_;
  std::vector<std::int32_t> spec_acc_;
  std::vector<std::size_t> spec_entry_;
  std::vector<const Request*> spec_got_;
  std::vector<TimeNs> spec_prev_;
  std::int64_t next_step_ = 0;
  std::int64_t steps_without_token_ = 0;  // complete()'s livelock watch
  bool plan_pending_ = false;             // a non-empty plan awaits complete()
  // ---- Async scheduling (see the file comment) ----
  // The other plan that awaits complete(): while a plan is formed, the one in flight before it;
  // while the older one is completed (complete() swaps the two), the newer one.
  StepPlan other_plan_;
  std::vector<Request*> other_requests_;
  bool other_pending_ = false;
  bool async_ = false;  // config_.async_scheduling
  // Whether the other pending plan names r (async scheduling); r must then outlive it.
  bool held_by_other_plan(const Request* r) const {
    return other_pending_ &&
           std::find(other_requests_.begin(), other_requests_.end(), r) != other_requests_.end();
  }
  // Whether a pending plan (this one or the other) names r (async scheduling).
  bool held_by_pending_plan(const Request* r) const;
  // complete() of the older of two pending plans (async scheduling).
  void complete_older(const StepResult& result, TimeNs now);
  // complete() of one plan without drafts, rounds or forks: the synchronous path.
  void complete_step(const StepResult& result, TimeNs now);
  std::int32_t lookahead_ = 0;         // config_.num_scheduler_steps - 1
  std::int32_t spec_k_ = 0;            // num_speculative_tokens when speculation is on, else 0
  std::int32_t spec_lookahead_ = 0;    // config_.speculative.lookahead_slots() when on
  std::int32_t admitted_in_step_ = 0;  // admissions from the waiting queue in the plan being formed
  SchedulerCounters counters_;
  std::size_t fork_seats_ = 0;  // seats reserved for the samples of running unforked requests
  // A request with prompt log probabilities was added: plans then sum their entries'
  // prompt_logprob_rows once formed (the totals' field stays 0 in every other run, unsummed).
  bool prompt_logprobs_seen_ = false;
  std::vector<std::shared_ptr<SampleGroup>> done_groups_;  // reported, awaiting deletion
  // Overload control's view of the load (admission_load()): the waiting queue's tokens, kept as
  // requests enter and leave it (queue_back, queue_front, unqueue), and the prefill-throughput
  // mean, updated by complete() from the step's duration since plan_start_ns_.
  std::int64_t waiting_tokens_ = 0;
  double prefill_tokens_per_s_ = 0;
  TimeNs plan_start_ns_ = 0;
  // An arrival that never enters the queue (kRejected or kShed, with the reason): reported to
  // the observer, counted and deleted.
  void turn_away(std::unique_ptr<Request> r, RequestStatus status, std::string reason, TimeNs now);
  void queue_back(Request& r);
  void queue_front(Request& r);
  void unqueue(Request& r);  // r just left the waiting queue (popped or erased)
  // Sheds or caps a new arrival (see the file comment); true when it was shed (r is then
  // consumed). A policy that throws leaves r with the caller.
  bool apply_overload_control(std::unique_ptr<Request>& r, TimeNs now);
  // add_request and add_prefill_only_request: the max_output_tokens the request was queued with
  // (before a prefill-only request's drop to 1), 0 when turned away.
  std::int32_t admit(RequestSpec spec, TimeNs now, bool prefill_only);

  // ---- LoRA (config.lora; see the file comment) ----
  // active_loras_ := the distinct adapters of the running and swapped requests.
  void collect_active_loras();
  // Sets plan_.num_lora_tokens and num_loras from the final plan (active_loras_ is scratch).
  void count_plan_loras();
  bool lora_active(std::uint32_t id) const {
    return std::find(active_loras_.begin(), active_loras_.end(), id) != active_loras_.end();
  }
  std::vector<std::uint32_t> active_loras_;  // at most max_loras + 1 ids (scratch)
  std::vector<Request*> lora_skipped_;       // admit_waiting's skipped requests (scratch)
};

// add_to_plan and add_entry run once per scheduled request per step, called from every batch
// formation's loop (in other files): defined here so they inline there.
[[gnu::always_inline]] inline void Scheduler::add_to_plan(Request& r, std::int32_t n,
                                                          std::int32_t cached_now, TimeNs now) {
  assert(n >= 1);
  const std::int32_t end = r.num_computed_tokens + n;
  // Output placeholders (async scheduling) count as known: their values come from the backend.
  const std::int32_t known = r.num_tokens() + r.num_output_placeholders;
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
  const std::int32_t max_computed = r.max_computed_tokens_;
  r.undo_max_computed_tokens_ = max_computed;
  r.undo_first_scheduled_ns_ = r.first_scheduled_ns;
  if (report_service_) waiting_->on_tokens_scheduled(r, is_prefill ? n : 0, is_prefill ? 0 : n);
  if (max_computed > first) {
    // Recomputing KV a preemption dropped.
    const std::int32_t recomputed = std::min(end, max_computed) - first;
    r.num_recomputed_tokens += recomputed;
    counters_.num_recomputed_tokens += recomputed;
  }
  r.num_computed_tokens = end;
  if (end > max_computed) r.max_computed_tokens_ = end;
  r.num_computed_total_ += n;
  if (r.first_scheduled_ns < 0) r.first_scheduled_ns = now;
}

}  // namespace servelab
