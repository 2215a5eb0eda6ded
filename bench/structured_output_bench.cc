// Structured outputs (engine/grammar_constraint.h) over GPT-2's vocabulary (50,257 tokens): what
// a sampled row of a constrained request costs the engine's host side.
//   BM_MaskOfState/K: one mask (a walk of the vocabulary's byte trie, the automaton's
//     transitions already known, the mask not cached) in state K of a JSON-schema output: 0 after
//     "{" (a key must follow: few tokens survive), 1 inside a free string (almost every token
//     survives), 2 inside an integer;
//   BM_ConstrainedOutput/W: a whole 72-token JSON output token by token as the executors ask
//     (allowed() with the outputs so far), W = 0 with a fresh automaton (every state's
//     transitions and mask computed as they are first met: the first request of a spec), W = 1
//     over the automaton an earlier request of the same spec left (engine/grammar_cache.h: its
//     states' masks cached);
//   BM_CompileSchema: a tool_choice "required" schema of two tools compiled into its grammar.
// Figures and the command: docs/performance.md.
#include <benchmark/benchmark.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/forced_tool_parser.h"
#include "engine/grammar_automaton.h"
#include "engine/grammar_constraint.h"
#include "engine/structured_output.h"
#include "engine/token_trie.h"
#include "serving/home.h"
#include "serving/tokenizer.h"

namespace servelab {
namespace {

using ojson = nlohmann::ordered_json;

struct Setup {
  std::shared_ptr<const Tokenizer> tok =
      load_tokenizer(servelab_home() / "data/tokenizers/gpt2/tokenizer.json");
  std::shared_ptr<const TokenTrie> trie =
      std::make_shared<const TokenTrie>(*tok, tok->vocab_size());
  std::shared_ptr<const GrammarMatcher> matcher = [] {
    StructuredOutputSpec spec;
    spec.schema = ojson::parse(R"({"type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": {"type": "object", "properties": {"city": {"type": "string"},
                                                     "zip": {"type": "string"}}}},
        "required": ["name", "age", "tags", "address"]})");
    return compile_structured_output(spec);
  }();
  std::string text =
      R"({"name": "Ada Lovelace, Countess of Lovelace", "age": 36, "tags": ["mathematician", )"
      R"("writer", "analyst of the Analytical Engine", "translator"], "address": {"city": )"
      R"("London, St James's Square", "zip": "SW1Y 4JH"}})";
};

const Setup& setup() {
  static const Setup s;
  return s;
}

void BM_MaskOfState(benchmark::State& state) {
  const Setup& s = setup();
  const char* prefixes[] = {"{", R"({"name": "Ada Lov)", R"({"name": "A", "age": 3)"};
  const GrammarState st = s.matcher->advance(s.matcher->initial(), prefixes[state.range(0)]);
  const GrammarConstraint c(s.matcher, s.trie, {50256});
  std::int64_t allowed = 0;
  for (auto _ : state) {
    const TokenMask m = c.mask_of(st);
    benchmark::DoNotOptimize(m.data());
    allowed = 0;
    for (const std::uint32_t w : m) allowed += __builtin_popcount(w);
  }
  state.counters["allowed_tokens"] = static_cast<double>(allowed);
}
BENCHMARK(BM_MaskOfState)->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

void BM_ConstrainedOutput(benchmark::State& state) {
  const Setup& s = setup();
  const std::vector<std::int32_t> ids = s.tok->encode(s.text);
  const bool warm = state.range(0) == 1;
  for (auto _ : state) {
    state.PauseTiming();
    auto automaton = std::make_shared<const GrammarAutomaton>(s.matcher, s.trie,
                                                              std::vector<std::int32_t>{50256});
    if (warm) {  // an earlier request of the same spec wrote the same text (untimed)
      const GrammarConstraint earlier(automaton);
      for (std::size_t k = 0; k <= ids.size(); ++k) {
        benchmark::DoNotOptimize(earlier.allowed(1, std::span(ids).first(k), {}));
      }
    }
    const GrammarConstraint c(automaton);
    state.ResumeTiming();
    for (std::size_t k = 0; k <= ids.size(); ++k) {
      benchmark::DoNotOptimize(c.allowed(2, std::span(ids).first(k), {}));
    }
  }
  state.counters["tokens"] = static_cast<double>(ids.size());
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(ids.size() + 1));
}
// A fixed count: the untimed warm-up of W = 1 costs far more than what is timed.
BENCHMARK(BM_ConstrainedOutput)->Arg(0)->Arg(1)->Iterations(100)->Unit(benchmark::kMillisecond);

void BM_CompileSchema(benchmark::State& state) {
  const std::vector<ForcedTool> tools = {
      {"get_weather", ojson::parse(R"({"type": "object", "properties": {"city": {"type": "string"},
          "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city"]})")},
      {"search", ojson::parse(R"({"type": "object", "properties": {"query": {"type": "string"},
          "limit": {"type": "integer"}}, "required": ["query"]})")}};
  StructuredOutputSpec spec;
  spec.schema = forced_tool_schema(tools, nullptr);
  for (auto _ : state) benchmark::DoNotOptimize(compile_structured_output(spec));
}
BENCHMARK(BM_CompileSchema)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace servelab

BENCHMARK_MAIN();
