// Fuzz target: the trace readers (traces/azure_trace.h, traces/trace_readers.h, CsvReader).
//
// Input layout: byte 0 chooses the reader and its options, the remaining bytes are the trace
// file. Bits 0-2 of byte 0 pick the type (azure, mooncake, burstgpt, vidur, csv, jsonl,
// servelab; 7 wraps to azure), bit 3 sets `lenient: true` (not azure), bit 4
// `time_scale: 0.5`, bit 5 `max_requests: 3`, bits 6-7 the `arrival_unit` of csv/jsonl (s, ms,
// us, ns). The workload is built with make_workload() (as an experiment's `workload:` section)
// and drained. ConfigError is the expected outcome for a malformed trace (exit code 2 in `sim`);
// anything else escaping (another exception, a sanitizer report, a timeout, unbounded memory)
// is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "serving/config_node.h"
#include "tests/fuzz/fuzz_input_file.h"
#include "traces/workload.h"

namespace {

constexpr const char* kTypes[] = {"azure", "mooncake", "burstgpt", "vidur",
                                  "csv",   "jsonl",    "servelab"};
constexpr const char* kUnits[] = {"s", "ms", "us", "ns"};

// The `workload:` section for selector byte `b` reading `path`.
std::string section_yaml(std::uint8_t b, const std::string& path) {
  const std::string type = kTypes[(b & 7) % 7];
  std::string y = "type: " + type + "\npath: '" + path + "'\n";
  if ((b & 0x08) && type != "azure") y += "lenient: true\n";  // azure has no lenient mode
  if (b & 0x10) y += "time_scale: 0.5\n";
  if (b & 0x20) y += "max_requests: 3\n";
  if (type == "csv" || type == "jsonl") {
    y += "columns: {arrival: t, prompt_tokens: p, output_tokens: o, priority: pr, tenant: te}\n";
    y += std::string("arrival_unit: ") + kUnits[b >> 6] + "\n";
  }
  return y;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  static servelab::fuzz::FuzzInputFile file("trace.txt");
  const std::string& path = file.write(data + 1, size - 1);
  const servelab::ConfigNode section =
      servelab::ConfigNode::load_string(section_yaml(data[0], path), "fuzz.yaml");
  try {
    std::unique_ptr<servelab::Workload> w = servelab::make_workload(section, 0, file.dir());
    (void)w->describe();
    // A row is at least two bytes ("1\n"), so this bound is never what ends a valid trace.
    for (std::size_t i = 0; i <= size; ++i) {
      if (!w->next()) break;
    }
    (void)w->skipped_rows();
  } catch (const servelab::ConfigError&) {
    // A malformed trace, reported with file and line: expected.
  }
  return 0;
}
