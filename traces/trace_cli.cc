// `sim trace stats|convert`: see trace_stats.h.
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "core/strings.h"
#include "serving/cli.h"
#include "serving/config_node.h"
#include "serving/output_file.h"
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
  // Detection reads the first line and the reader then opens the file again: a pipe (sim trace
  // stats /dev/stdin) would have lost that line, and every row with it when it is short.
  std::error_code ec;
  const auto kind = std::filesystem::status(path, ec).type();
  if (!ec && kind != std::filesystem::file_type::regular &&
      kind != std::filesystem::file_type::not_found) {
    throw ConfigError(path +
                      ": not a regular file (a pipe or device is read only once), so its format "
                      "cannot be detected; name it with --format");
  }
  CsvReader csv(path);
  if (!csv.next_row()) throw ConfigError(path + ": empty file, cannot detect its format");
  if (ends_with(path, ".jsonl")) {
    // JSON lines: Mooncake's rows are the ones with a timestamp (another .jsonl is not read as
    // one and blamed for a missing field).
    if (csv.line().find("\"timestamp\"") != std::string_view::npos) return "mooncake";
    throw ConfigError(path + ":1: expected a Mooncake trace row ({\"timestamp\": ...}), got '" +
                      shorten(trim(csv.line())) +
                      "'; another JSON-lines trace is read by an experiment's workload "
                      "(type: jsonl, with its columns)");
  }
  // The readers allow spaces after the header's commas; so does detection.
  std::string header;
  for (const char c : trim(csv.line())) {
    if (c != ' ' || header.empty() || header.back() != ',') header += c;
  }
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
  const std::vector<std::string> formats = {"auto",     "azure", "mooncake",
                                            "burstgpt", "vidur", "servelab"};
  const std::string sub = args.empty() ? "" : args[0];
  const std::vector<std::string> rest(args.begin() + (args.empty() ? 0 : 1), args.end());
  std::string format = "auto";
  if (sub == "stats") {
    std::string file;
    const auto app = cli::command(
        "sim trace stats",
        "Requests, span, rate, inter-arrival CV, length percentiles and, where content is "
        "known, the repeated-block fraction of a trace.");
    app->add_option("FILE", file, "the trace")->required();
    app->add_option("--format", format, "the trace's format (default: detected)")
        ->check(cli::one_of(formats));
    cli::parse(*app, rest);
    // Where an experiment's `path:` would find it (here, else ServeLab's home: traces/...).
    file = resolve_data_path(file, ".").value_or(file);
    if (format == "auto") format = detect_trace_format(file);
    std::unique_ptr<Workload> w = open_trace(file, format);
    // Only these formats carry prompt content; for the others every block would be unique.
    const bool has_content = format == "mooncake" || format == "servelab";
    const TraceStats st = compute_trace_stats(*w, has_content ? 512 : 0);
    std::printf("%s\n%s", w->describe().c_str(), format_trace_stats(st).c_str());
    return 0;
  }
  if (sub == "convert") {
    std::string in, out;
    bool force = false;
    const auto app = cli::command(
        "sim trace convert",
        "Rewrite any supported trace in ServeLab's own CSV format (an existing OUT is replaced "
        "only with --force, and never when it is IN).");
    app->add_option("IN", in, "the trace to read")->required();
    app->add_option("OUT", out, "the ServeLab trace to write")->required();
    app->add_option("--format", format, "IN's format (default: detected)")
        ->check(cli::one_of(formats));
    cli::add_force(*app, force, "OUT");
    cli::parse(*app, rest);
    // IN as an experiment's `path:` finds it (here, else ServeLab's home), resolved first: the
    // file read is the one OUT may never be, even with --force (it would wipe the input before
    // reading it).
    in = resolve_data_path(in, ".").value_or(in);
    check_output_file(out, {in}, force);
    std::unique_ptr<Workload> w = open_trace(in, format);
    const std::int64_t n = write_servelab_trace(*w, out);
    std::printf("wrote %lld requests to %s\n", static_cast<long long>(n), out.c_str());
    return 0;
  }
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::printf("%s\n(sim trace stats --help and sim trace convert --help list the options)\n",
                kUsage);
    return 0;
  }
  throw UsageError(sub.empty() ? std::string("sim trace: expected stats or convert; ") + kUsage
                               : "sim trace: unknown subcommand '" + sub + "'; " + kUsage);
}

}  // namespace servelab
