// `sim plot`: every figure is written, non-empty and valid for its format (PNG signature, SVG
// root element, PDF header), the same inputs give the same bytes, and bad arguments exit with
// code 2 naming the folder. Skipped when the plot interpreter cannot import matplotlib.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include "serving/home.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using namespace test_util;

bool have_matplotlib() {
  const char* py = std::getenv("SERVELAB_PYTHON");
  const std::string python = py && *py ? py : "/usr/bin/python3";
  const std::string cmd = python + " -c 'import matplotlib' > /dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

#define SKIP_WITHOUT_MATPLOTLIB()                                                             \
  if (!have_matplotlib()) {                                                                   \
    GTEST_SKIP() << "/usr/bin/python3 cannot import matplotlib (apt-get install "             \
                    "python3-matplotlib, as scripts/bootstrap does); sim plot tests skipped"; \
  }

// A small synthetic experiment on Llama-3-8B / H100 without its `sweep:` section, for the sweep
// figures' tests.
std::string small_experiment(const std::string& name, int num_requests) {
  return "name: " + name +
         "\nmodel: Llama-3-8B\nhardware: H100-SXM\nworkload:\n  type: synthetic\n"
         "  num_requests: " +
         std::to_string(num_requests) +
         "\n  arrival: {process: poisson, rate: 8}\n"
         "  prompt_len: {dist: uniform, min: 16, max: 200}\n"
         "  output_len: {dist: uniform, min: 4, max: 40}\n";
}

void expect_valid(const fs::path& p, const std::string& format) {
  ASSERT_TRUE(fs::exists(p)) << p << " was not written";
  const std::string bytes = read_file(p);
  ASSERT_GT(bytes.size(), 1000u) << p << " is (nearly) empty";
  if (format == "png") {
    EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << p;
  } else if (format == "svg") {
    EXPECT_NE(bytes.find("<svg"), std::string::npos) << p;
    EXPECT_NE(bytes.find("</svg>"), std::string::npos) << p;
  } else {
    EXPECT_EQ(bytes.substr(0, 5), "%PDF-") << p;
    EXPECT_NE(bytes.find("%%EOF"), std::string::npos) << p;
  }
}

// The burst experiment, cut to a few hundred requests so the test takes seconds, with every
// optional recording on.
fs::path burst_run(const fs::path& dir, int requests) {
  const Cli r = run_sim("run " + servelab_home().string() +
                            "/experiments/burst.yaml --quiet --record-schedule --record-events "
                            "--record-blocks --set workload.num_requests=" +
                            std::to_string(requests) + " --out " + (dir / "burst").string(),
                        dir);
  EXPECT_EQ(r.code, 0) << r.err;
  return dir / "burst";
}

TEST(Plot, BurstRunGivesEveryFigureAsPng) {
  SKIP_WITHOUT_MATPLOTLIB();
  const fs::path dir = temp_dir("plot_png");
  const fs::path run = burst_run(dir, 400);
  const Cli p = run_sim("plot " + run.string(), dir);
  ASSERT_EQ(p.code, 0) << p.err;
  for (const char* f :
       {"latency-cdf", "burst-throughput", "burst-batch", "burst-gantt", "burst-kv-blocks"}) {
    expect_valid(run / "figures" / (std::string(f) + ".png"), "png");
  }
  // A run folder holding figures/ is still a run folder `sim run` may overwrite.
  const Cli again = run_sim("run " + servelab_home().string() +
                                "/experiments/burst.yaml --quiet --set workload.num_requests=50 "
                                "--out " +
                                run.string(),
                            dir);
  EXPECT_EQ(again.code, 0) << again.err;
}

// A run folder whose CSVs are not ServeLab's (a garbage requests.csv, a steps.csv with a word
// for a number) is exit 2 naming the file and what is wrong, not empty figures or a traceback.
TEST(Plot, CorruptCsvFilesNameTheFileAndLine) {
  SKIP_WITHOUT_MATPLOTLIB();
  const fs::path dir = temp_dir("plot_corrupt");
  const fs::path run = burst_run(dir, 50);
  const std::string steps = read_file(run / "steps.csv");
  write_file(run / "requests.csv", "garbage\n");
  Cli p = run_sim("plot " + run.string() + " -o " + (dir / "f1").string(), dir);
  EXPECT_EQ(p.code, 2) << p.err;
  EXPECT_NE(p.err.find("requests.csv:1: no column 'id'"), std::string::npos) << p.err;
  EXPECT_EQ(p.err.find("Traceback"), std::string::npos) << p.err;
  fs::remove(run / "requests.csv");
  std::string bad = steps;
  bad[bad.find('\n') + 1] = 'x';  // the first row's step number
  write_file(run / "steps.csv", bad);
  p = run_sim("plot " + run.string() + " -o " + (dir / "f2").string(), dir);
  EXPECT_EQ(p.code, 2) << p.err;
  EXPECT_NE(p.err.find("steps.csv:2: column 'step': expected a number"), std::string::npos)
      << p.err;
}

// The other files the figures read: a word for an id or a time, a truncated row, a header of
// another shape, a step the schedule names that steps.csv lacks, bytes that are not UTF-8, a
// summary.json field of another type. Each is one line naming the file
// and line, exit 2, and no figure is left behind (the figures are staged).
TEST(Plot, CorruptRecordingsNameTheLineAndLeaveNoFigure) {
  SKIP_WITHOUT_MATPLOTLIB();
  const fs::path dir = temp_dir("plot_corrupt_recordings");
  const fs::path good = burst_run(dir, 50);
  const auto with_line = [](std::string text, int line, const std::string& replacement) {
    std::size_t start = 0;
    for (int i = 1; i < line; ++i) start = text.find('\n', start) + 1;
    const std::size_t end = text.find('\n', start);
    return text.replace(start, end - start, replacement);
  };
  struct Case {
    const char* file;
    int line;
    const char* row;
    const char* message;
  };
  const Case cases[] = {
      {"requests.csv", 3, "1,abc,0,0,0,10,5,0,0,0,0,0,0,0,finished,length",
       "requests.csv:3: column 'arrival_s': expected a number, got 'abc'"},
      {"requests.csv", 3, "1,0.5", "requests.csv:3: expected 16 fields, got 2"},
      {"schedule.csv", 1, "step,foo", "schedule.csv:1: no column 'request'"},
      {"schedule.csv", 2, "999999,0,0,64,prefill",
       "schedule.csv:2: step 999999 is not in steps.csv"},
      {"events.csv", 2, "0.1,abc,preempt,recompute",
       "events.csv:2: column 'request': expected an integer, got 'abc'"},
      {"blocks.csv", 2, "zz,0,1,0.1,0.2", "blocks.csv:2: column 'request': expected an integer"},
      {"requests.csv", 4, "2,0.5,0,0,0,10,5,0,0,0,0,0,0,0,finished,caf\xe9",
       "requests.csv:4: not UTF-8 text"},
      // Line 0: the whole file.
      {"summary.json", 0, "{\"run\": 5}", "summary.json: key 'run': expected an object, got 5"},
      {"summary.json", 0, "{\"cluster\": {\"pools\": [{\"replicas\": [{\"replica\": 0}]}]}}",
       "key 'cluster.pools[0].replicas[0].busy_fraction': expected a number, got null"},
  };
  int n = 0;
  for (const Case& c : cases) {
    const fs::path run = dir / ("bad" + std::to_string(n++));
    fs::copy(good, run, fs::copy_options::recursive);
    write_file(run / c.file, c.line == 0 ? std::string(c.row)
                                         : with_line(read_file(run / c.file), c.line, c.row));
    const Cli p = run_sim("plot " + run.string(), dir);
    EXPECT_EQ(p.code, 2) << c.file << " " << p.err;
    EXPECT_NE(p.err.find(c.message), std::string::npos) << p.err;
    EXPECT_EQ(p.err.find("Traceback"), std::string::npos) << p.err;
    EXPECT_FALSE(fs::exists(run / "figures")) << c.file;
    for (const auto& e : fs::directory_iterator(run)) {
      EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
    }
  }
}

// A folder of figures is `sim plot`'s when its manifest names every file in it: plotting again
// replaces those, a figure of the user's (even one named as sim plot would name it) is refused.
TEST(Plot, OnlyFoldersOfItsOwnFiguresAreWrittenInto) {
  SKIP_WITHOUT_MATPLOTLIB();
  const fs::path dir = temp_dir("plot_manifest");
  const fs::path run = burst_run(dir, 50);
  ASSERT_EQ(run_sim("plot -q " + run.string() + " -o " + (dir / "f").string(), dir).code, 0);
  const std::string manifest = read_file(dir / "f/.servelab-figures");
  EXPECT_NE(manifest.find("latency-cdf.png\n"), std::string::npos) << manifest;
  EXPECT_NE(manifest.find("burst-gantt.png\n"), std::string::npos) << manifest;
  // Again, in another format: both formats are sim plot's.
  ASSERT_EQ(
      run_sim("plot -q --format svg " + run.string() + " -o " + (dir / "f").string(), dir).code, 0);
  EXPECT_NE(read_file(dir / "f/.servelab-figures").find("latency-cdf.svg\n"), std::string::npos);
  EXPECT_NE(read_file(dir / "f/.servelab-figures").find("latency-cdf.png\n"), std::string::npos);
  fs::create_directories(dir / "pics");
  write_file(dir / "pics/latency-cdf.png", "my figure");
  const Cli p = run_sim("plot -q " + run.string() + " -o " + (dir / "pics").string(), dir);
  EXPECT_EQ(p.code, 2);
  EXPECT_NE(p.err.find("holds 'latency-cdf.png', which `sim plot` did not write"),
            std::string::npos)
      << p.err;
  EXPECT_EQ(read_file(dir / "pics/latency-cdf.png"), "my figure");
}

TEST(Plot, SvgAndPdfAreValidAndDeterministic) {
  SKIP_WITHOUT_MATPLOTLIB();
  const fs::path dir = temp_dir("plot_formats");
  const fs::path run = burst_run(dir, 60);
  for (const std::string fmt : {"svg", "pdf"}) {
    const fs::path a = dir / ("a-" + fmt), b = dir / ("b-" + fmt);
    ASSERT_EQ(
        run_sim("plot " + run.string() + " --quiet --format " + fmt + " -o " + a.string(), dir)
            .code,
        0);
    ASSERT_EQ(
        run_sim("plot " + run.string() + " --quiet --format " + fmt + " -o " + b.string(), dir)
            .code,
        0);
    for (const char* f :
         {"latency-cdf", "burst-throughput", "burst-batch", "burst-gantt", "burst-kv-blocks"}) {
      const std::string name = std::string(f) + "." + fmt;
      expect_valid(a / name, fmt);
      EXPECT_EQ(read_file(a / name), read_file(b / name)) << name << " differs between two plots";
    }
  }
}

// Log axes label their decades 10⁰, 10¹, ... in plain text: with mathtext off (labels are run
// and variant names) matplotlib's own labels printed as "$\mathdefault{10^{1}}$". An SVG draws
// each character from a glyph named by its code point: no '$', backslash, '^' or '{' may be drawn,
// and superscript digits must be.
TEST(Plot, LogAxesLabelDecadesWithoutMathtext) {
  SKIP_WITHOUT_MATPLOTLIB();
  const fs::path dir = temp_dir("plot_log_axes");
  const fs::path run = burst_run(dir, 60);
  ASSERT_EQ(
      run_sim("plot " + run.string() + " --quiet --format svg -o " + (dir / "fig").string(), dir)
          .code,
      0);
  const std::string svg = read_file(dir / "fig" / "latency-cdf.svg");  // log x axes
  for (const char* glyph :
       {"DejaVuSans-24\"", "DejaVuSans-5c\"", "DejaVuSans-5e\"", "DejaVuSans-7b\""}) {
    EXPECT_EQ(svg.find(glyph), std::string::npos) << glyph;
  }
  bool superscript = false;
  for (const char* glyph : {"DejaVuSans-b9\"", "DejaVuSans-b2\"", "DejaVuSans-b3\"",
                            "DejaVuSans-2070\"", "DejaVuSans-2074\""}) {
    superscript = superscript || svg.find(glyph) != std::string::npos;
  }
  EXPECT_TRUE(superscript);
  fs::remove_all(dir);
}

// The characters an SVG figure draws, in order: matplotlib draws text as glyphs named by their
// code points ("#DejaVuSans-6e" is 'n'); ASCII only, others as '?'.
std::string svg_text(const std::string& svg) {
  static const std::regex glyph("xlink:href=\"#DejaVuSans-([0-9a-f]+)\"");
  std::string text;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), glyph); it != std::sregex_iterator();
       ++it) {
    const long code = std::stol((*it)[1].str(), nullptr, 16);
    text += code < 128 ? static_cast<char>(code) : '?';
  }
  return text;
}

// A compare whose requests all have one output token has no TPOT: its bars panel says so
// instead of drawing an empty axis (summary.json's tpot_ms has no percentiles then).
TEST(Plot, BarsOfAnEmptyDistributionSayNoneInAnyRun) {
  SKIP_WITHOUT_MATPLOTLIB();
  const fs::path dir = temp_dir("plot_no_tpot");
  const Cli c = run_sim("compare " + servelab_home().string() +
                            "/experiments/burst.yaml --quiet --set workload.num_requests=50 "
                            "--set 'workload.output_len={dist: fixed, value: 1}' "
                            "--variant a:seed=1 --variant b:seed=2 --out " +
                            (dir / "cmp").string(),
                        dir);
  ASSERT_EQ(c.code, 0) << c.err;
  const Cli p = run_sim(
      "plot " + (dir / "cmp").string() + " --quiet --format svg -o " + (dir / "fig").string(), dir);
  ASSERT_EQ(p.code, 0) << p.err;
  const std::string text = svg_text(read_file(dir / "fig" / "cmp-bars.svg"));
  EXPECT_NE(text.find("msnone in any runTPOT (ms)"), std::string::npos) << text;
  EXPECT_NE(text.find("0 in every runpreemptions"), std::string::npos) << text;
  fs::remove_all(dir);
}

TEST(Plot, CompareFolderGivesCurvesAndBars) {
  SKIP_WITHOUT_MATPLOTLIB();
  const fs::path dir = temp_dir("plot_compare");
  const Cli c = run_sim("compare " + servelab_home().string() +
                            "/experiments/burst.yaml --quiet --set workload.num_requests=150 "
                            "--variant fcfs:policies.queue=fcfs --variant sjf:policies.queue=sjf "
                            "--out " +
                            (dir / "cmp").string(),
                        dir);
  ASSERT_EQ(c.code, 0) << c.err;
  const Cli p = run_sim("plot " + (dir / "cmp").string() + " -o " + (dir / "fig").string(), dir);
  ASSERT_EQ(p.code, 0) << p.err;
  for (const char* f : {"latency-cdf", "cmp-bars", "cmp-throughput-latency"}) {
    expect_valid(dir / "fig" / (std::string(f) + ".png"), "png");
  }
  EXPECT_FALSE(fs::exists(dir / "fig" / "cmp-classes.png"));
  // Its variants run one model on one GPU: no decode-steps figure.
  EXPECT_FALSE(fs::exists(dir / "fig" / "cmp-decode-steps.png"));
  // A comparison missing a variant's run folder is incomplete: refused, naming the row (its bars
  // came from compare.csv while its curves were silently left out).
  fs::remove_all(dir / "cmp" / "sjf");
  const Cli missing =
      run_sim("plot " + (dir / "cmp").string() + " -o " + (dir / "fig2").string(), dir);
  EXPECT_EQ(missing.code, 2) << missing.err;
  EXPECT_NE(missing.err.find("compare.csv:3: variant 'sjf' has no run folder"), std::string::npos)
      << missing.err;
  EXPECT_FALSE(fs::exists(dir / "fig2"));
  // A compare.csv with its header only is refused too (it wrote a manifest and no figure).
  {
    std::ifstream in(dir / "cmp" / "compare.csv");
    std::string header;
    std::getline(in, header);
    in.close();
    std::ofstream(dir / "cmp" / "compare.csv") << header << "\n";
  }
  const Cli empty =
      run_sim("plot " + (dir / "cmp").string() + " -o " + (dir / "fig3").string(), dir);
  EXPECT_EQ(empty.code, 2) << empty.err;
  EXPECT_NE(empty.err.find("compare.csv: no rows under its header"), std::string::npos)
      << empty.err;
  EXPECT_FALSE(fs::exists(dir / "fig3"));
}

// A comparison of models (or GPUs) gives the decode-step figure: step time by decode batch.
TEST(Plot, CompareOfModelsGivesTheDecodeStepFigure) {
  SKIP_WITHOUT_MATPLOTLIB();
  const fs::path dir = temp_dir("plot_models");
  write_file(dir / "models.yaml",
             small_experiment("models", 120) +
                 "compare:\n  - name: dense\n    set: {model: Llama-3-8B}\n"
                 "  - name: moe\n    set: {model: Qwen3-30B-A3B, hardware: H200}\n");
  ASSERT_EQ(run_sim("compare " + (dir / "models.yaml").string() + " --quiet --out " +
                        (dir / "cmp").string(),
                    dir)
                .code,
            0);
  const Cli p = run_sim("plot " + (dir / "cmp").string() + " -o " + (dir / "fig").string(), dir);
  ASSERT_EQ(p.code, 0) << p.err;
  expect_valid(dir / "fig" / "cmp-decode-steps.png", "png");
}

// So does a comparison of parallel layouts of one model on one GPU type (config.yaml's
// `parallel:` differs, summary.json's model and hardware do not).
TEST(Plot, CompareOfParallelLayoutsGivesTheDecodeStepFigure) {
  SKIP_WITHOUT_MATPLOTLIB();
  const fs::path dir = temp_dir("plot_layouts");
  write_file(dir / "layouts.yaml",
             small_experiment("layouts", 120) +
                 "compare:\n  - name: tensor\n"
                 "    set: {model: Qwen3-30B-A3B, parallel.tensor: 2}\n"
                 "  - name: expert\n"
                 "    set: {model: Qwen3-30B-A3B, parallel.tensor: 2, parallel.expert: true}\n");
  const Cli c = run_sim(
      "compare " + (dir / "layouts.yaml").string() + " --quiet --out " + (dir / "cmp").string(),
      dir);
  ASSERT_EQ(c.code, 0) << c.err;
  const Cli p = run_sim("plot " + (dir / "cmp").string() + " -o " + (dir / "fig").string(), dir);
  ASSERT_EQ(p.code, 0) << p.err;
  expect_valid(dir / "fig" / "cmp-decode-steps.png", "png");
}

// A comparison of a `type: mix` workload gives the by-class figure too; one without classes
// (above) does not.
TEST(Plot, CompareOfRequestClassesGivesTheClassesFigure) {
  SKIP_WITHOUT_MATPLOTLIB();
  const fs::path dir = temp_dir("plot_classes");
  const Cli c = run_sim("compare " + servelab_home().string() +
                            "/experiments/lessons/sharing-a-server.yaml --quiet --set "
                            "workload.parts[1].workload.num_requests=200 --set "
                            "workload.parts[0].workload.duration_s=40 --out " +
                            (dir / "cmp").string(),
                        dir);
  ASSERT_EQ(c.code, 0) << c.err;
  const Cli p = run_sim("plot " + (dir / "cmp").string() + " -o " + (dir / "fig").string(), dir);
  ASSERT_EQ(p.code, 0) << p.err;
  expect_valid(dir / "fig" / "cmp-classes.png", "png");
  expect_valid(dir / "fig" / "cmp-bars.png", "png");
  // The same inputs, the same bytes.
  const Cli again =
      run_sim("plot " + (dir / "cmp").string() + " -o " + (dir / "fig2").string(), dir);
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(read_file(dir / "fig" / "cmp-classes.png"),
            read_file(dir / "fig2" / "cmp-classes.png"));
}

// `sim validate` folders (validation.json + replay.csv) give the predicted-against-measured step
// time figure: one panel per engine run, one colour per cost model; the same inputs give the
// same bytes. A validation folder without replay.csv is refused, naming the folder.
void validation_folder(const fs::path& d, const std::string& engine, const std::string& model,
                       double scale) {
  fs::create_directories(d);
  write_file(d / "validation.json", "{\"engine_dir\": \"" + engine +
                                        "\", \"step_time\": {\"replay_cost_model\": \"" + model +
                                        "\"}}\n");
  std::string csv =
      "step,num_seqs,prefill_tokens,decode_tokens,decode_context_tokens,measured_ms,"
      "predicted_ms\n";
  for (int i = 0; i < 200; ++i) {
    const double measured = 2.0 + 0.37 * i;
    csv += std::to_string(i) + ",8,0,8,800," + std::to_string(measured) + "," +
           std::to_string(measured * scale * (1 + 0.01 * (i % 7 - 3))) + "\n";
  }
  write_file(d / "replay.csv", csv);
}

TEST(Plot, ValidationFoldersGiveTheStepTimeFigure) {
  SKIP_WITHOUT_MATPLOTLIB();
  const fs::path dir = temp_dir("plot_validation");
  validation_folder(dir / "a-cal", "out/burst-vllm-engine", "calibrated (cost.yaml)", 1.0);
  validation_folder(dir / "a-roof", "out/burst-vllm-engine", "roofline (H200)", 0.6);
  validation_folder(dir / "b-cal", "out/azure-vllm-engine", "calibrated (cost.yaml)", 1.02);
  const std::string in =
      (dir / "a-cal").string() + " " + (dir / "a-roof").string() + " " + (dir / "b-cal").string();
  for (const char* out : {"f1", "f2"}) {
    const Cli p = run_sim("plot " + in + " --format svg -o " + (dir / out).string(), dir);
    ASSERT_EQ(p.code, 0) << p.err;
    expect_valid(dir / out / "step-time-validation.svg", "svg");
  }
  const std::string svg = read_file(dir / "f1" / "step-time-validation.svg");
  EXPECT_EQ(svg, read_file(dir / "f2" / "step-time-validation.svg"));
  // Two panels titled by engine run, legends naming each model with its mean error.
  EXPECT_NE(svg.find("burst-vllm"), std::string::npos);
  EXPECT_NE(svg.find("azure-vllm"), std::string::npos);
  EXPECT_NE(svg.find("roofline (H200): 40.0 % mean |error|"), std::string::npos);
  EXPECT_EQ(fs::exists(dir / "f1" / "latency-cdf.svg"), false);  // no run folders given
  fs::remove(dir / "b-cal" / "replay.csv");
  const Cli bad = run_sim("plot " + (dir / "b-cal").string() + " -o " + (dir / "f3").string(), dir);
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("b-cal"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("replay.csv"), std::string::npos) << bad.err;
}

// A sweep over serving.block_size also gets the page-size figure; another sweep does not.
TEST(Plot, BlockSizeSweepGivesThePageSizeFigure) {
  SKIP_WITHOUT_MATPLOTLIB();
  const fs::path dir = temp_dir("plot_page_size");
  write_file(dir / "exp.yaml",
             small_experiment("pages", 40) + "sweep:\n  serving.block_size: [8, 32]\n");
  const Cli s = run_sim("sweep " + (dir / "exp.yaml").string() + " --quiet --no-plot --out " +
                            (dir / "pages").string(),
                        dir);
  ASSERT_EQ(s.code, 0) << s.err;
  const auto rows = read_csv(dir / "pages" / "sweep.csv");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_GT(std::stod(rows[1].at("unused_slots_mean")), std::stod(rows[0].at("unused_slots_mean")));
  EXPECT_GT(std::stod(rows[0].at("step_ms_mean")), 0.0);
  const Cli p = run_sim("plot " + (dir / "pages").string() + " -o " + (dir / "fig").string(), dir);
  ASSERT_EQ(p.code, 0) << p.err;
  expect_valid(dir / "fig" / "pages-page-size.png", "png");
  expect_valid(dir / "fig" / "pages-sweep.png", "png");

  std::string text = read_file(dir / "exp.yaml");
  text.replace(text.find("serving.block_size: [8, 32]"), 27, "workload.arrival.rate: [4, 8]");
  write_file(dir / "rate.yaml", text);
  ASSERT_EQ(run_sim("sweep " + (dir / "rate.yaml").string() + " --quiet --no-plot --out " +
                        (dir / "rates").string(),
                    dir)
                .code,
            0);
  ASSERT_EQ(
      run_sim("plot " + (dir / "rates").string() + " -o " + (dir / "fig2").string(), dir).code, 0);
  EXPECT_TRUE(fs::exists(dir / "fig2" / "rates-sweep.png"));
  EXPECT_FALSE(fs::exists(dir / "fig2" / "rates-page-size.png"));
}

// The sweep figure's legend names a `variant` axis's points by the variants' names, and a long
// value (a mapping, a list of pools) shortened, each line's label still its own. Past two lines
// the lines get one legend beside the panels and each panel's names the styles.
TEST(Plot, SweepLegendsNameVariantsAndShortenLongValues) {
  SKIP_WITHOUT_MATPLOTLIB();
  const fs::path dir = temp_dir("plot_sweep_legends");
  const std::string head = small_experiment("legends", 30);
  write_file(dir / "long.yaml",
             head +
                 "sweep:\n  policies.preemption: [{name: recompute, victim: fewest-computed},\n"
                 "                        {name: recompute, victim: most-blocks}]\n"
                 "  workload.arrival.rate: [4, 8]\n");
  write_file(dir / "variants.yaml",
             head +
                 "compare:\n  - {name: plain, set: {}}\n"
                 "  - {name: sarathi-256, set: {policies.batch: sarathi, "
                 "serving.max_num_batched_tokens: 256}}\n"
                 "  - {name: fcfs-swap, set: {policies.preemption: swap}}\n"
                 "sweep:\n  variant: all\n  workload.arrival.rate: [4, 8]\n");
  for (const std::string name : {"long", "variants"}) {
    ASSERT_EQ(run_sim("sweep " + (dir / (name + ".yaml")).string() + " --quiet --out " +
                          (dir / name).string() + " --no-plot",
                      dir)
                  .code,
              0)
        << name;
    ASSERT_EQ(run_sim("plot " + (dir / name).string() + " --format svg -o " +
                          (dir / (name + "-fig")).string(),
                      dir)
                  .code,
              0)
        << name;
  }
  // matplotlib's SVG keeps each text as a comment beside its glyphs.
  const std::string variants = read_file(dir / "variants-fig" / "variants-sweep.svg");
  EXPECT_NE(variants.find("<!-- variant=plain -->"), std::string::npos);
  EXPECT_NE(variants.find("<!-- variant=fcfs-swap -->"), std::string::npos);
  EXPECT_NE(variants.find("<!-- p99 -->"), std::string::npos);
  EXPECT_NE(variants.find("<!-- goodput -->"), std::string::npos);
  const std::string lines = read_file(dir / "long-fig" / "long-sweep.svg");
  EXPECT_NE(lines.find("<!-- preemption={name: recompute; victim:... p50 -->"), std::string::npos);
  EXPECT_NE(lines.find("<!-- preemption={name: recompute; victim:... #2 p50 -->"),
            std::string::npos);
  EXPECT_EQ(lines.find("most-blocks"), std::string::npos) << "a long value left whole";
}

// A sweep over model.kv_cache_dtype gets the kv-dtype figure (docs/lessons/fp8-kv.md), with or
// without a numeric key beside it; a sweep over something else does not (above). Both sweeps go
// to one `sim plot` (each input gets its figures; one matplotlib start instead of two).
TEST(Plot, KvDtypeSweepGivesTheKvDtypeFigure) {
  SKIP_WITHOUT_MATPLOTLIB();
  const fs::path dir = temp_dir("plot_kv_dtype");
  const std::string base =
      small_experiment("dtypes", 12) + "sweep:\n  model.kv_cache_dtype: [bf16, fp8]\n";
  write_file(dir / "one.yaml", base);
  write_file(dir / "two.yaml", base + "  workload.arrival.rate: [4, 8]\n");
  for (const char* name : {"one", "two"}) {
    const std::string n = name;
    ASSERT_EQ(run_sim("sweep " + (dir / (n + ".yaml")).string() + " --quiet --no-plot --out " +
                          (dir / n).string(),
                      dir)
                  .code,
              0);
  }
  const Cli p = run_sim("plot " + (dir / "one").string() + " " + (dir / "two").string() + " -o " +
                            (dir / "fig").string(),
                        dir);
  ASSERT_EQ(p.code, 0) << p.err;
  expect_valid(dir / "fig" / "one-kv-dtype.png", "png");
  expect_valid(dir / "fig" / "two-kv-dtype.png", "png");
}

TEST(Plot, BadArgumentsExitTwoNamingTheFolder) {
  const fs::path dir = temp_dir("plot_errors");
  const Cli missing = run_sim("plot " + (dir / "nowhere").string(), dir);
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find((dir / "nowhere").string()), std::string::npos) << missing.err;
  fs::create_directories(dir / "empty");
  const Cli empty = run_sim("plot " + (dir / "empty").string(), dir);
  EXPECT_EQ(empty.code, 2);
  EXPECT_NE(empty.err.find("not a run folder"), std::string::npos) << empty.err;
  EXPECT_EQ(run_sim("plot", dir).code, 2);
  EXPECT_EQ(run_sim("plot " + (dir / "empty").string() + " --format gif", dir).code, 2);
  // -o: a file, a folder holding anything but figures (a run folder, the user's notes) or a
  // symlink is refused before anything is drawn, and left as it was. (Needs no matplotlib.)
  fs::create_directories(dir / "run");
  write_file(dir / "run" / "summary.json", "{\"run\": {\"backend\": \"sim\"}}");
  write_file(dir / "notes.txt", "mine");
  fs::create_directories(dir / "mixed");
  write_file(dir / "mixed" / "a.png", "png");
  write_file(dir / "mixed" / ".servelab-figures", "a.png\n");
  write_file(dir / "mixed" / "notes.txt", "mine");
  fs::create_symlink(dir / "mixed", dir / "link");
  for (const char* out : {"notes.txt", "run", "mixed", "link"}) {
    const Cli c = run_sim("plot " + (dir / "run").string() + " -o " + (dir / out).string(), dir);
    EXPECT_EQ(c.code, 2) << out;
    EXPECT_NE(c.err.find((dir / out).string()), std::string::npos) << c.err;
  }
  EXPECT_EQ(read_file(dir / "notes.txt"), "mine");
  EXPECT_FALSE(fs::exists(dir / "run" / "figures"));
  EXPECT_EQ(read_file(dir / "mixed" / "notes.txt"), "mine");
}

// Run names are labels, not mathtext: a '$' in a folder's name is drawn as it is (an
// unbalanced one was a matplotlib traceback, exit 1).
TEST(Plot, DollarSignsInNamesAreText) {
  SKIP_WITHOUT_MATPLOTLIB();
  const fs::path dir = temp_dir("plot_dollar");
  const fs::path run = dir / "r$\\frac{$";
  Cli r =
      run_sim("run " + servelab_home().string() +
                  "/experiments/burst-tiny.yaml --quiet --set workload.num_requests=20 --out '" +
                  run.string() + "'",
              dir);
  ASSERT_EQ(r.code, 0) << r.err;
  r = run_sim("plot --quiet '" + run.string() + "'", dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(run / "figures")) << r.err;
  fs::remove_all(dir);
}

// Inputs of the same folder name each keep their figures (a later one is renamed, never onto a
// name a real input has), and a run given as "." is named after its folder.
TEST(Plot, SameNamedInputsKeepTheirOwnFigures) {
  SKIP_WITHOUT_MATPLOTLIB();
  const fs::path dir = temp_dir("plot_same_names");
  const std::string tiny = servelab_home().string() +
                           "/experiments/burst-tiny.yaml --quiet --set workload.num_requests=20";
  for (const char* run : {"x/r", "y/r", "r-2"}) {
    const Cli r = run_sim("run " + tiny + " --out " + (dir / run).string(), dir);
    ASSERT_EQ(r.code, 0) << r.err;
  }
  for (const char* cmp : {"x/cmp", "y/cmp"}) {
    const Cli c = run_sim("compare " + tiny +
                              " --variant a:policies.queue=fcfs --variant b:policies.queue=sjf "
                              "--out " +
                              (dir / cmp).string(),
                          dir);
    ASSERT_EQ(c.code, 0) << c.err;
  }
  const Cli p = run_sim("plot --quiet " + (dir / "x/r").string() + " " + (dir / "y/r").string() +
                            " " + (dir / "r-2").string() + " " + (dir / "x/cmp").string() + " " +
                            (dir / "y/cmp").string() + " -o " + (dir / "fig").string(),
                        dir);
  ASSERT_EQ(p.code, 0) << p.err;
  for (const char* f :
       {"r-throughput", "r-3-throughput", "r-2-throughput", "cmp-bars", "cmp-2-bars"}) {
    expect_valid(dir / "fig" / (std::string(f) + ".png"), "png");
  }
  // "." stands for the folder it names.
  const Cli dot = run_program("sim", "plot --quiet .", dir / "stdout.txt", dir / "stderr.txt",
                              "cd '" + (dir / "x/r").string() + "' && ");
  ASSERT_EQ(dot.code, 0) << dot.err;
  expect_valid(dir / "x/r/figures/r-throughput.png", "png");
  fs::remove_all(dir);
}

// The interpreter is the environment's (SERVELAB_PYTHON): one that cannot start is an error
// naming it (exit 2), one that fails is reported (exit 1), and an interrupt sent to `sim plot`
// alone stops the script too and leaves no figures or staging folder. (Needs no matplotlib.)
TEST(Plot, TheInterpretersFailuresAndInterruptsAreReported) {
  const fs::path dir = temp_dir("plot_interpreter");
  fs::create_directories(dir / "run");
  write_file(dir / "run" / "summary.json", "{\"run\": {\"backend\": \"sim\"}}");
  const std::string plot = "plot " + (dir / "run").string();
  const auto with = [&](const std::string& python, const std::string& wrapper = "") {
    return run_program("sim", plot, dir / "out.txt", dir / "err.txt",
                       "SERVELAB_PYTHON=" + python + " " + wrapper);
  };
  Cli c = with((dir / "nowhere").string());
  EXPECT_EQ(c.code, 2) << c.err;
  EXPECT_NE(c.err.find("cannot start the plotting interpreter"), std::string::npos) << c.err;
  c = with("/bin/false");
  EXPECT_EQ(c.code, 1) << c.err;
  EXPECT_NE(c.err.find("failed with exit code 1"), std::string::npos) << c.err;
  // The interpreter interrupts `sim` (its parent) once started: `sim` runs then, its handlers
  // installed (a SIGINT sent 0.5 s after the start could come before them on a loaded machine,
  // under the sanitizers, and kill it without a word). The timeout is a safety net only.
  write_file(dir / "slow.sh", "#!/bin/sh\nkill -INT $PPID\nexec sleep 30\n");
  fs::permissions(dir / "slow.sh", fs::perms::owner_all);
  const auto start = std::chrono::steady_clock::now();
  c = with((dir / "slow.sh").string(), "timeout --foreground --preserve-status -s INT 20 ");
  EXPECT_EQ(c.code, 130) << c.err;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_NE(c.err.find("interrupted; no output written"), std::string::npos) << c.err;
  EXPECT_EQ(std::distance(fs::directory_iterator(dir / "run"), fs::directory_iterator()), 1);
  fs::remove_all(dir);
}

// A figure that cannot be written (a full disk; here a file-size limit, which Python meets as
// EFBIG) is the user's to fix: exit code 2, one line naming the figure, no output folder (it was
// a traceback and exit code 1).
TEST(Plot, AFigureThatCannotBeWrittenIsExitTwo) {
  SKIP_WITHOUT_MATPLOTLIB();
  if (std::system("command -v prlimit > /dev/null 2>&1") != 0) GTEST_SKIP() << "no prlimit";
  const fs::path dir = temp_dir("plot_full");
  const Cli r = run_sim("run " + servelab_home().string() +
                            "/experiments/burst-tiny.yaml --quiet --set workload.num_requests=20 "
                            "--out " +
                            (dir / "run").string(),
                        dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const Cli p =
      run_program("sim", "plot " + (dir / "run").string() + " -o " + (dir / "fig").string(),
                  dir / "out.txt", dir / "err.txt", "prlimit --fsize=2000 ");
  EXPECT_EQ(p.code, 2) << p.err;
  EXPECT_NE(p.err.find(".png: cannot write the figure: File too large"), std::string::npos)
      << p.err;
  EXPECT_EQ(p.err.find("Traceback"), std::string::npos) << p.err;
  EXPECT_FALSE(fs::exists(dir / "fig"));
  fs::remove_all(dir);
}

TEST(Plot, ClusterRunGivesReplicaAndTransferFigures) {
  SKIP_WITHOUT_MATPLOTLIB();
  const fs::path dir = temp_dir("plot_cluster");
  const Cli r = run_sim("run " + servelab_home().string() +
                            "/experiments/cluster-pd.yaml --quiet --set workload.num_requests=60 "
                            "--set 'cluster.pools=[{count: 1, role: prefill}, {count: 2, role: "
                            "decode}]' --out " +
                            (dir / "pd").string(),
                        dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const Cli p = run_sim("plot " + (dir / "pd").string() + " -o " + (dir / "fig").string(), dir);
  ASSERT_EQ(p.code, 0) << p.err;
  expect_valid(dir / "fig" / "pd-replicas.png", "png");
  expect_valid(dir / "fig" / "pd-transfers.png", "png");
  expect_valid(dir / "fig" / "pd-throughput.png", "png");
  // Per-replica step numbers would make the single-replica figures wrong: not drawn.
  EXPECT_FALSE(fs::exists(dir / "fig" / "pd-batch.png"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
