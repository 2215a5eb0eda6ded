#include "sim/work_summary.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "serving/hardware_config.h"
#include "serving/model_config.h"

namespace servelab {

void fill_work_summary(std::span<const SimBackend* const> backends, double duration_s,
                       RunSummary& summary) {
  RunSummary::Work w;
  w.energy = !backends.empty();
  for (const SimBackend* b : backends) {
    const PowerModel* p = b->power();
    if (p == nullptr) throw std::logic_error("fill_work_summary: a backend has no work model");
    const SimBackend::WorkTotals& t = b->work();
    const double busy_s = ns_to_s(t.busy_ns);
    const auto gpus = static_cast<double>(p->gpus());
    w.gpu_busy_s += gpus * busy_s;
    w.gpu_s += gpus * duration_s;
    w.flops += t.flops;
    w.bytes += t.bytes;
    w.peak_flops_s += p->peak_flops() * busy_s;
    w.peak_bytes += p->peak_bytes_per_s() * busy_s;
    w.energy = w.energy && p->known();
    w.busy_joules += t.joules;
    w.idle_joules += p->idle_watts() * std::max(0.0, duration_s - busy_s);
  }
  if (!w.energy) w.busy_joules = w.idle_joules = 0;
  summary.work = w;
}

bool reports_energy(const ExperimentConfig& config) {
  const std::string catalog = default_catalog_dir();
  if (!config.cluster.set) return load_hardware(config.hardware, catalog).power.known();
  for (const PoolConfig& p : config.cluster.pools) {
    if (!load_hardware(p.hardware, catalog).power.known()) return false;
  }
  return true;
}

}  // namespace servelab
