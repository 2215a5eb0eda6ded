// KvTransferModel: how long moving a request's KV blocks between two replicas takes, for
// prefill/decode disaggregation (the simulator asks it once per handed-over request).
//
// The interface is deliberately narrow: the request's KV as pieces (bytes, and the time from
// which they may leave), source and destination replica (cluster indices); the answer is when
// the link started moving them (after any queueing) and when the last byte arrived. A transfer
// sent after the prefill is one piece, ready at the prefill's end; a layer-wise one
// (`cluster.kv_transfer.layerwise`) is a piece per layer of each prefill step, ready as that
// step computes the layer (layerwise_kv_pieces), so most of it can move while the prompt is
// still being computed. Transfers are booked as prefills end, in time order, so a model may keep
// the links' occupancy as state (the pieces of a layer-wise transfer are ready in the past of
// the call: a booked model fills the gaps that transfers booked before left on the links). A
// topology model (GPUs in nodes over NVLink, PCIe, InfiniBand; shared bandwidth along paths)
// implements the same interface. The models: serving/direct_kv_links.h (replicas on machines of
// their own: a port per replica, the default, or a link per pair) and
// serving/topology_kv_transfer.h (`cluster.topology`).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/time.h"

namespace servelab {

struct KvTransferTimes {
  TimeNs begin = 0;   // the link started moving this request's bytes (>= ready)
  TimeNs finish = 0;  // the last byte arrived (> begin unless bytes == 0 and latency == 0)
};

// Part of a request's KV that may leave from `ready` on.
struct KvPiece {
  std::int64_t bytes = 0;
  TimeNs ready = 0;
};

class KvTransferModel {
 public:
  virtual ~KvTransferModel() = default;
  // Books moving `pieces` from replica `src` to replica `dst`. REQUIRES: at least one piece,
  // bytes >= 0, ready times non-decreasing; the calls in the order the transfers were decided.
  virtual KvTransferTimes transfer_pieces(std::span<const KvPiece> pieces, std::uint32_t src,
                                          std::uint32_t dst) = 0;
  // The caller's promise that no later call has a piece ready before `horizon`: a model may
  // forget the occupancy that ended by then (the booked models' calendars stay bounded).
  virtual void forget_before(TimeNs /*horizon*/) {}
  // One piece: `bytes` available from `ready` on.
  KvTransferTimes transfer(std::int64_t bytes, std::uint32_t src, std::uint32_t dst, TimeNs ready) {
    const KvPiece piece{bytes, ready};
    return transfer_pieces({&piece, 1}, src, dst);
  }
};

// A step of a request's prefill: `tokens` of its prompt computed from `start` to `end`.
struct PrefillChunk {
  TimeNs start = 0, end = 0;
  std::int32_t tokens = 0;
};

// The pieces of a layer-wise transfer of `bytes` (a prompt of `prompt_len` tokens, >= 1) whose
// prefill ended at `now` and ran in `chunks` (in time order; a request preempted and recomputed
// has its later chunks last), from a model of `num_layers` (>= 1) layers. Chunks ending after
// `now` are ignored (a plan launched before the prefill's end was known: async scheduling).
// The chunks counted are the last ones, up to prompt_len tokens; each splits its tokens' share
// of the bytes into num_layers pieces, layer l ready at start + (l + 1) / num_layers of the
// chunk's time. Tokens that no counted chunk computed (a prefix hit, KV kept through a swap) are
// one piece, ready at the first counted chunk's start. Bytes are split by token and layer in
// integers; the pieces sum to `bytes`. Without chunks: one piece of all the bytes ready at `now`.
std::vector<KvPiece> layerwise_kv_pieces(std::int64_t bytes, std::int32_t prompt_len,
                                         std::span<const PrefillChunk> chunks,
                                         std::int32_t num_layers, TimeNs now);

}  // namespace servelab
