// Interconnect: the kinds of link between GPUs and what one GPU's port of each kind offers.
//
// A hardware catalogue entry states, under `interconnect:`, each link kind's bandwidth (one
// direction, B/s) and latency (per hop, seconds) as one GPU sees it, and how many GPUs a node
// (an HGX board, a server) holds. The topology (serving/topology.h) takes its defaults from
// here; the sources of the shipped figures are in docs/cost-model.md ("Interconnect").
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace servelab {

enum class LinkKind { kNvlink, kPcie, kInfiniband, kEthernet };

inline constexpr std::array<LinkKind, 4> kLinkKinds = {LinkKind::kNvlink, LinkKind::kPcie,
                                                       LinkKind::kInfiniband, LinkKind::kEthernet};

// "nvlink", "pcie", "infiniband", "ethernet".
inline std::string_view to_string(LinkKind kind) {
  switch (kind) {
    case LinkKind::kNvlink:
      return "nvlink";
    case LinkKind::kPcie:
      return "pcie";
    case LinkKind::kInfiniband:
      return "infiniband";
    case LinkKind::kEthernet:
      return "ethernet";
  }
  return "?";
}

// The kind named `name` (as to_string writes it); nullopt for anything else.
inline std::optional<LinkKind> link_kind_from_string(std::string_view name) {
  for (LinkKind k : kLinkKinds) {
    if (to_string(k) == name) return k;
  }
  return std::nullopt;
}

// One GPU's port of one kind: bandwidth in each direction (full duplex) and latency per hop.
// bandwidth 0 means the GPU has no such port.
struct LinkSpec {
  double bandwidth = 0;  // B/s, one direction
  double latency_s = 0;  // per hop
};

struct InterconnectSpec {
  std::int32_t gpus_per_node = 0;  // GPUs one node holds; 0 when the entry does not say
  std::array<LinkSpec, 4> links;   // indexed by LinkKind, datasheet bandwidths
  // Fraction of a port's datasheet bandwidth that NCCL transfers reach, in (0, 1]; the
  // topology's links taken from these ports run at bandwidth * efficiency (docs/validation.md
  // fits it to measured all-reduces).
  double efficiency = 1.0;

  const LinkSpec& operator[](LinkKind kind) const { return links[static_cast<int>(kind)]; }
  LinkSpec& operator[](LinkKind kind) { return links[static_cast<int>(kind)]; }
};

}  // namespace servelab
