#include "serving/tokenizer.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/config_error.h"
#include "serving/added_tokens.h"
#include "serving/bpe_model.h"
#include "serving/byte_level.h"
#include "serving/decoder.h"
#include "serving/input_file.h"
#include "serving/normalizer.h"
#include "serving/pretokenizer.h"
#include "serving/utf8.h"

namespace servelab {

namespace {

using nlohmann::json;

// A BPE tokenizer, Hugging Face's pipeline: the added tokens not `normalized` split the input;
// the normalizer rewrites the text between them, where the `normalized` added tokens (matched
// by their normalized content) split it again; the pre-tokenizer (after Metaspace's rewrite)
// splits the rest into pieces; BPE encodes each piece.
class BpeTokenizer final : public Tokenizer {
 public:
  BpeTokenizer(AddedTokens added, Normalizer normalizer, PreTokenizer pre,
               std::unique_ptr<BpeModel> bpe, Decoder decoder, SequenceTemplate around)
      : added_(std::move(added)),
        normalizer_(std::move(normalizer)),
        pre_(std::move(pre)),
        bpe_(std::move(bpe)),
        decoder_(std::move(decoder)),
        around_(std::move(around)) {
    std::vector<AddedTokens::Token> raw, normalized;
    for (const AddedTokens::Token& t : added_.tokens()) {
      if (!t.normalized) {
        raw.push_back(t);
        continue;
      }
      AddedTokens::Token n = t;
      n.content = normalizer_.normalize(t.content);
      if (!n.content.empty()) normalized.push_back(std::move(n));
    }
    raw_added_ = AddedTokens(std::move(raw));
    normalized_added_ = AddedTokens(std::move(normalized));
    std::int32_t size = bpe_->size();
    for (const AddedTokens::Token& t : added_.tokens()) size = std::max(size, t.id + 1);
    decoded_.resize(static_cast<std::size_t>(size), nullptr);
    for (std::int32_t id = 0; id < bpe_->size(); ++id) {
      decoded_[static_cast<std::size_t>(id)] = bpe_->bytes_of(id);
    }
    // An added token decodes to its content, whatever the vocabulary holds at its id.
    special_.assign(decoded_.size(), false);
    for (const AddedTokens::Token& t : added_.tokens()) {
      decoded_[static_cast<std::size_t>(t.id)] = &t.content;
      special_[static_cast<std::size_t>(t.id)] = t.special;
    }
    if (!decoder_.byte_level_only()) {
      std::vector<std::optional<std::string>> strings(decoded_.size());
      for (std::size_t id = 0; id < decoded_.size(); ++id) {
        if (decoded_[id] != nullptr) strings[id] = written(static_cast<std::int32_t>(id));
      }
      decoder_.bind(strings);
    }
  }

  std::vector<std::int32_t> encode(std::string_view text) const override {
    std::vector<std::int32_t> ids;
    ids.reserve(text.size() / 3 + 4);
    std::size_t pos = 0;
    while (pos < text.size()) {
      const std::optional<AddedTokens::Match> m = raw_added_.find(text, pos);
      const std::size_t end = m ? m->begin : text.size();
      encode_normalized(text.substr(pos, end - pos), pos == 0, ids);
      if (!m) break;
      ids.push_back(m->id);
      pos = m->end;
    }
    return ids;
  }

  std::string decode(std::span<const std::int32_t> ids) const override {
    if (!decoder_.byte_level_only()) {
      for (const std::int32_t id : ids) {
        if (id < 0 || static_cast<std::size_t>(id) >= decoded_.size() ||
            decoded_[static_cast<std::size_t>(id)] == nullptr) {
          written(id);  // throws std::out_of_range naming the id
        }
      }
      return decoder_.decode_ids(ids);
    }
    std::string bytes;
    for (std::int32_t id : ids) {
      const std::string* b = id >= 0 && static_cast<std::size_t>(id) < decoded_.size()
                                 ? decoded_[static_cast<std::size_t>(id)]
                                 : nullptr;
      if (b == nullptr) {
        throw std::out_of_range("token id " + std::to_string(id) +
                                " is outside the vocabulary (ids 0.." +
                                std::to_string(decoded_.size() - 1) + ", some unused)");
      }
      bytes += *b;
    }
    return utf8::to_valid(bytes);
  }

  bool decode_needs_context() const override { return !decoder_.byte_level_only(); }

  std::int32_t vocab_size() const override { return static_cast<std::int32_t>(decoded_.size()); }

  std::optional<std::int32_t> token_id(std::string_view token) const override {
    if (std::optional<std::int32_t> id = added_.id_of(token)) return id;
    return bpe_->id_of(token);
  }

  std::optional<std::string> token_string(std::int32_t id) const override {
    if (id < 0 || static_cast<std::size_t>(id) >= decoded_.size() ||
        decoded_[static_cast<std::size_t>(id)] == nullptr) {
      return std::nullopt;
    }
    return written(id);
  }

  std::optional<std::string> token_bytes(std::int32_t id) const override {
    if (id < 0 || static_cast<std::size_t>(id) >= decoded_.size() ||
        decoded_[static_cast<std::size_t>(id)] == nullptr) {
      return std::nullopt;
    }
    const bool added = added_.by_id(id) != nullptr;
    if (decoder_.byte_level_only() || added) return *decoded_[static_cast<std::size_t>(id)];
    return decoder_.token_bytes(id);
  }

  bool special(std::int32_t id) const override {
    return id >= 0 && static_cast<std::size_t>(id) < special_.size() &&
           special_[static_cast<std::size_t>(id)];
  }

  const SequenceTemplate& sequence_template() const override { return around_; }

 private:
  // The text of `id` as tokenizer.json writes it (an added token's content; a vocabulary token
  // in its alphabet). REQUIRES: `id` is in the vocabulary (else std::out_of_range).
  std::string written(std::int32_t id) const {
    const std::string* s = id >= 0 && static_cast<std::size_t>(id) < decoded_.size()
                               ? decoded_[static_cast<std::size_t>(id)]
                               : nullptr;
    if (s == nullptr) {
      throw std::out_of_range("token id " + std::to_string(id) +
                              " is outside the vocabulary (ids 0.." +
                              std::to_string(decoded_.size() - 1) + ", some unused)");
    }
    if (s != bpe_->bytes_of(id)) return *s;  // an added token's content
    return bpe_->alphabet() == BpeModel::Alphabet::kBytes ? byte_level::encode(*s) : *s;
  }

  // The text between two non-normalized added tokens; `at_start`: it begins the input.
  void encode_normalized(std::string_view segment, bool at_start,
                         std::vector<std::int32_t>& ids) const {
    if (segment.empty()) return;
    std::string normalized;
    if (!normalizer_.identity()) {
      normalized = normalizer_.normalize(segment);
      segment = normalized;
    }
    std::size_t pos = 0;
    while (pos < segment.size()) {
      const std::optional<AddedTokens::Match> m = normalized_added_.find(segment, pos);
      const std::size_t end = m ? m->begin : segment.size();
      encode_segment(segment.substr(pos, end - pos), at_start && pos == 0, ids);
      if (!m) break;
      ids.push_back(m->id);
      pos = m->end;
    }
  }

  void encode_segment(std::string_view segment, bool at_start,
                      std::vector<std::int32_t>& ids) const {
    if (segment.empty()) return;
    std::string rewritten;
    if (pre_.rewrites()) {
      rewritten = pre_.rewrite(segment, at_start);
      segment = rewritten;
    }
    std::string prefixed;
    if (pre_.add_prefix_space() && segment.front() != ' ') {
      prefixed.reserve(segment.size() + 1);
      prefixed.push_back(' ');
      prefixed.append(segment);
      segment = prefixed;
    }
    thread_local std::vector<PreTokenizer::Piece> pieces;
    pieces.clear();
    pre_.split(segment, pieces);
    for (const auto& [b, e] : pieces) bpe_->encode_piece(segment.substr(b, e - b), ids);
  }

  AddedTokens added_;             // every added token, as the file gives it
  AddedTokens raw_added_;         // those matched in the input
  AddedTokens normalized_added_;  // those matched in the normalized text (normalized content)
  Normalizer normalizer_;
  PreTokenizer pre_;
  std::unique_ptr<BpeModel> bpe_;
  Decoder decoder_;
  // id -> its bytes (kBytes) or its text (kCharsWithByteFallback), an added token's content
  // (null: unused id)
  std::vector<const std::string*> decoded_;
  std::vector<bool> special_;  // id -> an added token marked special
  SequenceTemplate around_;    // the post_processor's special tokens
};

// Reads the values of one tokenizer.json with errors "FILE: KEY: what was expected".
class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw ConfigError(file_ + ": " + key + ": " + what);
  }
  const std::string& file() const { return file_; }

  const json& member(const json& obj, const std::string& key, const char* name) const {
    auto it = obj.find(name);
    if (it == obj.end()) fail(join(key, name), "missing");
    return *it;
  }
  const json* optional_member(const json& obj, const char* name) const {
    auto it = obj.find(name);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  bool flag(const json& obj, const std::string& key, const char* name, bool fallback) const {
    const json* v = optional_member(obj, name);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) fail(join(key, name), "expected true or false, got " + v->dump());
    return v->get<bool>();
  }
  std::int32_t id(const json& v, const std::string& key) const {
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 ||
        v.get<std::int64_t>() > (std::int64_t{1} << 30)) {
      fail(key, "expected a token id (an integer in [0, 2^30]), got " + v.dump());
    }
    return static_cast<std::int32_t>(v.get<std::int64_t>());
  }
  static std::string join(const std::string& key, const char* name) {
    return key.empty() ? name : key + "." + name;
  }

 private:
  std::string file_;
};

// Ids index tables, so they must be dense enough: below twice the number of tokens plus a margin
// (real files leave small gaps, e.g. cl100k's special tokens), never a huge allocation.
std::size_t id_limit(std::size_t num_tokens) { return 2 * num_tokens + 1024; }

std::string type_of(const Reader& r, const json& obj, const std::string& key) {
  if (!obj.is_object()) r.fail(key, "expected an object, got " + obj.dump());
  const json& t = r.member(obj, key, "type");
  if (!t.is_string()) r.fail(key + ".type", "expected a string, got " + t.dump());
  return t.get<std::string>();
}

AddedTokens read_added_tokens(const Reader& r, const json& doc) {
  std::vector<AddedTokens::Token> tokens;
  const json* list = r.optional_member(doc, "added_tokens");
  if (list == nullptr) return AddedTokens();
  if (!list->is_array()) r.fail("added_tokens", "expected an array, got " + list->dump());
  std::size_t vocab_size = 0;
  if (doc.contains("model") && doc["model"].is_object() && doc["model"].contains("vocab")) {
    vocab_size = doc["model"]["vocab"].size();
  }
  const std::size_t limit = id_limit(vocab_size + list->size());
  for (std::size_t i = 0; i < list->size(); ++i) {
    const std::string key = "added_tokens[" + std::to_string(i) + "]";
    const json& t = (*list)[i];
    if (!t.is_object()) r.fail(key, "expected an object, got " + t.dump());
    AddedTokens::Token tok;
    tok.id = r.id(r.member(t, key, "id"), key + ".id");
    if (static_cast<std::size_t>(tok.id) >= limit) {
      r.fail(key + ".id", "id " + std::to_string(tok.id) +
                              " is far beyond the vocabulary (expected " + "ids below " +
                              std::to_string(limit) + ")");
    }
    const json& content = r.member(t, key, "content");
    if (!content.is_string() || content.get<std::string>().empty()) {
      r.fail(key + ".content", "expected a non-empty string, got " + content.dump());
    }
    tok.content = content.get<std::string>();
    tok.lstrip = r.flag(t, key, "lstrip", false);
    tok.rstrip = r.flag(t, key, "rstrip", false);
    tok.special = r.flag(t, key, "special", false);
    tok.normalized = r.flag(t, key, "normalized", !tok.special);  // Hugging Face's default
    if (r.flag(t, key, "single_word", false)) {
      r.fail(key + ".single_word", "true is not supported (expected false)");
    }
    for (const AddedTokens::Token& other : tokens) {
      if (other.content == tok.content)
        r.fail(key + ".content", "duplicate of another added token");
      if (other.id == tok.id) r.fail(key + ".id", "duplicate id " + std::to_string(tok.id));
    }
    tokens.push_back(std::move(tok));
  }
  return AddedTokens(std::move(tokens));
}

void check_model_options(const Reader& r, const json& model) {
  if (const json* d = r.optional_member(model, "dropout")) {
    if (!d->is_number() || d->get<double>() != 0.0) {
      r.fail("model.dropout", "BPE dropout is not supported (expected null), got " + d->dump());
    }
  }
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const json* a = r.optional_member(model, affix)) {
      if (!a->is_string() || !a->get<std::string>().empty()) {
        r.fail(std::string("model.") + affix,
               "not supported (expected null or \"\"), got " + a->dump());
      }
    }
  }
}

std::unique_ptr<BpeModel> read_model(const Reader& r, const json& doc) {
  const json& model = r.member(doc, "", "model");
  const std::string type = type_of(r, model, "model");
  if (type != "BPE") {
    r.fail("model.type", "unsupported model \"" + type + "\" (expected \"BPE\")");
  }
  check_model_options(r, model);
  const bool ignore_merges = r.flag(model, "model", "ignore_merges", false);
  // byte_fallback: a SentencePiece conversion (text tokens, "<0xHH>" for the rest); otherwise
  // byte-level.
  const BpeModel::Alphabet alphabet = r.flag(model, "model", "byte_fallback", false)
                                          ? BpeModel::Alphabet::kCharsWithByteFallback
                                          : BpeModel::Alphabet::kBytes;

  const json& vocab = r.member(model, "model", "vocab");
  if (!vocab.is_object()) r.fail("model.vocab", "expected an object of token: id");
  std::vector<std::optional<std::string>> tokens;
  const std::size_t limit = id_limit(vocab.size());
  for (const auto& [text, v] : vocab.items()) {
    const std::int32_t id = r.id(v, "model.vocab[\"" + text + "\"]");
    if (static_cast<std::size_t>(id) >= limit) {
      r.fail("model.vocab[\"" + text + "\"]",
             "id " + std::to_string(id) + " is far beyond the " + std::to_string(vocab.size()) +
                 " tokens (expected ids below " + std::to_string(limit) + ")");
    }
    if (static_cast<std::size_t>(id) >= tokens.size())
      tokens.resize(static_cast<std::size_t>(id) + 1);
    if (tokens[static_cast<std::size_t>(id)]) {
      r.fail("model.vocab[\"" + text + "\"]", "id " + std::to_string(id) + " is also that of \"" +
                                                  *tokens[static_cast<std::size_t>(id)] + "\"");
    }
    tokens[static_cast<std::size_t>(id)] = text;
  }
  auto bpe = std::make_unique<BpeModel>(std::move(tokens), ignore_merges, alphabet);
  for (int b = 0; b < 256; ++b) {
    if (bpe->byte_id(static_cast<unsigned char>(b)) < 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      r.fail("model.vocab",
             std::string("no token for byte ") + hex + " (\"" +
                 bpe->byte_token(static_cast<unsigned char>(b)) + "\"): " +
                 (alphabet == BpeModel::Alphabet::kBytes
                      ? "not a byte-level BPE vocabulary (a SentencePiece one sets byte_fallback)"
                      : "byte_fallback needs the 256 byte tokens"));
    }
  }

  const json& merges = r.member(model, "model", "merges");
  if (!merges.is_array()) r.fail("model.merges", "expected an array");
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const std::string key = "model.merges[" + std::to_string(i) + "]";
    const json& m = merges[i];
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const std::size_t space = s.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == s.size() ||
          s.find(' ', space + 1) != std::string::npos) {
        r.fail(key, "expected \"LEFT RIGHT\" (two tokens and one space), got " + m.dump());
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      r.fail(key, "expected \"LEFT RIGHT\" or [\"LEFT\", \"RIGHT\"], got " + m.dump());
    }
    const std::optional<std::int32_t> l = bpe->id_of(left), rt = bpe->id_of(right),
                                      merged = bpe->id_of(left + right);
    if (!l || !rt || !merged) {
      r.fail(key, "\"" + (l ? (rt ? left + right : right) : left) +
                      "\" is not in model.vocab (a merge needs both tokens and their "
                      "concatenation)");
    }
    bpe->add_merge(*l, *rt, *merged);  // a repeated pair keeps its first (lower) rank
  }
  return bpe;
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& tokenizer_json) {
  const Reader r(tokenizer_json.string());
  const std::string text = read_input_file(tokenizer_json, "a tokenizer.json file");
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    throw ConfigError(r.file() + ": malformed JSON: " + e.what());
  }
  if (!doc.is_object()) r.fail("(top level)", "expected a JSON object");
  Normalizer normalizer;
  if (const json* n = r.optional_member(doc, "normalizer")) {
    normalizer = Normalizer::from_json(*n, r.file(), "normalizer");
  }
  AddedTokens added = read_added_tokens(r, doc);
  PreTokenizer pre;
  if (const json* p = r.optional_member(doc, "pre_tokenizer")) {
    pre = PreTokenizer::from_json(*p, r.file(), "pre_tokenizer");
  }
  std::unique_ptr<BpeModel> bpe = read_model(r, doc);
  Decoder decoder = Decoder::from_json(r.member(doc, "", "decoder"), r.file(), "decoder");
  SequenceTemplate around;
  if (const json* p = r.optional_member(doc, "post_processor")) {
    around = read_post_processor(*p, r.file());
  }
  auto tok = std::make_unique<BpeTokenizer>(std::move(added), std::move(normalizer), std::move(pre),
                                            std::move(bpe), std::move(decoder), std::move(around));
  const SequenceTemplate& t = tok->sequence_template();
  for (const std::vector<std::int32_t>* ids : {&t.before, &t.after}) {
    for (const std::int32_t id : *ids) {
      if (id >= tok->vocab_size()) {
        r.fail("post_processor", "special token id " + std::to_string(id) +
                                     " is outside the vocabulary of " +
                                     std::to_string(tok->vocab_size()));
      }
    }
  }
  return tok;
}

}  // namespace servelab
