// Trace statistics at scale: a 10-million-row Azure-format trace streamed through
// compute_trace_stats(). Target: under 10 s, with memory that stays flat (max RSS independent of
// the row count: the reader holds one row and the statistics one histogram per length).
//
// The trace is generated once into the system's temporary directory (never the repository):
// deterministic (Rng::stream(1, "trace_bench")), one hour of Poisson arrivals, lognormal-like
// prompt and output lengths. Run: build/<dir>/bench/trace_bench --benchmark_filter=Trace
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/rng.h"
#include "traces/azure_trace.h"
#include "traces/trace_stats.h"

namespace servelab {
namespace {

constexpr std::int64_t kRows = 10'000'000;

// Writes the trace unless a file of that name is already there; returns its path.
std::string trace_file() {
  const std::string path =
      (std::filesystem::temp_directory_path() / "servelab_trace_bench_10M_azure.csv").string();
  std::error_code ec;
  if (std::filesystem::file_size(path, ec) > 0 && !ec) return path;
  const std::string tmp = path + ".part";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) std::abort();
  std::fputs("TIMESTAMP,ContextTokens,GeneratedTokens\n", f);
  Rng rng = Rng::stream(1, "trace_bench");
  const double rate = static_cast<double>(kRows) / 3600.0;  // one hour
  double t = 0;
  for (std::int64_t i = 0; i < kRows; ++i) {
    t += rng.exponential(rate);
    const auto ns = static_cast<std::int64_t>(t * 1e9);
    const std::int64_t s = ns / 1'000'000'000, frac = (ns % 1'000'000'000) / 100;
    const int prompt = static_cast<int>(std::clamp(rng.lognormal(6.7, 0.9), 1.0, 16000.0));
    const int output = static_cast<int>(std::clamp(rng.lognormal(4.9, 1.0), 1.0, 4000.0));
    std::fprintf(f, "2023-11-16 %02lld:%02lld:%02lld.%07lld,%d,%d\n",
                 static_cast<long long>(s / 3600), static_cast<long long>(s / 60 % 60),
                 static_cast<long long>(s % 60), static_cast<long long>(frac), prompt, output);
  }
  if (std::fclose(f) != 0) std::abort();
  std::filesystem::rename(tmp, path);
  return path;
}

long max_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

void BM_TraceStats10M(benchmark::State& state) {
  const std::string path = trace_file();
  const long rss_before = max_rss_kib();
  TraceStats st;
  for (auto _ : state) {
    AzureTraceWorkload w(path);
    st = compute_trace_stats(w, 0);
  }
  if (st.requests != kRows) state.SkipWithError("wrong row count");
  state.SetItemsProcessed(state.iterations() * st.requests);
  state.counters["max_rss_MiB"] = static_cast<double>(max_rss_kib()) / 1024.0;
  state.counters["rss_growth_MiB"] = static_cast<double>(max_rss_kib() - rss_before) / 1024.0;
  state.counters["input_p99"] = static_cast<double>(st.input.p99);
}
BENCHMARK(BM_TraceStats10M)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
}  // namespace servelab

BENCHMARK_MAIN();
