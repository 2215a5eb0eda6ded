#include "serving/home.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <vector>

namespace servelab {
namespace fs = std::filesystem;

namespace {

constexpr const char* kMarker = ".servelab-home";

bool holds_catalog(const fs::path& dir) {
  std::error_code ec;
  return fs::is_directory(dir / "experiments" / "catalog", ec);
}

// The folder named by D/.servelab-home, when that file exists and names a home.
std::optional<fs::path> marker_target(const fs::path& dir) {
  std::error_code ec;
  const fs::path marker = dir / kMarker;
  if (!fs::is_regular_file(marker, ec)) return std::nullopt;
  std::ifstream in(marker);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  if (line.empty() || !holds_catalog(line)) return std::nullopt;
  return fs::path(line);
}

}  // namespace

fs::path executable_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw HomeError("cannot read /proc/self/exe: " + ec.message());
  return exe.parent_path();
}

fs::path find_servelab_home(std::string_view env_home, const fs::path& exe_dir) {
  if (!env_home.empty()) {
    const fs::path home(env_home);
    if (!holds_catalog(home)) {
      throw HomeError("SERVELAB_HOME=" + std::string(env_home) +
                      " has no experiments/catalog folder (expected the ServeLab source tree "
                      "or a GPU bundle)");
    }
    return fs::absolute(home).lexically_normal();
  }
  for (fs::path d = exe_dir; !d.empty(); d = d.parent_path()) {
    if (holds_catalog(d)) return d.lexically_normal();
    if (std::optional<fs::path> t = marker_target(d)) return t->lexically_normal();
    if (d == d.root_path()) break;
  }
  throw HomeError("cannot find the ServeLab home (a folder with experiments/catalog) above " +
                  exe_dir.string() + ": set SERVELAB_HOME to the source tree or bundle");
}

const fs::path& servelab_home() {
  static const fs::path home = [] {
    const char* env = std::getenv("SERVELAB_HOME");
    return find_servelab_home(env ? env : "", executable_dir());
  }();
  return home;
}

std::string home_path(std::string_view relative) {
  return (servelab_home() / fs::path(relative)).string();
}

std::string servelab_program(std::string_view name) {
  const fs::path dir = executable_dir();
  const std::vector<fs::path> candidates = {dir / name, dir.parent_path() / name / name};
  for (const fs::path& p : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0) return p.string();
  }
  throw HomeError("cannot find the program '" + std::string(name) + "' (looked for " +
                  candidates[0].string() + " and " + candidates[1].string() + ")");
}

}  // namespace servelab
