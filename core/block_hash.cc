#include "core/block_hash.h"

#define XXH_STATIC_LINKING_ONLY  // for the stack-allocated XXH3_state_t
#include <xxhash.h>

#include <algorithm>

namespace servelab {

namespace {
struct Run {
  std::uint64_t content_id;
  std::uint32_t offset;
  std::uint32_t length;
};
}  // namespace

BlockHash hash_block(const BlockHash& parent, const RequestSpec& spec, std::int32_t block_index,
                     std::int32_t block_size) {
  // Canonical description: parent, then runs (content, offset, length) in order, merging a run
  // that continues the previous one (a prompt that ends where its output stream begins cannot,
  // since outputs use their own stream).
  Run runs[64];
  int num_runs = 0;
  std::uint64_t buffer[2 + 3 * 64];
  const std::int64_t begin = static_cast<std::int64_t>(block_index) * block_size;
  const std::int64_t end = begin + block_size;
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  std::uint64_t head[2] = {parent.lo, parent.hi};
  XXH3_128bits_update(&state, head, sizeof(head));
  auto emit = [&](std::uint64_t cid, std::uint32_t off, std::uint32_t len) {
    if (num_runs > 0 && runs[num_runs - 1].content_id == cid &&
        runs[num_runs - 1].offset + runs[num_runs - 1].length == off) {
      runs[num_runs - 1].length += len;
      return;
    }
    if (num_runs == 64) {  // flush: very fragmented prompts
      for (int i = 0; i < num_runs; ++i) {
        buffer[3 * i] = runs[i].content_id;
        buffer[3 * i + 1] = runs[i].offset;
        buffer[3 * i + 2] = runs[i].length;
      }
      XXH3_128bits_update(&state, buffer, sizeof(std::uint64_t) * 3 * num_runs);
      num_runs = 0;
    }
    runs[num_runs++] = {cid, off, len};
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
  for (int i = 0; i < num_runs; ++i) {
    buffer[3 * i] = runs[i].content_id;
    buffer[3 * i + 1] = runs[i].offset;
    buffer[3 * i + 2] = runs[i].length;
  }
  XXH3_128bits_update(&state, buffer, sizeof(std::uint64_t) * 3 * num_runs);
  const XXH128_hash_t h = XXH3_128bits_digest(&state);
  return BlockHash{h.low64, h.high64};
}

}  // namespace servelab
