#include "serving/recorder.h"

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "serving/csv_line.h"
#include "serving/output_file.h"

namespace servelab {

namespace {

std::FILE* open_or_throw(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw_io_error(path, "writing", errno);
  static constexpr std::size_t kBuffer = 1 << 20;
  std::setvbuf(f, nullptr, _IOFBF, kBuffer);
  return f;
}

// An earlier buffered write may have failed already (ENOSPC): ferror keeps it.
void flush_or_throw(std::FILE* f, const std::string& path) {
  if (f && (std::fflush(f) != 0 || std::ferror(f))) throw_io_error(path, "writing", errno);
}

std::string fixed_point(TimeNs t, TimeNs unit, int digits) {
  if (t < 0) return "";
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%" PRId64 ".%0*" PRId64, t / unit, digits, t % unit);
  return buf;
}

std::string format_double(double v) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.6f", v);
  return buf;
}

}  // namespace

SloTargets slo_for_class(const SloConfig& slo, const std::string& class_name) {
  SloTargets t = slo;
  const auto it = slo.classes.find(class_name);
  if (it == slo.classes.end()) return t;
  if (it->second.ttft_ms) t.ttft_ms = it->second.ttft_ms;
  if (it->second.tpot_ms) t.tpot_ms = it->second.tpot_ms;
  if (it->second.e2e_ms) t.e2e_ms = it->second.e2e_ms;
  return t;
}

std::string format_seconds(TimeNs t) { return fixed_point(t, kNsPerS, 9); }
std::string format_ms(TimeNs t) { return fixed_point(t, kNsPerMs, 6); }

Recorder::Recorder(SloConfig slo, const std::string& steps_path, const std::string& schedule_path,
                   bool replica_column)
    : slo_(slo),
      steps_path_(steps_path),
      schedule_path_(schedule_path),
      replica_column_(replica_column) {
  if (!steps_path.empty()) {
    steps_ = open_or_throw(steps_path);
    std::fputs(replica_column_ ? "step,replica," : "step,", steps_);
    std::fputs(
        "start_s,duration_ms,num_seqs,prefill_tokens,decode_tokens,kv_blocks_used,"
        "kv_blocks_free,kv_blocks_cached,kv_usage,waiting,running,preempted,swap_out_blocks,"
        "swap_in_blocks,kv_blocks_allocated,kv_blocks_freed,kv_blocks_evicted,"
        "kv_blocks_offloaded\n",
        steps_);
  }
  if (!schedule_path.empty()) {
    schedule_ = open_or_throw(schedule_path);
    std::fputs(replica_column_ ? "step,replica,request,first_token,num_tokens,kind\n"
                               : "step,request,first_token,num_tokens,kind\n",
               schedule_);
  }
}

Recorder::~Recorder() {
  if (steps_) std::fclose(steps_);
  if (schedule_) std::fclose(schedule_);
  if (events_) std::fclose(events_);
  if (blocks_) std::fclose(blocks_);
}

void Recorder::record_events(const std::string& path) {
  events_ = open_or_throw(path);
  events_path_ = path;
  std::fputs("time_s,request,event,detail\n", events_);
}

void Recorder::record_blocks(const std::string& path) {
  blocks_ = open_or_throw(path);
  blocks_path_ = path;
  std::fputs(replica_column_ ? "request,replica,position,block,start_s,end_s\n"
                             : "request,position,block,start_s,end_s\n",
             blocks_);
}

void Recorder::event(const Request& req, TimeNs now, const char* what, const std::string& detail) {
  if (!events_) return;
  std::string d = detail;
  std::replace(d.begin(), d.end(), ',', ';');
  std::fprintf(events_, "%s,%" PRIu64 ",%s,%s\n", format_seconds(now).c_str(), req.id(), what,
               d.c_str());
}

void Recorder::write_block_row(RequestId id, std::uint32_t replica, std::size_t position,
                               const HeldBlock& held, TimeNs end) {
  if (replica_column_) {
    std::fprintf(blocks_, "%" PRIu64 ",%" PRIu32 ",%zu,%d,%s,%s\n", id, replica, position,
                 held.block, format_seconds(held.since).c_str(), format_seconds(end).c_str());
  } else {
    std::fprintf(blocks_, "%" PRIu64 ",%zu,%d,%s,%s\n", id, position, held.block,
                 format_seconds(held.since).c_str(), format_seconds(end).c_str());
  }
}

void Recorder::release_blocks(RequestId id, TimeNs now) {
  const auto it = held_.find(id);
  if (it == held_.end()) return;
  for (std::size_t p = 0; p < it->second.blocks.size(); ++p) {
    write_block_row(id, it->second.replica, p, it->second.blocks[p], now);
  }
  held_.erase(it);
}

RequestRecord Recorder::make_record(const Request& req) const {
  RequestRecord r;
  r.id = req.id();
  r.arrival_ns = req.spec.arrival_ns;
  r.first_scheduled_ns = req.first_scheduled_ns;
  r.first_token_ns = req.first_token_ns;
  r.finish_ns = req.finish_ns;
  r.prompt_tokens = req.spec.prompt_len;
  r.output_tokens = req.num_total_output_tokens();  // all samples' (parallel sampling)
  r.samples = req.group != nullptr ? static_cast<std::int32_t>(req.group->samples.size()) : 1;
  r.cached_tokens = std::max(0, req.num_cached_tokens);
  r.preemptions = req.num_preemptions;
  r.recomputed_tokens = req.num_recomputed_tokens;
  r.status = req.status;
  r.reason = req.finish_reason;
  r.capped = req.capped_from_tokens > 0;
  r.lora_id = req.spec.lora_id;
  r.request_class = req.spec.request_class;
  return r;
}

void Recorder::on_ready(RequestId id, TimeNs arrival, TimeNs now) {
  if (!events_) return;
  std::fprintf(events_, "%s,%" PRIu64 ",ready,%s\n", format_seconds(now).c_str(), id,
               format_ms(now - arrival).c_str());
}

void Recorder::on_reject(const Request& req, TimeNs now) {
  records_.push_back(make_record(req));
  // An admission policy's refusal is not a rejection (docs/metrics.md, requests.shed).
  event(req, now, req.status == RequestStatus::kShed ? "shed" : "reject", req.finish_reason);
}

void Recorder::add_gaps(std::uint32_t request_class, TimeNs gap, std::int64_t count) {
  itl_ns_.add(gap, count);
  if (!class_itl_ns_.empty()) class_itl_ns_.at(request_class).add(gap, count);
}

void Recorder::on_token(const Request& req, TimeNs prev_token_ns, TimeNs now) {
  if (prev_token_ns >= 0) add_gaps(req.spec.request_class, now - prev_token_ns, 1);
}

void Recorder::on_step_tokens(std::span<const Request* const> requests,
                              std::span<const TimeNs> prev_token_ns, TimeNs now) {
  // Runs of requests with the same previous token time (and class, when the run has classes).
  const bool classes = !class_itl_ns_.empty();
  TimeNs run_prev = -1;
  std::uint32_t run_class = 0;
  std::int64_t run = 0;
  for (std::size_t i = 0; i < prev_token_ns.size(); ++i) {
    const TimeNs prev = prev_token_ns[i];
    const std::uint32_t cls = classes ? requests[i]->spec.request_class : 0;
    if (prev == run_prev && cls == run_class) {
      ++run;
      continue;
    }
    if (run > 0 && run_prev >= 0) add_gaps(run_class, now - run_prev, run);
    run_prev = prev;
    run_class = cls;
    run = 1;
  }
  if (run > 0 && run_prev >= 0) add_gaps(run_class, now - run_prev, run);
}

void Recorder::add_measured(const RequestRecord& record, std::span<const TimeNs> token_gaps) {
  measured_ = true;
  records_.push_back(record);
  for (const TimeNs gap : token_gaps) add_gaps(record.request_class, gap, 1);
}

void Recorder::on_preempt(const Request& req, TimeNs now) {
  ++preemptions_;
  event(req, now, "preempt", req.status == RequestStatus::kSwapped ? "swap" : "recompute");
  if (blocks_) release_blocks(req.id(), now);
}

void Recorder::on_finish(const Request& req, TimeNs now) {
  records_.push_back(make_record(req));
  event(req, now, req.status == RequestStatus::kAborted ? "abort" : "finish", req.finish_reason);
  if (blocks_) release_blocks(req.id(), now);
}

void Recorder::on_sample_end(const Request& sample, TimeNs now) {
  if (blocks_) release_blocks(sample.id(), now);
}

void Recorder::on_route(RequestId id, std::uint32_t replica, TimeNs now, const char* stage) {
  if (!events_) return;
  std::fprintf(events_, "%s,%" PRIu64 ",%s,replica=%" PRIu32 "\n", format_seconds(now).c_str(), id,
               stage, replica);
}

void Recorder::on_transfer(RequestId id, std::uint32_t src, std::uint32_t dst, std::int64_t bytes,
                           TimeNs now, TimeNs ready, TimeNs begin, TimeNs finish) {
  if (!events_) return;
  std::fprintf(events_,
               "%s,%" PRIu64 ",transfer,%" PRIu32 "->%" PRIu32 " bytes=%" PRId64
               " wait_ms=%s transfer_ms=%s start_s=%s\n",
               format_seconds(now).c_str(), id, src, dst, bytes, format_ms(begin - ready).c_str(),
               format_ms(finish - begin).c_str(), format_seconds(begin).c_str());
}

void Recorder::track_lora_slots(std::int32_t max_loras) {
  if (max_loras < 1) throw std::invalid_argument("Recorder::track_lora_slots: max_loras < 1");
  lora_slots_ = max_loras;
}

void Recorder::set_request_classes(std::vector<std::string> names) {
  if (names.empty()) throw std::invalid_argument("Recorder::set_request_classes: no classes");
  class_slo_.clear();
  for (const std::string& n : names) class_slo_.push_back(slo_for_class(slo_, n));
  class_itl_ns_.assign(names.size(), LogHistogram{});
  class_names_ = std::move(names);
}

void Recorder::on_step(const StepPlan& plan, TimeNs start, TimeNs duration,
                       const StepSnapshot& snap, std::uint32_t replica) {
  ++num_steps_;
  scheduled_seqs_ += static_cast<std::int64_t>(plan.requests.size());
  step_loras_ += plan.num_loras;
  lora_tokens_ += plan.num_lora_tokens;
  if (lora_slots_ > 0 && plan.num_loras > 0) {
    step_adapters(plan, step_adapters_);
    lora_tables_.try_emplace(replica, lora_slots_).first->second.place(step_adapters_, placed_);
  }
  if (blocks_) {
    // Compare each entry's table with the blocks it held: a new or replaced block opens an
    // interval now (the step's start); a replaced or dropped one closes its interval.
    for (const ScheduledRequest& e : plan.requests) {
      HeldBlocks& h = held_[e.id];
      if (h.replica != replica) {
        // Handed over (P/D): the prefill replica freed its blocks when its last step ended.
        for (std::size_t p = 0; p < h.blocks.size(); ++p) {
          write_block_row(e.id, h.replica, p, h.blocks[p], h.last_end);
        }
        h.blocks.clear();
        h.replica = replica;
      }
      std::vector<HeldBlock>& held = h.blocks;
      const std::size_t n = e.block_table.size();
      for (std::size_t p = 0; p < n; ++p) {
        if (p < held.size() && held[p].block == e.block_table[p]) continue;
        if (p < held.size()) {
          write_block_row(e.id, replica, p, held[p], start);
          held[p] = {e.block_table[p], start};
        } else {
          held.push_back({e.block_table[p], start});
        }
      }
      for (std::size_t p = n; p < held.size(); ++p)
        write_block_row(e.id, replica, p, held[p], start);
      held.resize(std::min(held.size(), n));
      h.last_end = start + duration;
    }
  }
  const double usage = snap.num_usable_blocks > 0 ? static_cast<double>(snap.kv_blocks_used) /
                                                        static_cast<double>(snap.num_usable_blocks)
                                                  : 0.0;
  usage_time_ += static_cast<long double>(usage) * static_cast<long double>(duration);
  busy_time_ += duration;
  usage_max_ = std::max(usage_max_, usage);
  reserved_unused_time_ +=
      static_cast<long double>(snap.kv_blocks_reserved_unused) * static_cast<long double>(duration);
  if (snap.kv_slots_held > 0) {
    const long double unused = static_cast<long double>(snap.kv_slots_held - snap.kv_slots_filled) /
                               static_cast<long double>(snap.kv_slots_held);
    fragmentation_time_ += unused * static_cast<long double>(duration);
    unused_slots_time_ += static_cast<long double>(snap.kv_slots_held - snap.kv_slots_filled) *
                          static_cast<long double>(duration);
  }
  swapped_out_ += static_cast<std::int64_t>(plan.swap_out.size());
  swapped_in_ += static_cast<std::int64_t>(plan.swap_in.size());
  // Page churn since this replica's previous snapshot (since its start for the first step).
  if (replica >= last_churn_.size()) last_churn_.resize(replica + 1);
  KvChurn& last = last_churn_[replica];
  const KvChurn delta{snap.churn.allocated - last.allocated, snap.churn.freed - last.freed,
                      snap.churn.evicted - last.evicted, snap.churn.offloaded - last.offloaded};
  last = snap.churn;
  churn_.allocated += delta.allocated;
  churn_.freed += delta.freed;
  churn_.evicted += delta.evicted;
  churn_.offloaded += delta.offloaded;
  const auto size = [](const auto& v) { return v.size(); };
  if (steps_) {
    CsvLine line;
    line.add(plan.step_index);
    if (replica_column_) line.add(replica);
    line.add_fixed(start, kNsPerS, 9)
        .add_fixed(duration, kNsPerMs, 6)
        .add(size(plan.requests))
        .add(plan.num_prefill_tokens)
        .add(plan.num_decode_tokens * plan.num_steps)  // a round: every pass's tokens
        .add(snap.kv_blocks_used)
        .add(snap.kv_blocks_free)
        .add(snap.kv_blocks_cached)
        .add_fixed6(usage)
        .add(snap.waiting)
        .add(snap.running)
        .add(size(plan.preempted))
        .add(size(plan.swap_out))
        .add(size(plan.swap_in))
        .add(delta.allocated)
        .add(delta.freed)
        .add(delta.evicted)
        .add(delta.offloaded)
        .end(steps_);
  }
  if (schedule_) {
    CsvLine line;
    for (const ScheduledRequest& s : plan.requests) {
      line.add(plan.step_index);
      if (replica_column_) line.add(replica);
      line.add(s.id)
          .add(s.first_token)
          .add(s.num_tokens * plan.num_steps)
          .add(s.is_prefill ? "prefill" : "decode")
          .end(schedule_);
    }
  }
}

void Recorder::finalize(TimeNs first_arrival, TimeNs end, const PrefixCacheStats& prefix) {
  first_arrival_ = first_arrival;
  end_ = end;
  prefix_ = prefix;
  finalized_ = true;
  flush_or_throw(steps_, steps_path_);
  flush_or_throw(schedule_, schedule_path_);
  if (blocks_) {
    // Requests still holding blocks at the end (none when every request finished).
    while (!held_.empty()) release_blocks(held_.begin()->first, end);
    flush_or_throw(blocks_, blocks_path_);
  }
  flush_or_throw(events_, events_path_);
}

namespace {

// A summary of nanoseconds in milliseconds.
DistributionSummary in_ms(DistributionSummary d) {
  for (double* v : {&d.mean, &d.p50, &d.p90, &d.p95, &d.p99, &d.max}) *v /= 1e6;
  return d;
}

// The request metrics of a set of requests (a run, or one class of it).
struct RequestTally {
  ClassSummary counts;
  std::int64_t prompt_cached_tokens = 0, good = 0;
  std::vector<double> ttft, tpot, e2e, queueing;

  void add(const RequestRecord& r, const SloTargets& slo) {
    ++counts.num_requests;
    // Every request's (an aborted one's too), as preemption.preemptions counts every event.
    counts.preemptions += r.preemptions;
    counts.recomputed_tokens += r.recomputed_tokens;
    if (r.status == RequestStatus::kShed) {
      ++counts.shed;
      return;
    }
    if (r.status == RequestStatus::kRejected) {
      ++counts.rejected;
      return;
    }
    if (r.status == RequestStatus::kAborted) {
      ++counts.aborted;
      return;
    }
    ++counts.completed;
    counts.input_tokens += r.prompt_tokens;
    counts.output_tokens += r.output_tokens;
    prompt_cached_tokens += r.cached_tokens;
    const double t_ttft = ns_to_ms(r.first_token_ns - r.arrival_ns);
    const double t_e2e = ns_to_ms(r.finish_ns - r.arrival_ns);
    ttft.push_back(t_ttft);
    e2e.push_back(t_e2e);
    if (r.first_scheduled_ns >= 0)
      queueing.push_back(ns_to_ms(r.first_scheduled_ns - r.arrival_ns));
    std::optional<double> t_tpot;
    // Per sequence: with parallel sampling, the mean tokens of a sample (samples of one request
    // may end at different lengths in the engine).
    const double per_seq = static_cast<double>(r.output_tokens) / r.samples;
    if (per_seq > 1) {
      t_tpot = (t_e2e - t_ttft) / (per_seq - 1);
      tpot.push_back(*t_tpot);
    }
    const bool ok = (!slo.ttft_ms || t_ttft <= *slo.ttft_ms) &&
                    (!slo.tpot_ms || !t_tpot || *t_tpot <= *slo.tpot_ms) &&
                    (!slo.e2e_ms || t_e2e <= *slo.e2e_ms);
    good += ok ? 1 : 0;
  }

  ClassSummary summary(std::string name, double duration_s) {
    ClassSummary c = counts;
    c.name = std::move(name);
    c.ttft_ms = summarize(ttft);
    c.tpot_ms = summarize(tpot);
    c.e2e_ms = summarize(e2e);
    c.queueing_ms = summarize(queueing);
    if (duration_s > 0) {
      c.requests_per_s = static_cast<double>(c.completed) / duration_s;
      c.output_tokens_per_s = static_cast<double>(c.output_tokens) / duration_s;
      c.goodput_requests_per_s = static_cast<double>(good) / duration_s;
    }
    c.slo_attainment =
        c.completed > 0 ? static_cast<double>(good) / static_cast<double>(c.completed) : 0.0;
    return c;
  }
};

}  // namespace

RunSummary Recorder::summary() const {
  RunSummary s;
  s.num_requests = static_cast<std::int64_t>(records_.size());
  for (const RequestRecord& r : records_) {
    if (r.lora_id != 0) ++s.requests_by_adapter[r.lora_id];
  }
  if (!s.requests_by_adapter.empty()) {
    std::int64_t adapted = 0;
    for (const auto& [id, n] : s.requests_by_adapter) adapted += n;
    s.requests_by_adapter[0] = s.num_requests - adapted;
  }
  s.adapters_per_step_mean =
      num_steps_ > 0 ? static_cast<double>(step_loras_) / static_cast<double>(num_steps_) : 0.0;
  s.lora_tokens = lora_tokens_;
  for (const auto& [replica, table] : lora_tables_) s.adapter_loads += table.loads();
  s.duration_s = ns_to_s(std::max<TimeNs>(0, end_ - first_arrival_));
  // Every request into the run's tally and, with classes, its class's: one definition of each
  // metric for both.
  const std::size_t num_classes = class_names_.size();
  std::vector<RequestTally> by_class(num_classes);
  RequestTally all;
  for (const RequestRecord& r : records_) {
    s.capped += r.capped ? 1 : 0;
    if (num_classes == 0) {
      all.add(r, slo_);
      continue;
    }
    if (r.request_class >= num_classes) {
      throw std::logic_error("Recorder: request " + std::to_string(r.id) + " has class " +
                             std::to_string(r.request_class) + " of " +
                             std::to_string(num_classes));
    }
    const SloTargets& slo = class_slo_[r.request_class];
    all.add(r, slo);
    by_class[r.request_class].add(r, slo);
  }
  ClassSummary total = all.summary("", s.duration_s);
  s.shed = total.shed;
  s.rejected = total.rejected;
  s.aborted = total.aborted;
  s.completed = total.completed;
  s.input_tokens = total.input_tokens;
  s.output_tokens = total.output_tokens;
  s.prompt_cached_tokens = all.prompt_cached_tokens;
  s.recomputed_tokens = total.recomputed_tokens;
  s.ttft_ms = total.ttft_ms;
  s.tpot_ms = total.tpot_ms;
  s.e2e_ms = total.e2e_ms;
  s.queueing_ms = total.queueing_ms;
  for (std::size_t k = 0; k < num_classes; ++k) {
    s.classes.push_back(by_class[k].summary(class_names_[k], s.duration_s));
    s.classes.back().itl_ms = in_ms(class_itl_ns_[k].summary());
  }
  s.itl_ms = in_ms(itl_ns_.summary());
  s.requests_per_s = total.requests_per_s;
  s.output_tokens_per_s = total.output_tokens_per_s;
  if (s.duration_s > 0) s.input_tokens_per_s = static_cast<double>(s.input_tokens) / s.duration_s;
  s.goodput_requests_per_s = total.goodput_requests_per_s;
  s.slo_attainment = total.slo_attainment;
  s.num_steps = num_steps_;
  s.preemptions = preemptions_;
  s.prefix_queried_tokens = prefix_.queried_tokens + prefix_.preempted_queried_tokens;
  s.prefix_hit_tokens = prefix_.hit_tokens + prefix_.preempted_hit_tokens;
  s.prefix_preempted_queried_tokens = prefix_.preempted_queried_tokens;
  s.prefix_preempted_hit_tokens = prefix_.preempted_hit_tokens;
  // vLLM's rate (PrefixCacheStats): resumed requests' lookups are kept apart and left out, and
  // so are hits in the offload tiers (its KV connector's, counted as "external").
  const auto rate = [&](std::int64_t hits) {
    return prefix_.queried_tokens > 0
               ? static_cast<double>(hits) / static_cast<double>(prefix_.queried_tokens)
               : 0.0;
  };
  s.prefix_hit_rate = rate(prefix_.hit_tokens - prefix_.external_hit_tokens);
  s.prefix_external_hit_rate = rate(prefix_.external_hit_tokens);
  s.prompt_hit_rate = s.input_tokens > 0 ? static_cast<double>(s.prompt_cached_tokens) /
                                               static_cast<double>(s.input_tokens)
                                         : 0.0;
  s.cow_copies = prefix_.cow_copies;
  s.blocks_saved_by_sharing = prefix_.blocks_saved_by_sharing;
  s.kv_usage_mean =
      busy_time_ > 0 ? static_cast<double>(usage_time_ / static_cast<long double>(busy_time_)) : 0;
  s.kv_usage_max = usage_max_;
  if (busy_time_ > 0) {
    const auto busy = static_cast<long double>(busy_time_);
    s.kv_reserved_unused_blocks_mean = static_cast<double>(reserved_unused_time_ / busy);
    s.kv_internal_fragmentation_mean = static_cast<double>(fragmentation_time_ / busy);
    s.kv_unused_slots_mean = static_cast<double>(unused_slots_time_ / busy);
  }
  if (num_steps_ > 0) {
    s.step_ms_mean = static_cast<double>(busy_time_) / 1e6 / static_cast<double>(num_steps_);
  }
  s.swapped_out_blocks = swapped_out_;
  s.swapped_in_blocks = swapped_in_;
  s.churn = churn_;
  if (s.duration_s > 0) {
    s.allocations_per_s = static_cast<double>(churn_.allocated) / s.duration_s;
    s.frees_per_s = static_cast<double>(churn_.freed) / s.duration_s;
    s.evictions_per_s = static_cast<double>(churn_.evicted) / s.duration_s;
    s.offloads_per_s = static_cast<double>(churn_.offloaded) / s.duration_s;
  }
  s.batch_seqs_mean =
      num_steps_ > 0 ? static_cast<double>(scheduled_seqs_) / static_cast<double>(num_steps_) : 0.0;
  return s;
}

void Recorder::write_requests_csv(const std::string& path) const {
  std::vector<const RequestRecord*> rows;
  rows.reserve(records_.size());
  for (const RequestRecord& r : records_) rows.push_back(&r);
  std::sort(rows.begin(), rows.end(),
            [](const RequestRecord* a, const RequestRecord* b) { return a->id < b->id; });
  std::FILE* f = open_or_throw(path);
  std::fputs(
      "id,arrival_s,first_scheduled_s,first_token_s,finish_s,prompt_tokens,output_tokens,"
      "cached_tokens,preemptions,recomputed_tokens,queueing_ms,ttft_ms,tpot_ms,e2e_ms,status,"
      "reason",
      f);
  std::fputs(class_names_.empty() ? "\n" : ",class\n", f);
  // The row's end: its class's name when the run has classes.
  const auto end_row = [&](const RequestRecord& r) {
    if (!class_names_.empty()) {
      std::fputc(',', f);
      std::fputs(class_names_.at(r.request_class).c_str(), f);
    }
    std::fputc('\n', f);
  };
  for (const RequestRecord* r : rows) {
    const bool done = r->status == RequestStatus::kFinished;
    const double per_seq = static_cast<double>(r->output_tokens) / r->samples;  // as above
    const std::string tpot =
        done && per_seq > 1
            ? format_double(ns_to_ms(r->finish_ns - r->first_token_ns) / (per_seq - 1))
            : "";
    // One CSV field: no separator, quote or line break (a server's or a plugin's text may hold
    // any of them).
    std::string reason = r->reason;
    for (char& c : reason) {
      if (c == ',') {
        c = ';';
      } else if (c == '"') {
        c = '\'';
      } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        c = ' ';
      }
    }
    if (measured_) {
      // A client's view (add_measured): what only the server knows stays empty.
      std::fprintf(
          f, "%" PRIu64 ",%s,,%s,%s,%d,%d,,,,,%s,%s,%s,%s,%s", r->id,
          format_seconds(r->arrival_ns).c_str(),
          r->first_token_ns >= 0 ? format_seconds(r->first_token_ns).c_str() : "",
          r->finish_ns >= 0 ? format_seconds(r->finish_ns).c_str() : "", r->prompt_tokens,
          r->output_tokens,
          r->first_token_ns >= 0 ? format_ms(r->first_token_ns - r->arrival_ns).c_str() : "",
          tpot.c_str(), done ? format_ms(r->finish_ns - r->arrival_ns).c_str() : "",
          to_string(r->status), reason.c_str());
      end_row(*r);
      continue;
    }
    std::fprintf(
        f, "%" PRIu64 ",%s,%s,%s,%s,%d,%d,%d,%d,%" PRId64 ",%s,%s,%s,%s,%s,%s", r->id,
        format_seconds(r->arrival_ns).c_str(), format_seconds(r->first_scheduled_ns).c_str(),
        format_seconds(r->first_token_ns).c_str(), format_seconds(r->finish_ns).c_str(),
        r->prompt_tokens, r->output_tokens, r->cached_tokens, r->preemptions, r->recomputed_tokens,
        r->first_scheduled_ns >= 0 ? format_ms(r->first_scheduled_ns - r->arrival_ns).c_str() : "",
        r->first_token_ns >= 0 ? format_ms(r->first_token_ns - r->arrival_ns).c_str() : "",
        tpot.c_str(), done ? format_ms(r->finish_ns - r->arrival_ns).c_str() : "",
        to_string(r->status), reason.c_str());
    end_row(*r);
  }
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  if (std::fclose(f) != 0 || failed) throw_io_error(path, "writing", failed ? err : errno);
}

namespace {
nlohmann::ordered_json dist_json(const DistributionSummary& d) {
  nlohmann::ordered_json j;
  j["count"] = d.count;
  j["mean"] = d.mean;
  j["p50"] = d.p50;
  j["p90"] = d.p90;
  j["p95"] = d.p95;
  j["p99"] = d.p99;
  j["max"] = d.max;
  return j;
}

// The five latency distributions of a run's summary or of one request class, in file order.
template <class Summary>
void put_latencies(nlohmann::ordered_json& j, const Summary& s) {
  j["ttft_ms"] = dist_json(s.ttft_ms);
  j["tpot_ms"] = dist_json(s.tpot_ms);
  j["itl_ms"] = dist_json(s.itl_ms);
  j["e2e_ms"] = dist_json(s.e2e_ms);
  j["queueing_ms"] = dist_json(s.queueing_ms);
}
}  // namespace

void add_spec_decode(RunSummary& s, const SchedulerCounters& c) {
  if (!s.spec_decode) s.spec_decode = RunSummary::SpecDecode{};
  RunSummary::SpecDecode& d = *s.spec_decode;
  d.num_drafts += c.num_drafts;
  d.num_draft_tokens += c.num_draft_tokens;
  d.num_accepted_tokens += c.num_accepted_tokens;
  if (d.num_accepted_tokens_per_pos.size() < c.num_accepted_tokens_per_pos.size()) {
    d.num_accepted_tokens_per_pos.resize(c.num_accepted_tokens_per_pos.size(), 0);
  }
  for (std::size_t i = 0; i < c.num_accepted_tokens_per_pos.size(); ++i) {
    d.num_accepted_tokens_per_pos[i] += c.num_accepted_tokens_per_pos[i];
  }
}

void write_summary_json(const std::string& path, const RunSummary& s,
                        const std::vector<std::pair<std::string, std::string>>& meta,
                        const std::string& cluster_json) {
  nlohmann::ordered_json j;
  nlohmann::ordered_json m;
  for (const auto& [k, v] : meta) m[k] = v;
  if (s.gpus > 0) m["gpus"] = s.gpus;
  j["run"] = m;
  j["requests"] = {{"total", s.num_requests},
                   {"completed", s.completed},
                   {"rejected", s.rejected},
                   {"aborted", s.aborted},
                   {"skipped_trace_rows", s.skipped_trace_rows}};
  if (s.report_overload) {
    j["requests"]["shed"] = s.shed;
    j["requests"]["capped"] = s.capped;
  }
  j["duration_s"] = s.duration_s;
  j["num_steps"] = s.num_steps;
  j["throughput"] = {{"requests_per_s", s.requests_per_s},
                     {"input_tokens_per_s", s.input_tokens_per_s},
                     {"output_tokens_per_s", s.output_tokens_per_s},
                     {"input_tokens", s.input_tokens},
                     {"output_tokens", s.output_tokens}};
  put_latencies(j, s);
  j["goodput"] = {{"requests_per_s", s.goodput_requests_per_s},
                  {"slo_attainment", s.slo_attainment}};
  if (s.gpus > 0) j["goodput"]["requests_per_s_per_gpu"] = s.goodput_per_gpu();
  j["preemption"] = {{"preemptions", s.preemptions}, {"recomputed_tokens", s.recomputed_tokens}};
  j["prefix_cache"] = {{"queried_tokens", s.prefix_queried_tokens},
                       {"hit_tokens", s.prefix_hit_tokens},
                       {"hit_rate", s.prefix_hit_rate},
                       {"preempted_queried_tokens", s.prefix_preempted_queried_tokens},
                       {"preempted_hit_tokens", s.prefix_preempted_hit_tokens},
                       {"prompt_cached_tokens", s.prompt_cached_tokens},
                       {"prompt_hit_rate", s.prompt_hit_rate}};
  if (!s.offload_tiers.empty()) {
    // Hits by where the KV was found (docs/metrics.md): the device pool, then each tier.
    std::int64_t device = s.prefix_hit_tokens;
    for (const RunSummary::OffloadTier& t : s.offload_tiers) device -= t.hit_tokens;
    j["prefix_cache"]["hit_tokens_gpu"] = device;
    for (const RunSummary::OffloadTier& t : s.offload_tiers)
      j["prefix_cache"]["hit_tokens_" + t.name] = t.hit_tokens;
    j["prefix_cache"]["external_hit_rate"] = s.prefix_external_hit_rate;
  }
  if (s.pinned_blocks >= 0) {
    j["prefix_cache"]["pinned_blocks"] = s.pinned_blocks;
    j["prefix_cache"]["pinned_prefill_s"] = s.pinned_prefill_s;
  }
  j["kv_cache"] = {{"usage_mean", s.kv_usage_mean},
                   {"usage_max", s.kv_usage_max},
                   {"swapped_out_blocks", s.swapped_out_blocks},
                   {"swapped_in_blocks", s.swapped_in_blocks},
                   {"reserved_unused_blocks_mean", s.kv_reserved_unused_blocks_mean},
                   {"internal_fragmentation_mean", s.kv_internal_fragmentation_mean},
                   {"unused_slots_mean", s.kv_unused_slots_mean},
                   {"cow_copies", s.cow_copies},
                   {"blocks_saved_by_sharing", s.blocks_saved_by_sharing},
                   {"allocated_blocks", s.churn.allocated},
                   {"freed_blocks", s.churn.freed},
                   {"evicted_blocks", s.churn.evicted},
                   {"offloaded_blocks", s.churn.offloaded},
                   {"allocations_per_s", s.allocations_per_s},
                   {"frees_per_s", s.frees_per_s},
                   {"evictions_per_s", s.evictions_per_s},
                   {"offloads_per_s", s.offloads_per_s}};
  j["batch"] = {{"seqs_mean", s.batch_seqs_mean}, {"slot_efficiency", s.slot_efficiency}};
  if (!s.offload_tiers.empty()) {
    nlohmann::ordered_json o;
    for (const RunSummary::OffloadTier& t : s.offload_tiers) {
      o[t.name] = {{"capacity_blocks", t.capacity_blocks},
                   {"stored_blocks", t.stored_blocks},
                   {"loaded_blocks", t.loaded_blocks},
                   {"evicted_blocks", t.evicted_blocks},
                   {"hit_tokens", t.hit_tokens}};
    }
    o["dropped_blocks"] = s.offload_dropped_blocks;
    o["load_time_s"] = s.offload_load_s;
    if (s.idle_offload_s > 0) {
      o["idle"] = {{"after_s", s.idle_offload_s},
                   {"sessions", s.idle_offloaded_sessions},
                   {"blocks", s.idle_offloaded_blocks},
                   {"store_time_s", s.idle_store_s}};
    }
    j["kv_offload"] = o;
  }
  if (s.spec_decode) {
    // vLLM's spec-decode counters, then the rates derived from them (docs/metrics.md).
    const RunSummary::SpecDecode& d = *s.spec_decode;
    nlohmann::ordered_json o;
    o["num_drafts"] = d.num_drafts;
    o["num_draft_tokens"] = d.num_draft_tokens;
    o["num_accepted_tokens"] = d.num_accepted_tokens;
    o["num_accepted_tokens_per_pos"] = d.num_accepted_tokens_per_pos;
    o["acceptance_rate"] = d.num_draft_tokens > 0 ? static_cast<double>(d.num_accepted_tokens) /
                                                        static_cast<double>(d.num_draft_tokens)
                                                  : 0.0;
    o["mean_acceptance_length"] =
        d.num_drafts > 0
            ? 1.0 + static_cast<double>(d.num_accepted_tokens) / static_cast<double>(d.num_drafts)
            : 0.0;
    j["spec_decode"] = o;
  }
  if (s.report_lora) {
    nlohmann::ordered_json by_adapter = nlohmann::ordered_json::object();
    const auto base = s.requests_by_adapter.find(0);
    by_adapter["base"] = base != s.requests_by_adapter.end() ? base->second : s.num_requests;
    for (const auto& [id, n] : s.requests_by_adapter) {
      if (id != 0) by_adapter[std::to_string(id)] = n;
    }
    j["lora"] = {{"max_loras", s.max_loras},
                 {"adapters_per_step_mean", s.adapters_per_step_mean},
                 {"lora_tokens", s.lora_tokens},
                 {"adapter_loads", s.adapter_loads},
                 {"requests_by_adapter", by_adapter}};
  }
  // docs/metrics.md, "Energy and utilization".
  if (s.work) {
    j["utilization"] = {{"busy_fraction", s.busy_fraction()},
                        {"mfu", s.mfu()},
                        {"mbu", s.mbu()},
                        {"flops", s.work->flops},
                        {"bytes", s.work->bytes}};
  }
  if (s.has_energy()) {
    nlohmann::ordered_json e;
    e["joules"] = s.joules();
    if (s.measured_joules) {
      e["measured"] = "nvml";
    } else {
      e["busy_joules"] = s.work->busy_joules;
      e["idle_joules"] = s.work->idle_joules;
    }
    e["average_power_w"] = s.average_power_w();
    e["joules_per_output_token"] = s.joules_per_output_token();
    e["joules_per_request"] = s.completed > 0 ? s.joules() / static_cast<double>(s.completed) : 0.0;
    j["energy"] = e;
  }
  if (s.cuda_graphs) {
    j["cuda_graphs"] = {{"captures", s.cuda_graphs->captures},
                        {"replays", s.cuda_graphs->replays},
                        {"padded_eager_steps", s.cuda_graphs->padded_eager_steps},
                        {"eager_steps", s.cuda_graphs->eager_steps}};
  }
  if (s.gemm_lt) {
    nlohmann::ordered_json shapes = nlohmann::ordered_json::array();
    for (const RunSummary::GemmLtShape& g : *s.gemm_lt) {
      shapes.push_back({{"tokens", g.tokens},
                        {"in", g.in},
                        {"out", g.out},
                        {"out_type", g.out_f32 ? "f32" : "bf16"},
                        {"accumulate", g.accumulate},
                        {"tuned", g.tuned},
                        {"candidates", g.candidates},
                        {"chosen", g.chosen},
                        {"split_k", g.split_k},
                        {"first_us", g.first_us},
                        {"chosen_us", g.chosen_us},
                        {"swiglu", g.swiglu},
                        {"kernel", g.kernel},
                        {"skinny_splits", g.skinny_splits},
                        {"cublas_us", g.cublas_us},
                        {"skinny_us", g.skinny_us}});
    }
    j["gemm_lt"] = shapes;
  }
  if (s.prefill_packing) {
    j["prefill_packing"] = {{"enabled", s.prefill_packing->enabled},
                            {"packed_steps", s.prefill_packing->packed_steps}};
  }
  if (!s.classes.empty()) {
    // Per request class, the request metrics of the run's definitions (docs/metrics.md).
    nlohmann::ordered_json classes = nlohmann::ordered_json::object();
    for (const ClassSummary& c : s.classes) {
      nlohmann::ordered_json o;
      o["requests"] = {{"total", c.num_requests},
                       {"completed", c.completed},
                       {"rejected", c.rejected},
                       {"aborted", c.aborted}};
      if (s.report_overload) o["requests"]["shed"] = c.shed;
      o["throughput"] = {{"requests_per_s", c.requests_per_s},
                         {"output_tokens_per_s", c.output_tokens_per_s},
                         {"input_tokens", c.input_tokens},
                         {"output_tokens", c.output_tokens}};
      put_latencies(o, c);
      o["goodput"] = {{"requests_per_s", c.goodput_requests_per_s},
                      {"slo_attainment", c.slo_attainment}};
      o["preemption"] = {{"preemptions", c.preemptions},
                         {"recomputed_tokens", c.recomputed_tokens}};
      classes[c.name] = o;
    }
    j["classes"] = classes;
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw_io_error(path, "writing", errno);
  if (!cluster_json.empty()) j["cluster"] = nlohmann::ordered_json::parse(cluster_json);
  // replace: a path or name that is not UTF-8 (a Latin-1 file name) is written with U+FFFD.
  const std::string text = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + '\n';
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int err = errno;
  if (std::fclose(f) != 0 || !ok) throw_io_error(path, "writing", ok ? errno : err);
}

}  // namespace servelab
