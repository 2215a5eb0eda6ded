#include "sim/cost_model.h"

namespace servelab {

CostModel::~CostModel() = default;

}  // namespace servelab
