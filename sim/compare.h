// `sim compare`: the same workload and seed under several variants of one experiment.
//
// Variants come from the experiment's `compare:` section,
//   compare:
//     - name: fcfs                       # names a run folder: letters, digits, '-', '_', '.'
//       set: {policies.queue: fcfs}      # overrides, as with --set (keys are dotted paths)
//     - name: no-cache
//       set: {policies.prefix_cache: none}
// or from the command line (`--variant name:key=value,key=value`), which replaces the section.
// Every variant is validated before any runs, so a typo in the last one costs nothing. Each
// variant's run folder is OUT/<variant>/; OUT/compare.csv has one row per variant.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "sim/run.h"
#include "sim/variant_loader.h"

namespace servelab {

struct Variant {
  std::string name;
  std::vector<std::string> overrides;  // "key.path=value"
  // FILE:LINE:COL of each override's value in the `compare:` section (messages about a bad value
  // name it); empty for variants from the command line or Python.
  std::vector<std::string> locations;
};

struct VariantResult {
  Variant variant;
  RunOutput run;
};

// The variants of the experiment's `compare:` section. Throws ConfigError (file, line, key) for
// a malformed section; an experiment without one has no variants.
std::vector<Variant> variants_from_experiment(const ExperimentSource& source);

// Parses "name:key=value,key=value". Throws ConfigError naming the argument.
Variant parse_variant(const std::string& text);

// Runs every variant of `source` (with `base_overrides` applied first, then the variant's) and
// writes OUT/<variant>/ and OUT/compare.csv (OUT defaults to out/<name>-compare).
// `before_step` is each run's RunOptions::before_step. REQUIRES: !variants.empty(). Throws
// ConfigError for bad input.
std::vector<VariantResult> run_compare(const ExperimentSource& source,
                                       const std::vector<Variant>& variants,
                                       const std::vector<std::string>& base_overrides,
                                       std::string out_dir, bool progress,
                                       const StepHook& before_step = {});

// The comparison table `sim compare` prints.
void print_compare_table(std::FILE* out, const std::vector<VariantResult>& results);

}  // namespace servelab
