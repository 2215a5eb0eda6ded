// `sim trace stats` and `sim trace convert` as a user runs them: output, files, exit codes.
#include <gtest/gtest.h>
#include <sys/stat.h>
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
using servelab::test_util::temp_dir;

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
  const fs::path out = temp_dir("trace_cli_converted") / "converted.csv";
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
  const fs::path bad = temp_dir("trace_cli_bad") / "bad.csv";
  std::ofstream(bad)
      << "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,12,x\n";
  const Cli c = sim("trace stats " + bad.string() + " --format azure");
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find(":2:"), std::string::npos) << c.err;  // names the line
  fs::remove(bad);
}

// Detection reads headers as the readers do (spaces after commas), takes a .jsonl for Mooncake
// only when its rows have a timestamp, and names a file in the current folder as given.
TEST(TraceCli, FormatDetection) {
  const fs::path dir = temp_dir("trace_cli_detect");
  std::ofstream(dir / "az.csv") << "TIMESTAMP, ContextTokens,  GeneratedTokens\n"
                                   "2023-11-16 18:15:46.6805900,374,44\n";
  const Cli az = servelab::test_util::run_program("sim", "trace stats az.csv", dir / "o.txt",
                                                  dir / "e.txt", "cd " + dir.string() + " && ");
  ASSERT_EQ(az.code, 0) << az.err;
  EXPECT_NE(az.out.find("azure trace az.csv\n"), std::string::npos) << az.out;
  std::ofstream(dir / "other.jsonl") << "{\"arrival\": 1, \"prompt\": 10}\n";
  const Cli other = sim("trace stats " + (dir / "other.jsonl").string());
  EXPECT_EQ(other.code, 2);
  EXPECT_NE(other.err.find("other.jsonl:1: expected a Mooncake trace row"), std::string::npos)
      << other.err;
  EXPECT_NE(other.err.find("type: jsonl"), std::string::npos) << other.err;
  fs::remove_all(dir);
}

// A legal row of a hundred million tokens: the length histogram is sparse past 2^20, so its
// memory follows the rows, not the largest length (a 1.75 GB vector before).
TEST(TraceCli, StatsOfHugeLengthsStaySmall) {
  const fs::path big = temp_dir("trace_cli_big") / "big.csv";
  std::ofstream(big) << "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                        "2023-11-16 18:15:46.6805900,100000000,7\n"
                        "2023-11-16 18:15:47.6805900,12,2000000000\n"
                        "2023-11-16 18:15:48.6805900,12,7\n";
  const Cli c = sim("trace stats " + big.string() + " --format azure");
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("100000000"), std::string::npos) << c.out;   // the input's max and p99
  EXPECT_NE(c.out.find("2000000000"), std::string::npos) << c.out;  // the output's
  fs::remove(big);
}

// Issue 15: `sim trace convert IN OUT` overwrote OUT silently, left it empty when a later row
// was bad, and with IN = OUT wiped the input.
TEST(TraceCli, ConvertNeverLosesData) {
  const fs::path dir = servelab::test_util::temp_dir("trace_convert_safety");
  const std::string good = (dir / "good.csv").string(), out = (dir / "out.csv").string();
  const std::string trace =
      "arrival_ns,prompt_tokens,output_tokens,priority,tenant,segments\n0,10,5,0,0,1:0:10\n1000,20,"
      "5,0,0,2:0:20\n2000,30,5,0,0,3:0:30\n";
  servelab::test_util::write_file(good, trace);
  servelab::test_util::write_file(out, "precious\n");
  // An existing OUT: refused without --force.
  Cli c = sim("trace convert " + good + " " + out);
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find("--force"), std::string::npos) << c.err;
  EXPECT_EQ(servelab::test_util::read_file(out), "precious\n");
  // A bad row after good ones: OUT keeps its old content (written to a temporary, renamed on
  // success only), and no temporary is left behind.
  const std::string bad = (dir / "bad.csv").string();
  servelab::test_util::write_file(bad, trace + "3000,x,5,0,0,4:0:5\n");
  c = sim("trace convert " + bad + " " + out + " --format servelab --force");
  EXPECT_EQ(c.code, 2) << c.err;
  EXPECT_EQ(servelab::test_util::read_file(out), "precious\n");
  for (const auto& e : fs::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }
  // IN = OUT: refused even with --force, also through another spelling of the path.
  const std::string same = (dir / "." / "good.csv").string();
  c = sim("trace convert " + good + " " + same + " --force");
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find("input"), std::string::npos) << c.err;
  EXPECT_EQ(servelab::test_util::read_file(good), trace);
  // --force replaces an existing OUT with the converted trace.
  c = sim("trace convert " + good + " " + out + " --force");
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(servelab::test_util::read_file(out).find("arrival_ns"), std::string::npos);
}

// An output that is not a regular file: a symlink is refused (never followed, never replaced),
// even with --force; a FIFO or a character device (/dev/null) is a stream, written in place
// without --force and left what it was (a rename onto it would replace it by a regular file).
TEST(TraceCli, OutputsThatAreNotRegularFiles) {
  const fs::path dir = servelab::test_util::temp_dir("trace_convert_special");
  const std::string good = (dir / "good.csv").string();
  servelab::test_util::write_file(
      good, "arrival_ns,prompt_tokens,output_tokens,priority,tenant,segments\n0,10,5,0,0,1:0:10\n");
  servelab::test_util::write_file(dir / "target.csv", "precious\n");
  fs::create_symlink(dir / "target.csv", dir / "link.csv");
  Cli c = sim("trace convert " + good + " " + (dir / "link.csv").string() + " --force");
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find("symlink"), std::string::npos) << c.err;
  EXPECT_TRUE(fs::is_symlink(dir / "link.csv"));
  EXPECT_EQ(servelab::test_util::read_file(dir / "target.csv"), "precious\n");
  // A FIFO: the converted trace comes out of it, and it stays a FIFO.
  const fs::path fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string reader_and_writer =
      "cat '" + fifo.string() + "' > '" + (dir / "read.csv").string() + "' & " +
      servelab::servelab_program("sim") + " trace convert '" + good + "' '" + fifo.string() +
      "' 2> '" + (dir / "err.txt").string() + "'; r=$?; wait; exit $r";
  const int status = std::system(("bash -c \"" + reader_and_writer + "\"").c_str());
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0)
      << servelab::test_util::read_file(dir / "err.txt");
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(fifo)));
  EXPECT_NE(servelab::test_util::read_file(dir / "read.csv").find("arrival_ns"), std::string::npos);
  // /dev/null: accepted without --force, and still a character device afterwards.
  c = sim("trace convert " + good + " /dev/null");
  EXPECT_EQ(c.code, 0) << c.err;
  EXPECT_TRUE(fs::is_character_file(fs::status("/dev/null")));
  for (const auto& e : fs::directory_iterator("/dev")) {
    EXPECT_EQ(e.path().filename().string().rfind(".null.tmp", 0), std::string::npos) << e.path();
  }
}

// Ctrl-C while the input is a pipe with nothing to read yet: the read, cut short by the signal,
// is the interrupt (exit 130, nothing written), not a "read error" (exit 2).
TEST(TraceCli, AnInterruptWhileReadingAPipeIsAnInterrupt) {
  const fs::path dir = servelab::test_util::temp_dir("trace_convert_fifo_int");
  const fs::path fifo = dir / "in.csv";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // A writer that sends the header and then waits (the reader blocks on the rest).
  const std::string script =
      "(printf 'arrival_ns,prompt_tokens,output_tokens,priority,tenant,segments\\n'; sleep 4) > '" +
      fifo.string() + "' & timeout --foreground --preserve-status -s INT 1 " +
      servelab::servelab_program("sim") + " trace convert '" + fifo.string() + "' '" +
      (dir / "out.csv").string() + "' --format servelab 2> '" + (dir / "err.txt").string() +
      "'; r=\\$?; kill %1 2>/dev/null; wait; exit \\$r";
  const int status = std::system(("bash -c \"" + script + "\"").c_str());
  const std::string err = servelab::test_util::read_file(dir / "err.txt");
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 130) << err;
  EXPECT_NE(err.find("interrupted"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(dir / "out.csv"));
}

}  // namespace
