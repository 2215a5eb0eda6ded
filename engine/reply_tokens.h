#pragma once
// ReplyTokens: the engine's observer that keeps a dependent workload's sampled replies
// (serving/quoted_replies.h says why a next turn must quote them) and gives the prompts that
// quote them their values. The parent's output blocks hold the KV of its sampled tokens under
// the reply's identities (block hashes), so a prefix-cache hit hands the next turn the KV of the
// tokens it is fed: greedy outputs do not change with prefix caching on or off. Only a dependent
// workload's replies are kept (only those release requests that quote them). Not thread-safe:
// the engine's cluster calls it under its run lock.
#include <cstdint>

#include "core/request.h"
#include "core/scheduler_observer.h"
#include "serving/quoted_replies.h"

namespace servelab {

class ReplyTokens : public ForwardingObserver {
 public:
  // `keep`: whether to keep replies at all (the workload is dependent); `vocab_size` > 0.
  ReplyTokens(SchedulerObserver& downstream, std::int32_t vocab_size, bool keep)
      : ForwardingObserver(downstream), replies_(vocab_size), keep_(keep) {}
  void on_reject(const Request& req, TimeNs now) override;
  void on_finish(const Request& req, TimeNs now) override;

  // QuotedReplies::quote over the replies kept.
  void quote_replies(RequestSpec& spec) const { replies_.quote(spec); }

 private:
  QuotedReplies replies_;
  bool keep_;
};

}  // namespace servelab
