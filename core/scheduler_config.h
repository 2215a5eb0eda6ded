// Serving limits the scheduler enforces (the `serving:` section of an experiment), plus the
// policy hooks chosen in the `policies:` section (built by policies/, core only sees the
// interfaces).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace servelab {

class WaitingQueue;

// Which running request a recompute preemption evicts when a running request cannot get slots.
enum class PreemptionVictim : std::uint8_t {
  kLastRunning,     // vLLM v1 FCFS: running.pop(), never a request already scheduled this step
  kLowestPriority,  // vLLM v1 PRIORITY: max over running of (priority, arrival); may be one
                    // already scheduled this step, whose entry and budget are then refunded
};

struct SchedulerConfig {
  std::int32_t max_num_batched_tokens = 8192;  // token budget per step
  std::int32_t max_num_seqs = 256;             // cap on running requests
  std::int32_t max_model_len = 8192;           // prompt + output cap; longer requests are rejected
  std::int32_t long_prefill_token_threshold = 0;  // cap on one request's tokens per step (0: off)
  bool enable_chunked_prefill = true;
  bool enable_prefix_caching = true;
  std::int32_t block_size = 16;
  PreemptionVictim preemption_victim = PreemptionVictim::kLastRunning;
  // Builds the waiting queue (a queue-order plugin). Empty: FCFS.
  std::function<std::unique_ptr<WaitingQueue>()> make_waiting_queue;
};

}  // namespace servelab
