#pragma once
// The data files a `workload:` section names, found by key: every scalar value of a key `path`
// (a trace's or a sessions file's), `file` or `table` (a length table's), at any depth (a mix
// nests workloads, a session workload its parts). Two users rewrite them: a run's config.yaml
// writes each as the absolute path it was read from (serving/experiment.cc), and `sim validate`
// compares two runs' workloads by file name (sim/validate.cc).

#include <yaml-cpp/yaml.h>

#include <functional>

namespace servelab {

// Calls `visit` once for each data-path value in `workload`, in no promised order. The node it
// is given refers into `workload`'s tree: assigning to it rewrites the value there (yaml-cpp
// nodes share their data; YAML::Clone first to keep the caller's tree). Other keys' values are
// searched recursively; a data-path key's value that is not a scalar is searched as well.
void for_each_data_path(const YAML::Node& workload, const std::function<void(YAML::Node&)>& visit);

}  // namespace servelab
