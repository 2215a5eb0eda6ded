// Every subcommand of `sim` and `engine` answers --help: exit code 0, its options on stdout.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "serving/home.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;
using test_util::Cli;
using test_util::read_file;
using test_util::temp_dir;

Cli run(const std::string& program, const std::string& args) {
  const fs::path dir = temp_dir("cli_help");
  const fs::path out = dir / "stdout.txt", err = dir / "stderr.txt";
  const std::string cmd =
      servelab_program(program) + " " + args + " > " + out.string() + " 2> " + err.string();
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(out), read_file(err)};
}

struct Expect {
  std::string program, command;
  std::vector<std::string> options;  // each must appear in the help text
};

TEST(CliHelp, EverySubcommandListsItsOptions) {
  const std::vector<Expect> all = {
      {"sim",
       "run",
       {"EXP.yaml", "--out", "--seed", "--set", "--record-schedule", "--record-events",
        "--record-blocks", "--progress", "--quiet"}},
      {"sim", "compare", {"EXP.yaml", "--variant", "--set", "--out", "--quiet"}},
      {"sim", "sweep", {"EXP.yaml", "--jobs", "--no-plot", "--set", "--out", "--mpi"}},
      {"sim", "plot", {"RUN_DIR", "--out", "--format", "--quiet"}},
      {"sim",
       "calibrate",
       {"PROFILE.csv", "--out", "--engine-run", "--holdout", "--force", "--quiet"}},
      {"sim", "validate", {"SIM_DIR", "ENGINE_DIR", "--out", "--cost-model", "--force", "--quiet"}},
      {"sim", "policies", {"--help"}},
      {"sim",
       "bench",
       {"EXP.yaml", "--url", "--model", "--max-concurrency", "--out", "--seed", "--set",
        "--progress", "--quiet"}},
      {"sim", "trace stats", {"FILE", "--format"}},
      {"sim", "trace convert", {"IN", "OUT", "--format", "--force"}},
      {"engine",
       "run",
       {"EXP.yaml", "--device", "--weights", "--kv-memory-gb", "--tokens", "--out", "--seed",
        "--set", "--record-schedule", "--quiet"}},
      {"engine",
       "profile",
       {"--model", "--out", "--device", "--reps", "--rounds", "--warmup", "--max-tokens",
        "--block-size", "--weights", "--seed", "--quick", "--force", "--quiet"}},
      {"engine",
       "serve",
       {"EXP.yaml", "--model", "--host", "--port", "--device", "--weights", "--kv-memory-gb",
        "--max-in-flight", "--served-model-name", "--seed", "--set"}},
  };
  for (const Expect& e : all) {
    for (const char* flag : {"--help", "-h"}) {
      SCOPED_TRACE(e.program + " " + e.command + " " + flag);
      const Cli c = run(e.program, e.command + " " + flag);
      EXPECT_EQ(c.code, 0) << c.err;
      EXPECT_NE(c.out.find("Usage: " + e.program + " " + e.command), std::string::npos) << c.out;
      for (const std::string& o : e.options) {
        EXPECT_NE(c.out.find(o), std::string::npos) << o << " missing from:\n" << c.out;
      }
    }
  }
  // The programs' own help, and `sim trace --help`.
  for (const char* program : {"sim", "engine"}) {
    for (const char* h : {"help", "--help", "-h"}) {
      EXPECT_EQ(run(program, h).code, 0) << program << " " << h;
    }
  }
  const Cli trace = run("sim", "trace --help");
  EXPECT_EQ(trace.code, 0);
  EXPECT_NE(trace.out.find("trace stats"), std::string::npos) << trace.out;
  // `help NAME` is NAME's own help; an unknown NAME is a usage error, not the general help.
  for (const char* program : {"sim", "engine"}) {
    const Cli c = run(program, "help run");
    EXPECT_EQ(c.code, 0) << c.err;
    EXPECT_NE(c.out.find(std::string("Usage: ") + program + " run"), std::string::npos) << c.out;
    const Cli bogus = run(program, "help bogus");
    EXPECT_EQ(bogus.code, 2);
    EXPECT_NE(bogus.err.find("help: unknown command 'bogus'"), std::string::npos) << bogus.err;
    EXPECT_EQ(bogus.out, "");
    const Cli two = run(program, "help run serve");
    EXPECT_EQ(two.code, 2);
    EXPECT_NE(two.err.find("expected one command name"), std::string::npos) << two.err;
  }
  EXPECT_EQ(run("sim", "help trace").code, 0);
}

// Usage errors exit 2 and name the option and what it expected.
TEST(CliHelp, UsageErrorsNameTheOption) {
  struct Case {
    std::string program, args, needle;
  };
  const std::vector<Case> cases = {
      {"sim", "run x.yaml --bogus", "sim run: unknown option '--bogus'"},
      {"sim", "run x.yaml --seed", "--seed: expected a value"},
      {"sim", "run x.yaml --seed 1 --seed 2", "--seed: given more than once"},
      {"sim", "run x.yaml --set seed=1 --set seed=2",
       "--set seed: given more than once, with different values ('seed=1', 'seed=2'"},
      {"sim", "compare x.yaml --set a.b=1 --set a.b=2", "--set a.b: given more than once"},
      // One key holding another, or one key spelled two ways: the later would replace the first.
      {"sim", "run x.yaml --set w.n=5 --set 'w={n: 7}'", "--set w: replaces what --set w.n set"},
      {"sim", "run x.yaml --set 'w.p[0].c=x' --set 'w.p[00].c=y'",
       "--set w.p[0].c: given more than once, with different values"},
      {"engine", "run x.yaml --seed 1 --set seed=2", "--set seed: given with --seed too"},
      {"sim", "compare x.yaml --variant v:a=1,a=2", "key 'a' is given twice"},
      {"sim", "compare x.yaml --variant v:a=1,", "ends with a comma"},
      {"sim", "run x.yaml --out ''", "expected a path, got an empty one"},
      // An option's value is never the next option (CLI11 took it: a folder named --quiet),
      // nor empty (the default without a word).
      {"sim", "run x.yaml --out --quiet", "--out: expected a value, got the option '--quiet'"},
      {"sim", "run x.yaml --out -q", "--out: expected a value, got the option '-q'"},
      {"engine", "run x.yaml --out --record-schedule", "got the option '--record-schedule'"},
      {"sim", "bench x.yaml --url u --timeout ''", "--timeout: expected a value, got an empty one"},
      {"sim", "validate a b --cost-model ''", "--cost-model: expected a value, got an empty one"},
      {"engine", "serve --model tiny --host ''", "--host: expected a value, got an empty one"},
      {"engine", "profile --model tiny -o ''", "expected a path, got an empty one"},
      {"sim", "sweep x.yaml --jobs 0", "--jobs: expected an integer in [1, 4096], got '0'"},
      {"sim", "plot d --format gif", "--format: expected png, svg or pdf, got 'gif'"},
      {"sim", "validate a b c", "sim validate: unexpected argument 'c'"},
      {"sim", "calibrate p.csv --force --frobnicate", "unknown option '--frobnicate'"},
      {"sim", "policies extra", "sim policies: unexpected argument 'extra'"},
      {"sim", "trace stats f.csv --format nope", "--format: expected auto, azure"},
      {"sim", "trace convert in.csv", "OUT is required"},
      {"engine", "run x.yaml --device tpu", "--device: expected cpu or cuda, got 'tpu'"},
      {"engine", "run x.yaml --kv-memory-gb -1", "--kv-memory-gb: expected a positive number"},
      {"engine", "run x.yaml --kv-memory-gb 1e308",
       "expected a positive number of GiB, at most 1e6"},
      {"engine", "profile --reps 0", "--reps: expected an integer in [1, 1000], got '0'"},
      {"engine", "profile --model m", "-o PROFILE.csv is required"},
      {"engine", "serve --model tiny --port 70000", "--port: expected an integer in [0, 65535]"},
      {"engine", "serve --model tiny --kv-memory-gb 0", "--kv-memory-gb: expected a positive"},
      {"engine", "serve", "give an experiment file or --model M"},
      {"engine", "serve --model tiny --set model=x", "--set model: given with --model too"},
      {"engine", "serve --model tiny --served-model-name ''", "expected a name, got an empty one"},
      {"sim", "bench x.yaml", "--url URL is required"},
      {"sim", "bench x.yaml --url u --max-concurrency 0", "--max-concurrency: expected an integer"},
      {"sim", "bench x.yaml --url u --record-events",
       "--record-events: a client cannot see the server's schedule"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.program + " " + c.args);
    const Cli r = run(c.program, c.args);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
  }
  // The same assignment twice is harmless (scripts that add a key the command already has).
  const fs::path out = temp_dir("cli_help_same") / "run";
  const Cli same = run("sim", "run " + (servelab_home() / "experiments/burst-tiny.yaml").string() +
                                  " --set workload.num_requests=2 --set workload.num_requests=2 -q "
                                  "-o " +
                                  out.string());
  EXPECT_EQ(same.code, 0) << same.err;
}

}  // namespace
}  // namespace servelab
