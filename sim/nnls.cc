#include "sim/nnls.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

namespace servelab {

namespace {

// Least squares over the columns in `passive` (others zero), as a full-length vector.
Eigen::VectorXd solve_passive(const Eigen::MatrixXd& A, const Eigen::VectorXd& b,
                              const std::vector<bool>& passive) {
  const Eigen::Index n = A.cols();
  std::vector<Eigen::Index> cols;
  for (Eigen::Index j = 0; j < n; ++j) {
    if (passive[static_cast<std::size_t>(j)]) cols.push_back(j);
  }
  Eigen::VectorXd z = Eigen::VectorXd::Zero(n);
  if (cols.empty()) return z;
  Eigen::MatrixXd sub(A.rows(), static_cast<Eigen::Index>(cols.size()));
  for (std::size_t k = 0; k < cols.size(); ++k)
    sub.col(static_cast<Eigen::Index>(k)) = A.col(cols[k]);
  const Eigen::VectorXd s = sub.colPivHouseholderQr().solve(b);
  for (std::size_t k = 0; k < cols.size(); ++k) z(cols[k]) = s(static_cast<Eigen::Index>(k));
  return z;
}

}  // namespace

NnlsResult nnls(const Eigen::MatrixXd& A, const Eigen::VectorXd& b, double tolerance,
                int max_iterations) {
  if (A.rows() != b.size()) throw std::invalid_argument("nnls: A.rows() != b.size()");
  const Eigen::Index n = A.cols();
  NnlsResult r;
  r.x = Eigen::VectorXd::Zero(n);
  if (n == 0 || A.rows() == 0) {
    r.residual_norm = b.norm();
    return r;
  }
  if (max_iterations <= 0) max_iterations = static_cast<int>(3 * n);
  const double scale = std::max((A.transpose() * b).cwiseAbs().maxCoeff(), 1e-300);
  const double tol = tolerance * scale;

  std::vector<bool> passive(static_cast<std::size_t>(n), false);
  std::vector<bool> banned(static_cast<std::size_t>(n), false);
  Eigen::VectorXd& x = r.x;
  r.converged = false;
  for (r.iterations = 0; r.iterations < max_iterations; ++r.iterations) {
    const Eigen::VectorXd w = A.transpose() * (b - A * x);
    // The most promising coefficient outside the passive set.
    Eigen::Index best = -1;
    double best_w = tol;
    for (Eigen::Index j = 0; j < n; ++j) {
      if (!passive[static_cast<std::size_t>(j)] && !banned[static_cast<std::size_t>(j)] &&
          w(j) > best_w) {
        best_w = w(j);
        best = j;
      }
    }
    if (best < 0) {
      r.converged = true;
      break;
    }
    passive[static_cast<std::size_t>(best)] = true;
    // Inner loop: keep the passive solution feasible.
    for (Eigen::Index guard = 0; guard <= n; ++guard) {
      const Eigen::VectorXd z = solve_passive(A, b, passive);
      bool feasible = true;
      for (Eigen::Index j = 0; j < n; ++j) {
        if (passive[static_cast<std::size_t>(j)] && z(j) <= 0) feasible = false;
      }
      if (feasible) {
        x = z;
        break;
      }
      // Step from x towards z as far as feasibility allows.
      double alpha = std::numeric_limits<double>::infinity();
      for (Eigen::Index j = 0; j < n; ++j) {
        if (passive[static_cast<std::size_t>(j)] && z(j) <= 0) {
          const double denom = x(j) - z(j);
          if (denom > 0) alpha = std::min(alpha, x(j) / denom);
        }
      }
      if (!std::isfinite(alpha)) alpha = 0;
      x += alpha * (z - x);
      // Coefficients that reached zero (or the one just added, when it cannot enter) leave.
      const double zero = 1e-14 * std::max(1.0, x.cwiseAbs().maxCoeff());
      for (Eigen::Index j = 0; j < n; ++j) {
        if (passive[static_cast<std::size_t>(j)] && x(j) <= zero) {
          passive[static_cast<std::size_t>(j)] = false;
          x(j) = 0;
        }
      }
    }
    // A coefficient that could not enter (numerically dependent on the passive set) is not
    // tried again until the passive set changes otherwise.
    if (!passive[static_cast<std::size_t>(best)]) {
      banned[static_cast<std::size_t>(best)] = true;
    } else {
      std::fill(banned.begin(), banned.end(), false);
    }
  }
  for (Eigen::Index j = 0; j < n; ++j) x(j) = std::max(0.0, x(j));
  r.residual_norm = (A * x - b).norm();
  return r;
}

}  // namespace servelab
