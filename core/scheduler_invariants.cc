#include "core/scheduler_invariants.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace servelab {

namespace {

[[noreturn]] void broken(const std::string& what) {
  throw std::logic_error("scheduler invariant broken: " + what);
}

std::string req(const Request& r) { return "request " + std::to_string(r.id()); }

}  // namespace

void check_scheduler_invariants(const Scheduler& s, const StepPlan& plan) {
  const SchedulerConfig& c = s.config();
  if (s.num_running() > static_cast<std::size_t>(c.max_num_seqs)) {
    broken(std::to_string(s.num_running()) + " running requests, more than max_num_seqs (" +
           std::to_string(c.max_num_seqs) + ")");
  }
  // Sorted id lists rather than sets: this runs after every step.
  std::vector<RequestId> running;
  running.reserve(s.num_running());
  for (const Request* r : s.running()) {
    running.push_back(r->id());
    if (r->status != RequestStatus::kRunning) {
      broken(req(*r) + " is in the running list with status " + to_string(r->status));
    }
    if (!r->host_block_table().empty()) broken(req(*r) + " is running but holds host blocks");
    // (A verify step computes draft tokens too: speculative decoding.)
    // (Async scheduling: the tokens of pending plans count, as output placeholders.)
    if (r->num_computed_tokens > r->num_tokens_with_spec() + r->num_output_placeholders) {
      broken(req(*r) + " has more computed tokens than known, draft and placeholder tokens");
    }
    if (static_cast<std::int64_t>(r->block_table.size()) * c.block_size < r->num_computed_tokens) {
      broken(req(*r) + "'s block table does not cover its computed tokens");
    }
  }
  std::vector<RequestId> held = running;
  const std::vector<Request*> waiting = s.waiting();
  if (waiting.size() != s.num_waiting()) {
    broken("the waiting queue holds " + std::to_string(waiting.size()) + " requests but reports " +
           std::to_string(s.num_waiting()));
  }
  for (const Request* r : waiting) {
    held.push_back(r->id());
    if (r->status != RequestStatus::kWaiting && r->status != RequestStatus::kPreempted) {
      broken(req(*r) + " is in the waiting queue with status " + to_string(r->status));
    }
    if (!r->block_table.empty() || r->num_computed_tokens != 0) {
      broken(req(*r) + " is waiting but holds blocks or computed tokens");
    }
  }
  for (const Request* r : s.swapped()) {
    held.push_back(r->id());
    if (r->status != RequestStatus::kSwapped) {
      broken(req(*r) + " is in the swapped list with status " + to_string(r->status));
    }
    if (!r->block_table.empty() || r->host_block_table().empty()) {
      broken(req(*r) + " is swapped but holds device blocks or no host blocks");
    }
  }
  if (c.lora.enabled()) {
    // At most max_loras adapters among the running and swapped requests (admit_waiting).
    std::vector<std::uint32_t> adapters;
    for (const Request* r : s.running()) adapters.push_back(r->spec.lora_id);
    for (const Request* r : s.swapped()) adapters.push_back(r->spec.lora_id);
    std::sort(adapters.begin(), adapters.end());
    adapters.erase(std::unique(adapters.begin(), adapters.end()), adapters.end());
    const auto n = static_cast<std::int64_t>(adapters.size()) -
                   (!adapters.empty() && adapters.front() == 0 ? 1 : 0);
    if (n > c.lora.max_loras) {
      broken(std::to_string(n) +
             " LoRA adapters among the running and swapped requests, more "
             "than max_loras (" +
             std::to_string(c.lora.max_loras) + ")");
    }
  }
  std::sort(held.begin(), held.end());
  if (const auto twice = std::adjacent_find(held.begin(), held.end()); twice != held.end()) {
    broken("request " + std::to_string(*twice) +
           " is held twice by the waiting queue, the running list and the swapped list");
  }

  if (plan.num_tokens() > c.max_num_batched_tokens) {
    broken("step " + std::to_string(plan.step_index) + " schedules " +
           std::to_string(plan.num_tokens()) + " tokens, more than max_num_batched_tokens (" +
           std::to_string(c.max_num_batched_tokens) + ")");
  }
  std::sort(running.begin(), running.end());
  std::vector<RequestId> scheduled;
  scheduled.reserve(plan.requests.size());
  std::int64_t prefill = 0, decode = 0;
  for (const ScheduledRequest& e : plan.requests) {
    scheduled.push_back(e.id);
    if (e.num_tokens < 1) broken("request " + std::to_string(e.id) + " is scheduled for no tokens");
    if (!std::binary_search(running.begin(), running.end(), e.id)) {
      broken("request " + std::to_string(e.id) + " is scheduled but not running");
    }
    if (static_cast<std::int64_t>(e.block_table.size()) * c.block_size < e.context_len()) {
      broken("request " + std::to_string(e.id) +
             "'s block table does not cover the tokens it is scheduled for");
    }
    (e.is_prefill ? prefill : decode) += e.num_tokens;
  }
  std::sort(scheduled.begin(), scheduled.end());
  if (const auto twice = std::adjacent_find(scheduled.begin(), scheduled.end());
      twice != scheduled.end()) {
    broken("request " + std::to_string(*twice) + " is scheduled twice in one step");
  }
  if (prefill != plan.num_prefill_tokens || decode != plan.num_decode_tokens) {
    broken("step " + std::to_string(plan.step_index) +
           "'s token counters do not match its entries");
  }
}

}  // namespace servelab
