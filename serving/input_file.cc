#include "serving/input_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>

#include "core/config_error.h"

namespace servelab {

std::string read_input_file(const std::filesystem::path& path, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw ConfigError(path.string() + ": is a directory, expected " + what);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ConfigError(path.string() + ": cannot open the file (" + std::strerror(errno) + ")");
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError(path.string() + ": reading failed");
  return text.str();
}

}  // namespace servelab
