// classes.csv, the per-class table of a folder of runs (`sim compare`, `sim sweep`), written
// beside compare.csv / sweep.csv when some run has request classes (a `type: mix` workload):
// one row per run and class, in the runs' order and each run's class order, with the class's
// metrics of summary.json `classes` (docs/metrics.md "Request classes"). The first columns
// name the run: `variant` for a comparison, `point` and one column per sweep key for a sweep.
#pragma once

#include <string>

#include "serving/recorder.h"

namespace servelab {

// The header line: `lead` ("variant", or "point,KEY,...") then `class` and the metrics; ends
// with a newline.
std::string classes_csv_header(const std::string& lead);
// One line per class of `s` (none when it has no classes), each starting with `lead_values`
// (the run's first columns, already CSV fields) and ending with a newline.
std::string classes_csv_rows(const std::string& lead_values, const RunSummary& s);

}  // namespace servelab
