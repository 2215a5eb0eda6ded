// LengthTable: (prompt, output) token-count pairs measured on a real dataset, to sample from.
//
// The file is a CSV whose header names its columns; the two read are num_prefill_tokens (prompt
// length) and num_decode_tokens (output length), in any position, other columns ignored. This is
// the format of the processed traces of sarathi-serve and vidur (traces/lengths/):
//   num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio
//   74,918,992,0.0806100217864923
// Every row must have as many fields as the header and positive integer counts. A table is
// immutable once loaded and is shared (shared_ptr<const>) by every distribution that samples it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace servelab {

class LengthTable {
 public:
  // Reads the whole table from `path`. Throws ConfigError "PATH: cannot open file", "PATH:1:
  // expected a header with columns num_prefill_tokens and num_decode_tokens, got '...'",
  // "PATH:LINE: expected ..., got '...'" for a malformed row, or "PATH: empty table" when there
  // are no data rows.
  static std::shared_ptr<const LengthTable> load(const std::string& path);

  // A table from given columns; `source` names it in descriptions.
  // REQUIRES: prefill.size() == decode.size() > 0, every value >= 1.
  LengthTable(std::string source, std::vector<std::int32_t> prefill,
              std::vector<std::int32_t> decode);
  LengthTable(const LengthTable&) = delete;
  LengthTable& operator=(const LengthTable&) = delete;

  std::size_t size() const { return prefill_.size(); }
  // REQUIRES: row < size().
  std::int32_t prefill(std::size_t row) const { return prefill_[row]; }
  std::int32_t decode(std::size_t row) const { return decode_[row]; }
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::vector<std::int32_t> prefill_;
  std::vector<std::int32_t> decode_;
};

}  // namespace servelab
