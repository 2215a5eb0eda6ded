#include "sim/cost_model.h"

namespace servelab {

CostModel::~CostModel() = default;

TimeNs CostModel::round_time(const StepPlan& plan) const {
  if (plan.num_steps <= 1) return step_time(plan);
  const StepCostBreakdown b = breakdown(plan);
  const double once = b.overhead + b.swap + b.copy;
  const double pass = b.total() - once;
  return seconds_to_ns(static_cast<double>(plan.num_steps) * pass + once);
}

}  // namespace servelab
