#include "engine/token_trie.h"

#include <algorithm>
#include <numeric>

namespace servelab {

TokenTrie::TokenTrie(const Tokenizer& tok, std::int32_t vocab) : vocab_(vocab) {
  const auto n = static_cast<std::size_t>(std::max(vocab, 0));
  bytes_.assign(n, std::string());
  has_.assign(n, 0);
  std::vector<std::int32_t> order;
  for (std::int32_t id = 0; id < vocab && id < tok.vocab_size(); ++id) {
    if (tok.special(id)) continue;
    std::optional<std::string> b = tok.token_bytes(id);
    if (!b || b->empty()) continue;
    bytes_[static_cast<std::size_t>(id)] = std::move(*b);
    has_[static_cast<std::size_t>(id)] = 1;
    order.push_back(id);
  }
  // Sorted by bytes (then id), a token's node is its prefix's node plus one edge; building
  // depth-first in that order gives each node's children contiguous and ascending by byte.
  std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    const std::string& x = bytes_[static_cast<std::size_t>(a)];
    const std::string& y = bytes_[static_cast<std::size_t>(b)];
    return x != y ? x < y : a < b;
  });
  // First pass: a node per distinct prefix, with its parent and byte, in preorder.
  struct Building {
    std::uint32_t parent;
    unsigned char byte;
    std::vector<std::int32_t> tokens;
  };
  std::vector<Building> built = {{0, 0, {}}};
  std::vector<std::uint32_t> path = {0};  // the nodes of the previous token's bytes
  std::string prev;
  for (const std::int32_t id : order) {
    const std::string& b = bytes_[static_cast<std::size_t>(id)];
    std::size_t common = 0;
    while (common < prev.size() && common < b.size() && prev[common] == b[common]) ++common;
    path.resize(common + 1);
    for (std::size_t i = common; i < b.size(); ++i) {
      built.push_back({path.back(), static_cast<unsigned char>(b[i]), {}});
      path.push_back(static_cast<std::uint32_t>(built.size() - 1));
    }
    built[path.back()].tokens.push_back(id);
    prev = b;
  }
  // Children of a node appear in preorder after it, ascending by byte: gather them per parent.
  std::vector<std::vector<std::uint32_t>> children(built.size());
  for (std::uint32_t i = 1; i < built.size(); ++i) children[built[i].parent].push_back(i);
  nodes_.resize(built.size());
  for (std::uint32_t i = 0; i < built.size(); ++i) {
    Node& node = nodes_[i];
    node.first_edge = static_cast<std::uint32_t>(edges_.size());
    node.num_edges = static_cast<std::uint32_t>(children[i].size());
    for (const std::uint32_t c : children[i]) edges_.push_back({built[c].byte, c});
    node.first_token = static_cast<std::uint32_t>(token_ids_.size());
    node.num_tokens = static_cast<std::uint32_t>(built[i].tokens.size());
    token_ids_.insert(token_ids_.end(), built[i].tokens.begin(), built[i].tokens.end());
  }
}

}  // namespace servelab
