#include "sim/shared_kv_transfer.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace servelab {

namespace {

void check_latency(TimeNs latency) {
  if (latency < 0) throw std::invalid_argument("SharedKvTransfer: latency must be >= 0");
}

}  // namespace

SharedKvTransfer::SharedKvTransfer(DirectKvLinks links, TimeNs latency)
    : direct_(std::move(links)), latency_(latency), links_(std::vector<double>{}) {
  check_latency(latency);
}

SharedKvTransfer::SharedKvTransfer(Topology topology, std::vector<Placement> replicas,
                                   TimeNs latency)
    : topology_(topology), replicas_(std::move(replicas)), latency_(latency), links_(topology) {
  check_latency(latency);
  for (const Placement& p : replicas_) {
    if (p.count < 1 || p.first < 0 || p.first + p.count > topology_->num_gpus()) {
      throw std::invalid_argument("SharedKvTransfer: a replica's GPUs outside the topology");
    }
  }
}

const Route& SharedKvTransfer::route(GpuId from, GpuId to) {
  auto it = routes_.find({from, to});
  if (it == routes_.end())
    it = routes_.emplace(std::pair{from, to}, topology_->route(from, to)).first;
  return it->second;
}

std::vector<SharedKvTransfer::Stream> SharedKvTransfer::streams(std::uint32_t src,
                                                                std::uint32_t dst) {
  if (!topology_) {
    // The direct links' channel ids are dense in first-use order, as LinkTransfers' added ones.
    std::vector<std::int32_t> channels = direct_->channels(src, dst);
    for (std::int32_t c = added_; c < direct_->num_channels(); ++c) {
      links_.add_channel(direct_->bandwidth(c));
    }
    added_ = direct_->num_channels();
    return {Stream{std::move(channels), 0}};
  }
  if (src >= replicas_.size() || dst >= replicas_.size()) {
    throw std::invalid_argument("SharedKvTransfer: no such replica");
  }
  const Placement& from = replicas_[src];
  const Placement& to = replicas_[dst];
  const std::int32_t k = std::max(from.count, to.count);
  std::vector<Stream> out;
  out.reserve(static_cast<std::size_t>(k));
  for (std::int32_t j = 0; j < k; ++j) {
    const Route& r = route(from.first + j % from.count, to.first + j % to.count);
    out.push_back({r.channels, r.latency_ns});
  }
  return out;
}

void SharedKvTransfer::start(TimeNs now, std::int64_t id, std::int64_t bytes, std::uint32_t src,
                             std::uint32_t dst) {
  if (bytes < 0) throw std::invalid_argument("SharedKvTransfer: negative size");
  if (now < links_.now()) {
    throw std::invalid_argument("SharedKvTransfer: time went backwards (" + std::to_string(now) +
                                " < " + std::to_string(links_.now()) + ")");
  }
  if (streams_left_.contains(id)) {
    throw std::invalid_argument("SharedKvTransfer: transfer " + std::to_string(id) +
                                " is in flight already");
  }
  const std::vector<Stream> s = streams(src, dst);
  const auto k = static_cast<std::int64_t>(s.size());
  streams_left_[id] = Left{next_seq_++, static_cast<std::int32_t>(k), now};
  for (std::int64_t j = 0; j < k; ++j) {
    const std::int64_t share = bytes / k + (j < bytes % k ? 1 : 0);
    const std::size_t js = static_cast<std::size_t>(j);
    // The fixed latency after each stream's own: the last stream's arrival is the end.
    owner_.emplace(links_.start_on(now, s[js].channels, s[js].latency_ns + latency_, share), id);
  }
}

std::vector<FinishedTransfer> SharedKvTransfer::advance(TimeNs now) {
  std::vector<std::pair<std::int64_t, FinishedTransfer>> ended;  // (start order, transfer)
  for (const FinishedTransfer& f : links_.advance(now)) {
    const auto o = owner_.find(f.id);
    if (o == owner_.end()) throw std::logic_error("SharedKvTransfer: a stream of no transfer");
    const std::int64_t id = o->second;
    owner_.erase(o);
    const auto left = streams_left_.find(id);
    left->second.last = std::max(left->second.last, f.finish_ns);
    if (--left->second.streams == 0) {
      ended.push_back({left->second.seq, {id, left->second.last}});
      streams_left_.erase(left);
    }
  }
  std::sort(ended.begin(), ended.end(), [](const auto& a, const auto& b) {
    return a.second.finish_ns != b.second.finish_ns ? a.second.finish_ns < b.second.finish_ns
                                                    : a.first < b.first;
  });
  std::vector<FinishedTransfer> out;
  out.reserve(ended.size());
  for (const auto& e : ended) out.push_back(e.second);
  return out;
}

}  // namespace servelab
