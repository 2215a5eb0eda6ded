// The ServeLab home of a Python process (serving/home.h): the interpreter is not a ServeLab
// program, so the home is searched from the package's folder instead of the executable's (the
// build folder's .servelab-home marker, or the one `cmake --install` writes into the installed
// package), and published as $SERVELAB_HOME before anything reads it. An explicit
// $SERVELAB_HOME is kept (and checked, as the commands check it).
#include <pybind11/pybind11.h>

#include <cstdlib>
#include <string>

#include "python/bindings.h"
#include "serving/home.h"

namespace py = pybind11;

namespace servelab::python {

void bind_home(py::module_& m) {
  m.def(
      "locate_home",
      [](const std::string& package_dir) {
        const char* env = std::getenv("SERVELAB_HOME");
        const std::string env_home = env != nullptr ? env : "";
        const std::string home = find_servelab_home(env_home, package_dir).string();
        if (env_home.empty()) setenv("SERVELAB_HOME", home.c_str(), 1);
        return servelab_home().string();
      },
      py::arg("package_dir"),
      "Finds the ServeLab home from the package folder (unless $SERVELAB_HOME is set), sets "
      "$SERVELAB_HOME and returns it; raises ConfigError when none is found.");
}

}  // namespace servelab::python
