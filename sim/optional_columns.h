// The columns `sim compare` and `sim sweep` add to their CSV files and tables only when one of
// their runs needs them, so that other comparisons' and sweeps' files stay as they were:
//   - GPUs and goodput per GPU, when a run serves on more than one GPU (RunSummary::gpus: a
//     model-parallel replica or a cluster): csv `gpus,goodput_per_gpu`, table `GPUs`, `goodput
//     /GPU`; comparing configurations of different sizes needs the goodput each GPU buys;
//   - overload control's counts, when a run chose an admission or length_cap plugin
//     (RunSummary::report_overload): csv `shed,capped`, table `shed`, `capped`;
//   - energy, when a run knows it (RunSummary::has_energy: its hardware entries have `power:`):
//     csv `joules,joules_per_output_token,average_power_w,mfu,mbu`, table `J/tok`, `kW`, `MFU %`.
// In that order, after the fixed columns. A row of a run that does not need a chosen column
// still fills it (its 1 GPU; 0 shed, 0 capped; 0 joules); a run that does not know its GPUs
// (RunSummary:: gpus 0) shows 0 and 0.
#pragma once

#include <string>

#include "serving/recorder.h"

namespace servelab {

struct OptionalColumns {
  bool gpus = false;
  bool overload = false;
  bool energy = false;

  // Chooses the columns `s` needs (its gpus, report_overload, energy); the others stay as they
  // were.
  void add(const RunSummary& s);
  // ",gpus,goodput_per_gpu,shed,capped,joules,..." as chosen (empty when none), no newline.
  std::string csv_header() const;
  std::string csv_row(const RunSummary& s) const;
  // The table's two header lines' endings (`line` 0 or 1) and a row's, each starting with the
  // space that separates it from the fixed columns, no newline.
  std::string table_header(int line) const;
  std::string table_row(const RunSummary& s) const;
};

}  // namespace servelab
