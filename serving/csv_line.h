// CsvLine: builds one CSV row in a reusable buffer with std::to_chars, for the per-step and
// per-scheduled-request outputs (steps.csv, schedule.csv), which have hundreds of thousands to
// millions of rows: no printf format parsing, no temporary strings.
//
// Contract: the text is byte-for-byte what the printf formats it replaces give: integers as
// "%d", fixed-point times as "%lld.%0*lld" of (t / unit, t % unit), doubles as "%.6f" (to_chars
// with a precision is specified to format like printf in the C locale). A negative time gives an
// empty field. Fields are separated by commas in the order added; end() adds the newline.
#pragma once

#include <charconv>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <string_view>

namespace servelab {

class CsvLine {
 public:
  // Any integer type, as "%d" / "%lld" / "%llu" would print it.
  template <std::integral T>
  CsvLine& add(T v) {
    sep();
    pos_ = std::to_chars(pos_, end_, v).ptr;
    return *this;
  }
  CsvLine& add(std::string_view s) {
    sep();
    for (const char c : s) *pos_++ = c;
    return *this;
  }
  // t / unit, a point, then t % unit on `digits` digits (zero-padded); empty when t < 0.
  // REQUIRES: unit == 10^digits.
  CsvLine& add_fixed(std::int64_t t, std::int64_t unit, int digits) {
    sep();
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
    sep();
    pos_ = std::to_chars(pos_, end_, v, std::chars_format::fixed, 6).ptr;
    return *this;
  }
  // Ends the row and writes it to `f`; the line is then empty again.
  void end(std::FILE* f) {
    *pos_++ = '\n';
    std::fwrite(buf_, 1, static_cast<std::size_t>(pos_ - buf_), f);
    pos_ = buf_;
    first_ = true;
  }

 private:
  void sep() {
    if (!first_) *pos_++ = ',';
    first_ = false;
  }
  // Rows are short (numbers and short words); 512 bytes hold the widest with room to spare.
  char buf_[512];
  char* pos_ = buf_;
  char* const end_ = buf_ + sizeof(buf_);
  bool first_ = true;
};

}  // namespace servelab
