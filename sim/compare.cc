#include "sim/compare.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <exception>
#include <filesystem>
#include <set>
#include <stdexcept>

#include "core/metrics.h"
#include "core/strings.h"
#include "serving/config_node.h"
#include "serving/output_file.h"
#include "serving/run_folder.h"
#include "serving/run_stage.h"
#include "sim/class_table.h"
#include "sim/optional_columns.h"
#include "sim/run_scoped_error.h"
#include "sim/variant_loader.h"

namespace servelab {

namespace {

// The optional columns (sim/optional_columns.h) the variants' runs need.
OptionalColumns columns_of(const std::vector<VariantResult>& results) {
  OptionalColumns columns;
  for (const VariantResult& r : results) columns.add(r.run.summary);
  return columns;
}

void check_name(const std::string& name, const std::string& where) {
  const bool ok = !name.empty() && std::all_of(name.begin(), name.end(), is_name_char);
  // A folder name: no '/', not "." or "..", not hidden (".x" is how staging folders are named).
  if (!ok || name.front() == '.' || name.size() > 200) {
    throw ConfigError(where + ": variant name '" + name +
                      "': expected up to 200 letters, digits, '-', '_' or '.', not starting "
                      "with '.'");
  }
  // The names of the comparison's own outputs beside the variants' folders, and those by which
  // `sim plot` tells a folder's kind (a variant folder of that name would make the group look
  // like a run, a sweep or a report).
  for (const char* own : {"compare.csv", kGroupClassesFile, "figures", "summary.json", "sweep.csv",
                          "validation.json", "replay.csv"}) {
    if (name == own) {
      throw ConfigError(where + ": variant name '" + name +
                        "' is taken by the comparison's own output; choose another");
    }
  }
}

}  // namespace

std::vector<Variant> variants_from_experiment(const ExperimentSource& source) {
  const ConfigNode doc = source.document();
  std::vector<Variant> out;
  const std::optional<ConfigNode> section = doc.find("compare");
  if (!section) return out;
  std::set<std::string> seen;
  for (const ConfigNode& v : section->elements()) {
    v.allow_keys({"name", "set"});
    Variant var;
    var.name = v.get_string("name");
    check_name(var.name, v.at("name").location());
    if (!seen.insert(var.name).second) v.at("name").fail_message("duplicate variant name");
    if (const std::optional<ConfigNode> set = v.find("set")) {
      if (!set->is_map()) set->fail("a mapping of key.path: value");
      for (const std::string& key : set->keys()) {
        const std::string o = key + "=" + override_text(set->at(key).yaml());
        // A section after a key inside it replaces that key (as --set given so; the key after
        // its section refines it).
        for (const std::string& earlier : var.overrides) {
          if (override_replaces(earlier, o)) {
            set->at(key).fail_message("replaces " + override_key(earlier) +
                                      ", set before it in this variant (it holds that key; set "
                                      "the section first and the key after it)");
          }
        }
        var.overrides.push_back(o);
        var.locations.push_back(set->at(key).location());
      }
    }
    out.push_back(std::move(var));
  }
  if (out.empty()) section->fail("a non-empty list of variants");
  return out;
}

Variant parse_variant(const std::string& text) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) {
    throw ConfigError("--variant " + text + ": expected NAME:key=value,key=value");
  }
  Variant v;
  v.name = text.substr(0, colon);
  check_name(v.name, "--variant " + text);
  const std::string rest = text.substr(colon + 1);
  // The next comma outside brackets, braces and quotes (a value may be YAML's flow list or
  // mapping: `workload.arrival={process: poisson, rate: 4}`), or npos.
  const auto next_comma = [&](std::size_t from) {
    int depth = 0;
    char quote = 0;
    for (std::size_t i = from; i < rest.size(); ++i) {
      const char c = rest[i];
      if (quote != 0) {
        if (c == quote) quote = 0;
      } else if (c == '\'' || c == '"') {
        quote = c;
      } else if (c == '[' || c == '{') {
        ++depth;
      } else if ((c == ']' || c == '}') && depth > 0) {
        --depth;
      } else if (c == ',' && depth == 0) {
        return i;
      }
    }
    return std::string::npos;
  };
  std::size_t start = 0;
  while (start < rest.size()) {
    const auto comma = next_comma(start);
    const std::string item = rest.substr(start, comma - start);
    if (item.find('=') == std::string::npos) {
      throw ConfigError("--variant " + text + ": '" + item + "' is not key=value");
    }
    const std::string key = item.substr(0, item.find('='));
    for (const std::string& o : v.overrides) {
      if (o.substr(0, o.find('=')) == key) {
        throw ConfigError("--variant " + text + ": key '" + key + "' is given twice");
      }
      if (override_replaces(o, item)) {
        throw ConfigError("--variant " + text + ": key '" + key + "' replaces " + override_key(o) +
                          ", given before it (it holds that key; give the section first and "
                          "the key after it)");
      }
    }
    v.overrides.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
    if (start == rest.size()) {  // `a:seed=1,` (an empty item first is refused above)
      throw ConfigError("--variant " + text + ": ends with a comma; expected key=value after it");
    }
  }
  return v;
}

std::vector<VariantResult> run_compare(const ExperimentSource& source,
                                       const std::vector<Variant>& variants,
                                       const std::vector<std::string>& base_overrides,
                                       std::string out_dir, bool progress,
                                       const StepHook& before_step) {
  // Each variant's name is its run folder: two of one name would overwrite one run by another,
  // and one that is not a plain folder name ("../x", "a/b", "") would write outside the group
  // (the Python module's compare(variants=...) passed such names through: a user's run folder
  // elsewhere was replaced).
  std::set<std::string> seen;
  for (const Variant& v : variants) {
    check_name(v.name, "compare");
    if (!seen.insert(v.name).second) {
      throw ConfigError("variant '" + v.name +
                        "' is given twice; each variant needs a name of its own (it names its run "
                        "folder)");
    }
  }
  // Load every variant and make its workload first: a bad override in the last variant is
  // reported before any run.
  std::vector<ExperimentConfig> configs;
  for (const Variant& v : variants) {
    configs.push_back(load_checked_variant(source, base_overrides, v.overrides,
                                           "variant '" + v.name + "'", v.locations));
  }
  if (out_dir.empty()) out_dir = "out/" + configs.front().name + "-compare";
  // The folder may hold a previous one (compare.csv and run folders), nothing else.
  std::vector<std::string> names;
  for (const Variant& v : variants) names.push_back(v.name);
  check_group_dir(out_dir, "compare.csv", "comparison", names);
  // Every earlier variant folder in it is replaced or removed at the end: no input may be there.
  for (const ExperimentConfig& c : configs) refuse_inputs_inside(c, out_dir);
  // Everything is written under a temporary sibling and moved into OUT at the end, so an error
  // or an interrupt leaves OUT as it was.
  StagedDir stage(out_dir);
  std::vector<VariantResult> results;
  for (std::size_t i = 0; i < variants.size(); ++i) {
    RunOptions options;
    options.out_dir = stage.temp_path() + "/" + variants[i].name;
    options.progress = progress;
    options.before_step = before_step;
    try {
      results.push_back({variants[i], run_simulation(configs[i], options)});
    } catch (...) {
      rethrow_with_prefix(std::current_exception(), "variant '" + variants[i].name + "': ");
    }
  }
  const std::string csv = stage.temp_path() + "/compare.csv";
  std::FILE* f = std::fopen(csv.c_str(), "wb");
  if (!f) throw_io_error(csv, "writing", errno);
  const OptionalColumns columns = columns_of(results);
  std::fputs(
      "variant,overrides,completed,rejected,aborted,requests_per_s,output_tokens_per_s,"
      "ttft_p50_ms,ttft_p99_ms,tpot_p50_ms,tpot_p99_ms,e2e_p50_ms,goodput_requests_per_s,"
      "slo_attainment,preemptions,recomputed_tokens,prefix_hit_rate,prompt_hit_rate,kv_usage_mean,"
      "kv_usage_max",
      f);
  std::fputs((columns.csv_header() + "\n").c_str(), f);
  for (const VariantResult& r : results) {
    std::string overrides;
    for (const std::string& o : r.variant.overrides)
      overrides += (overrides.empty() ? "" : " ") + o;
    for (char& c : overrides) {
      if (c == ',' || c == '"') c = ';';
    }
    const RunSummary& s = r.run.summary;
    std::fprintf(f,
                 "%s,%s,%" PRId64 ",%" PRId64 ",%" PRId64
                 ",%.6f,%.3f,%s,%s,%s,%s,%s,%.6f,%.6f,%" PRId64 ",%" PRId64 ",%.6f,%.6f,%.6f,%.6f",
                 r.variant.name.c_str(), overrides.c_str(), s.completed, s.rejected, s.aborted,
                 s.requests_per_s, s.output_tokens_per_s,
                 stat_text(s.ttft_ms, s.ttft_ms.p50, "%.6f", "").c_str(),
                 stat_text(s.ttft_ms, s.ttft_ms.p99, "%.6f", "").c_str(),
                 stat_text(s.tpot_ms, s.tpot_ms.p50, "%.6f", "").c_str(),
                 stat_text(s.tpot_ms, s.tpot_ms.p99, "%.6f", "").c_str(),
                 stat_text(s.e2e_ms, s.e2e_ms.p50, "%.6f", "").c_str(), s.goodput_requests_per_s,
                 s.slo_attainment, s.preemptions, s.recomputed_tokens, s.prefix_hit_rate,
                 s.prompt_hit_rate, s.kv_usage_mean, s.kv_usage_max);
    std::fputs((columns.csv_row(s) + "\n").c_str(), f);
  }
  if (std::fclose(f) != 0) throw_io_error(csv, "writing", errno);
  std::string classes;
  for (const VariantResult& r : results) classes += classes_csv_rows(r.variant.name, r.run.summary);
  commit_group(stage, classes_csv_header("variant"), classes);
  for (VariantResult& r : results) r.run.out_dir = out_dir + "/" + r.variant.name;
  return results;
}

void print_compare_table(std::FILE* out, const std::vector<VariantResult>& results) {
  const OptionalColumns columns = columns_of(results);
  // The variant column: as wide as the longest name, at least 16.
  int w = 16;
  for (const VariantResult& r : results) w = std::max(w, static_cast<int>(r.variant.name.size()));
  std::fprintf(out, "%-*s %9s %9s %9s %9s %9s %9s %9s %7s %7s %7s", w, "variant", "req/s",
               "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "goodput", "preempt", "cache %",
               "KV %", "done");
  std::fputs((columns.table_header(0) + "\n").c_str(), out);
  std::fprintf(out, "%-*s %9s %9s %9s %9s %9s %9s %9s %7s %7s %7s", w, "", "", "(ms)", "(ms)",
               "(ms)", "(ms)", "(req/s)", "", "prompt", "mean", "");
  std::fputs((columns.table_header(1) + "\n").c_str(), out);
  for (const VariantResult& r : results) {
    const RunSummary& s = r.run.summary;
    std::fprintf(out, "%-*s %9.2f %9s %9s %9s %9s %9.2f %9" PRId64 " %7.1f %7.1f %7" PRId64, w,
                 r.variant.name.c_str(), s.requests_per_s,
                 stat_text(s.ttft_ms, s.ttft_ms.p50, "%.1f", "-").c_str(),
                 stat_text(s.ttft_ms, s.ttft_ms.p99, "%.1f", "-").c_str(),
                 stat_text(s.tpot_ms, s.tpot_ms.p50, "%.2f", "-").c_str(),
                 stat_text(s.tpot_ms, s.tpot_ms.p99, "%.2f", "-").c_str(), s.goodput_requests_per_s,
                 s.preemptions, 100.0 * s.prompt_hit_rate, 100.0 * s.kv_usage_mean, s.completed);
    std::fputs((columns.table_row(s) + "\n").c_str(), out);
  }
  // Request classes (a mix workload): each variant's classes, a row each (their full metrics
  // are in each run's summary.json `classes`).
  int cw = 5;
  bool classes = false;
  for (const VariantResult& r : results) {
    for (const ClassSummary& c : r.run.summary.classes) {
      cw = std::max(cw, static_cast<int>(c.name.size()));
      classes = true;
    }
  }
  if (!classes) return;
  std::fprintf(out, "\n%-*s %-*s %9s %9s %9s %9s %9s %9s %9s %7s\n", w, "by class", cw, "class",
               "req/s", "TTFT p50", "TTFT p99", "TPOT p50", "ITL p99", "E2E p99", "goodput",
               "SLO %");
  for (const VariantResult& r : results) {
    for (const ClassSummary& c : r.run.summary.classes) {
      std::fprintf(out, "%-*s %-*s %9.2f %9s %9s %9s %9s %9s %9.2f %7.1f\n", w,
                   r.variant.name.c_str(), cw, c.name.c_str(), c.requests_per_s,
                   stat_text(c.ttft_ms, c.ttft_ms.p50, "%.1f", "-").c_str(),
                   stat_text(c.ttft_ms, c.ttft_ms.p99, "%.1f", "-").c_str(),
                   stat_text(c.tpot_ms, c.tpot_ms.p50, "%.2f", "-").c_str(),
                   stat_text(c.itl_ms, c.itl_ms.p99, "%.2f", "-").c_str(),
                   stat_text(c.e2e_ms, c.e2e_ms.p99, "%.1f", "-").c_str(), c.goodput_requests_per_s,
                   100.0 * c.slo_attainment);
    }
  }
}

}  // namespace servelab
