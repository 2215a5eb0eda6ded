#include "sim/variant_loader.h"

#include "serving/config_node.h"

namespace servelab {

ExperimentConfig load_variant(const std::string& path,
                              const std::vector<std::string>& base_overrides,
                              const std::vector<std::string>& overrides, const std::string& label) {
  std::vector<std::string> all = base_overrides;
  all.insert(all.end(), overrides.begin(), overrides.end());
  try {
    return load_experiment(path, all);
  } catch (const ConfigError& e) {
    throw ConfigError(label + ": " + e.what());
  }
}

}  // namespace servelab
