// QuotedReplies: the tokens sampled for a multi-turn workload's replies, and the prompts that
// quote them. A session's next turn holds each earlier reply as a segment of that reply's output
// stream (output_content_id(parent), offset, length; traces/session_workload.h). The simulator
// needs only those identities; whoever feeds a model values (the engine, `sim bench` against a
// server) must quote what the model sampled there: token_value() of a reply's identity is other
// tokens, so the next turn would not continue the conversation the server's prefix cache holds
// (its greedy output would change with prefix caching, and a server would miss past the reply).
//
// keep() records a finished request's sampled tokens; quote() gives a prompt that quotes a kept
// reply its values (RequestSpec::prompt_values): the sampled tokens where it quotes a reply,
// token_value() of the identity elsewhere (what prompt_token_value() gave before). Identities,
// and with them block hashes and the schedule, are unchanged; a reply quoted past its end (an
// aborted parent) keeps token_value() there. Not thread-safe.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/request.h"

namespace servelab {

class QuotedReplies {
 public:
  // REQUIRES: vocab_size > 0.
  explicit QuotedReplies(std::int32_t vocab_size) : vocab_size_(vocab_size) {}

  // Request `id`'s reply: the tokens sampled for it, in order (none: nothing is kept).
  void keep(RequestId id, std::vector<std::int32_t> tokens);

  // Sets spec.prompt_values when a segment of its prompt quotes a kept reply (a prompt with
  // literal values already is left alone).
  void quote(RequestSpec& spec) const;

  std::size_t size() const { return replies_.size(); }

 private:
  std::int32_t vocab_size_;
  std::unordered_map<std::uint64_t, std::vector<std::int32_t>> replies_;  // by output stream
};

}  // namespace servelab
