#include "sim/message_passing.h"

#include <dlfcn.h>

#include <filesystem>

#include "core/config_error.h"
#include "serving/home.h"

namespace servelab {

namespace {

// The plugin's one entry point (sim/mpi_plugin.cc): a new MessagePassing, owned by the caller.
using OpenFunction = MessagePassing* (*)();
constexpr const char* kPlugin = "libservelab_mpi.so";
constexpr const char* kEntry = "servelab_mpi_open";

}  // namespace

std::unique_ptr<MessagePassing> join_mpi_job() {
  const std::filesystem::path plugin = executable_dir() / kPlugin;
  if (!std::filesystem::exists(plugin)) {
    throw ConfigError(
        "--mpi: this sim was built without MPI (no " + plugin.string() +
        "); install libopenmpi-dev and openmpi-bin (scripts/bootstrap) and rebuild, or use --jobs");
  }
  // RTLD_GLOBAL: Open MPI loads its own components with dlopen, and they look up libmpi's
  // symbols in the global scope.
  void* handle = dlopen(plugin.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!handle) {
    const char* why = dlerror();
    throw ConfigError("--mpi: cannot load " + plugin.string() + ": " + (why ? why : "unknown"));
  }
  // Never closed: the MessagePassing's code lives in it until the process ends.
  auto open = reinterpret_cast<OpenFunction>(dlsym(handle, kEntry));
  if (!open) throw ConfigError("--mpi: " + plugin.string() + " has no " + kEntry);
  return std::unique_ptr<MessagePassing>(open());
}

}  // namespace servelab
