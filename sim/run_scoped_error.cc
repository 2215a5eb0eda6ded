#include "sim/run_scoped_error.h"

#include <exception>

#include "core/config_error.h"

namespace servelab {

void rethrow_with_prefix(const std::exception_ptr& error, const std::string& prefix) {
  try {
    std::rethrow_exception(error);
  } catch (const ConfigError& e) {
    throw ConfigError(prefix + e.what());
  } catch (const RunScopedError& e) {
    e.rethrow_with_prefix(prefix);
  }
  // Any other type left the try block as it came: not reached.
  std::terminate();
}

}  // namespace servelab
