// ConfigError: the one exception type for bad user input (a malformed experiment, trace,
// checkpoint or flag, an output that may not be written). Its message names the file, line or
// key and what was expected; the commands print it and exit with code 2. Every other exception
// reaching a command's top level is an internal error (exit code 1).
#pragma once

#include <stdexcept>

namespace servelab {

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace servelab
