#include "core/request_state.h"

namespace servelab {

const char* to_string(RequestStatus s) {
  switch (s) {
    case RequestStatus::kWaiting:
      return "waiting";
    case RequestStatus::kRunning:
      return "running";
    case RequestStatus::kPreempted:
      return "preempted";
    case RequestStatus::kSwapped:
      return "swapped";
    case RequestStatus::kFinished:
      return "finished";
    case RequestStatus::kRejected:
      return "rejected";
    case RequestStatus::kAborted:
      return "aborted";
    case RequestStatus::kShed:
      return "shed";
  }
  return "unknown";
}

std::int32_t Request::num_total_output_tokens() const {
  if (group == nullptr) return num_output_tokens();
  std::int32_t total = 0;
  for (const Request* r : group->samples) total += r->num_output_tokens();
  return total;
}

}  // namespace servelab
