// Robust NNLS (sim/huber_nnls.h): outliers pull linearly, so a few stalled steps do not move a
// fit the way they move least squares; the threshold is set once and shared.
#include "sim/huber_nnls.h"

#include <gtest/gtest.h>

#include <cmath>

#include "sim/nnls.h"

namespace servelab {
namespace {

TEST(HuberNnls, AFewOutliersBarelyMoveTheFit) {
  // y = 2 + 0.5 t on 100 points with a small alternating noise, and 3 points stalled by +20
  // (a CUDA-graph capture in an engine step, say).
  const int n = 100;
  Eigen::MatrixXd A(n, 2);
  Eigen::VectorXd b(n);
  for (int i = 0; i < n; ++i) {
    A(i, 0) = 1;
    A(i, 1) = i;
    b(i) = 2 + 0.5 * i + (i % 2 == 0 ? 0.01 : -0.01) + (i % 33 == 5 ? 20.0 : 0.0);
  }
  const NnlsResult ls = nnls(A, b);
  double c = 0;
  const HuberNnlsResult h = huber_nnls(A, b, c);
  EXPECT_GT(c, 0);
  EXPECT_NEAR(h.fit.x(0), 2.0, 0.1);
  EXPECT_NEAR(h.fit.x(1), 0.5, 0.002);
  // Least squares spreads the stalls over every point: several times the Huber fit's error.
  EXPECT_GT(std::abs(ls.x(0) - 2.0), 4 * std::abs(h.fit.x(0) - 2.0));
  // The objective is the Huber loss of the returned residuals, which are A x - b.
  double loss = 0;
  for (int i = 0; i < n; ++i) {
    const double e = std::abs(h.resid(i));
    loss += e <= c ? 0.5 * e * e : c * (e - 0.5 * c);
  }
  EXPECT_NEAR(h.objective, loss, 1e-9);
  EXPECT_NEAR((A * h.fit.x - b - h.resid).norm(), 0, 1e-9);
  // A threshold given is kept (fits that share one stay comparable); the result is >= 0.
  double given = 0.5;
  const HuberNnlsResult g = huber_nnls(A, -b, given);
  EXPECT_EQ(given, 0.5);
  EXPECT_GE(g.fit.x.minCoeff(), 0);
}

}  // namespace
}  // namespace servelab
