#include "python/run_files.h"

#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <iterator>
#include <system_error>

#include "core/config_error.h"
#include "serving/output_file.h"

namespace fs = std::filesystem;
namespace py = pybind11;

namespace servelab::python {

TempDir::TempDir() {
  std::error_code ec;
  std::string pattern = (fs::temp_directory_path(ec) / "servelab-XXXXXX").string();
  if (ec) pattern = "/tmp/servelab-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    throw_io_error(pattern, "creating a temporary folder", errno);
  }
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);  // best effort: a destructor reports nothing
}

Files read_files(const fs::path& dir, const std::vector<std::string>& names) {
  Files out;
  for (const std::string& name : names) {
    std::ifstream in(dir / name, std::ios::binary);
    if (!in) throw_io_error((dir / name).string(), "reading", errno);
    out.emplace_back(name, std::string(std::istreambuf_iterator<char>(in), {}));
  }
  return out;
}

Files read_tree(const fs::path& dir) {
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) names.push_back(fs::relative(e.path(), dir).generic_string());
  }
  std::sort(names.begin(), names.end());
  return read_files(dir, names);
}

void write_files(const fs::path& dir, const Files& files) {
  for (const auto& [name, contents] : files) {
    const fs::path rel(name);
    if (rel.empty() || rel.is_absolute() ||
        std::any_of(rel.begin(), rel.end(), [](const fs::path& p) { return p == ".."; })) {
      throw ConfigError("save: '" + name + "' is not a file name inside the run folder");
    }
    const fs::path path = dir / rel;
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    if (ec) throw_io_error(path.parent_path().string(), "creating the folder", ec.value());
    std::ofstream out(path, std::ios::binary);
    if (!out) throw_io_error(path.string(), "opening for writing", errno);
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.close();
    if (!out) throw_io_error(path.string(), "writing", errno);
  }
}

py::list to_python(const Files& files) {
  py::list out;
  for (const auto& [name, contents] : files) {
    out.append(py::make_tuple(py::str(name), py::bytes(contents)));
  }
  return out;
}

Files from_python(const py::list& files) {
  Files out;
  for (const py::handle item : files) {
    const auto t = item.cast<py::tuple>();
    if (t.size() != 2) throw py::type_error("expected (name, bytes) pairs");
    out.emplace_back(t[0].cast<std::string>(), t[1].cast<std::string>());
  }
  return out;
}

}  // namespace servelab::python
