// `sim trace stats|convert`: see trace_stats.h.
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <memory>

#include "core/config_node.h"
#include "core/output_file.h"
#include "core/strings.h"
#include "traces/csv_reader.h"
#include "traces/trace_readers.h"
#include "traces/trace_stats.h"
#include "traces/workload.h"

namespace servelab {

namespace {

constexpr const char* kUsage =
    "usage: sim trace stats FILE [--format F] | sim trace convert IN OUT [--format F] [--force] "
    "(F: azure, mooncake, burstgpt, vidur, servelab, auto)";

// The workload reading `path` in `format` (auto resolved), built through make_workload so the
// command and experiment files read traces identically. Seed 0: content ids of unshared prompts
// are arbitrary anyway.
std::unique_ptr<Workload> open_trace(const std::string& path, std::string format) {
  if (format == "auto") format = detect_trace_format(path);
  YAML::Node node;
  node["type"] = format;
  node["path"] = path;
  const ConfigNode section(node, std::make_shared<const std::string>("<sim trace " + path + ">"),
                           "workload");
  return make_workload(section, 0, ".");
}

}  // namespace

std::string detect_trace_format(const std::string& path) {
  if (ends_with(path, ".jsonl")) return "mooncake";
  CsvReader csv(path);
  if (!csv.next_row()) throw ConfigError(path + ": empty file, cannot detect its format");
  const std::string_view header = trim(csv.line());
  if (header == "TIMESTAMP,ContextTokens,GeneratedTokens") return "azure";
  if (header.starts_with("Timestamp,Model,Request tokens")) return "burstgpt";
  if (header.starts_with("arrival_ns,prompt_tokens,output_tokens")) return "servelab";
  if (header.find("arrived_at") != std::string_view::npos &&
      header.find("num_prefill_tokens") != std::string_view::npos) {
    return "vidur";
  }
  throw ConfigError(path +
                    ":1: expected a trace header (azure, burstgpt, vidur or servelab), got '" +
                    shorten(header) + "'; name the format with --format");
}

int trace_command(const std::vector<std::string>& args) {
  std::vector<std::string> positional;
  std::string format = "auto";
  bool force = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--force") {
      force = true;
    } else if (args[i] == "--format") {
      if (i + 1 == args.size()) throw ConfigError(std::string("--format needs a value; ") + kUsage);
      format = args[++i];
      if (format != "auto" && format != "azure" && format != "mooncake" && format != "burstgpt" &&
          format != "vidur" && format != "servelab") {
        throw ConfigError("--format: unknown format '" + format + "'; " + kUsage);
      }
    } else {
      positional.push_back(args[i]);
    }
  }
  if (positional.size() == 2 && positional[0] == "stats") {
    if (format == "auto") format = detect_trace_format(positional[1]);
    std::unique_ptr<Workload> w = open_trace(positional[1], format);
    // Only these formats carry prompt content; for the others every block would be unique.
    const bool has_content = format == "mooncake" || format == "servelab";
    const TraceStats st = compute_trace_stats(*w, has_content ? 512 : 0);
    std::printf("%s\n%s", w->describe().c_str(), format_trace_stats(st).c_str());
    return 0;
  }
  if (positional.size() == 3 && positional[0] == "convert") {
    // OUT == IN is refused even with --force (it would wipe the input before reading it).
    check_output_file(positional[2], {positional[1]}, force);
    std::unique_ptr<Workload> w = open_trace(positional[1], format);
    const std::int64_t n = write_servelab_trace(*w, positional[2]);
    std::printf("wrote %lld requests to %s\n", static_cast<long long>(n), positional[2].c_str());
    return 0;
  }
  throw ConfigError(kUsage);
}

}  // namespace servelab
