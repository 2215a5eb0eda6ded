#include "sim/optional_columns.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "core/strings.h"

namespace servelab {

namespace {

// A run that does not know its GPUs (`sim bench`) counts as one in a column of GPUs.
std::int64_t gpus_of(const RunSummary& s) { return std::max<std::int64_t>(s.gpus, 1); }

}  // namespace

void OptionalColumns::add(const RunSummary& s) {
  gpus = gpus || s.gpus > 1;
  overload = overload || s.report_overload;
}

std::string OptionalColumns::csv_header() const {
  return std::string(gpus ? ",gpus,goodput_per_gpu" : "") + (overload ? ",shed,capped" : "");
}

std::string OptionalColumns::csv_row(const RunSummary& s) const {
  std::string row;
  if (gpus) {
    row += format_text(",%" PRId64 ",%.6f", gpus_of(s),
                       s.goodput_requests_per_s / static_cast<double>(gpus_of(s)));
  }
  if (overload) row += format_text(",%" PRId64 ",%" PRId64, s.shed, s.capped);
  return row;
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
  std::string row;
  if (gpus) {
    row += format_text(" %5" PRId64 " %9.3f", gpus_of(s),
                       s.goodput_requests_per_s / static_cast<double>(gpus_of(s)));
  }
  if (overload) row += format_text(" %7" PRId64 " %7" PRId64, s.shed, s.capped);
  return row;
}

}  // namespace servelab
