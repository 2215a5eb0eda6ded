#include "sim/variant_loader.h"

#include <algorithm>

#include "traces/csv_reader.h"
#include "traces/workload.h"

namespace servelab {

ConfigNode ExperimentSource::document() const {
  return text ? ConfigNode::load_string(*text, path)
              : ConfigNode::load_file(resolve_experiment_file(path));
}

ExperimentConfig ExperimentSource::load(const std::vector<std::string>& overrides) const {
  if (text) return load_experiment_text(*text, path, base_dir, "experiment", overrides);
  return load_experiment(path, overrides);
}

namespace {

// The message of an error about an override value ("--set KEY..."; config_node.h) with the place
// in the file where that value was written instead.
std::string locate_overrides(std::string message, const std::vector<std::string>& overrides,
                             const std::vector<std::string>& locations) {
  for (std::size_t i = overrides.size(); i-- > 0;) {  // the last override of a key is the one used
    if (i >= locations.size() || locations[i].empty()) continue;
    const std::string needle = "--set " + overrides[i].substr(0, overrides[i].find('='));
    for (auto pos = message.find(needle); pos != std::string::npos;
         pos = message.find(needle, pos + 1)) {
      const std::size_t end = pos + needle.size();
      if (end == message.size() || message[end] == ':' || message[end] == '.' ||
          message[end] == ' ') {
        return message.replace(pos, 6, locations[i] + ": set ");
      }
    }
  }
  return message;
}

// A variant's or sweep point's error that is the command line's own: it begins at one of the
// --set overrides, and the experiment with the command line's overrides alone (no variant) fails
// with the same message. Such an error is reported without the variant's label, which would
// blame the first variant loaded for it. `workload`: the failure came from making the workload.
bool command_lines_own(const ExperimentSource& source,
                       const std::vector<std::string>& base_overrides, const std::string& message,
                       bool workload) {
  const bool at_set = std::any_of(
      base_overrides.begin(), base_overrides.end(),
      [&](const std::string& o) { return message.starts_with("--set " + override_key(o)); });
  if (!at_set) return false;
  try {
    const ExperimentConfig base = source.load(base_overrides);
    if (workload) make_workload(base.workload_section(), base.seed, base.base_dir);
  } catch (const ConfigError& e) {
    return e.what() == message;
  }
  return false;
}

}  // namespace

ExperimentConfig load_variant(const ExperimentSource& source,
                              const std::vector<std::string>& base_overrides,
                              const std::vector<std::string>& overrides, const std::string& label,
                              const std::vector<std::string>& locations) {
  // A key the command line sets (--set, --seed) that the variant or sweep point sets to another
  // value: the later would win without a word, so neither does.
  const auto value_of = [](const std::string& o) {
    const std::size_t eq = o.find('=');
    return eq == std::string::npos ? std::string() : std::string(trim(o.substr(eq + 1)));
  };
  for (std::size_t i = 0; i < overrides.size(); ++i) {
    for (const std::string& b : base_overrides) {
      const std::string where =
          i < locations.size() && !locations[i].empty() ? locations[i] + ": " : "";
      if (override_replaces(b, overrides[i])) {
        throw ConfigError(label + ": " + where + "sets " + override_key(overrides[i]) +
                          ", which holds the command line's --set " + override_key(b) +
                          " and would silently replace it");
      }
      if (override_key(b) != override_key(overrides[i]) || value_of(b) == value_of(overrides[i]))
        continue;
      throw ConfigError(label + ": " + where + "sets " + override_key(b) + " to " +
                        value_of(overrides[i]) + ", but the command line gives " + value_of(b) +
                        " (--set " + override_key(b) +
                        (override_key(b) == "seed" ? " or --seed" : "") +
                        "); one would silently win: drop one of them");
    }
  }
  std::vector<std::string> all = base_overrides;
  all.insert(all.end(), overrides.begin(), overrides.end());
  try {
    return source.load(all);
  } catch (const ConfigError& e) {
    if (command_lines_own(source, base_overrides, e.what(), false)) throw ConfigError(e.what());
    throw ConfigError(label + ": " + locate_overrides(e.what(), overrides, locations));
  }
}

ExperimentConfig load_checked_variant(const ExperimentSource& source,
                                      const std::vector<std::string>& base_overrides,
                                      const std::vector<std::string>& overrides,
                                      const std::string& label,
                                      const std::vector<std::string>& locations) {
  ExperimentConfig config = load_variant(source, base_overrides, overrides, label, locations);
  try {
    make_workload(config.workload_section(), config.seed, config.base_dir);
  } catch (const ConfigError& e) {
    if (command_lines_own(source, base_overrides, e.what(), true)) throw ConfigError(e.what());
    throw ConfigError(label + ": " + locate_overrides(e.what(), overrides, locations));
  }
  return config;
}

}  // namespace servelab
