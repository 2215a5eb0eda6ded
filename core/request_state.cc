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
  }
  return "unknown";
}

}  // namespace servelab
