#include "serving/kv_transfer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace servelab {

std::vector<KvPiece> layerwise_kv_pieces(std::int64_t bytes, std::int32_t prompt_len,
                                         std::span<const PrefillChunk> chunks,
                                         std::int32_t num_layers, TimeNs now) {
  if (prompt_len < 1 || num_layers < 1 || bytes < 0) {
    throw std::invalid_argument(
        "layerwise_kv_pieces: prompt_len and num_layers must be >= 1, bytes >= 0");
  }
  std::size_t end = chunks.size();
  while (end > 0 && chunks[end - 1].end > now) --end;
  chunks = chunks.first(end);
  // The last chunks, up to prompt_len tokens (the earliest counted one possibly in part).
  std::size_t first = chunks.size();
  std::int64_t counted = 0;
  while (first > 0 && counted < prompt_len) {
    --first;
    counted += std::max(0, chunks[first].tokens);
  }
  if (first == chunks.size()) return {KvPiece{bytes, now}};
  const std::int64_t skip = std::max<std::int64_t>(0, counted - prompt_len);  // of chunk `first`
  counted -= skip;
  // Bytes of tokens [a, b) of the prompt, split so that consecutive ranges sum exactly.
  const auto share = [&](std::int64_t total, std::int64_t a, std::int64_t b, std::int64_t n) {
    const auto at = [&](std::int64_t x) {
      return static_cast<std::int64_t>(static_cast<__int128>(total) * x / n);
    };
    return at(b) - at(a);
  };
  std::vector<KvPiece> pieces;
  pieces.reserve((chunks.size() - first) * static_cast<std::size_t>(num_layers) + 1);
  std::int64_t token = prompt_len - counted;  // tokens before: not computed in a counted chunk
  if (token > 0) pieces.push_back({share(bytes, 0, token, prompt_len), chunks[first].start});
  for (std::size_t c = first; c < chunks.size(); ++c) {
    const PrefillChunk& ch = chunks[c];
    const std::int64_t n = std::max(0, ch.tokens) - (c == first ? skip : 0);
    const std::int64_t chunk_bytes = share(bytes, token, token + n, prompt_len);
    token += n;
    for (std::int32_t l = 0; l < num_layers; ++l) {
      const TimeNs ready = ch.start + static_cast<TimeNs>(static_cast<__int128>(ch.end - ch.start) *
                                                          (l + 1) / num_layers);
      pieces.push_back({share(chunk_bytes, l, l + 1, num_layers), ready});
    }
  }
  return pieces;
}

}  // namespace servelab
