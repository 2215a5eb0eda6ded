#include "serving/workload_feedback.h"

namespace servelab {

void WorkloadFeedback::on_reject(const Request& req, TimeNs now) {
  ForwardingObserver::on_reject(req, now);
  if (notify_) workload_.on_finish(req.id(), now);
}

void WorkloadFeedback::on_finish(const Request& req, TimeNs now) {
  ForwardingObserver::on_finish(req, now);
  if (notify_) workload_.on_finish(req.id(), now);
}

}  // namespace servelab
