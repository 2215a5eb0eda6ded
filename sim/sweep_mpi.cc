#include "sim/sweep_mpi.h"

#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "core/config_error.h"
#include "serving/cli.h"
#include "serving/home.h"
#include "serving/interrupt.h"
#include "serving/output_file.h"
#include "serving/run_folder.h"
#include "sim/message_passing.h"
#include "sim/sweep.h"

namespace servelab {

namespace {

namespace fs = std::filesystem;

// A failure on one rank, as every rank learns it (agree() below).
struct Failure {
  enum Kind : char {
    kHelp = 'h',         // --help was shown: exit 0
    kUsage = 'u',        // UsageError: exit 2, with run_command's pointer to --help
    kConfig = 'c',       // ConfigError: exit 2
    kHome = 'H',         // HomeError: exit 2
    kInterrupted = 'i',  // Interrupted: exit 128 + signal
    kInternal = 'x',     // anything else: exit 1
  };
  Kind kind = kInternal;
  int signal = 0;
  std::string message;
};

// The exception being handled, as a Failure. Call only inside a catch block.
Failure current_failure() {
  try {
    throw;
  } catch (const HelpShown&) {
    return {Failure::kHelp, 0, ""};
  } catch (const Interrupted& e) {
    return {Failure::kInterrupted, e.signal(), e.what()};
  } catch (const UsageError& e) {
    return {Failure::kUsage, 0, e.what()};
  } catch (const ConfigError& e) {
    return {Failure::kConfig, 0, e.what()};
  } catch (const HomeError& e) {
    return {Failure::kHome, 0, e.what()};
  } catch (const std::exception& e) {
    return {Failure::kInternal, 0, e.what()};
  } catch (...) {
    return {Failure::kInternal, 0, "an unknown exception"};
  }
}

template <typename F>
std::optional<Failure> attempt(F&& f) {
  try {
    f();
    return std::nullopt;
  } catch (...) {
    return current_failure();
  }
}

std::string encode(const Failure& f) {
  return std::string(1, static_cast<char>(f.kind)) + std::to_string(f.signal) + "\n" + f.message;
}

Failure decode(std::string_view bytes) {
  Failure f;
  const std::size_t nl = bytes.find('\n');
  if (bytes.empty() || nl == std::string_view::npos) {
    f.message = "a malformed failure report from another rank";
    return f;
  }
  f.kind = static_cast<Failure::Kind>(bytes[0]);
  f.signal = std::atoi(std::string(bytes.substr(1, nl - 1)).c_str());
  f.message = std::string(bytes.substr(nl + 1));
  return f;
}

int exit_code(const Failure& f) {
  switch (f.kind) {
    case Failure::kHelp:
      return 0;
    case Failure::kUsage:
    case Failure::kConfig:
    case Failure::kHome:
      return 2;
    case Failure::kInterrupted:
      return 128 + f.signal;
    case Failure::kInternal:
      break;
  }
  return 1;
}

// Rank 0's way out: the exception run_command reports, as `sim sweep` without MPI would.
[[noreturn]] void rethrow(const Failure& f) {
  switch (f.kind) {
    case Failure::kHelp:
      throw HelpShown{};
    case Failure::kUsage:
      throw UsageError(f.message);
    case Failure::kConfig:
      throw ConfigError(f.message);
    case Failure::kHome:
      throw HomeError(f.message);
    case Failure::kInterrupted:
      throw Interrupted(f.signal);
    case Failure::kInternal:
      break;
  }
  throw std::runtime_error(f.message);
}

constexpr std::int64_t kNoFailure = std::numeric_limits<std::int64_t>::max();

// Called by every rank after each phase with its own failure, if any, and that failure's order
// (a point's index, 0 for anything else). Returns the failure every rank adopts: the one of
// lowest order, among equals the lowest rank's; none when no rank failed.
std::optional<Failure> agree(MessagePassing& mp, const std::optional<Failure>& mine,
                             std::int64_t order) {
  const std::vector<std::int64_t> orders = mp.all_gather(mine ? order : kNoFailure);
  const auto first = std::min_element(orders.begin(), orders.end());
  if (*first == kNoFailure) return std::nullopt;
  const int winner = static_cast<int>(first - orders.begin());
  return decode(mp.broadcast(winner, mp.rank() == winner ? encode(*mine) : std::string()));
}

// How every rank leaves after an agreed failure: rank 0 throws it, the others return its code.
int leave(const MessagePassing& mp, const Failure& f) {
  if (mp.rank() == 0) rethrow(f);
  return exit_code(f);
}

// A rank's private folder for its points (ranks other than 0), removed with everything in it.
class PrivateFolder {
 public:
  PrivateFolder() {
    std::string pattern = (fs::temp_directory_path() / "servelab-sweep-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw_io_error(pattern, "creating", errno);
    path_ = pattern;
  }
  ~PrivateFolder() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  PrivateFolder(const PrivateFolder&) = delete;
  PrivateFolder& operator=(const PrivateFolder&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The stream a rank sends rank 0 after its points ran: for each of its points in grid order a
// 'P' message (index, sweep.csv row, table row) and each file of its run folder as 'F' (path
// inside the folder), 'D' chunks and 'E'; then 'Z', or 'X' with its failure instead of whatever
// was left.
constexpr std::size_t kChunk = 8 << 20;

std::vector<fs::path> files_under(const fs::path& root) {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.is_regular_file()) files.push_back(fs::relative(e.path(), root));
  }
  std::sort(files.begin(), files.end());
  return files;
}

// A point's lines of sweep.csv, the printed table and classes.csv (sim/class_table.h).
struct PointRows {
  std::string csv, table, classes;
};

void send_points(MessagePassing& mp, const SweepPlan& plan, const std::vector<std::size_t>& mine,
                 const std::vector<SweepResult>& results, const std::string& dir) {
  const int width = sweep_name_width(plan.points);
  for (const std::size_t i : mine) {
    const SweepPoint& p = plan.points[i];
    // Appended piece by piece: `"P" + std::string` trips a GCC 12 -Wrestrict false positive.
    std::string head = "P";
    head.append(std::to_string(i))
        .append("\n")
        .append(sweep_csv_row(p, results[i].run.summary, plan.columns));
    head.push_back('\0');
    head.append(sweep_table_row(p, results[i].run.summary, plan.columns, width));
    head.push_back('\0');
    mp.send(0, head.append(sweep_classes_rows(p, results[i].run.summary)));
    const fs::path root = fs::path(dir) / p.name;
    for (const fs::path& rel : files_under(root)) {
      const std::string path = (root / rel).string();
      mp.send(0, std::string("F").append(rel.generic_string()));
      std::FILE* f = std::fopen(path.c_str(), "rb");
      if (!f) throw_io_error(path, "reading", errno);
      std::string chunk(kChunk + 1, '\0');
      for (;;) {
        chunk[0] = 'D';
        const std::size_t n = std::fread(chunk.data() + 1, 1, kChunk, f);
        if (n > 0) mp.send(0, std::string_view(chunk.data(), n + 1));
        if (n < kChunk) break;
      }
      const bool bad = std::ferror(f) != 0;
      std::fclose(f);
      if (bad) throw_io_error(path, "reading", EIO);
      mp.send(0, "E");
    }
  }
  mp.send(0, "Z");
}

// Rank 0's side: writes rank `from`'s points into DIR (the staging folder) and their rows into
// `rows`. After a failure (its own or `from`'s 'X') it reads the rest of the
// stream without writing, so the sender never blocks; returns that failure.
std::optional<Failure> receive_points(MessagePassing& mp, int from, const SweepPlan& plan,
                                      const std::string& dir, std::vector<PointRows>& rows) {
  std::optional<Failure> failed;
  std::FILE* file = nullptr;
  std::string path;
  std::size_t point = plan.points.size();
  auto close_file = [&] {
    if (file) std::fclose(file);
    file = nullptr;
  };
  for (;;) {
    const std::string m = mp.receive(from);
    const char type = m.empty() ? '?' : m[0];
    const std::string_view body = std::string_view(m).substr(m.empty() ? 0 : 1);
    if (type == 'Z') break;
    if (type == 'X') {
      if (!failed) failed = decode(body);
      break;
    }
    if (failed) continue;
    failed = attempt([&] {
      switch (type) {
        case 'P': {
          const std::size_t nl = body.find('\n'), nul = body.find('\0');
          const std::size_t nul2 = nul == std::string_view::npos ? nul : body.find('\0', nul + 1);
          if (nl == std::string_view::npos || nul2 == std::string_view::npos || nul < nl) {
            throw std::runtime_error("a malformed point message from rank " + std::to_string(from));
          }
          point = std::stoul(std::string(body.substr(0, nl)));
          if (point >= plan.points.size() ||
              point % static_cast<std::size_t>(mp.size()) != static_cast<std::size_t>(from)) {
            throw std::runtime_error("rank " + std::to_string(from) + " sent point " +
                                     std::to_string(point) + ", not one of its own");
          }
          rows[point].csv = std::string(body.substr(nl + 1, nul - nl - 1));
          rows[point].table = std::string(body.substr(nul + 1, nul2 - nul - 1));
          rows[point].classes = std::string(body.substr(nul2 + 1));
          break;
        }
        case 'F': {
          const fs::path rel(body);
          if (point >= plan.points.size() || rel.empty() || rel.is_absolute() ||
              std::find(rel.begin(), rel.end(), "..") != rel.end()) {
            throw std::runtime_error("rank " + std::to_string(from) + " sent a bad file name '" +
                                     std::string(body) + "'");
          }
          const fs::path target = fs::path(dir) / plan.points[point].name / rel;
          std::error_code ec;
          fs::create_directories(target.parent_path(), ec);
          if (ec) throw_io_error(target.parent_path().string(), "creating", ec.value());
          path = target.string();
          file = std::fopen(path.c_str(), "wb");
          if (!file) throw_io_error(path, "writing", errno);
          break;
        }
        case 'D':
          if (!file) throw std::runtime_error("file data outside a file");
          if (std::fwrite(body.data(), 1, body.size(), file) != body.size()) {
            throw_io_error(path, "writing", errno);
          }
          break;
        case 'E': {
          std::FILE* f = file;
          file = nullptr;
          if (!f || std::fclose(f) != 0) throw_io_error(path, "writing", errno);
          break;
        }
        default:
          throw std::runtime_error("an unknown message from rank " + std::to_string(from));
      }
    });
    if (failed) close_file();
  }
  close_file();
  return failed;
}

}  // namespace

int sweep_mpi_command(const std::vector<std::string>& args) {
  const std::unique_ptr<MessagePassing> mp = join_mpi_job();
  const int rank = mp->rank();
  const std::size_t ranks = static_cast<std::size_t>(mp->size());
  // Rank 0 prints (the table, --help); the others' standard output would only repeat it.
  if (rank != 0 && !std::freopen("/dev/null", "w", stdout)) std::fclose(stdout);

  // Phase 1: every rank parses and validates; rank 0 checks and stages OUT.
  SweepArgs a;
  SweepPlan plan;
  std::optional<StagedDir> stage;
  std::optional<PrivateFolder> private_folder;
  std::optional<Failure> failed = attempt([&] {
    a = parse_sweep_args(args);
    plan = plan_sweep(a.experiment.experiment, a.experiment.all_overrides(), a.experiment.out_dir);
    if (rank == 0) {
      check_sweep_dir(plan);
      // Everything is written under a temporary sibling and moved into OUT at the end, so an
      // error or an interrupt leaves OUT as it was.
      stage.emplace(plan.out_dir);
    } else {
      private_folder.emplace();
    }
  });
  if (const std::optional<Failure> f = agree(*mp, failed, 0)) return leave(*mp, *f);

  // Phase 2: each rank runs its share.
  std::vector<std::size_t> mine;
  for (std::size_t i = static_cast<std::size_t>(rank); i < plan.points.size(); i += ranks) {
    mine.push_back(i);
  }
  const std::string dir = rank == 0 ? stage->temp_path() : private_folder->path();
  std::vector<SweepResult> results;
  std::vector<std::exception_ptr> errors;
  failed = attempt([&] {
    run_sweep_points(plan, mine, dir, a.jobs, rank == 0 && a.experiment.show_progress(), {},
                     results, errors);
  });
  std::int64_t order = 0;
  if (!failed) {
    const auto first = std::find_if(errors.begin(), errors.end(), [](auto& e) { return !!e; });
    order = first - errors.begin();
    failed = attempt([&] { rethrow_first_sweep_error(plan, errors); });
  }
  if (const std::optional<Failure> f = agree(*mp, failed, order)) return leave(*mp, *f);

  const int width = sweep_name_width(plan.points);
  // Phase 3: the other ranks' rows and run folders travel to rank 0.
  std::vector<PointRows> rows(plan.points.size());
  if (rank == 0) {
    for (const std::size_t i : mine) {
      rows[i].csv = sweep_csv_row(plan.points[i], results[i].run.summary, plan.columns);
      rows[i].classes = sweep_classes_rows(plan.points[i], results[i].run.summary);
      rows[i].table = sweep_table_row(plan.points[i], results[i].run.summary, plan.columns,
                                      sweep_name_width(plan.points));
    }
    failed.reset();
    for (int from = 1; from < static_cast<int>(ranks); ++from) {
      std::optional<Failure> f = receive_points(*mp, from, plan, dir, rows);
      if (f && !failed) failed = std::move(f);
    }
  } else {
    failed = attempt([&] { send_points(*mp, plan, mine, results, dir); });
    if (failed) mp->send(0, std::string("X").append(encode(*failed)));
  }
  if (const std::optional<Failure> f = agree(*mp, failed, 0)) return leave(*mp, *f);

  // Phase 4: rank 0 writes sweep.csv, commits OUT and reports.
  int code = 0;
  failed.reset();
  if (rank == 0) {
    failed = attempt([&] {
      std::string csv = sweep_csv_header(plan.axes, plan.columns);
      std::string classes;
      for (const PointRows& row : rows) {
        csv += row.csv;
        classes += row.classes;
      }
      write_file_atomically(dir + "/sweep.csv", csv);
      commit_group(*stage, sweep_classes_header(plan.axes), classes);
      std::string table = sweep_table_header(plan.columns, width);
      for (const PointRows& row : rows) table += row.table;
      const std::string out =
          fs::path(plan.out_dir + "/" + plan.points.front().name).parent_path().string();
      code = report_sweep(a, out, table, plan.points.size());
    });
  }
  if (const std::optional<Failure> f = agree(*mp, failed, 0)) return leave(*mp, *f);
  return std::stoi(mp->broadcast(0, rank == 0 ? std::to_string(code) : std::string()));
}

}  // namespace servelab
