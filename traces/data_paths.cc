#include "traces/data_paths.h"

#include <string>
#include <vector>

namespace servelab {

void for_each_data_path(const YAML::Node& workload, const std::function<void(YAML::Node&)>& visit) {
  std::vector<YAML::Node> stack{workload};
  while (!stack.empty()) {
    YAML::Node n = stack.back();
    stack.pop_back();
    if (n.IsSequence()) {
      for (YAML::Node item : n) stack.push_back(item);
      continue;
    }
    if (!n.IsMap()) continue;
    for (auto kv : n) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
      if ((key == "path" || key == "file" || key == "table") && kv.second.IsScalar()) {
        visit(kv.second);
      } else {
        stack.push_back(kv.second);
      }
    }
  }
}

}  // namespace servelab
