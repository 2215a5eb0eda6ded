// The command-line parsing shared by `sim run`, `sim compare`, `sim sweep` and `engine run`
// (serving/cli.h).
#include <gtest/gtest.h>

#include "serving/cli.h"

namespace servelab {
namespace {

TEST(CliArgs, ParsesTheCommonOptionsInAnyOrder) {
  const ExperimentArgs a =
      parse_experiment_args({"--seed", "7", "exp.yaml", "--set", "a.b=1", "--set=c=2", "-o", "out",
                             "-q", "--record-schedule"},
                            "sim run");
  EXPECT_EQ(a.experiment, "exp.yaml");
  EXPECT_EQ(a.seed, 7u);
  EXPECT_EQ(a.overrides, (std::vector<std::string>{"a.b=1", "c=2"}));
  EXPECT_EQ(a.out_dir, "out");
  EXPECT_TRUE(a.quiet);
  EXPECT_TRUE(a.record_schedule);
  // The flags as overrides, after the --set ones (compare and sweep load the experiment so).
  EXPECT_EQ(a.all_overrides(),
            (std::vector<std::string>{"a.b=1", "c=2", "seed=7", "outputs.record_schedule=true"}));
}

TEST(CliArgs, CommandOptionsGoToTheExtraHandler) {
  std::string device;
  const ExperimentArgs a =
      parse_experiment_args({"e.yaml", "--device", "cpu"}, "engine run", [&](CLI::App& app) {
        app.add_option("--device", device)->check(cli::one_of({"cpu", "cuda"}));
      });
  EXPECT_EQ(device, "cpu");
  EXPECT_EQ(a.experiment, "e.yaml");
}

TEST(CliArgs, MistakesAreUsageErrorsNamingTheCommand) {
  auto message = [](std::vector<std::string> args) {
    try {
      parse_experiment_args(args, "sim run");
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message({}).find("sim run: expected an experiment file"), std::string::npos);
  EXPECT_NE(message({"a.yaml", "b.yaml"}).find("more than one"), std::string::npos);
  EXPECT_NE(message({"a.yaml", "--bogus"}).find("unknown option '--bogus'"), std::string::npos);
  EXPECT_NE(message({"a.yaml", "--set"}).find("--set: expected a value"), std::string::npos);
  EXPECT_NE(message({"a.yaml", "--seed", "-3"}).find("from 0 to 2^63-1"), std::string::npos);
  EXPECT_NE(message({"a.yaml", "--seed", "x"})
                .find("--seed: expected an integer from 0 to 2^63-1, got 'x'"),
            std::string::npos);
  // The range of the experiment's `seed:` (a larger one would be refused there).
  EXPECT_NE(message({"a.yaml", "--seed", "18446744073709551615"}).find("from 0 to 2^63-1"),
            std::string::npos);
  EXPECT_TRUE(message({"a.yaml", "--seed", "9223372036854775807"}).empty());
  EXPECT_NE(message({"a.yaml", "--seed"}).find("--seed: expected a value"), std::string::npos);
}

TEST(CliArgs, ValidatorsSayWhatTheyExpect) {
  auto message = [](std::vector<std::string> args) {
    try {
      parse_experiment_args(args, "engine run", [](CLI::App& app) {
        static std::string device;
        static int jobs = 0;
        app.add_option("--device", device)->check(cli::one_of({"cpu", "cuda"}));
        app.add_option("--jobs", jobs)->check(cli::integer_in(1, 4096));
      });
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message({"a.yaml", "--device", "tpu"}),
            "engine run: --device: expected cpu or cuda, got 'tpu'");
  EXPECT_EQ(message({"a.yaml", "--jobs", "0"}),
            "engine run: --jobs: expected an integer in [1, 4096], got '0'");
  EXPECT_EQ(message({"a.yaml", "--jobs", "12x"}),
            "engine run: --jobs: expected an integer in [1, 4096], got '12x'");
  EXPECT_EQ(message({"a.yaml", "--device=cuda", "--jobs=4"}), "");
}

TEST(CliArgs, HelpIsNotAnError) {
  EXPECT_THROW(parse_experiment_args({"--help"}, "sim run"), HelpShown);
  EXPECT_THROW(parse_experiment_args({"a.yaml", "-h"}, "sim run"), HelpShown);
}

}  // namespace
}  // namespace servelab
