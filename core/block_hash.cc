#include "core/block_hash.h"

// Inlined XXH3: the same hash values as the library call, without a call through the PLT and with
// the small-input path specialised (a block is described by 40 to 64 bytes almost always).
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace servelab {

namespace {

// The words describing one block: parent hash, then (content, offset, length) runs. Almost every
// block is one or two runs, so they live on the stack; a block of more runs moves to the heap.
class BlockWords {
 public:
  explicit BlockWords(const BlockHash& parent) {
    words_[0] = parent.lo;
    words_[1] = parent.hi;
  }
  void add_run(std::uint64_t cid, std::uint64_t off, std::uint64_t len) {
    // A run that continues the previous one merges into it, so equal token sequences give equal
    // words however their segments were split.
    if (size_ > 2 && data_[size_ - 3] == cid && data_[size_ - 2] + data_[size_ - 1] == off) {
      data_[size_ - 1] += len;
      return;
    }
    if (size_ + 3 > capacity_) grow(size_ + 3);
    data_[size_] = cid;
    data_[size_ + 1] = off;
    data_[size_ + 2] = len;
    size_ += 3;
  }
  // Extra keys after the runs: a tag word, their count, then the keys.
  void add_extra_keys(std::span<const std::uint64_t> keys) {
    if (size_ + 2 + keys.size() > capacity_) grow(size_ + 2 + keys.size());
    data_[size_++] = kExtraKeysTag;
    data_[size_++] = keys.size();
    for (const std::uint64_t k : keys) data_[size_++] = k;
  }
  BlockHash hash() const {
    const XXH128_hash_t h = XXH3_128bits(data_, sizeof(std::uint64_t) * size_);
    return BlockHash{h.low64, h.high64};
  }

 private:
  static constexpr std::size_t kInline = 2 + 3 * 16;
  static constexpr std::uint64_t kExtraKeysTag = 0x6d6d5f6b65797321ULL;  // "mm_keys!"
  [[gnu::noinline]] void grow(std::size_t need) {
    heap_.assign(data_, data_ + size_);
    heap_.resize(std::max(2 * capacity_, need));
    data_ = heap_.data();
    capacity_ = heap_.size();
  }
  std::uint64_t words_[kInline];
  std::uint64_t* data_ = words_;
  std::size_t size_ = 2, capacity_ = kInline;
  std::vector<std::uint64_t> heap_;
};

// The hash of a block that is a single run: what BlockWords gives for it, without its generality.
BlockHash hash_one_run(const BlockHash& parent, std::uint64_t cid, std::uint64_t off,
                       std::uint64_t len) {
  const std::uint64_t words[5] = {parent.lo, parent.hi, cid, off, len};
  const XXH128_hash_t h = XXH3_128bits(words, sizeof(words));
  return BlockHash{h.low64, h.high64};
}

}  // namespace

BlockHash salted_root(std::uint64_t salt) {
  const std::uint64_t words[3] = {kNoneHash.lo, kNoneHash.hi, salt};
  const XXH128_hash_t h = XXH3_128bits(words, sizeof(words));
  return BlockHash{h.low64, h.high64};
}

namespace {

// The canonical description of tokens [begin, end) of `spec`'s sequence: the runs of content the
// block covers, in order (see BlockWords). Outputs use their own stream, so a prompt run never
// merges into them.
void add_runs(BlockWords& words, const RequestSpec& spec, std::int64_t begin, std::int64_t end) {
  std::int64_t pos = 0;
  for (const PromptSegment& s : spec.prompt) {
    const std::int64_t s_end = pos + s.length;
    if (s_end > begin && pos < end) {
      const std::int64_t lo = std::max(pos, begin), hi = std::min(s_end, end);
      words.add_run(s.content_id, s.offset + static_cast<std::uint64_t>(lo - pos),
                    static_cast<std::uint64_t>(hi - lo));
    }
    pos = s_end;
    if (pos >= end) break;
  }
  if (end > spec.prompt_len) {
    const std::int64_t lo = std::max<std::int64_t>(begin, spec.prompt_len);
    words.add_run(output_content_id(spec.id), static_cast<std::uint64_t>(lo - spec.prompt_len),
                  static_cast<std::uint64_t>(end - lo));
  }
}

// The block's hash with the content ids of the multimodal inputs overlapping [begin, end) as
// extra keys; nullopt when none overlaps.
std::optional<BlockHash> hash_with_mm_keys(const BlockHash& parent, const RequestSpec& spec,
                                           std::int64_t begin, std::int64_t end) {
  constexpr std::size_t kInlineKeys = 8;
  std::uint64_t inline_keys[kInlineKeys];
  std::vector<std::uint64_t> more;
  std::size_t n = 0;
  for (const MultimodalInput& in : *spec.mm_inputs) {
    const std::int64_t lo = in.offset, hi = lo + static_cast<std::int64_t>(in.length);
    if (lo >= end) break;  // sorted by offset: no later input overlaps
    if (hi <= begin) continue;
    if (n < kInlineKeys) {
      inline_keys[n] = in.content_id;
    } else {
      if (more.empty()) more.assign(inline_keys, inline_keys + kInlineKeys);
      more.push_back(in.content_id);
    }
    ++n;
  }
  if (n == 0) return std::nullopt;
  BlockWords words(parent);
  add_runs(words, spec, begin, end);
  words.add_extra_keys(n <= kInlineKeys ? std::span<const std::uint64_t>(inline_keys, n)
                                        : std::span<const std::uint64_t>(more));
  return words.hash();
}

}  // namespace

BlockHash lora_keyed(const BlockHash& parent, std::uint32_t lora_id) {
  // The tag keeps the adapter's key apart from a salt's (salted_root hashes three words).
  const std::uint64_t words[4] = {parent.lo, parent.hi, 0x4c6f5241ULL /* "LoRA" */, lora_id};
  const XXH128_hash_t h = XXH3_128bits(words, sizeof(words));
  return BlockHash{h.low64, h.high64};
}

BlockHash hash_block(const BlockHash& unsalted_parent, const RequestSpec& spec,
                     std::int32_t block_index, std::int32_t block_size,
                     std::span<const std::int32_t> outputs) {
  BlockHash parent =
      block_index == 0 && spec.cache_salt != 0 ? salted_root(spec.cache_salt) : unsalted_parent;
  if (spec.lora_id != 0) [[unlikely]]
    parent = lora_keyed(parent, spec.lora_id);
  const std::int64_t begin = static_cast<std::int64_t>(block_index) * block_size;
  const std::int64_t end = begin + block_size;
  if (spec.outputs_by_value && end > spec.prompt_len) [[unlikely]] {
    // The outputs as a literal prompt's tokens: one-token runs of their values' streams.
    if (static_cast<std::int64_t>(outputs.size()) < end - spec.prompt_len) {
      throw std::logic_error("hash_block: block " + std::to_string(block_index) + " of request " +
                             std::to_string(spec.id) + " reaches past its " +
                             std::to_string(outputs.size()) + " known output values");
    }
    BlockWords words(parent);
    if (begin < spec.prompt_len) add_runs(words, spec, begin, spec.prompt_len);
    for (std::int64_t p = std::max<std::int64_t>(begin, spec.prompt_len); p < end; ++p) {
      words.add_run(literal_token_stream(outputs[static_cast<std::size_t>(p - spec.prompt_len)]), 0,
                    1);
    }
    return words.hash();
  }
  if (spec.mm_inputs != nullptr && begin < spec.prompt_len) [[unlikely]] {
    if (const std::optional<BlockHash> h = hash_with_mm_keys(parent, spec, begin, end)) return *h;
  }
  // Fast paths, for almost every block: one run, inside the outputs or inside one prompt segment
  // (the same words as the general description below).
  if (begin >= spec.prompt_len) {
    return hash_one_run(parent, output_content_id(spec.id),
                        static_cast<std::uint64_t>(begin - spec.prompt_len),
                        static_cast<std::uint64_t>(block_size));
  }
  if (end <= spec.prompt_len) {
    std::int64_t at = 0;
    for (const PromptSegment& s : spec.prompt) {
      const std::int64_t s_end = at + s.length;
      if (s_end > begin) {
        if (s_end >= end) {
          return hash_one_run(parent, s.content_id,
                              s.offset + static_cast<std::uint64_t>(begin - at),
                              static_cast<std::uint64_t>(block_size));
        }
        break;  // the block spans segments
      }
      at = s_end;
    }
  }
  BlockWords words(parent);
  add_runs(words, spec, begin, end);
  return words.hash();
}

}  // namespace servelab
