#include "sim/class_table.h"

#include <cinttypes>

#include "core/metrics.h"
#include "core/strings.h"
#include "serving/run_folder.h"

namespace servelab {

std::string classes_csv_header(const std::string& lead) {
  return lead + kGroupClassesColumns + "\n";
}

std::string classes_csv_rows(const std::string& lead_values, const RunSummary& s) {
  std::string rows;
  // An empty field for a distribution without values (core/metrics.h stat_text).
  const auto cell = [](const DistributionSummary& d, double v) {
    return "," + stat_text(d, v, "%.6f", "");
  };
  for (const ClassSummary& c : s.classes) {
    rows += lead_values + "," + c.name +
            format_text(",%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 ",%.6f,%.3f", c.completed,
                        c.rejected, c.aborted, c.shed, c.requests_per_s, c.output_tokens_per_s) +
            cell(c.ttft_ms, c.ttft_ms.p50) + cell(c.ttft_ms, c.ttft_ms.p99) +
            cell(c.tpot_ms, c.tpot_ms.p50) + cell(c.tpot_ms, c.tpot_ms.p99) +
            cell(c.itl_ms, c.itl_ms.p50) + cell(c.itl_ms, c.itl_ms.p99) +
            cell(c.e2e_ms, c.e2e_ms.p50) + cell(c.e2e_ms, c.e2e_ms.p99) +
            cell(c.queueing_ms, c.queueing_ms.p50) +
            format_text(",%.6f,%.6f,%" PRId64 ",%" PRId64 "\n", c.goodput_requests_per_s,
                        c.slo_attainment, c.preemptions, c.recomputed_tokens);
  }
  return rows;
}

}  // namespace servelab
