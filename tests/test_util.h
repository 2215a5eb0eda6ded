// Helpers shared by the end-to-end tests: scratch folders, whole-file I/O, CSV rows by column
// name, and running the real `sim` command (found by servelab_program) to check output and exit
// codes.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "serving/home.h"

namespace servelab::test_util {

namespace fs = std::filesystem;

// The scratch folders this test program made, removed when it exits normally (after its last
// test), so that a run of the suite leaves nothing under the temp dir: two suites a CI run once
// left ~2 GB there. SERVELAB_KEEP_TEST_DIRS=1 keeps them, to look at after a failure.
class ScratchFolders {
 public:
  void add(const fs::path& p) {
    for (const fs::path& q : paths_) {
      if (q == p) return;
    }
    paths_.push_back(p);
  }
  ~ScratchFolders() {
    const char* keep = std::getenv("SERVELAB_KEEP_TEST_DIRS");
    if (keep != nullptr && std::string(keep) != "" && std::string(keep) != "0") return;
    std::error_code ec;  // a folder already gone is fine
    for (const fs::path& p : paths_) fs::remove_all(p, ec);
  }

 private:
  std::vector<fs::path> paths_;
};

inline ScratchFolders& scratch_folders() {
  static ScratchFolders folders;
  return folders;
}

// The scratch folder of `name` under the system temp dir, unique to this process.
inline fs::path scratch_path(const std::string& name) {
  return fs::temp_directory_path() / ("servelab_" + name + "_" + std::to_string(::getpid()));
}

// That folder, created if missing and removed when the program exits; what earlier calls wrote
// into it stays (for helpers that write several files into one folder).
inline fs::path kept_temp_dir(const std::string& name) {
  const fs::path p = scratch_path(name);
  fs::create_directories(p);
  scratch_folders().add(p);
  return p;
}

// That folder fresh and empty, removed when the program exits.
inline fs::path temp_dir(const std::string& name) {
  fs::remove_all(scratch_path(name));
  return kept_temp_dir(name);
}

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

// `text` written to `file` in the fresh scratch folder temp_dir(folder); returns its path.
inline fs::path written_file(const std::string& folder, const std::string& file,
                             const std::string& text) {
  const fs::path p = temp_dir(folder) / file;
  write_file(p, text);
  return p;
}

// Rows of a CSV file with a header line, each as column -> field (no quoting: ServeLab's CSVs
// never quote).
inline std::vector<std::map<std::string, std::string>> read_csv(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  std::vector<std::string> header;
  std::stringstream hs(line);
  for (std::string f; std::getline(hs, f, ',');) header.push_back(f);
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(in, line)) {
    std::map<std::string, std::string> row;
    std::stringstream ls(line);
    for (std::size_t i = 0; i < header.size(); ++i) {
      std::string f;
      if (!std::getline(ls, f, ',')) f.clear();
      row[header[i]] = f;
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

struct Cli {
  int code;
  std::string out, err;
};

// Runs `PROGRAM ARGS` (a ServeLab program: sim, engine) with stdout and stderr captured in the
// files `out` and `err`, behind `wrapper` when given (e.g. "timeout -s INT 1 ").
inline Cli run_program(const std::string& program, const std::string& args, const fs::path& out,
                       const fs::path& err, const std::string& wrapper = "") {
  const std::string cmd = wrapper + servelab_program(program) + " " + args + " > " + out.string() +
                          " 2> " + err.string();
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(out), read_file(err)};
}

// Runs `sim ARGS` with stdout and stderr captured in files under `dir`.
inline Cli run_sim(const std::string& args, const fs::path& dir) {
  return run_program("sim", args, dir / "stdout.txt", dir / "stderr.txt");
}

// Runs `engine ARGS` with stdout and stderr captured in files under `dir` (engine_stdout.txt,
// engine_stderr.txt: a test may run sim in the same folder).
inline Cli run_engine_cli(const std::string& args, const fs::path& dir) {
  return run_program("engine", args, dir / "engine_stdout.txt", dir / "engine_stderr.txt");
}

}  // namespace servelab::test_util
