// The workload of the speculative-decoding engine tests (tests/speculative_engine_test.cc on the
// CPU executor, tests/gpu_executor_test.cc on the CUDA one): two repetitive literal prompts
// (greedy decoding of a random model repeats them, so n-grams match and drafts are accepted) and
// two content-stream prompts sharing a prefix, chunked through a 24-token step budget.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "core/request.h"
#include "core/scheduler.h"

namespace servelab::test_util {

// Each finished request's output tokens.
class FinishedTokens : public SchedulerObserver {
 public:
  void on_finish(const Request& req, TimeNs now) override {
    (void)now;
    tokens[req.id()] = req.output_tokens;
  }
  std::map<RequestId, std::vector<std::int32_t>> tokens;
};

// The scheduler settings, with n-gram speculation of k tokens (lookup 1..3) when k > 0.
inline SchedulerConfig speculation_scheduler(std::int32_t k) {
  SchedulerConfig sc;
  sc.max_num_batched_tokens = 24;  // prompts are chunked, decodes ride along
  sc.max_num_seqs = 8;
  sc.max_model_len = 512;
  sc.block_size = 8;
  if (k > 0) {
    sc.speculative.method = SpecMethod::kNgram;
    sc.speculative.num_speculative_tokens = k;
    sc.speculative.prompt_lookup_min = 1;
    sc.speculative.prompt_lookup_max = 3;
  }
  return sc;
}

// Requests 0-3 at time 0 (token ids below 64, so any vocabulary of the tests takes them).
inline void add_speculation_requests(Scheduler& s) {
  std::vector<std::int32_t> rep1, rep2;
  for (int i = 0; i < 6; ++i) {
    for (std::int32_t t : {11, 12, 13, 14, 15}) rep1.push_back(t);
  }
  for (int i = 0; i < 10; ++i) {
    for (std::int32_t t : {40, 41, 42}) rep2.push_back(t);
  }
  s.add_request(make_literal_request(0, 0, rep1, 24), 0);
  s.add_request(make_request(1, 0, {{unique_content_id(5, 1), 0, 37}}, 17), 0);
  s.add_request(make_literal_request(2, 0, rep2, 30), 0);
  s.add_request(
      make_request(3, 0, {{unique_content_id(5, 1), 0, 20}, {unique_content_id(5, 3), 0, 9}}, 12),
      0);
}

}  // namespace servelab::test_util
