#include "traces/workload.h"

#include <cstdio>
#include <filesystem>
#include <map>

#include "serving/home.h"
#include "traces/azure_trace.h"
#include "traces/lora_workload.h"
#include "traces/mix_workload.h"
#include "traces/multimodal_workload.h"
#include "traces/sampling_options.h"
#include "traces/session_workload.h"
#include "traces/synthetic_workload.h"
#include "traces/trace_readers.h"
#include "traces/transforms.h"

namespace servelab {

Workload::~Workload() = default;

std::optional<std::string> resolve_data_path(const std::string& path, const std::string& base_dir) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  if (p.is_absolute()) return path;
  std::error_code ec;
  // "." names the current folder: "x.jsonl", not "./x.jsonl" (which a second resolution made
  // "././x.jsonl" in messages).
  const fs::path local = base_dir.empty() || base_dir == "." ? p : fs::path(base_dir) / p;
  if (fs::exists(local, ec)) return local.string();
  try {
    const fs::path shipped = servelab_home() / p;
    if (fs::exists(shipped, ec)) return shipped.string();
  } catch (const HomeError&) {
    // No home (a binary copied alone): only base_dir-relative paths resolve.
  }
  return std::nullopt;
}

namespace {

// The file named by the string at `node`, resolved; a ConfigError at the key if it is nowhere.
std::string data_file(const ConfigNode& node, const std::string& base_dir) {
  const std::string path = node.as_string();
  if (std::optional<std::string> found = resolve_data_path(path, base_dir)) {
    // A folder would be read as an empty or malformed file ("malformed JSON") by its reader.
    std::error_code ec;
    if (std::filesystem::is_directory(*found, ec)) {
      node.fail_message("'" + *found + "' is a folder; expected a file");
    }
    // An experiment's files by their one name, however the experiment was reached (`sim run
    // e.yaml`, `$PWD/e.yaml`, `../e.yaml`, a run's config.yaml): the workload's description in
    // summary.json and config.yaml carries it, and the same experiment must give the same bytes.
    // A command's own file (`sim trace stats f.csv`, base ".") keeps the name it was given.
    if (base_dir == ".") return *found;
    const std::filesystem::path canonical = std::filesystem::weakly_canonical(*found, ec);
    return ec ? *found : canonical.string();
  }
  std::string where = "'" + (std::filesystem::path(base_dir) / path).string() + "'";
  try {
    where += " or '" + (servelab_home() / path).string() + "'";
  } catch (const HomeError&) {
  }
  node.fail_message("file '" + path + "' not found (looked for " + where + ")");
}

double positive_double(const ConfigNode& section, std::string_view key) {
  const ConfigNode node = section.at(key);
  const double v = node.as_double();
  if (!(v > 0)) node.fail("a number > 0");
  return v;
}

ArrivalConfig parse_arrival(const ConfigNode& n) {
  ArrivalConfig a;
  const std::string process = n.at("process").as_choice({"poisson", "gamma", "fixed", "onoff"});
  if (process == "poisson" || process == "fixed") {
    n.allow_keys({"process", "rate"});
    a.process = process == "poisson" ? ArrivalProcess::kPoisson : ArrivalProcess::kFixed;
  } else if (process == "gamma") {
    n.allow_keys({"process", "rate", "cv"});
    a.process = ArrivalProcess::kGamma;
    a.cv = positive_double(n, "cv");
  } else {
    n.allow_keys({"process", "rate", "on_s", "off_s"});
    a.process = ArrivalProcess::kOnOff;
    a.on_s = positive_double(n, "on_s");
    if (a.on_s > 1e9) n.at("on_s").fail("a number of seconds up to 1e9");
    a.off_s = n.get_double("off_s", 0.0, 1e9);
  }
  a.rate = positive_double(n, "rate");
  return a;
}

// Length tables by resolved path, so a file named twice is read once.
using TableCache = std::map<std::string, std::shared_ptr<const LengthTable>>;

std::shared_ptr<const LengthTable> load_table(const ConfigNode& file_node,
                                              const std::string& base_dir, TableCache& cache) {
  const std::string path = data_file(file_node, base_dir);
  std::shared_ptr<const LengthTable>& slot = cache[path];
  if (!slot) slot = LengthTable::load(path);
  return slot;
}

// Reads min and max (each optional, defaults 1 and kMaxSyntheticLength) and checks min <= max.
void parse_clamps(const ConfigNode& n, std::string_view min_key, std::string_view max_key,
                  std::int32_t& min, std::int32_t& max) {
  min = static_cast<std::int32_t>(n.get_int(min_key, 1, 1, kMaxSyntheticLength));
  max = static_cast<std::int32_t>(n.get_int(max_key, kMaxSyntheticLength, 1, kMaxSyntheticLength));
  if (max < min) {
    n.at(max_key).fail("an integer >= " + std::string(min_key) + " (" + std::to_string(min) + ")");
  }
}

LengthDist parse_length(const ConfigNode& n, bool is_prompt, const std::string& base_dir,
                        TableCache& cache) {
  LengthDist d;
  const std::string dist =
      n.at("dist").as_choice({"fixed", "uniform", "normal", "lognormal", "table"});
  if (dist == "fixed") {
    n.allow_keys({"dist", "value"});
    d.kind = LengthDistKind::kFixed;
    d.value = static_cast<std::int32_t>(n.get_int("value", 1, kMaxSyntheticLength));
    d.min = d.max = d.value;
  } else if (dist == "uniform") {
    n.allow_keys({"dist", "min", "max"});
    d.kind = LengthDistKind::kUniform;
    n.at("min");  // both bounds are required for a uniform range
    n.at("max");
    parse_clamps(n, "min", "max", d.min, d.max);
  } else if (dist == "normal" || dist == "lognormal") {
    n.allow_keys({"dist", "mean", "stddev", "min", "max"});
    d.kind = dist == "normal" ? LengthDistKind::kNormal : LengthDistKind::kLognormal;
    d.mean = positive_double(n, "mean");
    d.stddev = n.get_double("stddev", 0.0, 1e12);
    parse_clamps(n, "min", "max", d.min, d.max);
  } else {
    n.allow_keys({"dist", "file", "column", "min", "max"});
    d.kind = LengthDistKind::kTable;
    d.table = load_table(n.at("file"), base_dir, cache);
    const std::string column = n.has("column") ? n.at("column").as_choice({"prefill", "decode"})
                                               : (is_prompt ? "prefill" : "decode");
    d.column = column == "prefill" ? TableColumn::kPrefill : TableColumn::kDecode;
    parse_clamps(n, "min", "max", d.min, d.max);
  }
  return d;
}

std::unique_ptr<Workload> make_synthetic(const ConfigNode& s, std::uint64_t seed,
                                         const std::string& base_dir) {
  s.allow_keys({"type", "num_requests", "duration_s", "start_s", "arrival", "prompt_len",
                "output_len", "lengths", "shared_prefix", "transforms", "n", "sampling",
                "cache_salt", "multimodal", "lora"});
  SyntheticConfig c;
  c.n = static_cast<std::int32_t>(s.get_int("n", 1, 1, kMaxSamples));
  if (s.has("num_requests")) c.num_requests = s.get_int("num_requests", 1, INT64_MAX);
  if (s.has("duration_s")) {
    const double d = positive_double(s, "duration_s");
    if (d > 1e9 || d < 1e-9) s.at("duration_s").fail("a number of seconds in [1e-9, 1e9]");
    c.duration_ns = seconds_to_ns(d);
  }
  if (!c.num_requests && !c.duration_ns) {
    s.fail_message("needs num_requests or duration_s (or both) to know when to stop");
  }
  c.start_ns = seconds_to_ns(s.get_double("start_s", 0.0, 0.0, 1e9));
  c.arrival = parse_arrival(s.at("arrival"));
  c.arrival_location = s.at("arrival").location() + ": key '" + s.at("arrival").path() + "'";

  TableCache cache;
  if (s.has("lengths")) {
    if (s.has("prompt_len") || s.has("output_len")) {
      s.at("lengths").fail_message(
          "replaces prompt_len and output_len (prompt and output from one table row); give "
          "either lengths or both prompt_len and output_len");
    }
    const ConfigNode n = s.at("lengths");
    n.allow_keys({"table", "prompt_min", "prompt_max", "output_min", "output_max"});
    const auto table = load_table(n.at("table"), base_dir, cache);
    c.prompt_len.kind = c.output_len.kind = LengthDistKind::kTable;
    c.prompt_len.table = c.output_len.table = table;
    c.prompt_len.column = TableColumn::kPrefill;
    c.output_len.column = TableColumn::kDecode;
    parse_clamps(n, "prompt_min", "prompt_max", c.prompt_len.min, c.prompt_len.max);
    parse_clamps(n, "output_min", "output_max", c.output_len.min, c.output_len.max);
    c.paired_rows = true;
  } else {
    c.prompt_len = parse_length(s.at("prompt_len"), true, base_dir, cache);
    c.output_len = parse_length(s.at("output_len"), false, base_dir, cache);
  }

  if (s.has("shared_prefix")) {
    const ConfigNode n = s.at("shared_prefix");
    n.allow_keys({"num_prefixes", "length", "fraction"});
    SharedPrefixConfig p;
    p.num_prefixes = static_cast<std::int32_t>(n.get_int("num_prefixes", 1, 1'000'000'000));
    p.length = static_cast<std::int32_t>(n.get_int("length", 1, kMaxSyntheticLength - 1));
    p.fraction = n.get_double("fraction", 0.0, 1.0);
    // A prefix at least as long as every prompt would make every shared prompt longer than
    // asked for (and possibly than max_model_len, rejecting them all).
    if (p.fraction > 0 && p.length >= c.prompt_len.max) {
      n.at("length").fail("a length below the longest prompt (prompt_len max " +
                          std::to_string(c.prompt_len.max) + "): the prefix is part of the prompt");
    }
    c.shared_prefix = p;
  }
  return std::make_unique<SyntheticWorkload>(std::move(c), seed);
}

std::unique_ptr<Workload> make_azure(const ConfigNode& s, std::uint64_t seed,
                                     const std::string& base_dir) {
  s.allow_keys({"type", "path", "max_requests", "time_scale", "start_s", "transforms", "sampling",
                "cache_salt", "multimodal", "lora"});
  const std::string path = data_file(s.at("path"), base_dir);
  AzureTraceOptions o;
  if (s.has("max_requests")) o.max_requests = s.get_int("max_requests", 1, INT64_MAX);
  if (s.has("time_scale")) {
    o.time_scale = positive_double(s, "time_scale");
    if (o.time_scale > 1e6) s.at("time_scale").fail("a number > 0 and up to 1e6");
  }
  o.start_ns = seconds_to_ns(s.get_double("start_s", 0.0, 0.0, 1e9));
  o.content_seed = seed;
  return std::make_unique<AzureTraceWorkload>(path, o);
}

}  // namespace

std::unique_ptr<Workload> make_workload(const ConfigNode& section, std::uint64_t seed,
                                        const std::string& base_dir) {
  const std::string type =
      section.at("type").as_choice({"synthetic", "azure", "mooncake", "burstgpt", "vidur", "csv",
                                    "jsonl", "servelab", "multiturn", "sessions", "mix"});
  // Transforms are checked before the (possibly slow) file is opened.
  std::optional<TransformOptions> transforms;
  if (section.has("transforms")) transforms = parse_transforms(section.at("transforms"));
  RequestOptions options = parse_request_options(section);
  if (transforms) options.output_cap = transforms->max_output_tokens;
  const std::optional<MultimodalOptions> multimodal = parse_multimodal_options(section);
  const std::optional<LoraWorkloadOptions> lora = parse_lora_workload_options(section);
  std::unique_ptr<Workload> w;
  if (type == "synthetic") {
    w = make_synthetic(section, seed, base_dir);
  } else if (type == "azure") {
    w = make_azure(section, seed, base_dir);
  } else if (type == "mix") {
    w = make_mix_workload(section, seed, base_dir);
  } else if (type == "multiturn") {
    w = make_multiturn_workload(section, seed);  // its allow_keys rejects `transforms`
  } else if (type == "sessions") {
    w = make_session_file_workload(section, seed, data_file(section.at("path"), base_dir));
  } else {
    check_trace_reader_keys(section);
    w = make_trace_reader(section, seed, data_file(section.at("path"), base_dir));
  }
  if (transforms) w = std::make_unique<TransformedWorkload>(std::move(w), *transforms, seed);
  if (multimodal) w = std::make_unique<MultimodalWorkload>(std::move(w), *multimodal, seed);
  if (options.sampling || options.cache_salt) {
    w = std::make_unique<SampledWorkload>(std::move(w), std::move(options), seed);
  }
  if (lora) w = std::make_unique<LoraWorkload>(std::move(w), *lora, seed);
  return w;
}

namespace {

class LimitedWorkload : public WorkloadDecorator {
 public:
  LimitedWorkload(std::unique_ptr<Workload> inner, std::int64_t max_requests, TimeNs max_arrival,
                  std::string where)
      : WorkloadDecorator(std::move(inner)),
        max_requests_(max_requests),
        max_arrival_(max_arrival),
        where_(std::move(where)) {}

  std::optional<RequestSpec> next() override {
    std::optional<RequestSpec> r = inner().next();
    if (!r) {
      // Nothing to serve is a mistake in the workload (a window past the trace's end, a tiny
      // sample, an empty file), not a run of zero requests.
      if (count_ == 0) {
        throw ConfigError(where_ + ": the workload produced no requests (" + inner().describe() +
                          "); check its file and its transforms (window_s, sample)");
      }
      return r;
    }
    if (++count_ > max_requests_) {
      throw ConfigError(where_ + ": the workload has more than " + std::to_string(max_requests_) +
                        " requests (limits.max_requests); raise limits.max_requests to run "
                        "more");
    }
    if (r->arrival_ns > max_arrival_) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "request %lld arrives at %.9g s, after %.9g s",
                    static_cast<long long>(r->id), ns_to_s(r->arrival_ns), ns_to_s(max_arrival_));
      throw ConfigError(where_ + ": " + buf +
                        " (limits.max_duration_s); raise limits.max_duration_s to simulate "
                        "longer");
    }
    return r;
  }

 private:
  std::int64_t max_requests_;
  TimeNs max_arrival_;
  std::string where_;
  std::int64_t count_ = 0;
};

}  // namespace

std::unique_ptr<Workload> limit_workload(std::unique_ptr<Workload> inner, std::int64_t max_requests,
                                         TimeNs max_arrival_ns, std::string where) {
  return std::make_unique<LimitedWorkload>(std::move(inner), max_requests, max_arrival_ns,
                                           std::move(where));
}

}  // namespace servelab
