#include "sim/link_transfers.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

namespace servelab {

namespace {

std::vector<double> channel_capacities(const Topology& t) {
  std::vector<double> c(2 * static_cast<std::size_t>(t.num_links()));
  for (std::size_t i = 0; i < c.size(); ++i)
    c[i] = t.channel_bandwidth(static_cast<std::int32_t>(i));
  return c;
}

bool finished_before(const FinishedTransfer& a, const FinishedTransfer& b) {
  return a.finish_ns != b.finish_ns ? a.finish_ns < b.finish_ns : a.id < b.id;
}

}  // namespace

LinkTransfers::LinkTransfers(Topology topology)
    : topology_(std::move(topology)), capacity_(channel_capacities(*topology_)) {}

LinkTransfers::LinkTransfers(std::vector<double> channel_bandwidth)
    : capacity_(std::move(channel_bandwidth)) {
  for (double c : capacity_) {
    if (!(c > 0)) throw std::invalid_argument("LinkTransfers: channel bandwidth must be positive");
  }
}

std::int32_t LinkTransfers::add_channel(double bandwidth) {
  if (!(bandwidth > 0))
    throw std::invalid_argument("LinkTransfers: channel bandwidth must be positive");
  capacity_.push_back(bandwidth);
  return static_cast<std::int32_t>(capacity_.size() - 1);
}

void LinkTransfers::check_time(TimeNs now) const {
  if (now < now_) {
    throw std::invalid_argument("LinkTransfers: time went backwards (" + std::to_string(now) +
                                " < " + std::to_string(now_) + ")");
  }
}

std::int64_t LinkTransfers::start(TimeNs now, GpuId from, GpuId to, std::int64_t bytes) {
  if (!topology_) throw std::logic_error("LinkTransfers::start needs a topology");
  const Route r = topology_->route(from, to);
  return start_on(now, r.channels, r.latency_ns, bytes);
}

std::int64_t LinkTransfers::start_on(TimeNs now, const std::vector<std::int32_t>& channels,
                                     TimeNs latency_ns, std::int64_t bytes) {
  check_time(now);
  if (bytes < 0 || latency_ns < 0) throw std::invalid_argument("LinkTransfers: negative size");
  for (std::int32_t c : channels) {
    if (c < 0 || static_cast<std::size_t>(c) >= capacity_.size()) {
      throw std::invalid_argument("LinkTransfers: no channel " + std::to_string(c));
    }
  }
  // Flows that sent their last byte before `now` leave the link first: left in, they would take
  // a share of it again and "drain" a second time at `now` (a transfer alone on its link
  // finished late under sharing).
  drain_until(now);
  progress_to(now);
  const std::int64_t id = next_id_++;
  if (bytes == 0 || channels.empty()) {
    // Nothing to share a channel for: only the latency.
    propagating_.push_back({id, now + latency_ns});
    return id;
  }
  sending_.push_back({id, channels, latency_ns, static_cast<double>(bytes), 0, 0});
  reshare();
  return id;
}

void LinkTransfers::progress_to(TimeNs t) {
  // Called only up to the next drain: no flow empties strictly before t.
  const double dt = static_cast<double>(t - now_) * 1e-9;
  if (dt > 0) {
    for (Flow& f : sending_) f.remaining = std::max(0.0, f.remaining - f.rate * dt);
  }
  now_ = t;
}

void LinkTransfers::reshare() {
  // Progressive filling over the channels the sending flows cross (only those: a topology of
  // thousands of GPUs has far more channels than transfers in flight), in channel order.
  std::vector<std::int32_t> used;
  for (const Flow& f : sending_) used.insert(used.end(), f.channels.begin(), f.channels.end());
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  auto local = [&used](std::int32_t c) {
    return static_cast<std::size_t>(std::lower_bound(used.begin(), used.end(), c) - used.begin());
  };
  std::vector<double> cap(used.size());
  std::vector<std::int32_t> count(used.size(), 0);
  for (std::size_t k = 0; k < used.size(); ++k) cap[k] = capacity_[used[k]];
  std::vector<std::vector<std::size_t>> flow_channels(sending_.size());
  for (std::size_t i = 0; i < sending_.size(); ++i) {
    for (std::int32_t c : sending_[i].channels) {
      flow_channels[i].push_back(local(c));
      ++count[flow_channels[i].back()];
    }
  }
  std::vector<bool> fixed(sending_.size(), false);
  std::size_t left = sending_.size();
  while (left > 0) {
    std::size_t best = used.size();
    double share = std::numeric_limits<double>::infinity();
    for (std::size_t k = 0; k < used.size(); ++k) {
      if (count[k] == 0) continue;
      const double s = cap[k] / count[k];
      if (s < share) {
        share = s;
        best = k;
      }
    }
    if (best == used.size()) {
      throw std::logic_error("LinkTransfers: a sending transfer crosses no channel");
    }
    for (std::size_t i = 0; i < sending_.size(); ++i) {
      if (fixed[i]) continue;
      const auto& ch = flow_channels[i];
      if (std::find(ch.begin(), ch.end(), best) == ch.end()) continue;
      fixed[i] = true;
      --left;
      sending_[i].rate = share;
      for (std::size_t k : ch) {
        cap[k] = std::max(0.0, cap[k] - share);
        --count[k];
      }
    }
  }
  for (Flow& f : sending_) f.drain_ns = now_ + seconds_to_ns(f.remaining / f.rate);
}

std::optional<TimeNs> LinkTransfers::next_finish() const {
  std::optional<TimeNs> next;
  for (const FinishedTransfer& p : propagating_) {
    if (!next || p.finish_ns < *next) next = p.finish_ns;
  }
  // Rates only fall when a transfer starts, and only rise when one drains: until the first
  // drain the current drain times hold, and a drain can only bring the others forward.
  // The earliest finish is therefore found by running the model forward on a scratch copy.
  if (sending_.empty()) return next;
  LinkTransfers scratch(capacity_);
  scratch.now_ = now_;
  scratch.next_id_ = next_id_;
  scratch.sending_ = sending_;
  scratch.propagating_ = propagating_;
  while (!scratch.sending_.empty()) {
    TimeNs drain = std::numeric_limits<TimeNs>::max();
    for (const Flow& f : scratch.sending_) drain = std::min(drain, f.drain_ns);
    if (next && drain >= *next) break;  // nothing can finish before the propagating one
    const std::vector<FinishedTransfer> done = scratch.advance(drain);
    for (const FinishedTransfer& p : done) {
      if (!next || p.finish_ns < *next) next = p.finish_ns;
    }
    for (const FinishedTransfer& p : scratch.propagating_) {
      if (!next || p.finish_ns < *next) next = p.finish_ns;
    }
  }
  return next;
}

void LinkTransfers::drain_until(TimeNs now) {
  while (!sending_.empty()) {
    TimeNs drain = std::numeric_limits<TimeNs>::max();
    for (const Flow& f : sending_) drain = std::min(drain, f.drain_ns);
    if (drain > now) break;
    progress_to(drain);
    std::vector<Flow> still;
    still.reserve(sending_.size());
    for (Flow& f : sending_) {
      if (f.drain_ns == drain) {
        propagating_.push_back({f.id, drain + f.latency_ns});
      } else {
        still.push_back(std::move(f));
      }
    }
    sending_ = std::move(still);
    reshare();
  }
}

std::vector<FinishedTransfer> LinkTransfers::advance(TimeNs now) {
  check_time(now);
  drain_until(now);
  progress_to(now);
  std::vector<FinishedTransfer> out, keep;
  for (const FinishedTransfer& p : propagating_) (p.finish_ns <= now ? out : keep).push_back(p);
  propagating_ = std::move(keep);
  std::sort(out.begin(), out.end(), finished_before);
  return out;
}

double LinkTransfers::rate(std::int64_t id) const {
  for (const Flow& f : sending_) {
    if (f.id == id) return f.rate;
  }
  return 0;
}

std::vector<TimeNs> transfer_finish_times(const Topology& topology,
                                          const std::vector<TransferSpec>& specs) {
  LinkTransfers model(topology);
  std::vector<TimeNs> finish(specs.size(), 0);
  auto collect = [&](const std::vector<FinishedTransfer>& done) {
    for (const FinishedTransfer& d : done) finish[static_cast<std::size_t>(d.id)] = d.finish_ns;
  };
  for (const TransferSpec& s : specs) {
    // Drains and finishes up to this start are settled first, so rates change in time order.
    collect(model.advance(s.start_ns));
    model.start(s.start_ns, s.from, s.to, s.bytes);
  }
  while (const std::optional<TimeNs> next = model.next_finish()) collect(model.advance(*next));
  return finish;
}

}  // namespace servelab
