#include "sim/variant_loader.h"

namespace servelab {

ConfigNode ExperimentSource::document() const {
  return text ? ConfigNode::load_string(*text, path) : ConfigNode::load_file(path);
}

ExperimentConfig ExperimentSource::load(const std::vector<std::string>& overrides) const {
  if (text) return load_experiment_text(*text, path, base_dir, "experiment", overrides);
  return load_experiment(path, overrides);
}

ExperimentConfig load_variant(const ExperimentSource& source,
                              const std::vector<std::string>& base_overrides,
                              const std::vector<std::string>& overrides, const std::string& label) {
  std::vector<std::string> all = base_overrides;
  all.insert(all.end(), overrides.begin(), overrides.end());
  try {
    return source.load(all);
  } catch (const ConfigError& e) {
    throw ConfigError(label + ": " + e.what());
  }
}

}  // namespace servelab
