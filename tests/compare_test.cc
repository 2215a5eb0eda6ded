// `sim compare`: variant parsing, validation before running, and outputs equal to single runs.
#include "sim/compare.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "serving/config_node.h"
#include "sim/optional_columns.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;

using servelab::test_util::read_file;

fs::path temp_dir(const std::string& name) { return servelab::test_util::temp_dir("cmp_" + name); }

const char* kExperiment =
    "name: cmp\nseed: 3\nmodel: tiny\nhardware: H100-SXM\n"
    "serving: {block_size: 16, num_gpu_blocks: 40, max_model_len: 512}\n"
    "workload:\n  type: synthetic\n  num_requests: 80\n  arrival: {process: poisson, rate: 400}\n"
    "  prompt_len: {dist: uniform, min: 20, max: 300}\n"
    "  output_len: {dist: uniform, min: 5, max: 80}\n"
    "  shared_prefix: {num_prefixes: 2, length: 64, fraction: 0.6}\n"
    "compare:\n"
    "  - name: base\n    set: {}\n"
    "  - name: sjf\n    set: {policies.queue: sjf}\n"
    "  - name: nocache\n    set: {policies.prefix_cache: none}\n";

TEST(Compare, ParsesVariantArguments) {
  const Variant v = parse_variant("small:serving.max_num_seqs=4,policies.queue=sjf");
  EXPECT_EQ(v.name, "small");
  EXPECT_EQ(v.overrides,
            (std::vector<std::string>{"serving.max_num_seqs=4", "policies.queue=sjf"}));
  // A value may be a YAML flow list or mapping: commas inside it are its own.
  EXPECT_EQ(parse_variant("p:workload.arrival={process: poisson, rate: 4},seed=2,"
                          "cluster.pools=[{name: a}, {name: 'b,c'}]")
                .overrides,
            (std::vector<std::string>{"workload.arrival={process: poisson, rate: 4}", "seed=2",
                                      "cluster.pools=[{name: a}, {name: 'b,c'}]"}));
  EXPECT_THROW(parse_variant("nocolon"), ConfigError);
  EXPECT_THROW(parse_variant("x:novalue"), ConfigError);
  EXPECT_THROW(parse_variant("bad name:a=1"), ConfigError);
  // A key twice in one variant: the first value would be silently dropped.
  try {
    parse_variant("a:serving.block_size=32,serving.block_size=64");
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("key 'serving.block_size' is given twice"),
              std::string::npos)
        << e.what();
  }
  // A section after a key inside it would drop the key; the key after its section refines it.
  try {
    parse_variant("a:workload.arrival.rate=4,workload.arrival={process: poisson, rate: 8}");
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("key 'workload.arrival' replaces workload.arrival.rate"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(parse_variant("a:workload.arrival={process: poisson, rate: 8},workload.arrival.rate=4")
                .overrides.size(),
            2u);
}

TEST(Compare, ReadsTheCompareSectionAndRejectsMistakes) {
  const fs::path dir = temp_dir("section");
  std::ofstream(dir / "e.yaml") << kExperiment;
  const std::vector<Variant> vs = variants_from_experiment((dir / "e.yaml").string());
  ASSERT_EQ(vs.size(), 3u);
  EXPECT_EQ(vs[1].name, "sjf");
  EXPECT_EQ(vs[1].overrides, (std::vector<std::string>{"policies.queue=sjf"}));
  std::ofstream(dir / "dup.yaml") << "compare:\n  - name: a\n  - name: a\n";
  try {
    variants_from_experiment((dir / "dup.yaml").string());
    FAIL() << "duplicate accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("dup.yaml:3:"), std::string::npos) << e.what();
  }
  std::ofstream(dir / "inner.yaml")
      << "compare:\n  - name: a\n    set:\n      serving.block_size: 32\n"
         "      serving: {block_size: 16}\n";
  try {
    variants_from_experiment((dir / "inner.yaml").string());
    FAIL() << "a section replacing a key set before it accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("inner.yaml:5:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("replaces serving.block_size"), std::string::npos)
        << e.what();
  }
  std::ofstream(dir / "key.yaml") << "compare:\n  - name: a\n    sett: {}\n";
  EXPECT_THROW(variants_from_experiment((dir / "key.yaml").string()), ConfigError);
  fs::remove_all(dir);
}

TEST(Compare, VariantsEqualSingleRunsAndFailFastOnBadOverrides) {
  const fs::path dir = temp_dir("runs");
  std::ofstream(dir / "e.yaml") << kExperiment;
  const std::string exp = (dir / "e.yaml").string();
  const auto results =
      run_compare(exp, variants_from_experiment(exp), {}, (dir / "out").string(), false);
  ASSERT_EQ(results.size(), 3u);
  // The sjf variant's folder is exactly what `sim run --set policies.queue=sjf` writes.
  RunOptions o;
  o.out_dir = (dir / "single").string();
  run_simulation(load_experiment(exp, {"policies.queue=sjf"}), o);
  for (const char* f : {"summary.json", "requests.csv", "steps.csv"}) {
    EXPECT_EQ(read_file(dir / "out" / "sjf" / f), read_file(dir / "single" / f)) << f;
  }
  // Same workload in every variant; the cache matters here.
  EXPECT_EQ(results[0].run.summary.num_requests, results[2].run.summary.num_requests);
  EXPECT_GT(results[0].run.summary.prefix_hit_tokens, 0);
  EXPECT_EQ(results[2].run.summary.prefix_hit_tokens, 0);
  std::istringstream csv(read_file(dir / "out" / "compare.csv"));
  std::string line;
  int rows = 0;
  while (std::getline(csv, line)) ++rows;
  EXPECT_EQ(rows, 4);  // header + 3 variants
  // A bad override in the last variant is reported before anything runs.
  fs::remove_all(dir / "out2");
  EXPECT_THROW(run_compare(exp, {{"ok", {}, {}}, {"bad", {"policies.queue=lifo"}, {}}}, {},
                           (dir / "out2").string(), false),
               ConfigError);
  EXPECT_FALSE(fs::exists(dir / "out2"));
  // So are two variants of one name (one run folder would overwrite the other), and a --set of
  // the compare: section (the variants are read from the file).
  try {
    run_compare(exp, {{"a", {"serving.block_size=32"}, {}}, {"a", {}, {}}}, {},
                (dir / "out2").string(), false);
    FAIL() << "duplicate accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("variant 'a' is given twice"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(
      run_compare(exp, {{"a", {}, {}}}, {"compare[0].name=b"}, (dir / "out2").string(), false),
      ConfigError);
  EXPECT_FALSE(fs::exists(dir / "out2"));
  // So is a value only the workload reads, and a variant's value is named where the file has it.
  const std::string base = kExperiment;
  test_util::write_file(dir / "late.yaml", base.substr(0, base.find("compare:")) + R"(compare:
  - name: ok
    set: {}
  - name: slow-typo
    set: {workload.arrival.rate: fast}
)");
  const test_util::Cli late = test_util::run_sim(
      "compare " + (dir / "late.yaml").string() + " --out " + (dir / "out3").string(), dir);
  EXPECT_EQ(late.code, 2);
  EXPECT_NE(late.err.find("variant 'slow-typo': " + (dir / "late.yaml").string() + ":"),
            std::string::npos)
      << late.err;
  EXPECT_NE(late.err.find("expected a number, got 'fast'"), std::string::npos) << late.err;
  EXPECT_FALSE(fs::exists(dir / "out3"));
  EXPECT_FALSE(fs::exists(dir / "out2" / "ok"));
  // A key the command line sets that a variant sets otherwise: an error naming both values and
  // where the variant sets it (the variant's value used to win silently); the same value is fine.
  test_util::write_file(dir / "seeded.yaml", base.substr(0, base.find("compare:")) + R"(compare:
  - name: a
    set: {}
  - name: five
    set: {seed: 5}
)");
  const test_util::Cli seeded = test_util::run_sim(
      "compare " + (dir / "seeded.yaml").string() + " --seed 9 --out " + (dir / "out4").string(),
      dir);
  EXPECT_EQ(seeded.code, 2);
  EXPECT_NE(seeded.err.find("variant 'five': " + (dir / "seeded.yaml").string() + ":"),
            std::string::npos)
      << seeded.err;
  EXPECT_NE(seeded.err.find("sets seed to 5, but the command line gives 9 (--set seed or --seed)"),
            std::string::npos)
      << seeded.err;
  EXPECT_FALSE(fs::exists(dir / "out4"));
  EXPECT_EQ(test_util::run_sim("compare " + (dir / "seeded.yaml").string() + " --seed 5 -q --out " +
                                   (dir / "out4").string(),
                               dir)
                .code,
            0);
  // A variant key holding the command line's (or held by it) would replace it: refused too.
  const test_util::Cli held =
      test_util::run_sim("compare " + exp +
                             " --set workload.arrival.rate=9 --variant "
                             "'p:workload.arrival={process: poisson, rate: 3}' --out " +
                             (dir / "out5").string(),
                         dir);
  EXPECT_EQ(held.code, 2);
  EXPECT_NE(held.err.find("sets workload.arrival, which holds the command line's --set "
                          "workload.arrival.rate"),
            std::string::npos)
      << held.err;
  // An experiment or trace inside the folder a comparison replaces (an earlier variant's
  // config.yaml or requests.csv) is refused: the variant folders would be replaced or removed.
  ASSERT_TRUE(fs::exists(dir / "out" / "base" / "config.yaml"));
  const std::string kept = read_file(dir / "out" / "base" / "config.yaml");
  const test_util::Cli own = test_util::run_sim(
      "compare " + (dir / "out" / "base" / "config.yaml").string() +
          " --variant base:seed=1 --variant c:seed=2 -q --out " + (dir / "out").string(),
      dir);
  EXPECT_EQ(own.code, 2);
  EXPECT_NE(own.err.find("an input of the run is in its output folder"), std::string::npos)
      << own.err;
  EXPECT_EQ(read_file(dir / "out" / "base" / "config.yaml"), kept);
  EXPECT_TRUE(fs::exists(dir / "out" / "sjf" / "summary.json"));
  const std::string trace = base.substr(0, base.find("workload:")) +
                            "workload: {type: csv, path: out/sjf/requests.csv, columns: {arrival: "
                            "arrival_s, prompt_tokens: prompt_tokens, output_tokens: "
                            "output_tokens}}\n";
  test_util::write_file(dir / "replay.yaml", trace);
  const test_util::Cli replay = test_util::run_sim(
      "compare " + (dir / "replay.yaml").string() +
          " --variant a: --variant b:serving.max_num_seqs=8 -q --out " + (dir / "out").string(),
      dir);
  EXPECT_EQ(replay.code, 2) << replay.err;
  EXPECT_NE(replay.err.find("requests.csv: an input of the run is in its output folder"),
            std::string::npos)
      << replay.err;
  EXPECT_TRUE(fs::exists(dir / "out" / "sjf" / "requests.csv"));
  // A variant where nothing completes has no latencies: "-" in the table, empty fields in
  // compare.csv (zeros read as the best latency there is); one-token outputs have no TPOT.
  const test_util::Cli empty =
      test_util::run_sim("compare " + exp +
                             " --variant ok: --variant none:serving.max_model_len=8 --variant "
                             "'one:workload.output_len={dist: uniform, min: 1, max: 1}' --out " +
                             (dir / "out7").string(),
                         dir);
  ASSERT_EQ(empty.code, 0) << empty.err;
  std::map<std::string, std::map<std::string, std::string>> by_variant;
  for (const auto& row : test_util::read_csv(dir / "out7" / "compare.csv")) {
    by_variant[row.at("variant")] = row;
  }
  EXPECT_EQ(by_variant["none"]["completed"], "0");
  for (const char* col : {"ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "e2e_p50_ms"})
    EXPECT_EQ(by_variant["none"][col], "") << col;
  EXPECT_EQ(by_variant["one"]["tpot_p50_ms"], "");
  EXPECT_NE(by_variant["one"]["ttft_p50_ms"], "");
  EXPECT_NE(by_variant["ok"]["tpot_p50_ms"], "");
  std::istringstream table(empty.out);
  bool none_row = false;
  for (std::string row_text; std::getline(table, row_text);) {
    const std::string& line = row_text;
    if (!line.starts_with("none ")) continue;
    none_row = true;
    std::istringstream cells(line);
    std::vector<std::string> c;
    for (std::string x; cells >> x;) c.push_back(x);
    ASSERT_GE(c.size(), 6u) << line;
    EXPECT_EQ(c[2], "-") << line;  // TTFT p50
    EXPECT_EQ(c[5], "-") << line;  // TPOT p99
  }
  EXPECT_TRUE(none_row) << empty.out;
  // An error only the run finds (the model's positions) names the variant too.
  const test_util::Cli longer = test_util::run_sim(
      "compare " + exp + " --variant ok: --variant 'long:serving.max_model_len=4096' --out " +
          (dir / "out6").string(),
      dir);
  EXPECT_EQ(longer.code, 2);
  EXPECT_NE(longer.err.find("variant 'long': --set serving.max_model_len: key "
                            "'serving.max_model_len'"),
            std::string::npos)
      << longer.err;
  EXPECT_FALSE(fs::exists(dir / "out6"));
  fs::remove_all(dir);
}

// A relative experiment path not in the current folder is read from the ServeLab home, as
// `sim run` reads it (a lesson's `sim compare experiments/...` from any folder).
TEST(Compare, ExperimentsResolveThroughTheHomeAsSimRunDoes) {
  const fs::path dir = temp_dir("home");
  const test_util::Cli c = test_util::run_program(
      "sim",
      "compare experiments/burst-tiny.yaml --set workload.num_requests=10 -q "
      "--variant a:seed=1 --variant b:policies.queue=sjf --out out",
      dir / "stdout.txt", dir / "stderr.txt", "cd '" + dir.string() + "' && ");
  EXPECT_EQ(c.code, 0) << c.err;
  EXPECT_TRUE(fs::exists(dir / "out/compare.csv"));
  const std::vector<Variant> from_home = variants_from_experiment("experiments/policies.yaml");
  EXPECT_GT(from_home.size(), 5u);
  fs::remove_all(dir);
}

// The printed table's variant column is as wide as the longest name: every row's numbers start
// at the header's columns.
TEST(Compare, TableColumnsFitTheLongestVariantName) {
  std::vector<VariantResult> results(2);
  results[0].variant.name = "short";
  results[1].variant.name = "a-variant-name-of-thirty-chars";
  results[1].run.summary.requests_per_s = 12.5;
  char* buf = nullptr;
  std::size_t size = 0;
  std::FILE* out = open_memstream(&buf, &size);
  ASSERT_NE(out, nullptr);
  print_compare_table(out, results);
  std::fclose(out);
  std::istringstream lines(std::string(buf, size));
  std::free(buf);
  std::vector<std::string> rows;
  for (std::string line; std::getline(lines, line);) rows.push_back(line);
  ASSERT_EQ(rows.size(), 4u);
  const std::size_t req_end = rows[0].find("req/s") + 5;  // right-aligned numbers end here
  EXPECT_EQ(rows[2].find(" 0.00 "), req_end - 5);
  EXPECT_EQ(rows[3].find(" 12.50 "), req_end - 6);
  EXPECT_EQ(rows[3].rfind("a-variant-name-of-thirty-chars", 0), 0u);
}

// The optional columns: none for runs on one GPU without overload control; GPUs and goodput per
// GPU as soon as one run has several, each row filled (a run of unknown GPUs shows 0), and
// the table's header ends where its rows do.
TEST(Compare, OptionalColumnsAppearWhenARunNeedsThem) {
  RunSummary one, four, shed;
  one.gpus = 1;
  one.goodput_requests_per_s = 3;
  four.gpus = 4;
  four.goodput_requests_per_s = 10;
  shed.gpus = 1;
  shed.report_overload = true;
  shed.shed = 7;
  OptionalColumns columns;
  columns.add(one);
  EXPECT_EQ(columns.csv_header(), "");
  EXPECT_EQ(columns.csv_row(one), "");
  EXPECT_EQ(columns.table_header(0), "");
  columns.add(four);
  EXPECT_EQ(columns.csv_header(), ",gpus,goodput_per_gpu");
  EXPECT_EQ(columns.csv_row(four), ",4,2.500000");
  EXPECT_EQ(columns.csv_row(one), ",1,3.000000");
  RunSummary unknown;  // `sim bench`: gpus 0
  unknown.goodput_requests_per_s = 2;
  EXPECT_EQ(columns.csv_row(unknown), ",0,0.000000");
  columns.add(shed);
  EXPECT_EQ(columns.csv_header(), ",gpus,goodput_per_gpu,shed,capped");
  EXPECT_EQ(columns.csv_row(shed), ",1,0.000000,7,0");
  for (const RunSummary& s : {one, four, shed}) {
    EXPECT_EQ(columns.table_row(s).size(), columns.table_header(0).size());
  }
  EXPECT_EQ(columns.table_header(0), "  GPUs   goodput    shed  capped");
  EXPECT_EQ(columns.table_row(four), "     4     2.500       0       0");
  EXPECT_EQ(columns.table_header(1), std::string(12, ' ') + "/GPU");  // under `goodput`
}

// A comparison of cluster sizes: compare.csv's gpus are every pool's replicas x GPUs, and its
// goodput per GPU divides the variant's goodput by them.
TEST(Compare, ClusterVariantsReportTheirGpus) {
  const fs::path dir = temp_dir("gpus");
  const std::string base = kExperiment;
  test_util::write_file(dir / "e.yaml", base.substr(0, base.find("compare:")) + R"(compare:
  - name: one
    set: {}
  - name: three
    set: {cluster.pools: [{name: a, count: 3}]}
)");
  const test_util::Cli cli = test_util::run_sim(
      "compare " + (dir / "e.yaml").string() + " --out " + (dir / "out").string(), dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  const auto rows = test_util::read_csv(dir / "out" / "compare.csv");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("gpus"), "1");
  EXPECT_EQ(rows[1].at("gpus"), "3");
  EXPECT_NEAR(std::stod(rows[1].at("goodput_per_gpu")),
              std::stod(rows[1].at("goodput_requests_per_s")) / 3, 1e-6);
  const nlohmann::json summary =
      nlohmann::json::parse(read_file(dir / "out" / "three" / "summary.json"));
  EXPECT_EQ(summary["run"]["gpus"], 3);
  EXPECT_EQ(summary["cluster"]["gpus"], 3);
  EXPECT_NEAR(summary["goodput"]["requests_per_s_per_gpu"].get<double>(),
              summary["goodput"]["requests_per_s"].get<double>() / 3, 1e-12);
  EXPECT_NE(cli.out.find("GPUs"), std::string::npos) << cli.out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
