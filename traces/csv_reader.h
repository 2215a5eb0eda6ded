// CsvReader: a fast, streaming reader of the simple CSV files traces come in.
//
// The traces ServeLab reads are plain comma-separated numbers and timestamps, without quoting,
// and some are large (BurstGPT has millions of rows), so this reader does the least work that is
// still strict: one fread per 256 KiB, rows split in place into string_views, nothing allocated
// per row. It accepts "\n" and "\r\n" line ends (the Azure traces use the latter), a UTF-8 byte
// order mark at the start, and a last line without a line end; it skips blank lines. It does not
// understand quoted fields: a field containing a comma is split (no trace we read has one).
//
// Errors are ConfigErrors whose message reads "PATH:LINE: expected WHAT, got 'TEXT'", so a bad
// trace file is reported the way a bad experiment file is.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace servelab {

// The longest line a reader accepts: a longer one (a binary or sparse file, a missing line end)
// is an error naming PATH:LINE instead of an unbounded buffer.
inline constexpr std::size_t kMaxLineBytes = std::size_t{1} << 20;  // 1 MiB

class CsvReader {
 public:
  // Opens `path`. Throws ConfigError "PATH: cannot open file (REASON)".
  explicit CsvReader(std::string path);
  ~CsvReader();
  CsvReader(const CsvReader&) = delete;
  CsvReader& operator=(const CsvReader&) = delete;

  // Reads the next non-blank line and splits it at every comma. Returns false at the end of the
  // file. Throws ConfigError for a line longer than kMaxLineBytes. The views from line() and
  // fields() stay valid until the next call.
  bool next_row();
  std::string_view line() const { return line_; }
  std::span<const std::string_view> fields() const { return fields_; }
  // 1-based number of the line last returned by next_row() (0 before the first).
  std::int64_t line_number() const { return line_number_; }
  const std::string& path() const { return path_; }

  // Throws ConfigError "PATH:LINE: expected EXPECTED, got 'GOT'" for the current line
  // (GOT is shortened when long).
  [[noreturn]] void fail(std::string_view expected, std::string_view got) const;
  // Throws ConfigError "PATH:LINE: MESSAGE" for the current line.
  [[noreturn]] void fail_message(std::string_view message) const;

 private:
  // Sets line_ to the next physical line (without its line end); false at the end of the file.
  bool read_line();

  std::string path_;
  std::FILE* file_ = nullptr;
  std::vector<char> buffer_;
  std::size_t begin_ = 0;  // first unread byte in buffer_
  std::size_t end_ = 0;    // one past the last valid byte in buffer_
  bool eof_ = false;
  std::int64_t line_number_ = 0;
  std::string_view line_;
  std::vector<std::string_view> fields_;
};

// ASCII spaces and tabs removed from both ends.
std::string_view trim(std::string_view s);

// The decimal integer `s` (surrounding spaces allowed, an optional leading '-'), or nullopt if
// `s` is anything else or out of range.
std::optional<std::int64_t> parse_int(std::string_view s);

// `s` shortened to at most `max_chars` bytes for an error message ("..." marks a cut), with
// control bytes and bytes that are not UTF-8 written as \xNN (a binary file's header never
// reaches the terminal raw).
std::string shorten(std::string_view s, std::size_t max_chars = 80);

}  // namespace servelab
