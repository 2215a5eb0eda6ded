// Non-negative least squares: minimise ||A x - b||_2 subject to x >= 0 (Lawson & Hanson,
// "Solving Least Squares Problems", 1974, chapter 23), written here for the calibrated cost model.
//
// The active-set method keeps a passive set P of coefficients allowed to be positive (all
// others are held at zero). Each outer iteration moves into P the coefficient whose gradient
// w = A^T (b - A x) is largest; the inner loop solves the unconstrained least squares over P
// (column-pivoting QR, so rank-deficient subsets are fine) and, if that solution makes some
// coefficient of P non-positive, steps back along the segment to the last feasible point and
// drops the coefficients that reached zero. It stops when no coefficient outside P has a
// positive gradient (the KKT conditions), or after max_iterations outer steps.
#pragma once

#include <Eigen/Dense>

namespace servelab {

struct NnlsResult {
  Eigen::VectorXd x;         // the solution, every element >= 0
  double residual_norm = 0;  // ||A x - b||_2
  int iterations = 0;        // outer iterations used
  bool converged = true;     // false: max_iterations was reached (x is feasible, maybe not optimal)
};

// REQUIRES: A.rows() == b.size(). `tolerance` is relative to max |A^T b| (scale-free);
// max_iterations <= 0 means 3 * columns.
NnlsResult nnls(const Eigen::MatrixXd& A, const Eigen::VectorXd& b, double tolerance = 1e-10,
                int max_iterations = 0);

}  // namespace servelab
