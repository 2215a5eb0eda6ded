// `sim trace stats` and `sim trace convert` as a user runs them: output, files, exit codes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "serving/home.h"
#include "tests/test_util.h"

namespace {

namespace fs = std::filesystem;

using servelab::test_util::Cli;

Cli sim(const std::string& args) {
  static const fs::path dir = servelab::test_util::temp_dir("trace_cli");
  return servelab::test_util::run_sim(args, dir);
}

const std::string kRoot = servelab::servelab_home().string();

TEST(TraceCli, StatsOfTheShippedTraces) {
  const Cli conv =
      sim("trace stats " + kRoot + "/traces/azure2023/AzureLLMInferenceTrace_conv.csv");
  ASSERT_EQ(conv.code, 0) << conv.err;
  EXPECT_NE(conv.out.find("19366"), std::string::npos) << conv.out;
  EXPECT_NE(conv.out.find("3501.7 s"), std::string::npos) << conv.out;
  const Cli moon = sim("trace stats " + kRoot + "/traces/mooncake/conversation_trace.jsonl");
  ASSERT_EQ(moon.code, 0) << moon.err;
  EXPECT_NE(moon.out.find("12031"), std::string::npos) << moon.out;
  EXPECT_NE(moon.out.find("36.64 %"), std::string::npos) << moon.out;
}

TEST(TraceCli, ConvertThenStatsAgree) {
  const fs::path out =
      fs::temp_directory_path() / ("converted_" + std::to_string(::getpid()) + ".csv");
  const Cli conv =
      sim("trace convert " + kRoot + "/traces/mooncake/synthetic_trace.jsonl " + out.string());
  ASSERT_EQ(conv.code, 0) << conv.err;
  const Cli a = sim("trace stats " + kRoot + "/traces/mooncake/synthetic_trace.jsonl");
  const Cli b = sim("trace stats " + out.string());
  ASSERT_EQ(b.code, 0) << b.err;
  // Everything after the first line (which names the file and format) is identical.
  EXPECT_EQ(a.out.substr(a.out.find('\n')), b.out.substr(b.out.find('\n')));
  fs::remove(out);
}

TEST(TraceCli, BadInputIsExitCode2) {
  EXPECT_EQ(sim("trace stats /nonexistent.csv").code, 2);
  EXPECT_EQ(sim("trace frobnicate").code, 2);
  EXPECT_EQ(sim("trace").code, 2);
  const fs::path bad = fs::temp_directory_path() / ("bad_" + std::to_string(::getpid()) + ".csv");
  std::ofstream(bad)
      << "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,12,x\n";
  const Cli c = sim("trace stats " + bad.string() + " --format azure");
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find(":2:"), std::string::npos) << c.err;  // names the line
  fs::remove(bad);
}

}  // namespace
