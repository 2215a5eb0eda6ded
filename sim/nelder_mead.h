// Nelder-Mead: derivative-free minimisation of a smooth function of a few unconstrained
// parameters (the Vidur-profile fit of sim/vidur_fit.h). Deterministic: the same function and
// start give the same result. Standard coefficients (reflection 1, expansion 2, contraction 1/2,
// shrink 1/2); the initial simplex steps `step` along each axis.
#pragma once

#include <functional>
#include <vector>

namespace servelab {

struct NelderMeadResult {
  std::vector<double> x;
  double value = 0;
  int evaluations = 0;
};

// Minimises f from x0; stops after max_evaluations or when the simplex's values differ by less
// than `tolerance` (absolute). REQUIRES: x0 non-empty.
NelderMeadResult nelder_mead(const std::function<double(const std::vector<double>&)>& f,
                             std::vector<double> x0, double step = 0.5, int max_evaluations = 4000,
                             double tolerance = 1e-12);

}  // namespace servelab
