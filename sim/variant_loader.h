// Loading one experiment under several sets of overrides: what `sim compare` (variants) and
// `sim sweep` (sweep points) share.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "serving/config_node.h"
#include "serving/experiment.h"

namespace servelab {

// Where an experiment comes from: a YAML file (the commands), or YAML text standing for one (the
// Python module's dicts), named `path` in messages, whose relative data paths resolve against
// `base_dir` and which is called "experiment" when it has no `name:`.
struct ExperimentSource {
  ExperimentSource(std::string file) : path(std::move(file)) {}  // NOLINT: a file is a source
  ExperimentSource(const char* file) : path(file) {}             // NOLINT
  ExperimentSource(std::string name, std::string yaml_text, std::string text_base_dir)
      : path(std::move(name)), text(std::move(yaml_text)), base_dir(std::move(text_base_dir)) {}

  std::string path;
  std::optional<std::string> text;
  std::string base_dir;

  // The document as written (before overrides). Throws ConfigError.
  ConfigNode document() const;
  // The validated experiment with `overrides` ("key.path=value") applied. Throws ConfigError.
  ExperimentConfig load(const std::vector<std::string>& overrides) const;
};

// Loads `source` with `base_overrides` applied first, then `overrides` (both "key.path=value", as
// with --set). A ConfigError is thrown again as "<label>: <message>", so the user learns which
// variant or sweep point is wrong. `locations`, when given, holds where in the experiment file
// each of `overrides` was written (FILE:LINE:COL, or "" where unknown); the message then names
// that place instead of "--set KEY".
ExperimentConfig load_variant(const ExperimentSource& source,
                              const std::vector<std::string>& base_overrides,
                              const std::vector<std::string>& overrides, const std::string& label,
                              const std::vector<std::string>& locations = {});

// load_variant, and the workload made once to check it (traces read, distributions validated:
// what the experiment loader leaves to the run), so that a bad value fails before anything runs.
ExperimentConfig load_checked_variant(const ExperimentSource& source,
                                      const std::vector<std::string>& base_overrides,
                                      const std::vector<std::string>& overrides,
                                      const std::string& label,
                                      const std::vector<std::string>& locations = {});

}  // namespace servelab
