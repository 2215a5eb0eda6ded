// The command-line parsing shared by `sim run`, `sim compare` and `engine run`.
#include "serving/cli_args.h"

#include <gtest/gtest.h>

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
  const ExperimentArgs a = parse_experiment_args(
      {"e.yaml", "--device", "cpu"}, "engine run",
      [&](const std::string& flag, const std::function<std::string()>& value) {
        if (flag != "--device") return false;
        device = value();
        return true;
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
  EXPECT_NE(message({"a.yaml", "--seed", "-3"}).find("non-negative"), std::string::npos);
}

}  // namespace
}  // namespace servelab
