// Trace readers beyond Azure: Mooncake JSONL, BurstGPT CSV, Vidur/Splitwise CSV, generic CSV and
// JSONL with a column mapping, and ServeLab's own CSV format (what `sim trace convert` writes).
//
// Every reader streams its file (one row in memory at a time), yields requests in nondecreasing
// arrival order with ids 0, 1, 2, ..., and reads its header and first row in its constructor, so
// most file errors surface when the workload is built. Arrival = (row time - first row's time) *
// time_scale + start_s (the ServeLab format is not re-based: its times are already ours). The
// first row is the file's first data row, kept or not: a row a filter drops (BurstGPT's model,
// failed requests) still counts as the origin and must be in time order, so the parts of one
// trace split by model (a mix's classes) keep their relative timing.
//
// Keys every reader accepts (besides its own, below):
//   path: FILE             # required; see resolve_data_path()
//   max_requests: N        # optional (>= 1): stop after N requests
//   time_scale: 0.5        # optional (> 0, default 1): arrival times multiplied (0.5 = twice the
//   rate) start_s: 0             # optional (>= 0, default 0): arrival time of the first request
//   lenient: false         # optional: true skips malformed rows (counted by skipped_rows())
//                          # instead of failing with ConfigError "FILE:LINE: expected ..., got ..."
//   transforms: {...}      # optional, any workload type: see transforms.h
//
// Per type:
//   type: mooncake         # JSONL {"timestamp": ms, "input_length", "output_length", "hash_ids"}
//     block_tokens: 512    # optional (>= 1, default 512): tokens per hash id
//   The prompt is one segment per hash id: content stream mooncake_content_id(hash_id), offset
//   0, block_tokens long (the last one input_length - block_tokens*(n-1) when shorter). Equal
//   hash ids are therefore equal content in every request and under every seed, so prefix
//   caching sees the trace's sharing. Tokens beyond block_tokens * n are the request's own fresh
//   content. A row whose input_length needs fewer blocks than it has hash ids is malformed.
//
//   type: burstgpt         # CSV "Timestamp,Model,Request tokens,Response tokens,Total tokens,
//                          #      Log Type[,Session ID,Elapsed time]"; Timestamp in seconds
//     model: ChatGPT       # optional: keep only rows whose Model equals this (times stay
//                          # relative to the file's first row)
//     include_failed: false  # optional (default false): rows with Response tokens == 0 are
//                          # failed requests and dropped; when true they are kept with one output
//                          # token. A Request tokens of 0 becomes a 1-token prompt.
//
//   type: vidur            # CSV with columns arrived_at (s), num_prefill_tokens,
//                          # num_decode_tokens (others ignored; Vidur and Splitwise traces)
//
//   type: csv              # any CSV with a header
//   type: jsonl            # any JSONL of objects with numeric fields
//     columns: {arrival: COL, prompt_tokens: COL, output_tokens: COL,
//               priority: COL, tenant: COL}       # priority and tenant optional
//     arrival_unit: s      # optional: s (default), ms, us or ns
//
//   type: servelab         # CSV "arrival_ns,prompt_tokens,output_tokens,priority,tenant,segments"
//                          # segments = "content_id:offset:length;..." (decimal), the prompt
//                          exactly
//
// Prompt content of readers without content information (burstgpt, vidur, csv, jsonl) is a
// fresh stream unique_content_id(seed, id) per request, as for Azure: nothing shared.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/request.h"
#include "serving/config_node.h"
#include "traces/workload.h"

namespace servelab {

// The content stream of Mooncake hash id `hash_id`: independent of the experiment seed and of
// the request, so equal hash ids are equal tokens.
inline constexpr std::uint64_t mooncake_content_id(std::uint64_t hash_id) {
  return mix64(mix64(0x6d6f6f6e63616b65ULL /* "mooncake" */) ^ hash_id);
}

// True for the types this file implements.
bool is_trace_reader_type(const std::string& type);

// Checks `section`'s type and that it has no unknown keys (before its file is looked for, so a
// typo is reported as such). Throws ConfigError naming the key.
void check_trace_reader_keys(const ConfigNode& section);

// Builds the reader `section` describes (section's `type` must satisfy is_trace_reader_type).
// `path` is the resolved data file. Checks every key (transforms excepted, which make_workload
// applies). Throws ConfigError for bad keys, a missing or malformed file.
std::unique_ptr<Workload> make_trace_reader(const ConfigNode& section, std::uint64_t seed,
                                            const std::string& path);

// Writes `w` (drained) to `out_path` in the ServeLab format above; returns the request count.
// The file is written to a temporary sibling and renamed onto `out_path` only on success: a bad
// row, an I/O error or an interrupt leaves `out_path` as it was. Throws ConfigError when the
// file cannot be written, Interrupted on SIGINT/SIGTERM. The caller checks `out_path` first
// (check_output_file: --force, never the input).
std::int64_t write_servelab_trace(Workload& w, const std::string& out_path);

}  // namespace servelab
