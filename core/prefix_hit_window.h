// PrefixHitWindow: vLLM v1's windowed prefix-cache hit rate (vllm/v1/metrics/stats.py,
// PrefixCachingMetrics / CachingMetrics), the number vLLM logs as "Prefix cache hit rate" next to
// its cumulative Prometheus counters.
//
// Fed once per scheduler step with that step's prefix-cache lookups: the requests that looked up
// (one per lookup; the callers leave resumed requests' lookups out, as vLLM's counters do), the
// tokens they queried and the tokens that hit.
// The window keeps the most recent steps whose requests add up to at most max_recent_requests
// (1000 in vLLM): after adding a step, the oldest steps are dropped while more than that many
// requests remain, but the newest step is always kept (so one step of more than N requests is
// the whole window). A step without lookups changes nothing. A reset of the prefix cache
// (KvCacheManager::reset_prefix_cache) empties the window before that step's lookups are added.
// hit_rate() = hit tokens / queried tokens over the window; 0 when nothing was queried.
#pragma once

#include <cstdint>
#include <deque>

namespace servelab {

class PrefixHitWindow {
 public:
  static constexpr std::int64_t kVllmMaxRecentRequests = 1000;

  // REQUIRES: max_recent_requests >= 1.
  explicit PrefixHitWindow(std::int64_t max_recent_requests = kVllmMaxRecentRequests)
      : max_requests_(max_recent_requests) {}

  void observe(std::int64_t requests, std::int64_t queried_tokens, std::int64_t hit_tokens,
               bool reset) {
    if (reset) clear();
    if (requests <= 0) return;
    entries_.push_back({requests, queried_tokens, hit_tokens});
    requests_ += requests;
    queried_ += queried_tokens;
    hits_ += hit_tokens;
    while (entries_.size() > 1 && requests_ > max_requests_) {
      const Entry& old = entries_.front();
      requests_ -= old.requests;
      queried_ -= old.queried;
      hits_ -= old.hits;
      entries_.pop_front();
    }
  }
  void clear() {
    entries_.clear();
    requests_ = queried_ = hits_ = 0;
  }

  double hit_rate() const {
    return queried_ > 0 ? static_cast<double>(hits_) / static_cast<double>(queried_) : 0.0;
  }
  std::int64_t requests() const { return requests_; }
  std::int64_t queried_tokens() const { return queried_; }
  std::int64_t hit_tokens() const { return hits_; }
  std::int64_t max_recent_requests() const { return max_requests_; }

 private:
  struct Entry {
    std::int64_t requests, queried, hits;
  };
  std::int64_t max_requests_;
  std::deque<Entry> entries_;
  std::int64_t requests_ = 0, queried_ = 0, hits_ = 0;
};

}  // namespace servelab
