#pragma once
// A multi-turn workload's next turn quotes the turns before it (traces/session_workload.h): its
// prompt holds each earlier reply as a segment of that reply's output stream
// (output_content_id(parent), offset, length). The simulator needs only those identities; the
// engine feeds the model values, and token_value() of a reply's identity is not what the model
// sampled there. The parent's output blocks hold the KV of its sampled tokens under those very
// identities (block hashes), so a prefix-cache hit would hand the next turn KV of other tokens
// than it computes without the cache: greedy outputs changed with prefix caching on or off.
//
// ReplyTokens keeps each finished request's sampled tokens (a dependent workload's only: only
// those release requests that quote them) and gives a prompt that quotes a known reply its
// values (RequestSpec::prompt_values): the sampled tokens where it quotes a reply, token_value()
// of the identity elsewhere (what prompt_token_value() gave before). The identities, and with
// them block hashes and the schedule, are unchanged; a reply quoted past its end (an aborted
// parent) keeps token_value() there. Not thread-safe: the engine's cluster calls it under its
// run lock.
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/request.h"
#include "core/scheduler_observer.h"

namespace servelab {

class ReplyTokens : public ForwardingObserver {
 public:
  // `keep`: whether to keep replies at all (the workload is dependent); `vocab_size` > 0.
  ReplyTokens(SchedulerObserver& downstream, std::int32_t vocab_size, bool keep)
      : ForwardingObserver(downstream), vocab_size_(vocab_size), keep_(keep) {}
  void on_reject(const Request& req, TimeNs now) override;
  void on_finish(const Request& req, TimeNs now) override;

  // Sets spec.prompt_values when a segment of its prompt quotes a kept reply (a prompt with
  // literal values already is left alone).
  void quote_replies(RequestSpec& spec) const;

 private:
  std::int32_t vocab_size_;
  bool keep_;
  std::unordered_map<std::uint64_t, std::vector<std::int32_t>> replies_;  // by output stream
};

}  // namespace servelab
