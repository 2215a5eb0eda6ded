// A streamed choice through a tool-call parser (engine/tool_call_stream.h): what `engine serve`
// spends per token of an output whose tool calls it parses, against parsing the whole text again
// at every token (what a stream would cost without ToolCallStream's resumable scan). The output:
// N bytes of prose in 4-byte pieces (the size of a token's text), then two hermes calls, so the
// content part is scanned for the marker as it grows and the call part is held.
// Figures and the command: docs/performance.md.
#include <benchmark/benchmark.h>

#include <string>

#include "engine/tool_call_stream.h"
#include "engine/tool_parser.h"

namespace servelab {
namespace {

std::string output_text(std::size_t prose) {
  std::string text;
  while (text.size() < prose) text += "The <b>weather</b> tool: ";
  text.resize(prose);
  text +=
      "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  return text;
}

void BM_ToolCallStream(benchmark::State& state) {
  const std::string text = output_text(static_cast<std::size_t>(state.range(0)));
  const auto parser = make_tool_parser("hermes");
  for (auto _ : state) {
    ToolCallStream stream(*parser, "chatcmpl-1", 0, true);
    for (std::size_t at = 0; at < text.size(); at += 4) {
      benchmark::DoNotOptimize(stream.push(std::string_view(text).substr(at, 4)));
    }
    benchmark::DoNotOptimize(stream.finish());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(text.size() / 4));
}
BENCHMARK(BM_ToolCallStream)->Arg(1024)->Arg(8192)->Arg(32768)->Unit(benchmark::kMicrosecond);

void BM_ToolCallsReparsedEveryToken(benchmark::State& state) {
  const std::string text = output_text(static_cast<std::size_t>(state.range(0)));
  const auto parser = make_tool_parser("hermes");
  for (auto _ : state) {
    for (std::size_t at = 4; at <= text.size(); at += 4) {
      benchmark::DoNotOptimize(parser->extract(std::string_view(text).substr(0, at)));
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(text.size() / 4));
}
BENCHMARK(BM_ToolCallsReparsedEveryToken)
    ->Arg(1024)
    ->Arg(8192)
    ->Arg(32768)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace servelab

BENCHMARK_MAIN();
