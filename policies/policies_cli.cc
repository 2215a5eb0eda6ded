// `sim policies`: prints the plugin catalogue (policies/registry.h).
#include "policies/policies_cli.h"

#include <cstdio>
#include <string>
#include <vector>

#include "policies/registry.h"

namespace servelab {

int policies_command(const std::vector<std::string>& args) {
  if (!args.empty()) {
    std::fprintf(stderr, "sim policies: takes no arguments (got '%s')\n", args[0].c_str());
    return 2;
  }
  std::fputs(format_catalogue().c_str(), stdout);
  return 0;
}

}  // namespace servelab
