#include "core/block_hash.h"

#include <xxhash.h>

#include <algorithm>
#include <vector>

namespace servelab {

BlockHash hash_block(const BlockHash& parent, const RequestSpec& spec, std::int32_t block_index,
                     std::int32_t block_size) {
  // Canonical description: parent, then runs (content, offset, length) in order, merging a run
  // that continues the previous one (a prompt that ends where its output stream begins cannot,
  // since outputs use their own stream). Almost every block is one or two runs, so the words go
  // to a stack buffer and one XXH3 call hashes them (the streaming API costs more per block
  // than the hash itself); only a block of more than kInline runs uses the heap.
  constexpr std::size_t kInline = 2 + 3 * 16;
  std::uint64_t inline_words[kInline];
  std::vector<std::uint64_t> heap_words;
  std::uint64_t* words = inline_words;
  std::size_t size = 0, capacity = kInline;
  auto push = [&](std::uint64_t w) {
    if (size == capacity) {
      heap_words.assign(words, words + size);
      heap_words.resize(2 * capacity);
      words = heap_words.data();
      capacity = heap_words.size();
    }
    words[size++] = w;
  };
  push(parent.lo);
  push(parent.hi);
  const std::int64_t begin = static_cast<std::int64_t>(block_index) * block_size;
  const std::int64_t end = begin + block_size;
  auto emit = [&](std::uint64_t cid, std::uint32_t off, std::uint32_t len) {
    if (size > 2 && words[size - 3] == cid && words[size - 2] + words[size - 1] == off) {
      words[size - 1] += len;
      return;
    }
    push(cid);
    push(off);
    push(len);
  };
  std::int64_t pos = 0;
  for (const PromptSegment& s : spec.prompt) {
    const std::int64_t s_end = pos + s.length;
    if (s_end > begin && pos < end) {
      const std::int64_t lo = std::max(pos, begin), hi = std::min(s_end, end);
      emit(s.content_id, s.offset + static_cast<std::uint32_t>(lo - pos),
           static_cast<std::uint32_t>(hi - lo));
    }
    pos = s_end;
    if (pos >= end) break;
  }
  if (end > spec.prompt_len) {
    const std::int64_t lo = std::max<std::int64_t>(begin, spec.prompt_len);
    emit(output_content_id(spec.id), static_cast<std::uint32_t>(lo - spec.prompt_len),
         static_cast<std::uint32_t>(end - lo));
  }
  const XXH128_hash_t h = XXH3_128bits(words, sizeof(std::uint64_t) * size);
  return BlockHash{h.low64, h.high64};
}

}  // namespace servelab
