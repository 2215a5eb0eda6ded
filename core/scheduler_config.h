// Serving limits the scheduler enforces (the `serving:` section of an experiment).
#pragma once

#include <cstdint>

namespace servelab {

struct SchedulerConfig {
  std::int32_t max_num_batched_tokens = 8192;  // token budget per step
  std::int32_t max_num_seqs = 256;             // cap on running requests
  std::int32_t max_model_len = 8192;           // prompt + output cap; longer requests are rejected
  std::int32_t long_prefill_token_threshold = 0;  // cap on one request's tokens per step (0: off)
  bool enable_chunked_prefill = true;
  bool enable_prefix_caching = true;
  std::int32_t block_size = 16;
};

}  // namespace servelab
