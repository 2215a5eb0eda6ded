#include "sim/huber_nnls.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace servelab {

HuberNnlsResult huber_nnls(const Eigen::MatrixXd& A, const Eigen::VectorXd& b, double& huber_c,
                           double min_scale) {
  const Eigen::Index n = A.rows();
  Eigen::VectorXd sqrt_w = Eigen::VectorXd::Ones(n);
  HuberNnlsResult r;
  for (int it = 0; it < 10; ++it) {
    r.fit = nnls(sqrt_w.asDiagonal() * A, sqrt_w.cwiseProduct(b));
    r.resid = A * r.fit.x - b;
    if (huber_c <= 0) {
      std::vector<double> a(r.resid.data(), r.resid.data() + n);
      for (double& v : a) v = std::abs(v);
      std::nth_element(a.begin(), a.begin() + n / 2, a.end());
      huber_c = 1.345 * std::max(min_scale, 1.4826 * a[static_cast<std::size_t>(n / 2)]);
    }
    for (Eigen::Index i = 0; i < n; ++i) {
      const double e = std::abs(r.resid(i));
      sqrt_w(i) = e <= huber_c ? 1.0 : std::sqrt(huber_c / e);
    }
  }
  r.objective = 0;
  for (Eigen::Index i = 0; i < n; ++i) {
    const double e = std::abs(r.resid(i));
    r.objective += e <= huber_c ? 0.5 * e * e : huber_c * (e - 0.5 * huber_c);
  }
  return r;
}

}  // namespace servelab
