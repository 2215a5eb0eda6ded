#include "engine/reply_tokens.h"

namespace servelab {

void ReplyTokens::on_reject(const Request& req, TimeNs now) {
  ForwardingObserver::on_reject(req, now);
  // Nothing sampled: a turn quoting it keeps token_value() (nothing of it is cached either).
}

void ReplyTokens::on_finish(const Request& req, TimeNs now) {
  ForwardingObserver::on_finish(req, now);
  if (keep_) replies_.keep(req.id(), req.output_tokens);
}

}  // namespace servelab
