#include "sim/nelder_mead.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace servelab {

NelderMeadResult nelder_mead(const std::function<double(const std::vector<double>&)>& f,
                             std::vector<double> x0, double step, int max_evaluations,
                             double tolerance) {
  if (x0.empty()) throw std::invalid_argument("nelder_mead: no parameters");
  const std::size_t n = x0.size();
  std::vector<std::vector<double>> pts(n + 1, x0);
  for (std::size_t i = 0; i < n; ++i) pts[i + 1][i] += step;
  std::vector<double> vals(n + 1);
  int evals = 0;
  auto eval = [&](const std::vector<double>& p) {
    ++evals;
    return f(p);
  };
  for (std::size_t i = 0; i <= n; ++i) vals[i] = eval(pts[i]);
  std::vector<std::size_t> order(n + 1);
  std::vector<double> centroid(n), trial(n), trial2(n);
  auto along = [&](double t, std::vector<double>& out) {  // centroid + t (centroid - worst)
    for (std::size_t j = 0; j < n; ++j) out[j] = centroid[j] + t * (centroid[j] - pts[n][j]);
  };
  while (evals < max_evaluations) {
    std::iota(order.begin(), order.end(), std::size_t{0});
    // Ties by index: deterministic.
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return vals[a] < vals[b]; });
    std::vector<std::vector<double>> sp(n + 1);
    std::vector<double> sv(n + 1);
    for (std::size_t i = 0; i <= n; ++i) {
      sp[i] = std::move(pts[order[i]]);
      sv[i] = vals[order[i]];
    }
    pts = std::move(sp);
    vals = std::move(sv);
    if (vals[n] - vals[0] < tolerance) break;
    std::fill(centroid.begin(), centroid.end(), 0.0);
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = 0; j < n; ++j) centroid[j] += pts[i][j] / static_cast<double>(n);
    }
    along(1.0, trial);
    const double fr = eval(trial);
    if (fr < vals[0]) {
      along(2.0, trial2);
      const double fe = eval(trial2);
      if (fe < fr) {
        pts[n] = trial2;
        vals[n] = fe;
      } else {
        pts[n] = trial;
        vals[n] = fr;
      }
    } else if (fr < vals[n - 1]) {
      pts[n] = trial;
      vals[n] = fr;
    } else {
      along(-0.5, trial2);
      const double fc = eval(trial2);
      if (fc < vals[n]) {
        pts[n] = trial2;
        vals[n] = fc;
      } else {
        for (std::size_t i = 1; i <= n; ++i) {
          for (std::size_t j = 0; j < n; ++j) pts[i][j] = pts[0][j] + 0.5 * (pts[i][j] - pts[0][j]);
          vals[i] = eval(pts[i]);
        }
      }
    }
  }
  const auto best =
      static_cast<std::size_t>(std::min_element(vals.begin(), vals.end()) - vals.begin());
  return {pts[best], vals[best], evals};
}

}  // namespace servelab
