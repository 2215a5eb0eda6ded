#include "sim/sweep.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <exception>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "core/metrics.h"
#include "core/strings.h"
#include "serving/cli.h"
#include "serving/config_node.h"
#include "serving/interrupt.h"
#include "serving/output_file.h"
#include "serving/run_folder.h"
#include "serving/run_stage.h"
#include "sim/class_table.h"
#include "sim/compare.h"
#include "sim/plot.h"
#include "sim/run_scoped_error.h"
#include "sim/sweep_mpi.h"
#include "sim/variant_loader.h"
#include "sim/work_summary.h"

namespace servelab {

namespace {

bool is_key_path(const std::string& key) {
  if (key.empty() || key.front() == '.' || key.back() == '.') return false;
  char prev = 0;
  for (char c : key) {
    if (c == '.' && prev == '.') return false;
    // '[' and ']': list indices, as --set takes them (`cluster.pools[0].count`); the override
    // checks their form when the point loads, naming the sweep key.
    if (!(is_name_char(c) || c == '[' || c == ']')) {
      return false;
    }
    prev = c;
  }
  return true;
}

// A value as a piece of a folder name: letters, digits, '.', '-'; anything else becomes '_'.
constexpr std::size_t kMaxNamePart = 48;

std::string name_part(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-';
    if (ok) {
      out.push_back(c);
    } else if (out.empty() || out.back() != '_') {
      out.push_back('_');
    }
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  // Folder names are at most 255 bytes; the point's index prefix keeps shortened names unique.
  if (out.size() > kMaxNamePart) out.resize(kMaxNamePart);
  return out.empty() ? "x" : out;
}

// A CSV field: ServeLab's CSVs never quote, so commas and quotes become ';' and nothing.
std::string csv_field(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == ',') {
      out.push_back(';');
    } else if (c != '"' && c != '\n') {
      out.push_back(c);
    }
  }
  return out;
}

void write_binary_file(const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw_io_error(path, "writing", errno);
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const int err = errno;
  if (std::fclose(f) != 0 || !ok) throw_io_error(path, "writing", ok ? errno : err);
}

// The `variant` axis: the named entries of the experiment's `compare:` section, or all of them.
SweepAxis variant_axis(const ExperimentSource& source, const ConfigNode& values) {
  SweepAxis axis;
  axis.key = "variant";
  axis.location = values.location();
  const std::vector<Variant> variants = variants_from_experiment(source);
  if (variants.empty()) {
    values.fail_message(
        "a `variant` axis names entries of the experiment's `compare:` section, "
        "and the experiment has none");
  }
  std::string known;
  for (const Variant& v : variants) known += (known.empty() ? "" : ", ") + v.name;
  auto add = [&](const Variant& v) {
    axis.values.push_back(v.name);
    axis.value_overrides.push_back(v.overrides);
    axis.value_locations.push_back(v.locations);
  };
  if (values.is_scalar() && values.as_string() == "all") {
    for (const Variant& v : variants) add(v);
    return axis;
  }
  if (!values.is_sequence() || values.elements().empty()) {
    values.fail("a non-empty list of variant names from `compare:` (" + known + "), or all");
  }
  for (const ConfigNode& value : values.elements()) {
    const std::string name = value.is_scalar() ? value.as_string() : std::string();
    const auto it = std::find_if(variants.begin(), variants.end(),
                                 [&](const Variant& v) { return v.name == name; });
    if (it == variants.end()) {
      value.fail("the name of a variant in `compare:` (" + known + ")");
    }
    if (std::find(axis.values.begin(), axis.values.end(), name) != axis.values.end()) {
      value.fail_message("variant '" + name + "' is listed twice");
    }
    add(*it);
  }
  return axis;
}

}  // namespace

std::vector<SweepAxis> sweep_from_experiment(const ExperimentSource& source) {
  const ConfigNode doc = source.document();
  const std::optional<ConfigNode> section = doc.find("sweep");
  if (!section) {
    throw ConfigError(source.path + ": no `sweep:` section (a mapping of key.path: [values])");
  }
  if (!section->is_map() || section->keys().empty()) {
    section->fail("a non-empty mapping of key.path: [value, value, ...]");
  }
  std::vector<SweepAxis> axes;
  for (const std::string& key : section->keys()) {
    const ConfigNode values = section->at(key);
    if (key == "variant") {
      axes.push_back(variant_axis(source, values));
      continue;
    }
    if (!is_key_path(key)) {
      values.fail_message("expected a dotted key path such as workload.arrival.rate");
    }
    const std::string head = key.substr(0, key.find('.'));
    if (head == "sweep" || head == "compare" || head == "derived") {
      values.fail_message("a sweep cannot set the `" + head + "` section");
    }
    // One axis inside another (`workload.arrival` and `workload.arrival.rate`): at every point
    // one value would be set into, or replaced by, the other's.
    for (const SweepAxis& other : axes) {
      if (other.key != "variant" && (key_holds(other.key, key) || key_holds(key, other.key))) {
        values.fail_message("overlaps the axis " + other.key + " (" + other.location +
                            "): one holds the other; sweep the inner key alone, or write "
                            "its values out in the outer one's");
      }
    }
    if (!values.is_sequence() || values.elements().empty()) {
      values.fail("a non-empty list of values, e.g. [2, 4, 8]");
    }
    SweepAxis axis;
    axis.key = key;
    axis.location = values.location();
    for (const ConfigNode& v : values.elements()) {
      axis.values.push_back(override_text(v.yaml()));
      axis.value_overrides.push_back({key + "=" + axis.values.back()});
      axis.value_locations.push_back({v.location()});
    }
    axes.push_back(std::move(axis));
  }
  return axes;
}

std::vector<SweepPoint> sweep_points(const std::vector<SweepAxis>& axes) {
  std::size_t n = 1;
  for (const SweepAxis& a : axes) n *= a.values.size();
  const std::size_t width = std::to_string(n - 1).size();
  std::vector<SweepPoint> points;
  for (std::size_t i = 0; i < n; ++i) {
    SweepPoint p;
    std::string index = std::to_string(i);
    p.name = std::string(width - index.size(), '0') + index;
    std::size_t rest = i, stride = n;
    for (const SweepAxis& a : axes) {
      stride /= a.values.size();
      const std::size_t k = rest / stride;
      const std::string& v = a.values[k];
      rest %= stride;
      p.values.push_back(v);
      p.overrides.insert(p.overrides.end(), a.value_overrides[k].begin(),
                         a.value_overrides[k].end());
      p.locations.insert(p.locations.end(), a.value_locations[k].begin(),
                         a.value_locations[k].end());
      const std::string label = a.key.substr(a.key.rfind('.') + 1);
      // Appended piece by piece: `"_" + std::string` trips a GCC 12 -Wrestrict false positive.
      p.name.append("_").append(name_part(label)).append("-").append(name_part(v));
    }
    points.push_back(std::move(p));
  }
  return points;
}

SweepPlan plan_sweep(const ExperimentSource& source, const std::vector<std::string>& base_overrides,
                     std::string out_dir) {
  SweepPlan plan;
  plan.axes = sweep_from_experiment(source);
  // Each value alone first, so an error names the sweep key that caused it.
  for (const SweepAxis& a : plan.axes) {
    for (std::size_t i = 0; i < a.values.size(); ++i) {
      throw_if_interrupted();  // a large grid takes a while to load
      const std::string label = a.location + ": sweep key '" + a.key + "', value " + a.values[i];
      load_checked_variant(source, base_overrides, a.value_overrides[i], label,
                           a.value_locations[i]);
    }
  }
  plan.points = sweep_points(plan.axes);
  for (const SweepPoint& p : plan.points) {
    throw_if_interrupted();
    plan.configs.push_back(
        load_variant(source, base_overrides, p.overrides, "sweep point " + p.name, p.locations));
    RunSummary flags;
    fill_overload_flag(plan.configs.back(), flags);
    flags.gpus = plan.configs.back().num_gpus();
    if (reports_energy(plan.configs.back())) flags.work = RunSummary::Work{.energy = true};
    plan.columns.add(flags);
  }
  if (out_dir.empty()) out_dir = "out/" + plan.configs.front().name + "-sweep";
  plan.out_dir = std::move(out_dir);
  for (const SweepPoint& p : plan.points) {
    if (p.name.size() > 255) {
      throw ConfigError(source.path + ": sweep point " + p.name.substr(0, 40) +
                        "...: its folder name is longer than 255 bytes (fewer sweep keys)");
    }
  }
  return plan;
}

void check_sweep_dir(const SweepPlan& plan) {
  // The folder may hold a previous one (sweep.csv and run folders), nothing else.
  std::vector<std::string> names;
  for (const SweepPoint& p : plan.points) names.push_back(p.name);
  check_group_dir(plan.out_dir, "sweep.csv", "sweep", names);
  // Every earlier point folder in it is replaced or removed at the end: no input may be there.
  for (const ExperimentConfig& c : plan.configs) refuse_inputs_inside(c, plan.out_dir);
}

void run_sweep_points(const SweepPlan& plan, const std::vector<std::size_t>& indices,
                      const std::string& dir, int jobs, bool progress, const StepHook& before_step,
                      std::vector<SweepResult>& results, std::vector<std::exception_ptr>& errors) {
  results.resize(plan.points.size());
  errors.resize(plan.points.size());
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> done{0};
  std::mutex progress_mutex;
  auto worker = [&] {
    for (std::size_t k = next++; k < indices.size(); k = next++) {
      // A point shorter than the simulator's interrupt check interval would never see one.
      if (interrupt_signal()) break;
      const std::size_t i = indices[k];
      try {
        RunOptions options;
        options.out_dir = dir + "/" + plan.points[i].name;
        options.before_step = before_step;
        results[i] = {plan.points[i], run_simulation(plan.configs[i], options)};
      } catch (...) {
        errors[i] = std::current_exception();
      }
      const std::size_t d = ++done;
      if (progress) {
        std::lock_guard<std::mutex> lock(progress_mutex);
        std::fprintf(stderr, "\r  %zu/%zu points done   ", d, indices.size());
        std::fflush(stderr);
      }
    }
  };
  const std::size_t num_workers =
      std::min<std::size_t>(indices.size(), static_cast<std::size_t>(std::max(1, jobs)));
  std::vector<std::thread> threads;
  for (std::size_t w = 1; w < num_workers; ++w) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
  if (progress) std::fputs("\r\033[K", stderr);
  throw_if_interrupted();
}

void rethrow_first_sweep_error(const SweepPlan& plan,
                               const std::vector<std::exception_ptr>& errors) {
  for (std::size_t i = 0; i < errors.size(); ++i) {
    if (!errors[i]) continue;
    rethrow_with_prefix(errors[i], "sweep point " + plan.points[i].name + ": ");
  }
}

namespace {

// A sweep table's first columns: the point's name and one column per sweep key.
std::string lead_header(const std::vector<SweepAxis>& axes) {
  std::string line = "point";
  for (const SweepAxis& a : axes) line.append(",").append(a.key);
  return line;
}

std::string lead_values(const SweepPoint& point) {
  std::string line = point.name;
  for (const std::string& v : point.values) line.append(",").append(csv_field(v));
  return line;
}

}  // namespace

std::string sweep_classes_header(const std::vector<SweepAxis>& axes) {
  return classes_csv_header(lead_header(axes));
}

std::string sweep_classes_rows(const SweepPoint& point, const RunSummary& summary) {
  return classes_csv_rows(lead_values(point), summary);
}

std::string sweep_csv_header(const std::vector<SweepAxis>& axes, const OptionalColumns& columns) {
  std::string line = lead_header(axes);
  line +=
      ",completed,rejected,aborted,duration_s,requests_per_s,input_tokens_per_s,"
      "output_tokens_per_s,ttft_mean_ms,ttft_p50_ms,ttft_p90_ms,ttft_p99_ms,tpot_mean_ms,"
      "tpot_p50_ms,tpot_p90_ms,tpot_p99_ms,itl_p99_ms,e2e_p50_ms,e2e_p99_ms,queueing_p50_ms,"
      "goodput_requests_per_s,slo_attainment,preemptions,recomputed_tokens,prefix_hit_rate,"
      "prompt_hit_rate,kv_usage_mean,kv_usage_max,batch_seqs_mean,slot_efficiency,"
      "internal_fragmentation_mean,unused_slots_mean,step_ms_mean,allocations_per_s,"
      "evictions_per_s";
  line += columns.csv_header() + "\n";
  return line;
}

std::string sweep_csv_row(const SweepPoint& point, const RunSummary& s,
                          const OptionalColumns& columns) {
  // An empty field for a distribution without values (core/metrics.h stat_text).
  const auto cell = [](const DistributionSummary& d, double v) {
    return "," + stat_text(d, v, "%.6f", "");
  };
  std::string line = lead_values(point);
  line += format_text(",%" PRId64 ",%" PRId64 ",%" PRId64 ",%.6f,%.6f,%.3f,%.3f", s.completed,
                      s.rejected, s.aborted, s.duration_s, s.requests_per_s, s.input_tokens_per_s,
                      s.output_tokens_per_s);
  line += cell(s.ttft_ms, s.ttft_ms.mean) + cell(s.ttft_ms, s.ttft_ms.p50) +
          cell(s.ttft_ms, s.ttft_ms.p90) + cell(s.ttft_ms, s.ttft_ms.p99) +
          cell(s.tpot_ms, s.tpot_ms.mean) + cell(s.tpot_ms, s.tpot_ms.p50) +
          cell(s.tpot_ms, s.tpot_ms.p90) + cell(s.tpot_ms, s.tpot_ms.p99) +
          cell(s.itl_ms, s.itl_ms.p99) + cell(s.e2e_ms, s.e2e_ms.p50) +
          cell(s.e2e_ms, s.e2e_ms.p99) + cell(s.queueing_ms, s.queueing_ms.p50);
  line += format_text(
      ",%.6f,%.6f,%" PRId64 ",%" PRId64 ",%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.3f,%.6f,%.3f,%.3f",
      s.goodput_requests_per_s, s.slo_attainment, s.preemptions, s.recomputed_tokens,
      s.prefix_hit_rate, s.prompt_hit_rate, s.kv_usage_mean, s.kv_usage_max, s.batch_seqs_mean,
      s.slot_efficiency, s.kv_internal_fragmentation_mean, s.kv_unused_slots_mean, s.step_ms_mean,
      s.allocations_per_s, s.evictions_per_s);
  line += columns.csv_row(s) + "\n";
  return line;
}

int sweep_name_width(const std::vector<SweepPoint>& points) {
  std::size_t width = 32;
  for (const SweepPoint& p : points) width = std::max(width, p.name.size());
  return static_cast<int>(width);
}

std::string sweep_table_header(const OptionalColumns& columns, int width) {
  return format_text("%-*s %9s %9s %9s %9s %9s %9s %9s", width, "point", "req/s", "TTFT p50",
                     "TTFT p99", "TPOT p50", "TPOT p99", "goodput", "preempt") +
         columns.table_header(0) + "\n" +
         format_text("%-*s %9s %9s %9s %9s %9s %9s %9s", width, "", "", "(ms)", "(ms)", "(ms)",
                     "(ms)", "(req/s)", "") +
         columns.table_header(1) + "\n";
}

std::string sweep_table_row(const SweepPoint& point, const RunSummary& s,
                            const OptionalColumns& columns, int width) {
  return format_text("%-*s %9.2f %9s %9s %9s %9s %9.2f %9" PRId64, width, point.name.c_str(),
                     s.requests_per_s, stat_text(s.ttft_ms, s.ttft_ms.p50, "%.1f", "-").c_str(),
                     stat_text(s.ttft_ms, s.ttft_ms.p99, "%.1f", "-").c_str(),
                     stat_text(s.tpot_ms, s.tpot_ms.p50, "%.2f", "-").c_str(),
                     stat_text(s.tpot_ms, s.tpot_ms.p99, "%.2f", "-").c_str(),
                     s.goodput_requests_per_s, s.preemptions) +
         columns.table_row(s) + "\n";
}

std::vector<SweepResult> run_sweep(const ExperimentSource& source,
                                   const std::vector<std::string>& base_overrides,
                                   std::string out_dir, int jobs, bool progress,
                                   const StepHook& before_step) {
  const SweepPlan plan = plan_sweep(source, base_overrides, std::move(out_dir));
  check_sweep_dir(plan);
  // Everything is written under a temporary sibling and moved into OUT at the end, so an error
  // or an interrupt leaves OUT as it was.
  StagedDir stage(plan.out_dir);
  std::vector<std::size_t> all(plan.points.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  std::vector<SweepResult> results;
  std::vector<std::exception_ptr> errors;
  run_sweep_points(plan, all, stage.temp_path(), jobs, progress, before_step, results, errors);
  rethrow_first_sweep_error(plan, errors);

  std::string csv = sweep_csv_header(plan.axes, plan.columns);
  for (const SweepResult& r : results) {
    csv += sweep_csv_row(r.point, r.run.summary, plan.columns);
  }
  write_binary_file(stage.temp_path() + "/sweep.csv", csv);
  std::string classes;
  for (const SweepResult& r : results) classes += sweep_classes_rows(r.point, r.run.summary);
  commit_group(stage, sweep_classes_header(plan.axes), classes);
  for (SweepResult& r : results) r.run.out_dir = plan.out_dir + "/" + r.point.name;
  return results;
}

std::string sweep_table(const std::vector<SweepResult>& results) {
  OptionalColumns columns;
  std::vector<SweepPoint> points;
  for (const SweepResult& r : results) {
    columns.add(r.run.summary);
    points.push_back(r.point);
  }
  const int width = sweep_name_width(points);
  std::string table = sweep_table_header(columns, width);
  for (const SweepResult& r : results) {
    table += sweep_table_row(r.point, r.run.summary, columns, width);
  }
  return table;
}

SweepArgs parse_sweep_args(const std::vector<std::string>& args) {
  SweepArgs s;
  int jobs = 0;
  bool no_plot = false;
  s.experiment = parse_experiment_args(
      args, "sim sweep",
      [&](CLI::App& app) {
        app.add_option("-j,--jobs", jobs,
                       "simulations run at once (default: all cores); with --mpi, per process "
                       "(default 1)")
            ->check(cli::integer_in(1, 4096))
            ->type_name("N");
        app.add_flag("--no-plot", no_plot, "no figures (OUT/figures/)");
        app.add_flag("--mpi", s.mpi,
                     "share the points among the processes of an MPI job "
                     "(mpirun -np N sim sweep EXP --mpi); the files are those of --jobs");
      },
      "Run every point of the experiment's `sweep:` grid (key.path: [values]) on N threads, or "
      "on the processes of an MPI job; writes OUT/sweep.csv, OUT/<point>/ and OUT/figures/ "
      "(default OUT: out/<experiment name>-sweep); the files do not depend on N.");
  s.plot = !no_plot;
  s.jobs = jobs > 0
               ? jobs
               : (s.mpi ? 1 : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  return s;
}

int report_sweep(const SweepArgs& a, const std::string& dir, const std::string& table,
                 std::size_t num_points) {
  if (!a.experiment.quiet) {
    std::fputs(table.c_str(), stdout);
    std::printf("wrote %s/sweep.csv and %zu run folders\n", dir.c_str(), num_points);
    std::fflush(stdout);
  }
  if (!a.plot) return 0;
  PlotArgs p;
  p.inputs = {dir};
  p.quiet = a.experiment.quiet;
  const int code = run_plot(p);
  if (code == 3) {
    std::fprintf(stderr,
                 "sim: warning: no figures: matplotlib is missing (apt-get install "
                 "python3-matplotlib); the table and run folders are written\n");
    return 0;
  }
  return code;
}

int sweep_command(const std::vector<std::string>& args) {
  // Decided before parsing, so that under mpirun even a usage error is reported once.
  if (std::find(args.begin(), args.end(), "--mpi") != args.end()) return sweep_mpi_command(args);
  const SweepArgs a = parse_sweep_args(args);
  const std::vector<SweepResult> results =
      run_sweep(a.experiment.experiment, a.experiment.all_overrides(), a.experiment.out_dir, a.jobs,
                a.experiment.show_progress());
  const std::string dir = std::filesystem::path(results.front().run.out_dir).parent_path();
  return report_sweep(a, dir, sweep_table(results), results.size());
}

}  // namespace servelab
