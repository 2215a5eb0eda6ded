// Issue 16: calibrated files record the machine they were fitted on, and using one on another
// machine prints one warning line. The comparison rules (serving/machine.h), the once-per-file
// printing, the $SERVELAB_MACHINE_NAME override, and the commands that load a calibrated file:
// `sim run`, `sim sweep`, `sim compare` and `engine run` (`sim validate` in validate_test.cc).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <string>

#include "core/config_error.h"
#include "serving/machine.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using test_util::Cli;
using test_util::read_file;
using test_util::run_engine_cli;
using test_util::run_sim;
using test_util::temp_dir;
using test_util::write_file;

constexpr const char* kCarry = "calibrations do not carry across machines";

MachineRecord machine(const std::string& kind, const std::string& name, std::int64_t threads = 2) {
  MachineRecord m;
  m.kind = kind;
  m.name = name;
  m.threads = threads;
  return m;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Sets $SERVELAB_MACHINE_NAME for one scope (the commands the test runs inherit it).
class MachineNameEnv {
 public:
  explicit MachineNameEnv(const char* value) {
    if (value) {
      ::setenv(kMachineNameEnv, value, 1);
    } else {
      ::unsetenv(kMachineNameEnv);
    }
  }
  ~MachineNameEnv() { ::unsetenv(kMachineNameEnv); }
};

TEST(CalibrationMachine, WarningRules) {
  const auto xeon = machine("cpu", "Intel(R) Xeon(R) Processor @ 2.10GHz");
  const auto epyc = machine("cpu", "AMD EPYC", 16);
  const auto h100 = machine("cuda", "NVIDIA H100 80GB HBM3");
  const auto h200 = machine("cuda", "NVIDIA H200");
  using U = CalibrationUse;
  // Another CPU: one line naming the file, both machines and why.
  const auto w = calibration_machine_warning("cal/tiny.yaml", xeon, epyc, U::kSimulation);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->find('\n'), std::string::npos);
  for (const char* part :
       {"warning: cal/tiny.yaml was calibrated on cpu \"Intel(R) Xeon(R) "
        "Processor @ 2.10GHz\" (2 hardware threads)",
        "this machine's device is cpu \"AMD EPYC\" (16 hardware threads)", kCarry, "39-57 %"}) {
    EXPECT_NE(w->find(part), std::string::npos) << part << "\n" << *w;
  }
  // The same CPU name: silent, whatever the thread count.
  EXPECT_FALSE(calibration_machine_warning("f", xeon, machine("cpu", xeon.name, 64), U::kEngine));
  EXPECT_FALSE(calibration_machine_warning("f", xeon, xeon, U::kSimulation));
  // An older file without a machine: silent.
  EXPECT_FALSE(calibration_machine_warning("f", std::nullopt, epyc, U::kSimulation));
  EXPECT_FALSE(calibration_machine_warning("f", std::nullopt, h200, U::kEngine));
  // A CUDA calibration in a simulation predicts its GPU wherever it is simulated: silent.
  EXPECT_FALSE(calibration_machine_warning("f", h100, epyc, U::kSimulation));
  // An engine on another GPU, or on the CPU with a CUDA calibration (and the reverse): warned.
  EXPECT_TRUE(calibration_machine_warning("f", h100, h200, U::kEngine));
  EXPECT_TRUE(calibration_machine_warning("f", h100, machine("cpu", h100.name), U::kEngine));
  EXPECT_TRUE(calibration_machine_warning("f", xeon, machine("cuda", xeon.name), U::kEngine));
  EXPECT_FALSE(calibration_machine_warning("f", h100, h100, U::kEngine));
}

TEST(CalibrationMachine, WarnsOncePerFile) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  const auto a = machine("cpu", "A"), b = machine("cpu", "B");
  EXPECT_FALSE(warn_if_calibrated_elsewhere("x.yaml", a, a, CalibrationUse::kSimulation, out));
  EXPECT_TRUE(warn_if_calibrated_elsewhere("x.yaml", a, b, CalibrationUse::kSimulation, out));
  EXPECT_FALSE(warn_if_calibrated_elsewhere("x.yaml", a, b, CalibrationUse::kSimulation, out));
  EXPECT_FALSE(warn_if_calibrated_elsewhere("x.yaml", a, b, CalibrationUse::kEngine, out));
  EXPECT_TRUE(warn_if_calibrated_elsewhere("y.yaml", a, b, CalibrationUse::kEngine, out));
  std::rewind(out);
  std::string text;
  for (int c = std::fgetc(out); c != EOF; c = std::fgetc(out)) text += static_cast<char>(c);
  std::fclose(out);
  EXPECT_EQ(count(text, "\n"), 2) << text;
  EXPECT_EQ(count(text, "x.yaml"), 1) << text;
  EXPECT_EQ(count(text, "y.yaml"), 1) << text;
}

TEST(CalibrationMachine, ThisMachineAndTheOverride) {
  {
    const MachineNameEnv env(nullptr);
    const MachineRecord cpu = this_machine("cpu");
    EXPECT_EQ(cpu.kind, "cpu");
    EXPECT_FALSE(cpu.name.empty());  // /proc/cpuinfo's model name, or "unknown"
    EXPECT_EQ(cpu.name.find('\n'), std::string::npos);
    EXPECT_GE(cpu.threads, 1);
    EXPECT_EQ(this_machine("cuda", " NVIDIA H200 ").name, "NVIDIA H200");
    EXPECT_EQ(this_machine("cuda").name, "unknown");
    EXPECT_THROW(this_machine("tpu"), ConfigError);
  }
  {
    const MachineNameEnv env("  Injected CPU  ");
    EXPECT_EQ(this_machine("cpu").name, "Injected CPU");
    EXPECT_EQ(this_machine("cuda", "NVIDIA H200").name, "Injected CPU");
  }
  for (const char* bad : {"", "  ", "two\nlines"}) {
    const MachineNameEnv env(bad);
    try {
      this_machine("cpu");
      ADD_FAILURE() << "no error for '" << bad << "'";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(kMachineNameEnv), std::string::npos) << e.what();
    }
  }
}

// ---- the commands ----

std::string cost_yaml(const std::string& machine_section) {
  return "type: calibrated\nmodel: tiny\n" + machine_section +
         "block_size: 16\nblock_bytes: 8192\ncoefficients:\n"
         "  step_s: 5.0e-5\n  per_sequence_s: 2.0e-6\n  per_token_s: 1.0e-6\n"
         "  per_token_above_knee_s: 0\n  knee_tokens: 0\n  prefill_pair_s: 1.0e-9\n"
         "  decode_context_token_s: 2.0e-9\n  sampled_sequence_s: 3.0e-6\n"
         "  swap_byte_s: 2.5e-10\n  copy_byte_s: 1.0e-10\n";
}

std::string experiment(const std::string& name, const std::string& cost_file,
                       const std::string& extra = "") {
  return "name: " + name +
         "\nmodel: tiny\nhardware: H100-SXM\nserving: {block_size: 16, num_gpu_blocks: 64, "
         "max_model_len: 1024}\nworkload:\n  type: synthetic\n  num_requests: 6\n"
         "  arrival: {process: fixed, rate: 1.0e12}\n  prompt_len: {dist: fixed, value: 40}\n"
         "  output_len: {dist: fixed, value: 3}\n"
         "cost_model: {type: calibrated, file: " +
         cost_file + "}\n" + extra;
}

// `sim run`, `sim sweep` (points on threads) and `sim compare` with a CPU calibration: one line
// on another CPU, none on the same one, none for an older file or a CUDA calibration.
TEST(CalibrationMachine, SimCommandsWarnOnceOnAnotherCpu) {
  const auto dir = temp_dir("calibration_machine_sim");
  write_file(dir / "cpu.yaml",
             cost_yaml("machine: {kind: cpu, name: \"Recorded CPU\", threads: 2}\n"));
  write_file(dir / "gpu.yaml",
             cost_yaml("machine:\n  kind: cuda\n  name: \"NVIDIA H100\"\n  threads: 8\n"));
  write_file(dir / "old.yaml", cost_yaml(""));
  const std::string cpu = (dir / "cpu.yaml").string();
  write_file(dir / "run.yaml", experiment("run", cpu));
  write_file(dir / "sweep.yaml",
             experiment("sw", cpu, "sweep:\n  workload.num_requests: [2, 3, 4, 5]\n"));
  write_file(dir / "cmp.yaml", experiment("cmp", cpu,
                                          "compare:\n  - {name: a, set: {}}\n  - {name: b, set: "
                                          "{serving.max_num_seqs: 2}}\n"));
  const std::string run = "run " + (dir / "run.yaml").string() + " --quiet --out ";
  {
    const MachineNameEnv env("Another CPU");
    Cli r = run_sim(run + (dir / "r1").string(), dir);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(count(r.err, kCarry), 1) << r.err;
    EXPECT_EQ(count(r.err, "\n"), 1) << r.err;
    EXPECT_NE(r.err.find(cpu + " was calibrated on cpu \"Recorded CPU\""), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("this machine's device is cpu \"Another CPU\""), std::string::npos)
        << r.err;
    r = run_sim("sweep " + (dir / "sweep.yaml").string() + " --jobs 2 --no-plot --quiet --out " +
                    (dir / "sw").string(),
                dir);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(count(r.err, kCarry), 1) << r.err;
    r = run_sim(
        "compare " + (dir / "cmp.yaml").string() + " --quiet --out " + (dir / "cmp").string(), dir);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(count(r.err, kCarry), 1) << r.err;
    // A CUDA calibration, or a file without a machine: silent.
    for (const char* f : {"gpu.yaml", "old.yaml"}) {
      r = run_sim(run + (dir / "r2").string() + " --set cost_model.file=" + (dir / f).string(),
                  dir);
      ASSERT_EQ(r.code, 0) << r.err;
      EXPECT_EQ(r.err, "") << f;
    }
  }
  {
    const MachineNameEnv env("Recorded CPU");
    const Cli r = run_sim(run + (dir / "r3").string(), dir);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err, "");
  }
  {
    const MachineNameEnv env("");  // set but empty: an error, not a silent default
    const Cli r = run_sim(run + (dir / "r4").string(), dir);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find(kMachineNameEnv), std::string::npos) << r.err;
  }
}

// `engine run --device cpu` compares the device it runs on: another CPU or a CUDA calibration
// warns once, the same CPU is silent.
TEST(CalibrationMachine, EngineRunComparesItsDevice) {
  const auto dir = temp_dir("calibration_machine_engine");
  write_file(dir / "cpu.yaml",
             cost_yaml("machine: {kind: cpu, name: \"Recorded CPU\", threads: 2}\n"));
  write_file(dir / "gpu.yaml",
             cost_yaml("machine: {kind: cuda, name: \"Recorded CPU\", threads: 2}\n"));
  write_file(dir / "exp.yaml", experiment("eng", (dir / "cpu.yaml").string()));
  const std::string run = "run " + (dir / "exp.yaml").string() + " --quiet --out " +
                          (dir / "e").string() + " --set cost_model.file=";
  {
    const MachineNameEnv env("Recorded CPU");
    Cli r = run_engine_cli(run + (dir / "cpu.yaml").string(), dir);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    r = run_engine_cli(run + (dir / "gpu.yaml").string(), dir);  // same name, other kind
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(count(r.err, kCarry), 1) << r.err;
    EXPECT_NE(r.err.find("calibrated on cuda \"Recorded CPU\""), std::string::npos) << r.err;
  }
  {
    const MachineNameEnv env("Another CPU");
    const Cli r = run_engine_cli(run + (dir / "cpu.yaml").string(), dir);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(count(r.err, kCarry), 1) << r.err;
    EXPECT_NE(r.err.find("this machine's device is cpu \"Another CPU\""), std::string::npos)
        << r.err;
  }
}

}  // namespace
}  // namespace servelab
