// Output files and folders that never lose data: checks before writing (an existing output is
// replaced only with --force, an output is never one of the inputs, a symlink is never followed)
// and atomic replacement (write a temporary sibling, rename it into place on success only).
//
// Errors about the user's files or their environment (an existing output, a symlink, EACCES,
// ENOSPC, a read-only file system) are ConfigErrors naming the path, so the commands exit with
// code 2 and a message instead of "internal error".
#pragma once

#include <string>
#include <vector>

#include "serving/config_node.h"

namespace servelab {

// Throws ConfigError "PATH: WHAT failed (strerror(err))" with a hint for EACCES/ENOSPC.
[[noreturn]] void throw_io_error(const std::string& path, const std::string& what, int err);

// Checks that `out` may be written as a single output file: ConfigError when it is a symlink
// (never followed, never replaced), the same file as one of `inputs` (std::filesystem::equivalent,
// always refused) or an existing file directly in an input that is a folder (or in the folder of
// an input `*.index.json`: a sharded checkpoint's shards), a directory, a block device or a socket,
// or when it is an existing regular file and `force` is false ("pass --force to replace it"). A
// character device or a FIFO
// (/dev/null, a named pipe) is accepted without --force: AtomicFile writes it in place. A path
// that does not exist yet needs an existing folder (checked before the work, not at the write),
// and "-" is refused (no output file is standard output).
void check_output_file(const std::string& out, const std::vector<std::string>& inputs, bool force);

// A file written to a temporary sibling of `path` (".NAME.tmp-PID" in the same folder, so the
// rename stays on one file system) and renamed onto `path` by commit(); destroying an uncommitted
// AtomicFile removes the temporary, so a failed or interrupted write leaves `path` as it was.
// When `path` is a character device or a FIFO, temp_path() is `path` itself and commit() renames
// nothing (a rename would put a regular file in the device's place).
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::string& path() const { return path_; }
  // Where to write until commit().
  const std::string& temp_path() const { return temp_; }
  // Renames the temporary onto path(). Throws ConfigError when the rename fails.
  void commit();

 private:
  std::string path_, temp_;
  bool committed_ = false;
  bool in_place_ = false;
};

// Writes `text` to `path` atomically (AtomicFile). Throws ConfigError on I/O failure.
void write_file_atomically(const std::string& path, const std::string& text);

// A folder built under a temporary sibling (".NAME.tmp-PID" next to `dir`) and moved into place
// by commit(), which replaces an existing `dir` only then: a reader sees either the previous
// folder or the complete new one. Destroying an uncommitted StagedDir removes the temporary.
// The caller checks beforehand that an existing `dir` may be replaced.
class StagedDir {
 public:
  // Creates the parent folders and the temporary folder. Throws ConfigError when `dir` or the
  // temporary is a symlink or cannot be created. final_path() is `dir` without "." and ".." steps
  // or a trailing '/' ("run/." is "run"; "." is the absolute path of the current folder).
  explicit StagedDir(const std::string& dir);
  ~StagedDir();
  StagedDir(const StagedDir&) = delete;
  StagedDir& operator=(const StagedDir&) = delete;

  const std::string& final_path() const { return dir_; }
  const std::string& temp_path() const { return temp_; }
  // Replaces `dir` by the temporary folder (the old one, if any, is removed afterwards).
  void commit();
  // Moves each entry of the temporary folder into `dir` (created if absent), replacing an entry
  // of the same name, and removes the temporary: for a folder of runs (compare, sweep) whose
  // other entries are kept.
  void commit_entries();

 private:
  std::string dir_, temp_;
  bool committed_ = false;
};

// Whether `path` is `dir` or lies inside it, both resolved (symlinks followed, "." and ".."
// removed, a trailing '/' ignored); neither needs to exist.
bool path_within(const std::string& path, const std::string& dir);

// Throws ConfigError when `path` is a symlink ("refusing to follow a symlink").
void refuse_symlink(const std::string& path);

}  // namespace servelab
