// LengthCap: a brownout lever that lowers a request's max_output_tokens when it arrives while the
// server is overloaded ("apply length caps under overload"; the `policies.length_cap` plugins,
// registered as PolicyKind::kLengthCap). The request is admitted as usual but generates at most
// the capped number of tokens; it finishes with finish_reason "length (capped from N)" and counts
// as capped in the summary.
//
// The scheduler asks cap() in add_request() after the admission policy admitted the request
// (a shed request is not capped), with the same AdmissionLoad. Requests handed over by another
// replica are not capped.
//
// Contract: deterministic, immutable after construction. A null cap in SchedulerConfig never
// lowers anything (the default).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/admission_policy.h"
#include "core/request.h"

namespace servelab {

class LengthCap {
 public:
  virtual ~LengthCap() = default;
  // The registry name, for messages.
  virtual std::string_view name() const = 0;
  // The max_output_tokens `spec` may generate under `load`: spec.max_output_tokens to leave it
  // alone, or a smaller value >= 1 to cap it.
  virtual std::int32_t cap(const RequestSpec& spec, const AdmissionLoad& load) const = 0;
};

}  // namespace servelab
