#include "sim/optional_columns.h"

#include <cinttypes>
#include <cstdio>

#include "core/strings.h"

namespace servelab {

namespace {

// The chosen columns' values of `s`: as CSV fields, or as the table's right-aligned cells.
std::string values(const OptionalColumns& c, const RunSummary& s, bool table) {
  std::string out;
  const std::int64_t g = s.gpus;
  const double per_gpu = s.goodput_per_gpu();
  if (c.gpus) {
    out += table ? format_text(" %5" PRId64 " %9.3f", g, per_gpu)
                 : format_text(",%" PRId64 ",%.6f", g, per_gpu);
  }
  if (c.overload) {
    out += table ? format_text(" %7" PRId64 " %7" PRId64, s.shed, s.capped)
                 : format_text(",%" PRId64 ",%" PRId64, s.shed, s.capped);
  }
  if (c.energy) {
    out += table ? format_text(" %7.3f %6.2f %6.1f", s.joules_per_output_token(),
                               s.average_power_w() / 1e3, 100.0 * s.mfu())
                 : format_text(",%.3f,%.6f,%.3f,%.6f,%.6f", s.joules(), s.joules_per_output_token(),
                               s.average_power_w(), s.mfu(), s.mbu());
  }
  return out;
}

}  // namespace

void OptionalColumns::add(const RunSummary& s) {
  gpus = gpus || s.gpus > 1;
  overload = overload || s.report_overload;
  energy = energy || s.has_energy();
}

std::string OptionalColumns::csv_header() const {
  return std::string(gpus ? ",gpus,goodput_per_gpu" : "") + (overload ? ",shed,capped" : "") +
         (energy ? ",joules,joules_per_output_token,average_power_w,mfu,mbu" : "");
}

std::string OptionalColumns::csv_row(const RunSummary& s) const {
  return values(*this, s, /*table=*/false);
}

std::string OptionalColumns::table_header(int line) const {
  std::string h;
  if (gpus)
    h += line == 0 ? format_text(" %5s %9s", "GPUs", "goodput")
                   : format_text(" %5s %9s", "", "/GPU");
  if (overload) h += line == 0 ? format_text(" %7s %7s", "shed", "capped") : "";
  if (energy) {
    h += line == 0 ? format_text(" %7s %6s %6s", "J/tok", "kW", "MFU %")
                   : format_text(" %7s %6s %6s", "output", "mean", "busy");
  }
  return h;
}

std::string OptionalColumns::table_row(const RunSummary& s) const {
  return values(*this, s, /*table=*/true);
}

}  // namespace servelab
