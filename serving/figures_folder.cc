#include "serving/figures_folder.h"

#include <filesystem>
#include <fstream>
#include <set>

#include "serving/config_node.h"
#include "serving/output_file.h"

namespace servelab {

namespace fs = std::filesystem;

std::vector<std::string> figures_manifest(const std::string& dir) {
  std::vector<std::string> names;
  std::ifstream in(fs::path(dir) / kFiguresManifest, std::ios::binary);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) names.push_back(line);
  }
  return names;
}

void check_figures_dir(const std::string& dir, const std::string& refusal) {
  refuse_symlink(dir);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(dir, ec))) return;
  if (!fs::is_directory(fs::symlink_status(dir, ec))) {
    throw ConfigError(dir + ": is a file, not a folder of figures; " + refusal);
  }
  const std::vector<std::string> listed = figures_manifest(dir);
  const std::set<std::string> ours(listed.begin(), listed.end());
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == kFiguresManifest && entry.is_regular_file() && !entry.is_symlink()) continue;
    if (entry.is_symlink() || !entry.is_regular_file() || !ours.count(name)) {
      throw ConfigError(dir + ": holds '" + name + "', which `sim plot` did not write; " + refusal);
    }
  }
  if (ec) throw_io_error(dir, "listing", ec.value());
}

void write_figures_manifest(const std::string& stage_dir, const std::string& dir,
                            const std::vector<std::string>& written) {
  std::set<std::string> names(written.begin(), written.end());
  std::error_code ec;
  for (const std::string& name : figures_manifest(dir)) {
    if (fs::is_regular_file(fs::symlink_status(fs::path(dir) / name, ec))) names.insert(name);
  }
  std::string text;
  for (const std::string& name : names) text += name + "\n";
  write_file_atomically((fs::path(stage_dir) / kFiguresManifest).string(), text);
}

}  // namespace servelab
