// The machine a calibration was measured on, and the machine a program runs on.
//
// Step times do not carry across machines: the shipped CPU calibration, fitted on one CPU, gave
// 39-57 % step error on another (issue 16). So `engine profile` records the machine in the
// profile's header (`# machine_kind:`, `# machine_name:`, `# machine_threads:`), `sim calibrate`
// copies it into cost.yaml (`machine: {kind, name, threads}`), and whoever uses a calibrated
// file compares it with the machine it runs on (calibration_machine_warning) and warns once.
//
// What is compared is the device name (and, for an engine, the device kind); the thread count is
// recorded for the reader, not compared. Files without a machine (written before it was
// recorded) are never warned about. The comparison is only as fine as the names: /proc/cpuinfo
// may give one name to several CPU models (e.g. "AMD EPYC").
//
// $SERVELAB_MACHINE_NAME, when set, replaces the detected device name everywhere (what
// `engine profile` records and what a calibrated file is compared with): tests inject a name with
// it, and a user can name a machine whose /proc/cpuinfo says too little. Set but empty, or with a
// control character, it is a ConfigError.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace servelab {

inline constexpr const char* kMachineNameEnv = "SERVELAB_MACHINE_NAME";

struct MachineRecord {
  std::string kind;          // "cpu" or "cuda": the device the engine steps ran on
  std::string name;          // CPU: /proc/cpuinfo's first "model name"; CUDA: the GPU's name as
                             // the CUDA runtime reports it; "unknown" when it cannot be read
  std::int64_t threads = 0;  // hardware threads of the host (std::thread::hardware_concurrency,
                             // at least 1 once filled in)

  bool operator==(const MachineRecord&) const = default;
  // `cpu "NAME" (N hardware threads)`, for messages.
  std::string describe() const;
};

// This machine for a device of `kind` ("cpu" or "cuda"): the name is $SERVELAB_MACHINE_NAME when
// set; else, for cpu, the "model name" of /proc/cpuinfo (read once per process; "unknown" when
// absent); for cuda, `gpu_name` (what the CUDA executor reports; "unknown" when empty), so this
// layer needs no GPU. Throws ConfigError for a bad $SERVELAB_MACHINE_NAME (see the file comment).
MachineRecord this_machine(const std::string& kind, const std::string& gpu_name = "");

// Who uses a calibrated file, which decides what is compared:
// - kSimulation (`sim run/compare/sweep/validate`): a CPU calibration predicts the CPU engine,
//   which in practice runs on this host, so its name is compared with this host's CPU; a CUDA
//   calibration predicts its GPU wherever it is simulated and is never warned about.
// - kEngine (`engine run`): the device the engine runs on (kind and name) is compared.
enum class CalibrationUse { kSimulation, kEngine };

// The warning (one line, no line end) when `recorded` names a machine other than `here` for
// this use; nullopt when they match, when `recorded` is empty (an older file), or for a CUDA
// calibration in a simulation. `file` is the calibrated file, named in the message.
std::optional<std::string> calibration_machine_warning(const std::string& file,
                                                       const std::optional<MachineRecord>& recorded,
                                                       const MachineRecord& here,
                                                       CalibrationUse use);

// Prints calibration_machine_warning's line (plus "\n") on `out`, at most once per process for
// each file (thread-safe: sweep points run on threads), and returns whether it printed.
bool warn_if_calibrated_elsewhere(const std::string& file,
                                  const std::optional<MachineRecord>& recorded,
                                  const MachineRecord& here, CalibrationUse use,
                                  std::FILE* out = stderr);

}  // namespace servelab
