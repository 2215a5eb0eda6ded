// AzureTraceWorkload: replays the Azure LLM inference trace (2023 and 2024 releases).
//
// File format (Azure/AzurePublicDataset, data/AzureLLMInferenceTrace_{conv,code}.csv):
//   TIMESTAMP,ContextTokens,GeneratedTokens
//   2023-11-16 18:15:46.6805900,374,44
// One row per request: its arrival time, prompt length and output length. Rows must be in
// nondecreasing time order. Arrival = timestamp - first row's timestamp, times time_scale, plus
// start. Prompt content is unknown (the trace keeps only counts), so every prompt is a fresh
// stream unique_content_id(content_seed, id): nothing is shared between requests.
//
// YAML (the `workload:` section):
//   workload:
//     type: azure
//     path: traces/azure2023/AzureLLMInferenceTrace_conv.csv   # see resolve_data_path()
//     max_requests: 1000   # optional (>= 1): only the first rows
//     time_scale: 0.5      # optional (> 0, default 1): arrival times multiplied (0.5 = twice the
//     rate) start_s: 0           # optional (>= 0, default 0): arrival time of the first row
//
// The file is streamed (one row in memory at a time). Errors are ConfigErrors: "PATH: cannot open
// file", "PATH:1: expected header ..., got ...", "PATH: empty trace", and for a bad row
// "PATH:LINE: expected ..., got ..." (wrong field count, bad timestamp, token count not a positive
// integer, a timestamp earlier than the row before).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/time.h"
#include "traces/csv_reader.h"
#include "traces/workload.h"

namespace servelab {

struct AzureTraceOptions {
  std::optional<std::int64_t> max_requests;  // >= 1; nullopt reads every row
  double time_scale = 1.0;                   // > 0
  TimeNs start_ns = 0;                       // >= 0
  std::uint64_t content_seed = 0;            // seeds the prompts' content ids
};

class AzureTraceWorkload : public Workload {
 public:
  // Opens `path` and reads its header and first row. Throws ConfigError for a missing file, a
  // wrong header, a malformed first row or a trace without data rows; std::invalid_argument for
  // options out of range.
  explicit AzureTraceWorkload(const std::string& path, AzureTraceOptions options = {});

  // Throws ConfigError "PATH:LINE: ..." when the next row is malformed.
  std::optional<RequestSpec> next() override;
  std::string describe() const override;

 private:
  struct Row {
    TimeNs timestamp_ns = 0;
    std::int32_t context_tokens = 0;
    std::int32_t generated_tokens = 0;
  };
  // Reads and checks the next data row into pending_; false at the end of the file.
  bool read_row();

  CsvReader csv_;
  AzureTraceOptions options_;
  Row pending_;
  bool has_pending_ = false;
  TimeNs first_ns_ = 0;
  std::int64_t previous_line_ = 0;
  RequestId next_id_ = 0;
};

// Parses "YYYY-MM-DD HH:MM:SS[.F]" into nanoseconds since 1970-01-01 00:00:00 UTC, exactly
// (integer arithmetic only). F has 1 to 9 digits. A 'T' may separate date and time, and a
// trailing "Z", "+HH:MM", "-HH:MM", "+HHMM" or "+HH" gives the UTC offset (absent means UTC).
// Surrounding spaces are ignored. Returns nullopt for anything else, including impossible dates
// and times (month 13, February 30, hour 24).
std::optional<TimeNs> parse_timestamp_ns(std::string_view text);

}  // namespace servelab
