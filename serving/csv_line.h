// CsvLine: builds one CSV row in a reusable buffer with std::to_chars, for the per-step and
// per-scheduled-request outputs (steps.csv, schedule.csv), which have hundreds of thousands to
// millions of rows: no printf format parsing, no temporary strings.
//
// Contract: the text is byte-for-byte what the printf formats it replaces give: integers as
// "%d", fixed-point times as "%lld.%0*lld" of (t / unit, t % unit), doubles as "%.6f" (to_chars
// with a precision is specified to format like printf in the C locale). A negative time gives an
// empty field. Fields are separated by commas in the order added; end() adds the newline.
// Any row fits: the buffer starts at 512 bytes and grows (on a cold path) before a field that
// might not fit, so a long word or a huge double is written whole, never past the end.
#pragma once

#include <algorithm>
#include <charconv>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>

namespace servelab {

class CsvLine {
 public:
  CsvLine() = default;
  CsvLine(const CsvLine&) = delete;  // points into itself
  CsvLine& operator=(const CsvLine&) = delete;

  // Any integer type, as "%d" / "%lld" / "%llu" would print it.
  template <std::integral T>
  CsvLine& add(T v) {
    sep(kMaxInteger);
    pos_ = std::to_chars(pos_, end_, v).ptr;
    return *this;
  }
  CsvLine& add(std::string_view s) {
    sep(s.size());
    pos_ = std::copy(s.begin(), s.end(), pos_);
    return *this;
  }
  // t / unit, a point, then t % unit on `digits` digits (zero-padded); empty when t < 0.
  // REQUIRES: unit == 10^digits.
  CsvLine& add_fixed(std::int64_t t, std::int64_t unit, int digits) {
    sep(kMaxInteger + 1 + static_cast<std::size_t>(std::max(digits, 0)));
    if (t < 0) return *this;
    pos_ = std::to_chars(pos_, end_, t / unit).ptr;
    *pos_++ = '.';
    std::int64_t frac = t % unit;
    for (int d = digits - 1; d >= 0; --d) {
      pos_[d] = static_cast<char>('0' + frac % 10);
      frac /= 10;
    }
    pos_ += digits;
    return *this;
  }
  // "%.6f".
  CsvLine& add_fixed6(double v) {
    sep(kMaxFixed6);
    pos_ = std::to_chars(pos_, end_, v, std::chars_format::fixed, 6).ptr;
    return *this;
  }
  // Ends the row and writes it to `f`; the line is then empty again.
  void end(std::FILE* f) {
    *pos_++ = '\n';  // every field left room for it
    std::fwrite(buf_, 1, static_cast<std::size_t>(pos_ - buf_), f);
    pos_ = buf_;
    first_ = true;
  }

 private:
  // The most characters one field may take: an integer (sign and 20 digits), a "%.6f" double
  // (DBL_MAX has 309 integer digits, a sign, a point and 6 decimals).
  static constexpr std::size_t kMaxInteger = 21;
  static constexpr std::size_t kMaxFixed6 = 320;

  // Makes room for a separator, a field of up to `field` characters and the final newline,
  // then writes the separator.
  void sep(std::size_t field) {
    if (static_cast<std::size_t>(end_ - pos_) < field + 2) [[unlikely]]
      grow(field + 2);
    if (!first_) *pos_++ = ',';
    first_ = false;
  }
  [[gnu::noinline, gnu::cold]] void grow(std::size_t need) {
    const auto used = static_cast<std::size_t>(pos_ - buf_);
    const std::size_t capacity = std::max(2 * static_cast<std::size_t>(end_ - buf_), used + need);
    auto bigger = std::make_unique_for_overwrite<char[]>(capacity);
    std::memcpy(bigger.get(), buf_, used);
    heap_ = std::move(bigger);
    buf_ = heap_.get();
    pos_ = buf_ + used;
    end_ = buf_ + capacity;
  }

  // Rows are short (numbers and short words): the inline buffer holds them without allocating;
  // a longer one moves to the heap.
  char small_[512];
  std::unique_ptr<char[]> heap_;
  char* buf_ = small_;
  char* pos_ = small_;
  char* end_ = small_ + sizeof(small_);
  bool first_ = true;
};

}  // namespace servelab
