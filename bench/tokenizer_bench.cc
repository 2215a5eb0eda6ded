// Tokenizer speed (serving/tokenizer.h): encode and decode throughput on a fixed text of a few
// KB, and the cost of loading a tokenizer.json. The text is the 92 texts of
// tests/data/tokenizer/cl100k_vectors.json joined by newlines (English, code, numbers,
// whitespace runs, eight scripts, emoji): 5.0 KB, about 2,300 cl100k tokens. Encoding is measured
// with the per-piece cache warm (the steady state of a server); the first iteration fills it.
// Figures and the command that produced them: docs/performance.md.
#include <benchmark/benchmark.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "serving/chat_template.h"
#include "serving/home.h"
#include "serving/tokenizer.h"

namespace servelab {
namespace {

std::filesystem::path tokenizer_path(const std::string& name) {
  // cl100k is unpacked into the build folder by CMake; gpt2 ships unpacked.
  if (name == "cl100k") {
    return executable_dir().parent_path() / "data/tokenizers/cl100k/tokenizer.json";
  }
  if (name == "sentencepiece-small") {
    return servelab_home() / "tests/data/tokenizer/sentencepiece-small.json";
  }
  return servelab_home() / "data/tokenizers" / name / "tokenizer.json";
}

const std::string& sample_text() {
  static const std::string text = [] {
    std::ifstream in(servelab_home() / "tests/data/tokenizer/cl100k_vectors.json");
    std::stringstream ss;
    ss << in.rdbuf();
    const nlohmann::json vectors = nlohmann::json::parse(ss.str());
    std::string joined;
    for (const auto& c : vectors.at("cases")) {
      joined += c.at("text").get<std::string>();
      joined += '\n';
    }
    return joined;
  }();
  return text;
}

const Tokenizer& tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  auto& t = loaded[name];
  if (!t) t = load_tokenizer(tokenizer_path(name));
  return *t;
}

void encode(benchmark::State& state, const std::string& name) {
  const Tokenizer& tok = tokenizer(name);
  const std::string& text = sample_text();
  std::int64_t tokens = 0;
  for (auto _ : state) {
    const std::vector<std::int32_t> ids = tok.encode(text);
    tokens += static_cast<std::int64_t>(ids.size());
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(text.size()));
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}

void decode(benchmark::State& state, const std::string& name) {
  const Tokenizer& tok = tokenizer(name);
  const std::vector<std::int32_t> ids = tok.encode(sample_text());
  for (auto _ : state) {
    const std::string text = tok.decode(ids);
    benchmark::DoNotOptimize(text.data());
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * static_cast<double>(ids.size()),
                         benchmark::Counter::kIsRate);
}

void BM_EncodeCl100k(benchmark::State& state) { encode(state, "cl100k"); }
BENCHMARK(BM_EncodeCl100k)->Unit(benchmark::kMicrosecond);
void BM_EncodeGpt2(benchmark::State& state) { encode(state, "gpt2"); }
BENCHMARK(BM_EncodeGpt2)->Unit(benchmark::kMicrosecond);
// The merge loop without the cache's help: each iteration encodes 4 KB of fresh random
// lowercase words (3 to 10 letters, nearly all unseen), so nearly every piece misses the cache.
void BM_EncodeCl100kUnseenWords(benchmark::State& state) {
  const Tokenizer& tok = tokenizer("cl100k");
  std::uint64_t rng = 0x2545F4914F6CDD1Dull;
  auto next = [&rng] {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };
  std::int64_t tokens = 0, bytes = 0;
  std::string text;
  for (auto _ : state) {
    state.PauseTiming();
    text.clear();
    while (text.size() < 4096) {
      text.push_back(' ');
      for (std::uint64_t n = 3 + next() % 8; n > 0; --n) {
        text.push_back(static_cast<char>('a' + next() % 26));
      }
    }
    state.ResumeTiming();
    const std::vector<std::int32_t> ids = tok.encode(text);
    tokens += static_cast<std::int64_t>(ids.size());
    bytes += static_cast<std::int64_t>(text.size());
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(bytes);
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EncodeCl100kUnseenWords)->Unit(benchmark::kMicrosecond);

void BM_DecodeCl100k(benchmark::State& state) { decode(state, "cl100k"); }
BENCHMARK(BM_DecodeCl100k)->Unit(benchmark::kMicrosecond);

// The SentencePiece path (Llama 2's layout: normalizer, one piece per segment, the four-step
// decoder) on the hand-made 287-token file of the fuzz target: its few words leave most of the
// text to byte fallback, so the merge loop and the ByteFallback runs get more tokens than a
// real 32k vocabulary would give them (an upper bound on their cost per byte).
void BM_EncodeSentencePieceSmall(benchmark::State& state) { encode(state, "sentencepiece-small"); }
BENCHMARK(BM_EncodeSentencePieceSmall)->Unit(benchmark::kMicrosecond);
void BM_DecodeSentencePieceSmall(benchmark::State& state) { decode(state, "sentencepiece-small"); }
BENCHMARK(BM_DecodeSentencePieceSmall)->Unit(benchmark::kMicrosecond);

// A chat request's prompt through a model's chat template (serving/chat_template.h): the
// Llama 3.1-style dated template of tests/data/chat_templates rendered for a conversation of
// `messages` messages of about 200 bytes each (what engine serve does per chat request, before
// encoding), and parsing that template (once per server start).
std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void BM_ChatTemplateRender(benchmark::State& state) {
  const ChatTemplate tmpl(
      read_text(servelab_home() / "tests/data/chat_templates/llama3_dated.jinja"), "llama3",
      {{"bos_token", jinja::Value::string("<|begin_of_text|>")}});
  std::vector<ChatMessage> msgs{{"system", "You are a helpful assistant."}};
  const std::string& text = sample_text();
  for (std::int64_t i = 0; i < state.range(0) - 1; ++i) {
    msgs.push_back({i % 2 == 0 ? "user" : "assistant",
                    text.substr(static_cast<std::size_t>(i) * 200 % (text.size() - 200), 200)});
  }
  std::size_t bytes = 0;
  for (auto _ : state) {
    const std::string prompt = tmpl.render(msgs, true, false);
    bytes += prompt.size();
    benchmark::DoNotOptimize(prompt.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
}
BENCHMARK(BM_ChatTemplateRender)->Arg(2)->Arg(16)->Arg(128)->Unit(benchmark::kMicrosecond);

void BM_ChatTemplateParse(benchmark::State& state) {
  const std::string source =
      read_text(servelab_home() / "tests/data/chat_templates/kitchen_sink.jinja");
  for (auto _ : state) {
    const jinja::Template t(source, "kitchen_sink");
    benchmark::DoNotOptimize(&t);
  }
}
BENCHMARK(BM_ChatTemplateParse)->Unit(benchmark::kMicrosecond);

// Loading the 3.1 MB cl100k tokenizer.json (JSON parse, vocabulary, 100k merges, PCRE2 JIT).
void BM_LoadCl100k(benchmark::State& state) {
  for (auto _ : state) {
    auto tok = load_tokenizer(tokenizer_path("cl100k"));
    benchmark::DoNotOptimize(tok.get());
  }
}
BENCHMARK(BM_LoadCl100k)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace servelab

BENCHMARK_MAIN();
