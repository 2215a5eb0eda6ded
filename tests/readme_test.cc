// README.md's quick start shows what `sim run experiments/burst.yaml` prints. This test runs that
// command and checks the README's transcript line by line, so a change that moves simulated
// numbers (the cost model, a hardware entry) says that the README needs the new transcript.
// The wall time is a measurement and is not compared; a README line ending in "..." is a prefix.
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "serving/home.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using namespace test_util;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find("wall time") == std::string::npos) lines.push_back(line);
  }
  return lines;
}

// The README's list of lessons and the lessons' index (docs/lessons/README.md) name every lesson
// of docs/lessons/ (a lesson that the front page omits is one a course instructor does not find).
TEST(Readme, ListsEveryLesson) {
  const std::string readme = read_file(servelab_home() / "README.md");
  const std::string index = read_file(servelab_home() / "docs" / "lessons" / "README.md");
  int lessons = 0;
  for (const auto& entry : fs::directory_iterator(servelab_home() / "docs" / "lessons")) {
    const fs::path& path = entry.path();
    if (path.extension() != ".md" || path.filename() == "README.md") continue;
    ++lessons;
    const std::string link = "(docs/lessons/" + path.filename().string() + ")";
    EXPECT_NE(readme.find(link), std::string::npos) << "README.md does not link " << link;
    EXPECT_NE(index.find("(" + path.filename().string() + ")"), std::string::npos)
        << "docs/lessons/README.md does not link " << path.filename();
  }
  EXPECT_GE(lessons, 20) << "docs/lessons/ not found";
}

TEST(Readme, QuickStartTranscriptIsWhatSimPrints) {
  const std::string readme = read_file(servelab_home() / "README.md");
  const std::string opening = "```\nburst: ";
  const std::size_t begin = readme.find(opening);
  ASSERT_NE(begin, std::string::npos) << "README.md has no `sim run` transcript";
  const std::size_t end = readme.find("```", begin + 4);
  ASSERT_NE(end, std::string::npos);
  const std::vector<std::string> expected = lines_of(readme.substr(begin + 4, end - (begin + 4)));

  // From a scratch folder, so that the run folder is out/burst/ as the README shows.
  const fs::path dir = temp_dir("readme");
  const std::string cmd = "cd '" + dir.string() + "' && " + servelab_program("sim") + " run '" +
                          (servelab_home() / "experiments" / "burst.yaml").string() +
                          "' > stdout.txt 2> stderr.txt";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_file(dir / "stderr.txt");
  const std::vector<std::string> got = lines_of(read_file(dir / "stdout.txt"));

  ASSERT_EQ(got.size(), expected.size()) << read_file(dir / "stdout.txt");
  for (std::size_t i = 0; i < got.size(); ++i) {
    const std::string& want = expected[i];
    if (want.size() >= 3 && want.compare(want.size() - 3, 3, "...") == 0) {
      EXPECT_EQ(got[i].substr(0, want.size() - 3), want.substr(0, want.size() - 3)) << i;
    } else {
      EXPECT_EQ(got[i], want) << "README.md transcript line " << i;
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
