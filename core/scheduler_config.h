// Serving limits the scheduler enforces (the `serving:` section of an experiment), plus the
// policy hooks chosen in the `policies:` section (built by policies/, core only sees the
// interfaces).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace servelab {

class WaitingQueue;
struct Request;

// Which running request a recompute preemption evicts when a running request cannot get slots.
enum class PreemptionVictim : std::uint8_t {
  kLastRunning,     // vLLM v1 FCFS: running.pop(), never a request already scheduled this step
  kLowestPriority,  // vLLM v1 PRIORITY: max over running of (priority, arrival); may be one
                    // already scheduled this step, whose entry and budget are then refunded
  kFewestComputed,  // SGLang retract_decode: fewest output tokens, then longest prompt, then
                    // later in the running list (refunded like kLowestPriority)
  kMostBlocks,      // the request holding the most KV blocks, ties to the later arrival
                    // (refunded like kLowestPriority)
};

// What preempting a victim does to its KV (the `preemption` plugin).
enum class PreemptionMode : std::uint8_t {
  kRecompute,  // vLLM v1: free the KV, recompute prompt + outputs on resume
  kSwap,       // vLLM v0 preemption_mode=swap: move the KV to host blocks, copy it back later
  kAuto,       // per victim, swap when config.prefer_swap(victim) says it is cheaper
};

// How a step's batch is formed (the `batch` plugin). Every formation shares the token budget
// max_num_batched_tokens, the seat cap max_num_seqs and the recompute preemption machinery.
enum class BatchFormation : std::uint8_t {
  kVllm,          // vLLM v1 continuous batching with chunked prefill (the default)
  kStatic,        // one batch at a time, max length reserved, nobody joins until all finish
  kOrca,          // iteration-level: whole prompts only, max length reserved, joins every step
  kSarathi,       // Sarathi-Serve stall-free: decodes, then partial prefills, then new chunks
  kPrefillFirst,  // vLLM v0 default: a step is prefill-only or decode-only, no chunking
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
  // A request preempted more than this many times is aborted (0: no cap).
  std::int32_t max_preemptions = 0;
  // kSwap / kAuto need the kVllm batch formation and a host pool in the KV cache manager; a
  // victim whose KV the host pool cannot take is recomputed instead (see core/scheduler.h).
  PreemptionMode preemption_mode = PreemptionMode::kRecompute;
  // kAuto's cost oracle: true when swapping this victim out and back in is cheaper than
  // recomputing its num_computed_tokens. A function rather than cost coefficients so core/ needs
  // nothing of sim/ and the simulator can ask its full cost model (sim/run.cc sets it from the
  // RooflineCostModel). Empty: kAuto recomputes every victim (vLLM v0's auto choice for a
  // single-sequence request).
  std::function<bool(const Request&)> prefer_swap;
  BatchFormation batch_formation = BatchFormation::kVllm;
  // Sarathi's per-step token budget tau (0: max_num_batched_tokens; larger values are capped
  // at max_num_batched_tokens).
  std::int32_t sarathi_chunk_size = 0;
  // Fraction of the usable blocks an admission must leave free (vLLM v0 / Sarathi watermark);
  // used by kSarathi and kPrefillFirst only.
  double admission_watermark = 0.01;
  // Builds the waiting queue (a queue-order plugin). Empty: FCFS.
  std::function<std::unique_ptr<WaitingQueue>()> make_waiting_queue;
};

}  // namespace servelab
