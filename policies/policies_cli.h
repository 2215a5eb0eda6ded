// `sim policies`: prints the catalogue of policy plugins (name, description, origin,
// parameters with defaults). Returns the exit code: 0, or 2 when given arguments.
#pragma once

#include <string>
#include <vector>

namespace servelab {

int policies_command(const std::vector<std::string>& args);

}  // namespace servelab
