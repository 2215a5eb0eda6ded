#include "sim/class_table.h"

#include <cinttypes>

#include "core/strings.h"
#include "serving/run_folder.h"

namespace servelab {

std::string classes_csv_header(const std::string& lead) {
  return lead + kGroupClassesColumns + "\n";
}

std::string classes_csv_rows(const std::string& lead_values, const RunSummary& s) {
  std::string rows;
  for (const ClassSummary& c : s.classes) {
    rows += lead_values + "," + c.name +
            format_text(",%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64
                        ",%.6f,%.3f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%" PRId64
                        ",%" PRId64 "\n",
                        c.completed, c.rejected, c.aborted, c.shed, c.requests_per_s,
                        c.output_tokens_per_s, c.ttft_ms.p50, c.ttft_ms.p99, c.tpot_ms.p50,
                        c.tpot_ms.p99, c.itl_ms.p50, c.itl_ms.p99, c.e2e_ms.p50, c.e2e_ms.p99,
                        c.queueing_ms.p50, c.goodput_requests_per_s, c.slo_attainment,
                        c.preemptions, c.recomputed_tokens);
  }
  return rows;
}

}  // namespace servelab
