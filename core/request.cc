#include "core/request.h"

#include <cassert>
#include <climits>
#include <string>

#include "core/config_error.h"

namespace servelab {

void canonicalize(RequestSpec& spec) {
  std::vector<PromptSegment> out;
  out.reserve(spec.prompt.size());
  std::int64_t total = 0;
  for (const PromptSegment& s : spec.prompt) {
    if (s.length == 0) continue;
    total += s.length;
    if (!out.empty() && out.back().content_id == s.content_id &&
        out.back().offset + out.back().length == s.offset) {
      out.back().length += s.length;
    } else {
      out.push_back(s);
    }
  }
  if (total > INT32_MAX) {
    throw ConfigError("request " + std::to_string(spec.id) + ": its prompt has " +
                      std::to_string(total) +
                      " tokens, more than a request can hold (2^31 - 1); its workload adds up "
                      "lengths past any model's context (session histories, images)");
  }
  spec.prompt = std::move(out);
  spec.prompt_len = static_cast<std::int32_t>(total);
}

RequestSpec make_request(RequestId id, TimeNs arrival_ns, std::vector<PromptSegment> segments,
                         std::int32_t max_output_tokens) {
  RequestSpec spec;
  spec.id = id;
  spec.arrival_ns = arrival_ns;
  spec.prompt = std::move(segments);
  spec.max_output_tokens = max_output_tokens;
  canonicalize(spec);
  return spec;
}

RequestSpec make_literal_request(RequestId id, TimeNs arrival_ns, std::vector<std::int32_t> tokens,
                                 std::int32_t max_output_tokens) {
  std::vector<PromptSegment> segments;
  segments.reserve(tokens.size());
  for (const std::int32_t t : tokens) segments.push_back({literal_token_stream(t), 0, 1});
  RequestSpec spec = make_request(id, arrival_ns, std::move(segments), max_output_tokens);
  spec.prompt_values = std::make_shared<const std::vector<std::int32_t>>(std::move(tokens));
  spec.outputs_by_value = true;
  return spec;
}

TokenId token_identity(const RequestSpec& spec, std::int32_t pos) {
  assert(pos >= 0);
  if (pos >= spec.prompt_len) {
    return {output_content_id(spec.id), static_cast<std::uint32_t>(pos - spec.prompt_len)};
  }
  std::int32_t start = 0;
  for (const PromptSegment& s : spec.prompt) {
    if (pos < start + static_cast<std::int32_t>(s.length)) {
      return {s.content_id, s.offset + static_cast<std::uint32_t>(pos - start)};
    }
    start += static_cast<std::int32_t>(s.length);
  }
  return {0, 0};  // unreachable for a canonical spec
}

}  // namespace servelab
