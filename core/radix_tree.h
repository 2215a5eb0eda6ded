// RadixTree: an SGLang-style radix prefix cache (RadixAttention) at KV-block granularity.
//
// Contract:
// - A node is one full KV block, keyed by its block hash. The hash chains over the parent's
//   hash and the block's tokens, so a key names the whole token path from the root and the
//   key -> node index is the tree's child lookup: the child of node P holding tokens T is the
//   node whose key is hash(P.key, T). Each node records its parent block and its child count.
// - The tree owns one reference (BlockPool reference count) on every block it holds, so a
//   cached block never reaches the pool's free queue and the pool never evicts it behind the
//   tree's back. A node is *locked* while anyone else references its block (pool reference
//   count >= 2): a running request, or a forked sample, holding it.
// - Lock propagation: the tree only accepts a node whose parent is a node too and which the
//   inserting request holds right after its parent in its block table; a request's tree blocks
//   are therefore a root path, and a request holding a node holds all its ancestors. Hence a
//   locked node's ancestors are locked, and an unlocked node's descendants are all unlocked.
// - Eviction: only unlocked *leaves* are evicted, least recently used first (ticks of a logical
//   clock, ties by block id: deterministic). Evicting a leaf may turn its parent into an
//   unlocked leaf, which then competes by its own last-use tick. An interior node is never
//   evicted before its children. A node's tick is set when it is inserted, when it becomes
//   unlocked (the last holder releases it; releases come tail first, so a request's deeper
//   blocks get the older ticks) and when a waiting request's match walks it (refresh()).
// - Every unlocked node is evictable eventually (by evicting its subtree first), so
//   num_unlocked() blocks count as free capacity for the KV cache manager.
// The tree never decides by address or unordered iteration order.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "core/block_hash.h"
#include "core/block_pool.h"
#include "core/block_tag_index.h"

namespace servelab {

class RadixTree {
 public:
  // `pool` must outlive the tree; the tree holds references on the pool's blocks.
  explicit RadixTree(BlockPool& pool);
  RadixTree(const RadixTree&) = delete;
  RadixTree& operator=(const RadixTree&) = delete;

  // The node cached under `key`, if any (its block).
  std::optional<BlockId> lookup(const BlockHash& key) const;
  // Inserts `block` under `key` as a child of `parent` (kNullBlock: the root) and takes a
  // reference on it. Returns false and changes nothing when `key` is cached already (the block
  // then stays private to its request) or `parent` is neither the root nor a node.
  // REQUIRES: block holds a reference (the inserting request's) and is not a node.
  bool insert(BlockId parent, BlockId block, const BlockHash& key);
  // Whether `block` is a node of the tree.
  bool contains(BlockId block) const { return block > 0 && nodes_[block].in_tree; }

  // Removes leaf node `block`, which someone besides the tree holds (locked), and drops the
  // tree's reference: for a block inserted before its KV was computed, when that computation is
  // called off. REQUIRES: contains(block), no children, pool reference count >= 2.
  void remove(BlockId block);

  // Gives node `block` a fresh tick (a match of a waiting request: SGLang's match_prefix sets
  // last_access_time on every node it walks); an unlocked leaf moves to the back of the eviction
  // order. No-op for a block that is not a node.
  void refresh(BlockId block);
  // Call after the pool reference count of `blocks` rose (touch): nodes that became locked
  // leave the eviction order.
  void on_acquired(std::span<const BlockId> blocks);
  // Call after the pool reference count of `blocks` fell (free_blocks), in release order:
  // nodes that became unlocked get a fresh tick and, if leaves, join the eviction order.
  void on_released(std::span<const BlockId> blocks);

  // Evicts up to `n` unlocked leaves, least recently used first; their blocks return to the
  // pool's free queue without a hash. Returns how many were evicted.
  std::int32_t evict(std::int32_t n);

  std::int32_t num_nodes() const { return num_nodes_; }
  // Nodes nobody but the tree references (evictable capacity).
  std::int32_t num_unlocked() const { return num_unlocked_; }
  std::int64_t num_evictions() const { return num_evictions_; }
  // The eviction order: unlocked leaves, next victim first (for tests).
  std::vector<BlockId> eviction_order() const;
  // The parent of node `block` (kNullBlock for a child of the root). REQUIRES: contains(block).
  BlockId parent(BlockId block) const { return nodes_[block].parent; }

  // Verifies the contract above against the pool; throws std::logic_error naming the first
  // violation.
  void check_invariants() const;

 private:
  struct Node {
    BlockId parent = kNullBlock;
    std::int32_t children = 0;
    std::uint64_t tick = 0;
    bool in_tree = false;
  };
  bool locked(BlockId b) const { return pool_.ref_count(b) >= 2; }
  bool is_evictable_leaf(BlockId b) const {
    return nodes_[b].in_tree && nodes_[b].children == 0 && !locked(b);
  }

  BlockPool& pool_;
  std::vector<Node> nodes_;      // by block id
  std::vector<BlockHash> keys_;  // by block id: a node's key (the index reads keys from here)
  BlockTagIndex index_;          // key -> block (entries erased on eviction)
  std::set<std::pair<std::uint64_t, BlockId>> leaves_;  // unlocked leaves by (tick, block)
  std::uint64_t clock_ = 0;
  std::int32_t num_nodes_ = 0;
  std::int32_t num_unlocked_ = 0;
  std::int64_t num_evictions_ = 0;
};

}  // namespace servelab
