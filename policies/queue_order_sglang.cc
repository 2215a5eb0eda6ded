// SGLang's schedule policies as queue orders (python/sglang/srt/managers/schedule_policy.py;
// reference schedulers.md section 4.3). SGLang re-sorts its whole waiting list at the start of
// every step, so these are WaitingQueues that reorder() (core/waiting_queue.h) a list kept in
// FCFS order otherwise (arrivals at the back, preempted requests at the head):
//
//   lpm         longest prefix match: a stable sort by the tokens the device cache holds of
//               each request's prefix, longest first. In-batch deprioritisation: a request with
//               at most `in_batch_threshold` cached tokens that shares at least that many with
//               a request ahead of it in the list goes to the back, so only one of a group
//               sharing a new prefix is admitted first and the others hit its blocks. Turns
//               itself off (the list stays FCFS) above `max_queue` waiting requests and without
//               prefix caching, as SGLang does.
//   dfs-weight  the requests grouped by the deepest cached block of their prefix, the groups
//               listed by a depth-first walk of the tree those blocks form, heavier subtrees
//               (more waiting requests) first, each node's own requests after its children's;
//               requests with no cached prefix last. FCFS without prefix caching.
//   lof         longest output first: a stable sort by max_output_tokens, longest first.
//   random      a fresh shuffle every step, from the experiment seed.
//
// Granularity: SGLang matches prefixes token by token in its radix tree; here a match is a run
// of whole cached blocks (the block hash chain, core/block_hash.h), so a prefix is seen in
// block_size steps and the thresholds are compared with whole blocks' tokens. Ties keep the
// list's current order (Python's stable sort over the list as the last step left it).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <numeric>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "core/waiting_queue.h"
#include "policies/queue_order.h"

namespace servelab {

namespace {

// A list in FCFS order between reorders; subclasses re-sort it at the start of a step.
class ReorderedQueue : public DequeWaitingQueue {
 public:
  bool reorders() const override { return true; }

 protected:
  // Stable-sorts the list by key(index in the current list), ascending.
  template <class Key>
  void stable_sort_by(const std::vector<Key>& key) {
    std::vector<std::size_t> idx(q_.size());
    std::iota(idx.begin(), idx.end(), std::size_t{0});
    std::stable_sort(idx.begin(), idx.end(),
                     [&](std::size_t a, std::size_t b) { return key[a] < key[b]; });
    std::deque<Request*> sorted;
    for (const std::size_t i : idx) sorted.push_back(q_[i]);
    q_ = std::move(sorted);
  }
};

class LpmQueue final : public ReorderedQueue {
 public:
  LpmQueue(std::int32_t max_queue, std::int32_t in_batch_threshold)
      : max_queue_(max_queue), threshold_(in_batch_threshold) {}
  const char* name() const override { return "lpm"; }
  void reorder(PrefixProbe* probe, TimeNs) override {
    if (probe == nullptr || q_.size() > static_cast<std::size_t>(max_queue_)) return;
    const std::int32_t bs = probe->block_size();
    // (deprioritised, -cached tokens): ascending puts the longest match first. Deprioritised
    // requests all share one key (SGLang's float("inf")), so they keep their list order.
    std::vector<std::pair<bool, std::int32_t>> key(q_.size());
    seen_.clear();
    for (std::size_t i = 0; i < q_.size(); ++i) {
      Request& r = *q_[i];
      const std::int32_t cached = probe->cached_blocks(r) * bs;
      bool deprioritised = false;
      if (threshold_ > 0 && cached <= threshold_) {
        // SGLang checks the request against a temporary radix tree of the requests before it
        // in the list that were not deprioritised. Sharing at least `threshold_` tokens means
        // sharing the first k = ceil(threshold_ / block size) blocks, and a block's hash names
        // its whole prefix (the chain), so the tree reduces to the set of their k-th hashes.
        const std::span<const BlockHash> hashes = probe->hashes(r);
        const std::size_t k = static_cast<std::size_t>((threshold_ + bs - 1) / bs);
        if (hashes.size() >= k) {
          deprioritised = !seen_.insert(hashes[k - 1]).second;
        }
      }
      key[i] = {deprioritised, deprioritised ? 0 : -cached};
    }
    stable_sort_by(key);
  }

 private:
  std::int32_t max_queue_, threshold_;
  std::unordered_set<BlockHash, BlockHashHasher> seen_;  // membership only, never iterated
};

class DfsWeightQueue final : public ReorderedQueue {
 public:
  const char* name() const override { return "dfs-weight"; }
  void reorder(PrefixProbe* probe, TimeNs) override {
    if (probe == nullptr) return;
    // Node 0 is the root (no cached block); node n > 0 stands for one cached block, its parent
    // the block before it. Children in order of creation (the list's order), so ties are stable.
    nodes_.assign(1, Node{});
    index_.clear();
    for (Request* r : q_) {
      const std::span<const BlockHash> hashes = probe->hashes(*r);
      const std::int32_t cached = probe->cached_blocks(*r);
      std::size_t node = 0;
      for (std::int32_t b = 0; b < cached; ++b) {
        const auto [it, added] = index_.try_emplace(hashes[b], nodes_.size());
        if (added) {
          nodes_.push_back(Node{});
          nodes_[node].children.push_back(it->second);
        }
        node = it->second;
      }
      nodes_[node].requests.push_back(r);
    }
    // Weights: a node's own requests plus its subtree's. Children are created after their
    // parents, so one backward pass adds every subtree before its parent reads it.
    for (std::size_t n = nodes_.size(); n-- > 0;) {
      Node& node = nodes_[n];
      node.weight += node.requests.size();
      for (const std::size_t c : node.children) node.weight += nodes_[c].weight;
    }
    // Depth first from the root: a node's children, heavier first (stable), each with its
    // subtree, then the node's own requests. The tree is as deep as the longest cached prefix
    // in blocks (hundreds of thousands for a long enough prompt), so the walk keeps its own
    // stack instead of recursing.
    q_.clear();
    struct Frame {
      std::size_t node;
      std::vector<std::size_t> children;
      std::size_t next = 0;
    };
    std::vector<Frame> stack;
    const auto enter = [&](std::size_t n) {
      Frame f{n, nodes_[n].children};
      std::stable_sort(f.children.begin(), f.children.end(), [&](std::size_t a, std::size_t b) {
        return nodes_[a].weight > nodes_[b].weight;
      });
      stack.push_back(std::move(f));
    };
    enter(0);
    while (!stack.empty()) {
      Frame& top = stack.back();
      if (top.next < top.children.size()) {
        enter(top.children[top.next++]);  // `top` is not used after the push moves it
        continue;
      }
      q_.insert(q_.end(), nodes_[top.node].requests.begin(), nodes_[top.node].requests.end());
      stack.pop_back();
    }
  }

 private:
  struct Node {
    std::vector<std::size_t> children;
    std::vector<Request*> requests;
    std::size_t weight = 0;
  };

  std::vector<Node> nodes_;
  std::unordered_map<BlockHash, std::size_t, BlockHashHasher> index_;  // lookups only
};

class LofQueue final : public ReorderedQueue {
 public:
  const char* name() const override { return "lof"; }
  void reorder(PrefixProbe*, TimeNs) override {
    std::vector<std::int32_t> key(q_.size());
    for (std::size_t i = 0; i < q_.size(); ++i) key[i] = -q_[i]->spec.max_output_tokens;
    stable_sort_by(key);
  }
};

class RandomQueue final : public ReorderedQueue {
 public:
  explicit RandomQueue(std::uint64_t seed) : rng_(Rng::stream(seed, "queue-random")) {}
  const char* name() const override { return "random"; }
  void reorder(PrefixProbe*, TimeNs) override {
    for (std::size_t i = q_.size(); i > 1; --i) {  // Fisher-Yates
      const auto j =
          static_cast<std::size_t>(rng_.uniform_int(0, static_cast<std::int64_t>(i) - 1));
      std::swap(q_[i - 1], q_[j]);
    }
  }

 private:
  Rng rng_;
};

const PolicyRegistrar kLpm(
    {PolicyKind::kQueue,
     "lpm",
     "longest cached prefix first, re-sorted every step; a request sharing a new prefix with one "
     "ahead of it waits behind the others; FCFS above max_queue waiting requests or without "
     "prefix caching",
     "SGLang --schedule-policy lpm (schedule_policy.py, in-batch prefix deprioritisation)",
     {{"max_queue",
       ParamType::kInt,
       std::int64_t{128},
       0,
       1e9,
       {},
       "above this many waiting requests the order stays FCFS (SGLang: 128)"},
      {"in_batch_threshold",
       ParamType::kInt,
       std::int64_t{32},
       0,
       1e6,
       {},
       "tokens: a request with at most this many cached that shares at least this many with one "
       "ahead of it is deprioritised (0: never)"}},
     queue_factory([](const PolicySpec& spec, std::uint64_t) -> std::unique_ptr<WaitingQueue> {
       return std::make_unique<LpmQueue>(
           static_cast<std::int32_t>(spec.get_int("max_queue")),
           static_cast<std::int32_t>(spec.get_int("in_batch_threshold")));
     }),
     /*rank=*/5});

const PolicyRegistrar kDfsWeight(
    {PolicyKind::kQueue,
     "dfs-weight",
     "requests grouped by their deepest cached block, groups in a depth-first walk of the cached "
     "prefix tree with heavier subtrees first, uncached requests last; re-sorted every step",
     "SGLang --schedule-policy dfs-weight (schedule_policy.py)",
     {},
     queue_factory([](const PolicySpec&, std::uint64_t) -> std::unique_ptr<WaitingQueue> {
       return std::make_unique<DfsWeightQueue>();
     }),
     /*rank=*/6});

const PolicyRegistrar kLof({PolicyKind::kQueue,
                            "lof",
                            "longest output first: the largest max_output_tokens first (stable), "
                            "re-sorted every step",
                            "SGLang --schedule-policy lof (schedule_policy.py)",
                            {},
                            queue_factory([](const PolicySpec&,
                                             std::uint64_t) -> std::unique_ptr<WaitingQueue> {
                              return std::make_unique<LofQueue>();
                            }),
                            /*rank=*/7});

const PolicyRegistrar kRandom(
    {PolicyKind::kQueue,
     "random",
     "the waiting requests shuffled afresh every step (seeded)",
     "SGLang --schedule-policy random (schedule_policy.py)",
     {},
     queue_factory([](const PolicySpec&, std::uint64_t seed) -> std::unique_ptr<WaitingQueue> {
       return std::make_unique<RandomQueue>(seed);
     }),
     /*rank=*/8});

}  // namespace

}  // namespace servelab
