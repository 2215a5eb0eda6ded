// A BPE model: the vocabulary (token text -> id), the ranked merges, and the merge loop that turns
// one pre-tokenised piece of text into token ids. Two alphabets:
//   - kBytes (GPT-2, Llama 3, Qwen2): token texts are written in GPT-2's byte alphabet and each
//     byte of a piece starts as its own token;
//   - kCharsWithByteFallback (SentencePiece conversions: Llama 2, Mistral; Hugging Face's BPE
//     with byte_fallback): token texts are the text itself; each character of a piece starts as
//     its token, or, when the vocabulary has none, as the "<0xHH>" tokens of its UTF-8 bytes (an
//     ill-formed byte of the input likewise).
//
// Encoding a piece: (with ignore_merges) a piece whose whole text is a token is that token;
// otherwise each byte (character) starts as its own token and the adjacent pair with the lowest
// merge rank is merged, leftmost first on equal ranks, until no adjacent pair has a merge (Hugging
// Face's BPE; for vocabularies converted from tiktoken ranks, the same result as tiktoken). The
// loop is a linked list of symbols with a min-heap of candidate pairs: O(n log n) in the piece
// length. Results for pieces up to kMaxCachedPiece bytes are cached (sharded, mutex-guarded,
// bounded).
//
// Invariants after construction: every byte value has a token (byte_id: its alphabet
// character, or its "<0xHH>" token), every merge names
// tokens of the vocabulary. encode_piece and the accessors are thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace servelab {

class BpeModel {
 public:
  static constexpr std::size_t kMaxCachedPiece = 128;

  enum class Alphabet { kBytes, kCharsWithByteFallback };

  // `tokens[id]` is the text of token `id` as tokenizer.json writes it, nullopt for an unused id.
  // REQUIRES (the loader checks and reports them with the file's keys): the texts are distinct,
  // and each of the 256 bytes has a token (byte_id >= 0).
  BpeModel(std::vector<std::optional<std::string>> tokens, bool ignore_merges,
           Alphabet alphabet = Alphabet::kBytes);
  ~BpeModel();
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // Registers the merge of `left` and `right` into `merged` (ids of the vocabulary) with the
  // next rank (merges are added in rank order). Returns false when the pair already has a merge
  // (the first, lower rank, is kept).
  bool add_merge(std::int32_t left, std::int32_t right, std::int32_t merged);

  // Appends the ids of `piece` (raw bytes; any bytes) to `out`.
  void encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const;

  // The id of a token given as tokenizer.json writes it.
  std::optional<std::int32_t> id_of(std::string_view token) const;
  // The id of the token whose text is `bytes` (mapped into the byte alphabet for kBytes).
  std::optional<std::int32_t> id_of_bytes(std::string_view bytes) const;
  // The bytes token `id` stands for (kBytes; for kCharsWithByteFallback its text as written);
  // nullptr for an id outside the vocabulary.
  const std::string* bytes_of(std::int32_t id) const;
  // One past the largest id.
  std::int32_t size() const { return static_cast<std::int32_t>(bytes_.size()); }
  std::size_t num_merges() const { return num_merges_; }
  std::int32_t byte_id(unsigned char b) const { return byte_ids_[b]; }
  Alphabet alphabet() const { return alphabet_; }
  // The text of byte `b`'s token: its alphabet character, or "<0xHH>".
  std::string byte_token(unsigned char b) const;

 private:
  struct Merge {
    std::int32_t rank;
    std::int32_t merged;
  };
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  static std::uint64_t pair_key(std::int32_t l, std::int32_t r) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(l)) << 32) |
           static_cast<std::uint32_t>(r);
  }
  void merge_loop(std::string_view piece, std::vector<std::int32_t>& out) const;
  // The merge of a pair, or nullptr: an open-addressing table (linear probing, load <= 1/2), one
  // cache line per lookup where a node-based map costs two or three misses.
  const Merge* find_merge(std::uint64_t key) const;
  void grow_merges();

  std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>> vocab_;
  std::vector<std::optional<std::string>> bytes_;  // id -> the bytes it stands for
  std::array<std::int32_t, 256> byte_ids_{};
  struct MergeSlot {
    std::uint64_t key;  // kEmptySlot when free
    Merge merge;
  };
  static constexpr std::uint64_t kEmptySlot = ~std::uint64_t{0};  // no pair of ids < 2^31 is this
  std::vector<MergeSlot> merges_;
  std::size_t num_merges_ = 0;
  int merge_shift_ = 64;  // 64 - log2(merges_.size())
  bool ignore_merges_;
  Alphabet alphabet_;

  struct CacheShard;
  std::unique_ptr<CacheShard[]> cache_;
};

}  // namespace servelab
