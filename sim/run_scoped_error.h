// Naming the run an error happened in. A group of runs (sim compare, sim sweep and their Python
// forms) reports a run's error with the run's name in front ("variant 'b': ...", "sweep point
// p3: ..."), keeping the error's type: a ConfigError stays a ConfigError (exit code 2), and an
// error type derived from RunScopedError (a Python policy's servelab.PolicyError) rethrows a
// copy of itself with the prefix. Every other exception passes unchanged.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace servelab {

class RunScopedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  // Throws a copy of this error, of its own dynamic type, whose message is prefix + what().
  [[noreturn]] virtual void rethrow_with_prefix(const std::string& prefix) const = 0;
};

// Rethrows `error` (REQUIRES: not null) with `prefix` in front as above.
[[noreturn]] void rethrow_with_prefix(const std::exception_ptr& error, const std::string& prefix);

}  // namespace servelab
