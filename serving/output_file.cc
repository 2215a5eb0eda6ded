#include "serving/output_file.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "core/strings.h"

namespace servelab {

namespace fs = std::filesystem;

namespace {

// `path` without "." and ".." steps or a trailing '/' ("run/." and "run/" are "run"), made
// absolute when it ends in "." or ".." (".", "../..": a folder whose name only the absolute path
// gives).
fs::path normal_path(const std::string& path) {
  const auto trimmed = [](fs::path p) {
    p = p.lexically_normal();
    if (!p.has_filename() && p.has_relative_path()) p = p.parent_path();  // "dir/" -> "dir"
    return p;
  };
  fs::path p = trimmed(path);
  if (p.filename() == "." || p.filename() == "..") p = trimmed(fs::absolute(p));
  return p;
}

// ".NAME.KIND-PID" next to `path`.
std::string sibling(const std::string& path, const char* kind) {
  const fs::path p = normal_path(path);
  const fs::path parent = p.parent_path();
  // Appended piece by piece: `"." + std::string` trips a GCC 12 -Wrestrict false positive.
  std::string base = p.filename().string();
  // A name near the file system's 255-byte limit keeps its first 200 bytes (cut between UTF-8
  // characters) and a hash of the whole, so the sibling's name fits and stays its own.
  if (base.size() > 200) {
    std::size_t cut = 200;
    while (cut > 0 && (static_cast<unsigned char>(base[cut]) & 0xC0) == 0x80) --cut;
    const std::size_t whole = std::hash<std::string>{}(base);
    base = base.substr(0, cut) + "~" + std::to_string(whole);
  }
  std::string name(1, '.');
  name.append(base).append(".").append(kind).append("-");
  name.append(std::to_string(static_cast<long long>(::getpid())));
  return (parent / name).string();
}

std::string hint(int err) {
  switch (err) {
    case EACCES:
    case EPERM:
      return "; check the folder's permissions or choose another output";
    case ENOSPC:
    case EDQUOT:
      return "; the disk is full: free space or choose another output";
    case EROFS:
      return "; the file system is read-only: choose another output";
    default:
      return "";
  }
}

// `path` as the user knows it: a folder this process stages (".NAME.tmp-PID", sibling()) named
// as the folder it becomes, NAME.
std::string shown_path(const std::string& path) {
  const std::string suffix = ".tmp-" + std::to_string(static_cast<long long>(::getpid()));
  fs::path shown;
  bool changed = false;
  for (const fs::path& part : fs::path(path)) {
    const std::string name = part.string();
    if (name.size() > suffix.size() + 1 && name.front() == '.' && name.ends_with(suffix)) {
      shown /= name.substr(1, name.size() - 1 - suffix.size());
      changed = true;
    } else {
      shown /= part;
    }
  }
  return changed ? shown.string() : path;
}

}  // namespace

void throw_io_error(const std::string& path, const std::string& what, int err) {
  throw ConfigError(shown_path(path) + ": " + what + " failed (" + std::strerror(err) + ")" +
                    hint(err));
}

void refuse_symlink(const std::string& path) {
  std::error_code ec;
  if (fs::is_symlink(fs::symlink_status(path, ec))) {
    throw ConfigError(path +
                      ": is a symlink; refusing to write through it (remove it or choose "
                      "another output)");
  }
}

namespace {

// A character device or a FIFO (/dev/null, /dev/stdout's target, a named pipe): a stream, not a
// file with contents to lose, and one a rename would replace by a regular file.
bool is_stream(const fs::file_status& st) { return fs::is_character_file(st) || fs::is_fifo(st); }

}  // namespace

bool path_within(const std::string& path, const std::string& dir) {
  const auto resolved = [](const std::string& s) {
    std::error_code ec;
    fs::path r = fs::weakly_canonical(fs::absolute(s), ec);
    // Unresolvable (a name over 255 bytes, a symlink loop): the path as written, normalised.
    // An empty path matched every folder ("is the current folder" for a name too long).
    if (ec) r = fs::absolute(s).lexically_normal();
    if (!r.has_filename() && r.has_parent_path()) r = r.parent_path();  // "dir/" -> "dir"
    return r;
  };
  const fs::path p = resolved(path), d = resolved(dir);
  const auto [end, _] = std::mismatch(d.begin(), d.end(), p.begin(), p.end());
  return end == d.end();
}

void check_output_file(const std::string& out, const std::vector<std::string>& inputs, bool force) {
  if (out == "-") {
    throw ConfigError("'-': this output is a file, not standard output; name a file");
  }
  refuse_symlink(out);
  std::error_code ec;
  const fs::file_status st = fs::status(out, ec);
  if (!fs::exists(st)) {
    // Checked now, not after the work (a profile's grid can take hours): the file is written
    // as a sibling temporary in that folder.
    const fs::path folder = fs::path(out).parent_path();
    if (!folder.empty() && !fs::is_directory(folder, ec)) {
      throw ConfigError(out + ": its folder " + folder.string() +
                        " does not exist (create it first, or choose another output)");
    }
    return;
  }
  for (const std::string& in : inputs) {
    std::error_code eq_ec;
    if (fs::equivalent(in, out, eq_ec)) {
      throw ConfigError(out + ": the output is the input file " + in +
                        "; refusing to overwrite it (choose another output)");
    }
    // A folder read as a whole (a checkpoint's, a Hugging Face model's; an index's shards):
    // none of its existing files is replaced.
    const bool is_index = ends_with(in, ".index.json");
    if (in.empty() || (!is_index && !fs::is_directory(in, eq_ec))) continue;
    const fs::path folder =
        fs::weakly_canonical(is_index ? fs::absolute(in).parent_path() : fs::absolute(in), eq_ec);
    if (fs::weakly_canonical(fs::absolute(out), eq_ec).parent_path() == folder) {
      throw ConfigError(out + ": a file of the input folder " + folder.string() +
                        "; refusing to overwrite it (choose another output)");
    }
  }
  if (fs::is_directory(st)) throw ConfigError(out + ": output path is a directory");
  if (is_stream(st)) return;  // written in place (AtomicFile), nothing replaced
  if (!fs::is_regular_file(st)) {
    throw ConfigError(out +
                      ": not a regular file (a block device or a socket); refusing to write to "
                      "it (choose another output)");
  }
  if (!force) {
    throw ConfigError(out + ": output file exists; pass --force to replace it");
  }
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), temp_(sibling(path_, "tmp")) {
  std::error_code ec;
  if (is_stream(fs::status(path_, ec))) {
    temp_ = path_;
    in_place_ = true;
  }
}

AtomicFile::~AtomicFile() {
  if (!committed_ && !in_place_) ::unlink(temp_.c_str());
}

void AtomicFile::commit() {
  if (!in_place_ && std::rename(temp_.c_str(), path_.c_str()) != 0) {
    throw_io_error(path_, "rename", errno);
  }
  committed_ = true;
}

void write_file_atomically(const std::string& path, const std::string& text) {
  AtomicFile file(path);
  std::FILE* f = std::fopen(file.temp_path().c_str(), "wb");
  if (!f) throw_io_error(path, "writing", errno);
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int err = errno;
  if (std::fclose(f) != 0 || !ok) throw_io_error(path, "writing", ok ? errno : err);
  file.commit();
}

StagedDir::StagedDir(const std::string& dir)
    : dir_(normal_path(dir).string()), temp_(sibling(dir_, "tmp")) {
  refuse_symlink(dir_);
  std::error_code ec;
  const fs::path parent = fs::path(temp_).parent_path();
  if (!parent.empty()) {
    fs::create_directories(parent, ec);
    if (ec) throw_io_error(parent.string(), "creating the folder", ec.value());
  }
  fs::remove_all(temp_, ec);  // a leftover of a killed run with the same process id
  if (!fs::create_directory(temp_, ec)) {
    throw_io_error(temp_, "creating the folder", ec ? ec.value() : EEXIST);
  }
}

StagedDir::~StagedDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(temp_, ec);
}

void StagedDir::commit() {
  std::error_code ec;
  refuse_symlink(dir_);
  if (fs::exists(fs::symlink_status(dir_, ec))) {
    const std::string old = sibling(dir_, "old");
    fs::remove_all(old, ec);
    if (std::rename(dir_.c_str(), old.c_str()) != 0) throw_io_error(dir_, "replacing", errno);
    if (std::rename(temp_.c_str(), dir_.c_str()) != 0) {
      const int err = errno;
      std::rename(old.c_str(), dir_.c_str());  // put the previous folder back
      throw_io_error(dir_, "replacing", err);
    }
    fs::remove_all(old, ec);
  } else if (std::rename(temp_.c_str(), dir_.c_str()) != 0) {
    throw_io_error(dir_, "creating", errno);
  }
  committed_ = true;
}

void StagedDir::commit_entries() {
  std::error_code ec;
  refuse_symlink(dir_);
  fs::create_directories(dir_, ec);
  if (ec) throw_io_error(dir_, "creating the folder", ec.value());
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(temp_, ec)) entries.push_back(e.path());
  if (ec) throw_io_error(temp_, "listing", ec.value());
  // Folders first, the index file (compare.csv, sweep.csv) last: it is what readers look for.
  std::stable_partition(entries.begin(), entries.end(),
                        [](const fs::path& p) { return fs::is_directory(p); });
  for (const fs::path& from : entries) {
    const std::string to = (fs::path(dir_) / from.filename()).string();
    refuse_symlink(to);
    const bool is_dir = fs::is_directory(from);
    if (is_dir && fs::exists(fs::symlink_status(to, ec))) {
      const std::string old = sibling(to, "old");
      fs::remove_all(old, ec);
      if (std::rename(to.c_str(), old.c_str()) != 0) throw_io_error(to, "replacing", errno);
      if (std::rename(from.c_str(), to.c_str()) != 0) {
        const int err = errno;
        std::rename(old.c_str(), to.c_str());
        throw_io_error(to, "replacing", err);
      }
      fs::remove_all(old, ec);
    } else if (std::rename(from.c_str(), to.c_str()) != 0) {
      throw_io_error(to, "writing", errno);
    }
  }
  fs::remove_all(temp_, ec);
  committed_ = true;
}

}  // namespace servelab
