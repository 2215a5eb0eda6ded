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
  return out;
}

}  // namespace

void OptionalColumns::add(const RunSummary& s) {
  gpus = gpus || s.gpus > 1;
  overload = overload || s.report_overload;
}

std::string OptionalColumns::csv_header() const {
  return std::string(gpus ? ",gpus,goodput_per_gpu" : "") + (overload ? ",shed,capped" : "");
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
  return h;
}

std::string OptionalColumns::table_row(const RunSummary& s) const {
  return values(*this, s, /*table=*/true);
}

}  // namespace servelab
