#include "core/radix_tree.h"

#include <stdexcept>
#include <string>

namespace servelab {

namespace {

[[noreturn]] void fail(const std::string& what) { throw std::logic_error("RadixTree: " + what); }

// Index slots per node (load factor at most 1/4: short probe runs).
constexpr std::size_t kIndexSlotsPerNode = 4;

}  // namespace

RadixTree::RadixTree(BlockPool& pool)
    : pool_(pool),
      nodes_(static_cast<std::size_t>(pool.num_blocks())),
      keys_(static_cast<std::size_t>(pool.num_blocks())),
      index_(static_cast<std::size_t>(pool.num_blocks()), kIndexSlotsPerNode, keys_.data()) {}

std::optional<BlockId> RadixTree::lookup(const BlockHash& key) const {
  const BlockId b = index_.find(key);
  if (b == BlockTagIndex::kEmpty) return std::nullopt;
  return b;
}

bool RadixTree::insert(BlockId parent, BlockId block, const BlockHash& key) {
  if (block <= kNullBlock || block >= pool_.num_blocks() || nodes_[block].in_tree) {
    fail("insert of invalid or cached block " + std::to_string(block));
  }
  if (parent != kNullBlock && !contains(parent)) return false;
  if (index_.find(key) != BlockTagIndex::kEmpty) return false;
  keys_[block] = key;  // before the insert: the index reads it
  index_.try_emplace(key, block);
  const BlockId one[] = {block};
  pool_.touch(one);  // the tree's own reference
  Node& n = nodes_[block];
  n.parent = parent;
  n.children = 0;
  n.tick = ++clock_;
  n.in_tree = true;
  ++num_nodes_;
  if (pool_.ref_count(block) == 1) {
    // Nobody else holds it (not the normal case: the inserting request does).
    ++num_unlocked_;
    leaves_.insert({n.tick, block});
  }
  if (parent != kNullBlock) {
    Node& p = nodes_[parent];
    if (p.children++ == 0 && !locked(parent)) leaves_.erase({p.tick, parent});
  }
  return true;
}

void RadixTree::refresh(BlockId block) {
  if (!contains(block)) return;
  Node& n = nodes_[block];
  const bool leaf = n.children == 0 && !locked(block);
  if (leaf) leaves_.erase({n.tick, block});
  n.tick = ++clock_;
  if (leaf) leaves_.insert({n.tick, block});
}

void RadixTree::on_acquired(std::span<const BlockId> blocks) {
  for (const BlockId b : blocks) {
    if (!contains(b) || pool_.ref_count(b) != 2) continue;  // not a node, or locked already
    --num_unlocked_;
    if (nodes_[b].children == 0) leaves_.erase({nodes_[b].tick, b});
  }
}

void RadixTree::on_released(std::span<const BlockId> blocks) {
  for (const BlockId b : blocks) {
    if (!contains(b) || pool_.ref_count(b) != 1) continue;  // not a node, or still locked
    Node& n = nodes_[b];
    n.tick = ++clock_;
    ++num_unlocked_;
    if (n.children == 0) leaves_.insert({n.tick, b});
  }
}

std::int32_t RadixTree::evict(std::int32_t n) {
  std::int32_t done = 0;
  while (done < n && !leaves_.empty()) {
    const BlockId b = leaves_.begin()->second;
    leaves_.erase(leaves_.begin());
    Node& node = nodes_[b];
    index_.erase(BlockTagIndex::tag_of(keys_[b]), b);
    node.in_tree = false;
    --num_nodes_;
    --num_unlocked_;
    ++num_evictions_;
    if (node.parent != kNullBlock) {
      Node& p = nodes_[node.parent];
      if (--p.children == 0 && !locked(node.parent)) leaves_.insert({p.tick, node.parent});
    }
    node.parent = kNullBlock;
    const BlockId one[] = {b};
    pool_.free_blocks(one);  // the tree's reference: the block is free, with no hash
    ++done;
  }
  return done;
}

void RadixTree::remove(BlockId block) {
  if (!contains(block) || nodes_[block].children != 0 || !locked(block)) {
    fail("remove of block " + std::to_string(block) + " which is not a locked leaf node");
  }
  Node& node = nodes_[block];
  index_.erase(BlockTagIndex::tag_of(keys_[block]), block);
  node.in_tree = false;
  --num_nodes_;
  if (node.parent != kNullBlock) {
    Node& p = nodes_[node.parent];
    if (--p.children == 0 && !locked(node.parent)) leaves_.insert({p.tick, node.parent});
  }
  node.parent = kNullBlock;
  const BlockId one[] = {block};
  pool_.free_blocks(one);  // the tree's reference; the holder keeps the block
}

std::vector<BlockId> RadixTree::eviction_order() const {
  std::vector<BlockId> out;
  out.reserve(leaves_.size());
  for (const auto& [tick, b] : leaves_) out.push_back(b);
  return out;
}

void RadixTree::check_invariants() const {
  const std::int32_t n = pool_.num_blocks();
  std::vector<std::int32_t> children(static_cast<std::size_t>(n), 0);
  std::int32_t nodes = 0, unlocked = 0, leaves = 0;
  for (BlockId b = 1; b < n; ++b) {
    const Node& node = nodes_[b];
    if (!node.in_tree) continue;
    ++nodes;
    const std::string name = "node " + std::to_string(b);
    if (pool_.ref_count(b) < 1) fail(name + " has no pool reference (the tree holds one)");
    if (pool_.block_hash(b)) fail(name + " carries a pool hash (radix mode uses none)");
    if (index_.find(keys_[b]) != b) fail(name + " is not indexed under its key");
    if (node.parent != kNullBlock) {
      if (node.parent < 0 || node.parent >= n || !nodes_[node.parent].in_tree) {
        fail(name + " has parent " + std::to_string(node.parent) + " which is not a node");
      }
      ++children[node.parent];
      if (locked(b) && !locked(node.parent)) {
        fail(name + " is locked but its parent " + std::to_string(node.parent) + " is not");
      }
    }
    if (!locked(b)) ++unlocked;
  }
  for (BlockId b = 1; b < n; ++b) {
    if (!nodes_[b].in_tree) continue;
    if (children[b] != nodes_[b].children) {
      fail("node " + std::to_string(b) + " counts " + std::to_string(nodes_[b].children) +
           " children but has " + std::to_string(children[b]));
    }
    const bool leaf = is_evictable_leaf(b);
    if (leaf) ++leaves;
    if (leaf != leaves_.contains({nodes_[b].tick, b})) {
      fail("node " + std::to_string(b) +
           (leaf ? " is an unlocked leaf missing from"
                 : " is in the eviction order but not an "
                   "unlocked leaf of"));
    }
  }
  if (static_cast<std::size_t>(leaves) != leaves_.size()) {
    fail("eviction order holds " + std::to_string(leaves_.size()) + " entries for " +
         std::to_string(leaves) + " unlocked leaves");
  }
  if (nodes != num_nodes_) fail("num_nodes is " + std::to_string(num_nodes_));
  if (unlocked != num_unlocked_) {
    fail(std::to_string(unlocked) + " unlocked nodes but num_unlocked is " +
         std::to_string(num_unlocked_));
  }
  std::int32_t indexed = 0;
  index_.for_each([&](std::uint32_t tag, BlockId b) {
    if (b <= kNullBlock || b >= n || !nodes_[b].in_tree || BlockTagIndex::tag_of(keys_[b]) != tag) {
      fail("index entry names block " + std::to_string(b) + " which is not a node with its key");
    }
    ++indexed;
  });
  if (indexed != num_nodes_) fail("index holds " + std::to_string(indexed) + " entries");
}

}  // namespace servelab
