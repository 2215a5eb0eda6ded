#include "serving/machine.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "core/config_error.h"

namespace servelab {

namespace {

std::string trimmed(const std::string& s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  const auto last = s.find_last_not_of(" \t");
  return s.substr(first, last - first + 1);
}

// The first "model name" of /proc/cpuinfo, "unknown" when there is none (e.g. on ARM).
std::string read_cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string name = trimmed(line.substr(colon + 1));
    return name.empty() ? "unknown" : name;
  }
  return "unknown";
}

// $SERVELAB_MACHINE_NAME when set (validated), nullopt otherwise.
std::optional<std::string> machine_name_override() {
  const char* env = std::getenv(kMachineNameEnv);
  if (env == nullptr) return std::nullopt;
  const std::string value = trimmed(env);
  if (value.empty()) {
    throw ConfigError(std::string(kMachineNameEnv) +
                      " is set but empty: unset it, or set it to the device name to record and "
                      "compare calibrations with");
  }
  for (const char c : value) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      throw ConfigError(std::string(kMachineNameEnv) +
                        ": expected a device name without control characters (line ends, tabs)");
    }
  }
  return value;
}

}  // namespace

std::string MachineRecord::describe() const {
  return kind + " \"" + name + "\" (" + std::to_string(threads) + " hardware threads)";
}

MachineRecord this_machine(const std::string& kind, const std::string& gpu_name) {
  if (kind != "cpu" && kind != "cuda") {
    throw ConfigError("device: expected cpu or cuda, got '" + kind + "'");
  }
  MachineRecord m;
  m.kind = kind;
  if (std::optional<std::string> name = machine_name_override()) {
    m.name = std::move(*name);
  } else if (kind == "cpu") {
    static const std::string cpu = read_cpu_model_name();  // thread-safe initialisation
    m.name = cpu;
  } else {
    const std::string gpu = trimmed(gpu_name);
    m.name = gpu.empty() ? "unknown" : gpu;
  }
  m.threads = std::max<std::int64_t>(1, std::thread::hardware_concurrency());
  return m;
}

std::optional<std::string> calibration_machine_warning(const std::string& file,
                                                       const std::optional<MachineRecord>& recorded,
                                                       const MachineRecord& here,
                                                       CalibrationUse use) {
  if (!recorded) return std::nullopt;  // an older file: nothing to compare
  if (use == CalibrationUse::kSimulation && recorded->kind != "cpu") return std::nullopt;
  if (recorded->kind == here.kind && recorded->name == here.name) return std::nullopt;
  return "warning: " + file + " was calibrated on " + recorded->describe() +
         ", but this machine's device is " + here.describe() +
         ": calibrations do not carry across machines (on another CPU the shipped one was off by "
         "39-57 % per step; docs/validation.md); profile and calibrate this machine with "
         "`engine profile` and `sim calibrate`";
}

bool warn_if_calibrated_elsewhere(const std::string& file,
                                  const std::optional<MachineRecord>& recorded,
                                  const MachineRecord& here, CalibrationUse use, std::FILE* out) {
  const std::optional<std::string> warning = calibration_machine_warning(file, recorded, here, use);
  if (!warning) return false;
  static std::mutex mutex;
  static std::set<std::string> warned;  // files already warned about in this process
  const std::lock_guard<std::mutex> lock(mutex);
  if (!warned.insert(file).second) return false;
  std::fprintf(out, "%s\n", warning->c_str());
  std::fflush(out);
  return true;
}

}  // namespace servelab
