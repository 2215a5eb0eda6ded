// Robust non-negative least squares: minimise sum_i huber_c(|A x - b|_i) subject to x >= 0, by
// iteratively reweighted NNLS (sim/nnls.h): 10 rounds, each weighting row i by 1 where its
// residual is within the threshold c and by sqrt(c / |r_i|) beyond, so a row hit by a hiccup (a
// scheduling stall, a CUDA-graph capture) pulls linearly on the fit, not quadratically. Used by
// `sim calibrate` for the profile fit and for the host overhead of an engine run.
#pragma once

#include <Eigen/Dense>

#include "sim/nnls.h"

namespace servelab {

struct HuberNnlsResult {
  NnlsResult fit;         // the last round's NNLS (its x is the robust solution)
  Eigen::VectorXd resid;  // A x - b at that solution, unweighted
  double objective = 0;   // sum of the Huber losses of resid
};

// `huber_c` > 0 is the threshold to use; <= 0: it is set from the first (unweighted) round as
// 1.345 x the residuals' normalised median absolute value (at least 1.345 x `min_scale`), and
// written back, so that several fits can share one threshold.
// REQUIRES: A.rows() == b.size() >= 1.
HuberNnlsResult huber_nnls(const Eigen::MatrixXd& A, const Eigen::VectorXd& b, double& huber_c,
                           double min_scale = 0.01);

}  // namespace servelab
