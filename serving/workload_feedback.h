// WorkloadFeedback: the observer between a scheduler and the Recorder when the workload depends
// on completions (sessions: a turn is released when the previous one finishes).
#pragma once

#include <span>

#include "core/request.h"
#include "core/scheduler_observer.h"
#include "core/time.h"
#include "traces/workload.h"

namespace servelab {

// Forwards every scheduler event to `downstream` (the Recorder) and tells a dependent workload
// (sessions) when each of its requests finishes, is rejected or aborted, so it can release the
// requests that wait on them. Both references must outlive it.
class WorkloadFeedback : public ForwardingObserver {
 public:
  WorkloadFeedback(Workload& workload, SchedulerObserver& downstream)
      : ForwardingObserver(downstream), workload_(workload), notify_(workload.dependent()) {}
  void on_reject(const Request& req, TimeNs now) override;
  void on_finish(const Request& req, TimeNs now) override;

 private:
  Workload& workload_;
  bool notify_;
};

}  // namespace servelab
