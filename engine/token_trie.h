// A vocabulary's tokens by their bytes (Tokenizer::token_bytes), in a trie: structured outputs
// (engine/grammar_constraint.h) walk it once per grammar state to find every token whose bytes
// the grammar can take next, sharing the work of tokens with a common prefix and dropping a
// whole subtree at the first byte the grammar refuses. Immutable after construction; one per
// server, shared by every request's constraint.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "serving/tokenizer.h"

namespace servelab {

class TokenTrie {
 public:
  struct Node {
    std::uint32_t first_edge = 0, num_edges = 0;    // edges_[first .. first + num), by byte
    std::uint32_t first_token = 0, num_tokens = 0;  // token_ids_[...]: the tokens ending here
  };
  struct Edge {
    unsigned char byte = 0;
    std::uint32_t child = 0;
  };

  // The tokens of `tok` below `vocab` (the model's vocabulary size) that have bytes of their
  // own: not special (an added token marked special has no text a grammar could take), not
  // empty, and with Tokenizer::token_bytes known.
  TokenTrie(const Tokenizer& tok, std::int32_t vocab);

  std::int32_t vocab() const { return vocab_; }
  std::size_t num_tokens() const { return token_ids_.size(); }
  // A token's bytes; nullptr for one outside the trie.
  const std::string* bytes(std::int32_t id) const {
    return id >= 0 && id < vocab_ && has_[static_cast<std::size_t>(id)]
               ? &bytes_[static_cast<std::size_t>(id)]
               : nullptr;
  }
  const Node& root() const { return nodes_[0]; }
  std::span<const Edge> edges(const Node& n) const {
    return {edges_.data() + n.first_edge, n.num_edges};
  }
  const Node& node(std::uint32_t i) const { return nodes_[i]; }
  std::span<const std::int32_t> tokens(const Node& n) const {
    return {token_ids_.data() + n.first_token, n.num_tokens};
  }

 private:
  std::int32_t vocab_ = 0;
  std::vector<std::string> bytes_;
  std::vector<char> has_;
  std::vector<Node> nodes_;
  std::vector<Edge> edges_;
  std::vector<std::int32_t> token_ids_;
};

}  // namespace servelab
