// Run folders between C++ and Python. A run from Python is written by the very code `sim run`
// uses into a private temporary folder, read back into memory (files in the order the run lists
// them) and the folder removed; Result.save(dir) writes those bytes to a folder with the same
// rules as the commands (serving/run_folder.h: check_out_dir, a staged folder that replaces an
// old run only when complete). So a saved run is byte-identical to `sim run`'s.
#pragma once

#include <pybind11/pybind11.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace servelab::python {

// A private temporary folder (mkdtemp under the system's temporary folder), removed with
// everything in it when destroyed. Throws ConfigError when it cannot be created.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// (relative path, contents) of the files of a run or of a folder of runs.
using Files = std::vector<std::pair<std::string, std::string>>;

// The named files of `dir`, in the given order. Throws ConfigError when one cannot be read.
Files read_files(const std::filesystem::path& dir, const std::vector<std::string>& names);
// Every regular file under `dir` (relative paths, sorted).
Files read_tree(const std::filesystem::path& dir);
// Writes `files` under `dir` (creating sub-folders). Throws ConfigError on I/O failure.
void write_files(const std::filesystem::path& dir, const Files& files);

// Files as a Python list of (str, bytes). REQUIRES: the GIL.
pybind11::list to_python(const Files& files);
// The reverse (TypeError for anything else).
Files from_python(const pybind11::list& files);

}  // namespace servelab::python
