// FuzzInputFile: the fuzz input written to a file, for code under test that reads from a path.
//
// Each fuzz process gets one private directory (mkdtemp under $TMPDIR, removed at exit); every
// call to write() truncates and rewrites the same file in it, so a long fuzzing run leaves
// nothing behind and touches no other process's files. Not thread-safe (libFuzzer calls the
// target from one thread).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace servelab::fuzz {

class FuzzInputFile {
 public:
  // `name` is the file's name inside the private directory (its extension can matter to the
  // code under test, e.g. ".safetensors" vs ".json").
  explicit FuzzInputFile(const std::string& name) {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/servelab-fuzz-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) {
      std::perror("servelab fuzz: mkdtemp");
      std::abort();
    }
    dir_ = templ;
    path_ = dir_ + "/" + name;
  }
  ~FuzzInputFile() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  FuzzInputFile(const FuzzInputFile&) = delete;
  FuzzInputFile& operator=(const FuzzInputFile&) = delete;

  // Replaces the file's contents with [data, data + size). Aborts on an I/O error (that is the
  // harness failing, not the code under test).
  const std::string& write(const std::uint8_t* data, std::size_t size) {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (f == nullptr || (size > 0 && std::fwrite(data, 1, size, f) != size) ||
        std::fclose(f) != 0) {
      std::perror("servelab fuzz: writing the input file");
      std::abort();
    }
    return path_;
  }

  const std::string& path() const { return path_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::string path_;
};

}  // namespace servelab::fuzz
