// `sim policies`: prints the plugin catalogue (policies/registry.h).
#include "policies/policies_cli.h"

#include <cstdio>
#include <string>
#include <vector>

#include "policies/registry.h"
#include "serving/cli.h"

namespace servelab {

int policies_command(const std::vector<std::string>& args) {
  const auto app = cli::command(
      "sim policies",
      "List the policy plugins, their origins and parameters (docs/policies.md). Takes no "
      "arguments.");
  cli::parse(*app, args);
  std::fputs(format_catalogue().c_str(), stdout);
  return 0;
}

}  // namespace servelab
