// Summary statistics of a request stream, computed in one streaming pass with flat memory, and
// the `sim trace` subcommands built on them.
//
// compute_trace_stats() keeps counters and one histogram per length (a std::vector<int64_t>
// indexed by token count, so percentiles are exact and memory depends on the largest length,
// not on the number of requests). The repeated-block fraction needs the set of block contents
// seen so far, so it is computed only when block_tokens > 0: pass 0 for traces whose prompts
// carry no shared content (Azure, BurstGPT, ...), where it would be 0 at a memory cost.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "traces/workload.h"

namespace servelab {

struct LengthStats {
  double mean = 0;
  std::int64_t p50 = 0, p90 = 0, p99 = 0, max = 0;  // nearest-rank percentiles
};

struct TraceStats {
  std::int64_t requests = 0;
  double span_s = 0;           // last arrival - first arrival
  double rate = 0;             // (requests - 1) / span_s; 0 when span_s == 0
  double interarrival_cv = 0;  // stddev / mean of the gaps between consecutive arrivals
  LengthStats input, output;
  std::int64_t skipped_rows = 0;   // malformed rows a lenient reader skipped
  std::int64_t filtered_rows = 0;  // rows the reader's filters left out (Workload::filtered_rows)
  // Blocks of block_tokens prompt tokens whose content appeared earlier in the trace, over all
  // blocks (a partial last block counts as a block); absent when block_tokens == 0.
  std::optional<double> repeated_block_fraction;
  std::int64_t blocks = 0;
  std::int32_t block_tokens = 0;
};

// Drains `w`. Throws whatever `w` throws (ConfigError for a malformed trace).
TraceStats compute_trace_stats(Workload& w, std::int32_t block_tokens);

// A human-readable table, one statistic per line.
std::string format_trace_stats(const TraceStats& stats);

// `sim trace ARGS...`: ARGS is
//   stats FILE [--format F]          prints format_trace_stats() of FILE
//   convert IN OUT [--format F]      writes IN in the ServeLab format (trace_readers.h) to OUT
// F is azure, mooncake, burstgpt, vidur, servelab or auto (default): auto picks mooncake for
// .jsonl files and otherwise looks at the CSV header. Output goes to stdout. Returns 0 on
// success; throws ConfigError for bad arguments or files (exit code 2 in main).
int trace_command(const std::vector<std::string>& args);

// The format `auto` resolves to for `path` (reads its first line). Throws ConfigError when
// unrecognized, and for a path that is not a regular file (a pipe, /dev/stdin: reading its first
// line would take it from the reader).
std::string detect_trace_format(const std::string& path);

}  // namespace servelab
