// A streamed choice's text (engine/output_text.h): what `engine serve` spends decoding an output
// of N tokens as they arrive, OutputText (the text so far kept, only the newest ids decoded)
// against decoding every id again at every token (what the server did before). The ids are the
// cl100k encoding of the tokenizer benchmark's text (tests/data/tokenizer/cl100k_vectors.json,
// English, code, eight scripts, emoji: ids that end inside a character included), repeated to
// N. Figures and the command: docs/performance.md.
#include <benchmark/benchmark.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "engine/output_text.h"
#include "serving/home.h"
#include "serving/tokenizer.h"

namespace servelab {
namespace {

const Tokenizer& cl100k() {
  static const std::unique_ptr<Tokenizer> tok =
      load_tokenizer(executable_dir().parent_path() / "data/tokenizers/cl100k/tokenizer.json");
  return *tok;
}

std::vector<std::int32_t> output_ids(std::size_t n) {
  std::ifstream in(servelab_home() / "tests/data/tokenizer/cl100k_vectors.json");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text;
  const nlohmann::json vectors = nlohmann::json::parse(ss.str());
  for (const auto& c : vectors.at("cases")) {
    text += c.at("text").get<std::string>();
    text += '\n';
  }
  const std::vector<std::int32_t> once = cl100k().encode(text);
  if (once.empty()) throw std::runtime_error("output_text_bench: no sample text");
  std::vector<std::int32_t> ids;
  while (ids.size() < n) ids.insert(ids.end(), once.begin(), once.end());
  ids.resize(n);
  return ids;
}

void BM_OutputTextIncremental(benchmark::State& state) {
  const std::vector<std::int32_t> ids = output_ids(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    OutputText text(cl100k(), {});
    for (const std::int32_t id : ids) {
      text.push(id);
      benchmark::DoNotOptimize(text.text().data());
    }
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_OutputTextIncremental)->Arg(256)->Arg(2048)->Arg(8192)->Unit(benchmark::kMicrosecond);

void BM_OutputTextRedecodeEveryToken(benchmark::State& state) {
  const std::vector<std::int32_t> ids = output_ids(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    for (std::size_t n = 1; n <= ids.size(); ++n) {
      const std::string text = render_text(cl100k(), std::span<const std::int32_t>(ids.data(), n));
      benchmark::DoNotOptimize(text.data());
    }
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_OutputTextRedecodeEveryToken)
    ->Arg(256)
    ->Arg(2048)
    ->Arg(8192)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace servelab

BENCHMARK_MAIN();
