// Fuzz target: experiment YAML text -> validated ExperimentConfig -> workload.
//
// The input is an experiment file. It goes through load_experiment() (YAML parsing, every
// section's validation), make_workload() and the first kMaxRequests requests of its stream, then
// resolved_config_yaml() (the config.yaml a run writes): the path `sim run` takes, in its order,
// without the model catalogue and the simulation. ConfigError is the expected outcome for a
// bad file (exit code 2 in `sim`); anything else escaping (another exception, a sanitizer report,
// a timeout, unbounded memory) is a finding.
#include <cstddef>
#include <cstdint>

#include "serving/config_node.h"
#include "serving/experiment.h"
#include "tests/fuzz/fuzz_input_file.h"
#include "traces/workload.h"

namespace {

// Enough requests to reach every generator's and reader's per-request code; few enough that a
// valid million-request workload stays fast.
constexpr int kMaxRequests = 64;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static servelab::fuzz::FuzzInputFile file("experiment.yaml");
  const std::string& path = file.write(data, size);
  try {
    const servelab::ExperimentConfig config = servelab::load_experiment(path, {});
    std::unique_ptr<servelab::Workload> w =
        servelab::make_workload(config.workload_section(), config.seed, config.base_dir);
    (void)w->describe();
    for (int i = 0; i < kMaxRequests; ++i) {
      if (!w->next()) break;
    }
    (void)servelab::resolved_config_yaml(config, {{"workload", w->describe()}});
  } catch (const servelab::ConfigError&) {
    // An invalid experiment, reported the way `sim` reports it: expected.
  }
  return 0;
}
