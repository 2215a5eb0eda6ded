// Loading one experiment under several sets of overrides: what `sim compare` (variants) and
// `sim sweep` (sweep points) share.
#pragma once

#include <string>
#include <vector>

#include "serving/experiment.h"

namespace servelab {

// Loads `path` with `base_overrides` applied first, then `overrides` (both "key.path=value", as
// with --set). A ConfigError is thrown again as "<label>: <message>", so the user learns which
// variant or sweep point is wrong.
ExperimentConfig load_variant(const std::string& path,
                              const std::vector<std::string>& base_overrides,
                              const std::vector<std::string>& overrides, const std::string& label);

}  // namespace servelab
