// Workload: the stream of requests an experiment replays, from a trace reader or a generator.
//
// A workload is pulled one request at a time, so a million-request trace or generator never
// holds its requests in memory. Every implementation yields requests in nondecreasing arrival
// order with ids 0, 1, 2, ... and is deterministic: the same configuration and seed give the
// same stream, request for request.
//
// make_workload() builds one from the `workload:` section of an experiment file; the keys of
// each type are documented in synthetic_workload.h (type: synthetic) and azure_trace.h
// (type: azure), and every key is checked (an unknown key, a wrong type or an out-of-range value
// is a ConfigError naming the file, the line and the key).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/request.h"
#include "serving/config_node.h"

namespace servelab {

class Workload {
 public:
  Workload() = default;
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;
  virtual ~Workload();

  // The next request, or nullopt once the workload is exhausted (and on every later call).
  // Arrival times are nondecreasing and ids are 0, 1, 2, ... in order. A streaming reader may
  // find a malformed row only when it reaches it: it then throws ConfigError "FILE:LINE: ...".
  virtual std::optional<RequestSpec> next() = 0;

  // One line saying what this workload is, for logs and run summaries.
  virtual std::string describe() const = 0;

  // Rows of the underlying trace skipped as malformed so far (`lenient: true`); 0 for others.
  virtual std::int64_t skipped_rows() const { return 0; }

  // Rows of the underlying trace its reader's filters left out so far (BurstGPT's failed
  // requests and other models' rows); 0 for others. Malformed rows are skipped_rows(), not these.
  virtual std::int64_t filtered_rows() const { return 0; }

  // --- Dependent workloads (sessions, agent workflows) ---
  // Some requests are released only when the requests they depend on finish. Such a workload
  // returns true from dependent(), and then its contract differs from the one of next() above:
  // - next_arrival() is the arrival time of the earliest request known now and not yet returned
  //   (nullopt when none is known: either exhausted, or every remaining request waits on
  //   requests still in flight); next() returns that request (nullopt when none is known).
  //   Requests known at one moment come out in nondecreasing arrival order, but a request
  //   released later may arrive earlier than one returned before it; ids need not be in
  //   arrival order.
  // - on_finish(id, t) tells the workload that request `id` finished at t (or was rejected or
  //   aborted at t: its dependents are released all the same). Requests it releases arrive at
  //   or after t.
  // - exhausted() is true once every request has been returned.
  // The simulator calls on_finish for every request of a dependent workload.
  virtual bool dependent() const { return false; }
  virtual std::optional<TimeNs> next_arrival() { return std::nullopt; }
  virtual void on_finish(RequestId id, TimeNs t) { (void)id, (void)t; }
  virtual bool exhausted() const { return false; }
};

// A workload wrapping another: everything but next() and describe() is the inner workload's
// (the dependent-workload protocol included), so a decorator that changes requests overrides
// next() only.
class WorkloadDecorator : public Workload {
 public:
  explicit WorkloadDecorator(std::unique_ptr<Workload> inner) : inner_(std::move(inner)) {}
  std::optional<RequestSpec> next() override { return inner_->next(); }
  std::string describe() const override { return inner_->describe(); }
  std::int64_t skipped_rows() const override { return inner_->skipped_rows(); }
  std::int64_t filtered_rows() const override { return inner_->filtered_rows(); }
  bool dependent() const override { return inner_->dependent(); }
  std::optional<TimeNs> next_arrival() override { return inner_->next_arrival(); }
  void on_finish(RequestId id, TimeNs t) override { inner_->on_finish(id, t); }
  bool exhausted() const override { return inner_->exhausted(); }

 protected:
  Workload& inner() { return *inner_; }
  const Workload& inner() const { return *inner_; }

 private:
  std::unique_ptr<Workload> inner_;
};

// `inner` behind a guard that throws ConfigError when it yields more than `max_requests`
// requests or one arriving after `max_arrival_ns`, or when it ends without yielding any; `where`
// starts the message (the experiment file) and the message names the limits.max_requests /
// limits.max_duration_s key to raise.
std::unique_ptr<Workload> limit_workload(std::unique_ptr<Workload> inner, std::int64_t max_requests,
                                         TimeNs max_arrival_ns, std::string where);

// Builds the workload that `section` (the `workload:` mapping) describes; `type` selects the
// kind. `seed` is the experiment seed: every random stream and every content id derives from it.
// Relative file paths in the section are resolved by resolve_data_path() against `base_dir`
// (normally the experiment file's directory). Loads length tables eagerly and opens trace files
// (reading their header and first row), so most file errors surface here.
// Throws ConfigError for any invalid key, value or file.
std::unique_ptr<Workload> make_workload(const ConfigNode& section, std::uint64_t seed,
                                        const std::string& base_dir);

// Where the data file `path` named in an experiment is: `path` itself if absolute, otherwise
// base_dir/path if that exists, otherwise <ServeLab home>/path (serving/home.h) if that
// exists, so experiments can name the traces this repository ships ("traces/azure2023/...")
// from anywhere. Returns nullopt when a relative path exists in neither place.
std::optional<std::string> resolve_data_path(const std::string& path, const std::string& base_dir);

}  // namespace servelab
