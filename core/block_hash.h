// Content hashes of full KV blocks, chained from the first block (vLLM v1's block hash chain).
//
// hash(block k) = XXH3-128(parent hash, canonical description of the block's tokens), where the
// parent of block 0 is kNoneHash. Tokens are described by their identities (see request.h): the
// runs of consecutive positions of one content stream that the block covers. Equal token
// identities give equal hashes, whatever a backend sampled (but for a literal prompt's outputs,
// RequestSpec::outputs_by_value, described by their sampled values as a literal prompt is). 128
// bits make an accidental collision negligible even over billions of blocks.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "core/request.h"

namespace servelab {

struct BlockHash {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  friend bool operator==(const BlockHash&, const BlockHash&) = default;
};

inline constexpr BlockHash kNoneHash{0x53657276654c6162ULL, 0x4e6f6e6548617368ULL};

// `parent` keyed with the LoRA adapter `lora_id` (!= 0): what hash_block chains from for every
// block of a request under that adapter. Never equal to `parent` or to a salted root.
BlockHash lora_keyed(const BlockHash& parent, std::uint32_t lora_id);

// The parent hash of block 0 of a request salted with `salt` (!= 0): never kNoneHash.
BlockHash salted_root(std::uint64_t salt);

struct BlockHashHasher {
  std::size_t operator()(const BlockHash& h) const noexcept { return h.lo ^ (h.hi * 31); }
};

// Hash of block `block_index` (tokens [block_index*block_size, (block_index+1)*block_size)) of
// `spec`'s sequence, given the hash of the previous block. The block may extend into the output
// tokens. A request with a cache_salt hashes its block 0 under salted_root(salt) instead of
// `parent` (vLLM: the salt is an extra key of the first block only; later blocks inherit it
// through the chain), so equal prompts with different salts share no block. A block that overlaps
// multimodal inputs' placeholder ranges (RequestSpec::mm_inputs) also hashes their content ids,
// in offset order, as extra keys (vLLM v1's multimodal extra keys): equal placeholder tokens
// standing for different images give different hashes, and so do the blocks after them
// (chained); a block that overlaps no input hashes as without them.
// A request under a LoRA adapter (spec.lora_id != 0) hashes every block from lora_keyed(parent,
// lora_id) (vLLM: the adapter is an extra key of every block's hash), so equal prompts under
// different adapters, or under one and none, share no block. A request whose outputs are
// identified by value (RequestSpec::outputs_by_value: a literal prompt) describes its output
// tokens as a literal prompt would describe the same values, from `outputs` (its sampled
// values): a block of prompt and reply hashes as the next prompt that quotes both. Throws
// std::logic_error when such a block reaches past the values given. REQUIRES: block_size > 0.
BlockHash hash_block(const BlockHash& parent, const RequestSpec& spec, std::int32_t block_index,
                     std::int32_t block_size, std::span<const std::int32_t> outputs = {});

}  // namespace servelab
