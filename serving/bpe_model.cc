#include "serving/bpe_model.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <functional>

#include "serving/byte_level.h"
#include "serving/utf8.h"

namespace servelab {

namespace {
constexpr std::size_t kCacheShards = 16;
constexpr std::size_t kCacheEntriesPerShard = 4096;
}  // namespace

struct BpeModel::CacheShard {
  std::mutex mu;
  std::unordered_map<std::string, std::vector<std::int32_t>, StringHash, std::equal_to<>> map;
};

BpeModel::BpeModel(std::vector<std::optional<std::string>> tokens, bool ignore_merges,
                   Alphabet alphabet)
    : ignore_merges_(ignore_merges),
      alphabet_(alphabet),
      cache_(std::make_unique<CacheShard[]>(kCacheShards)) {
  byte_ids_.fill(-1);
  bytes_.resize(tokens.size());
  vocab_.reserve(tokens.size());
  for (std::size_t id = 0; id < tokens.size(); ++id) {
    if (!tokens[id]) continue;
    const auto i = static_cast<std::int32_t>(id);
    std::optional<std::string> raw =
        alphabet_ == Alphabet::kBytes ? byte_level::decode(*tokens[id]) : std::nullopt;
    bytes_[id] = raw ? std::move(*raw) : *tokens[id];
    vocab_.emplace(std::move(*tokens[id]), i);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(byte_token(static_cast<unsigned char>(b)));
    if (it != vocab_.end()) byte_ids_[static_cast<std::size_t>(b)] = it->second;
  }
}

BpeModel::~BpeModel() = default;

std::string BpeModel::byte_token(unsigned char b) const {
  if (alphabet_ == Alphabet::kBytes) return std::string(byte_level::char_of(b));
  char hex[8];
  std::snprintf(hex, sizeof hex, "<0x%02X>", b);
  return hex;
}

namespace {
std::size_t slot_of(std::uint64_t key, int shift) {
  return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift);
}
}  // namespace

void BpeModel::grow_merges() {
  std::vector<MergeSlot> old = std::move(merges_);
  const std::size_t capacity = old.empty() ? 1024 : old.size() * 2;
  merges_.assign(capacity, MergeSlot{kEmptySlot, {}});
  merge_shift_ = 64 - std::countr_zero(capacity);
  const std::size_t mask = capacity - 1;
  for (const MergeSlot& s : old) {
    if (s.key == kEmptySlot) continue;
    std::size_t i = slot_of(s.key, merge_shift_);
    while (merges_[i].key != kEmptySlot) i = (i + 1) & mask;
    merges_[i] = s;
  }
}

const BpeModel::Merge* BpeModel::find_merge(std::uint64_t key) const {
  if (merges_.empty()) return nullptr;
  const std::size_t mask = merges_.size() - 1;
  for (std::size_t i = slot_of(key, merge_shift_);; i = (i + 1) & mask) {
    const MergeSlot& s = merges_[i];
    if (s.key == key) return &s.merge;
    if (s.key == kEmptySlot) return nullptr;
  }
}

bool BpeModel::add_merge(std::int32_t left, std::int32_t right, std::int32_t merged) {
  const std::uint64_t key = pair_key(left, right);
  if (find_merge(key) != nullptr) return false;
  if (2 * (num_merges_ + 1) > merges_.size()) grow_merges();
  const std::size_t mask = merges_.size() - 1;
  std::size_t i = slot_of(key, merge_shift_);
  while (merges_[i].key != kEmptySlot) i = (i + 1) & mask;
  merges_[i] = {key, {static_cast<std::int32_t>(num_merges_), merged}};
  ++num_merges_;
  return true;
}

std::optional<std::int32_t> BpeModel::id_of(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::int32_t> BpeModel::id_of_bytes(std::string_view bytes) const {
  return alphabet_ == Alphabet::kBytes ? id_of(byte_level::encode(bytes)) : id_of(bytes);
}

const std::string* BpeModel::bytes_of(std::int32_t id) const {
  if (id < 0 || id >= size() || !bytes_[static_cast<std::size_t>(id)]) return nullptr;
  return &*bytes_[static_cast<std::size_t>(id)];
}

void BpeModel::encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const {
  if (piece.empty()) return;
  if (piece.size() == 1 && alphabet_ == Alphabet::kBytes) {
    out.push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (piece.size() > kMaxCachedPiece) {
    merge_loop(piece, out);
    return;
  }
  CacheShard& shard = cache_[std::hash<std::string_view>{}(piece) % kCacheShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.map.find(piece);
    if (it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const std::size_t first = out.size();
  merge_loop(piece, out);
  std::vector<std::int32_t> ids(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() >= kCacheEntriesPerShard) shard.map.clear();
  shard.map.emplace(std::string(piece), std::move(ids));
}

void BpeModel::merge_loop(std::string_view piece, std::vector<std::int32_t>& out) const {
  if (ignore_merges_) {
    if (std::optional<std::int32_t> whole = id_of_bytes(piece)) {
      out.push_back(*whole);
      return;
    }
  }
  // Symbols as a doubly linked list over the piece's bytes; a merged-away symbol has id -1.
  struct Symbol {
    std::int32_t id, prev, next;
  };
  struct Candidate {
    std::int32_t rank, left, right, merged, left_id, right_id;
    // std::priority_queue-style max-heap ordering that puts the lowest rank, then the leftmost
    // position, on top.
    bool operator<(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  thread_local std::vector<Symbol> syms;
  thread_local std::vector<Candidate> heap;
  syms.clear();
  heap.clear();
  auto add_symbol = [&](std::int32_t id) {
    const auto i = static_cast<std::int32_t>(syms.size());
    if (i > 0) syms.back().next = i;
    syms.push_back({id, i - 1, -1});
  };
  if (alphabet_ == Alphabet::kBytes) {
    for (const char c : piece) add_symbol(byte_ids_[static_cast<unsigned char>(c)]);
  } else {
    // A character of the vocabulary, else its bytes' fallback tokens.
    for (std::size_t i = 0; i < piece.size();) {
      const std::size_t len = std::max<std::size_t>(1, utf8::sequence_length(piece, i));
      if (std::optional<std::int32_t> id = id_of(piece.substr(i, len))) {
        add_symbol(*id);
      } else {
        for (std::size_t k = i; k < i + len; ++k) {
          add_symbol(byte_ids_[static_cast<unsigned char>(piece[k])]);
        }
      }
      i += len;
    }
  }
  const auto n = static_cast<std::int32_t>(syms.size());
  auto consider = [&](std::int32_t left) {
    if (left < 0) return;
    const std::int32_t right = syms[static_cast<std::size_t>(left)].next;
    if (right < 0) return;
    const std::int32_t lid = syms[static_cast<std::size_t>(left)].id;
    const std::int32_t rid = syms[static_cast<std::size_t>(right)].id;
    const Merge* m = find_merge(pair_key(lid, rid));
    if (m == nullptr) return;
    heap.push_back({m->rank, left, right, m->merged, lid, rid});
    std::push_heap(heap.begin(), heap.end());
  };
  for (std::int32_t i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& l = syms[static_cast<std::size_t>(c.left)];
    Symbol& r = syms[static_cast<std::size_t>(c.right)];
    // Stale when either side was merged since it was pushed.
    if (l.id != c.left_id || l.next != c.right || r.id != c.right_id) continue;
    l.id = c.merged;
    l.next = r.next;
    if (r.next >= 0) syms[static_cast<std::size_t>(r.next)].prev = c.left;
    r.id = -1;
    consider(l.prev);
    consider(c.left);
  }
  for (std::int32_t i = 0; i >= 0; i = syms[static_cast<std::size_t>(i)].next) {
    out.push_back(syms[static_cast<std::size_t>(i)].id);
  }
}

}  // namespace servelab
