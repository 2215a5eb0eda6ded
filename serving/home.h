// The ServeLab home: the folder that holds the files programs read at run time (the model and
// hardware catalogues in experiments/catalog, experiment files, the shipped traces, the plot
// script). Programs never carry a build machine's absolute path: the same binary finds its files
// in the source tree it was built from, in a build folder outside that tree, or in a GPU bundle
// copied to another machine, from any working directory.
//
// servelab_home() looks, in order:
//   1. $SERVELAB_HOME when set and non-empty; it must hold experiments/catalog (otherwise a
//      HomeError says so: a wrong setting is never silently replaced by a guess);
//   2. from the running executable's folder (/proc/self/exe, links resolved) upwards, the first
//      folder D that holds D/experiments/catalog, or a marker file D/.servelab-home whose one
//      line names such a folder (CMake writes one at the top of every build folder, so a build
//      outside the source tree finds its sources; a copied binary no longer sees it).
// Throws HomeError naming what it tried when neither finds one. The result is computed once per
// process (thread-safe) and is absolute.
//
// servelab_program(name) finds a sibling ServeLab program for tests and tools: the first of
// <exe dir>/<name> (a bundle's bin/ folder) and <exe dir>/../<name>/<name> (a build folder, where
// each program sits in the folder of its source directory) that is an executable file. Throws
// HomeError when neither is.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

namespace servelab {

class HomeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The folder the running executable lives in (links resolved).
std::filesystem::path executable_dir();

// Resolves the home as described above from explicit inputs (tested without touching the
// process's environment): `env_home` is $SERVELAB_HOME ("" when unset), `exe_dir` the
// executable's folder.
std::filesystem::path find_servelab_home(std::string_view env_home,
                                         const std::filesystem::path& exe_dir);

// The process's home (cached after the first call).
const std::filesystem::path& servelab_home();

// servelab_home() / relative, as a string.
std::string home_path(std::string_view relative);

// A sibling ServeLab program, as described above.
std::string servelab_program(std::string_view name);

}  // namespace servelab
