#include "traces/csv_reader.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>

#include "serving/config_node.h"
#include "serving/interrupt.h"

namespace servelab {

namespace {
constexpr std::size_t kChunkBytes = 256 * 1024;
}  // namespace

CsvReader::CsvReader(std::string path) : path_(std::move(path)) {
  file_ = std::fopen(path_.c_str(), "rb");
  if (file_ == nullptr) {
    throw ConfigError(path_ + ": cannot open file (" + std::strerror(errno) + ")");
  }
  buffer_.resize(kChunkBytes);
}

CsvReader::~CsvReader() {
  if (file_ != nullptr) std::fclose(file_);
}

bool CsvReader::read_line() {
  for (;;) {
    const char* start = buffer_.data() + begin_;
    const void* nl = std::memchr(start, '\n', end_ - begin_);
    if (nl != nullptr) {
      const char* stop = static_cast<const char*>(nl);
      begin_ = static_cast<std::size_t>(stop - buffer_.data()) + 1;
      line_ = std::string_view(start, static_cast<std::size_t>(stop - start));
      break;
    }
    if (eof_) {
      if (begin_ == end_) return false;
      line_ = std::string_view(start, end_ - begin_);  // last line without a line end
      begin_ = end_;
      break;
    }
    // Keep the partial line, make room (doubling for a line longer than the buffer), read on.
    std::memmove(buffer_.data(), start, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
    if (end_ >= kMaxLineBytes) {
      throw ConfigError(path_ + ":" + std::to_string(line_number_ + 1) + ": line longer than " +
                        std::to_string(kMaxLineBytes >> 20) + " MiB (is this a trace file?)");
    }
    if (end_ == buffer_.size()) buffer_.resize(std::min(buffer_.size() * 2, kMaxLineBytes + 1));
    errno = 0;
    const std::size_t got = std::fread(buffer_.data() + end_, 1, buffer_.size() - end_, file_);
    const int error = errno;  // before anything else can change it
    if (got == 0) {
      if (std::ferror(file_)) {
        // A signal while a pipe or FIFO had nothing to read (the handlers do not restart
        // reads): an interrupt is reported as one; another signal's read is tried again.
        if (error == EINTR) {
          throw_if_interrupted();
          std::clearerr(file_);
          continue;
        }
        throw ConfigError(path_ + ": read error (" + std::strerror(error) + ")");
      }
      // An end met just after a signal (a pipe's writer gone with it): the interrupt first.
      throw_if_interrupted();
      eof_ = true;
    } else if (std::ferror(file_)) {
      std::clearerr(file_);  // a read cut short by a signal: what it got is kept, read on
    }
    end_ += got;
  }
  ++line_number_;
  if (!line_.empty() && line_.back() == '\r') line_.remove_suffix(1);
  if (line_number_ == 1 && line_.starts_with("\xEF\xBB\xBF")) line_.remove_prefix(3);
  return true;
}

bool CsvReader::next_row() {
  do {
    if (!read_line()) return false;
  } while (trim(line_).empty());
  fields_.clear();
  std::size_t pos = 0;
  for (;;) {
    const std::size_t comma = line_.find(',', pos);
    if (comma == std::string_view::npos) {
      fields_.push_back(line_.substr(pos));
      break;
    }
    fields_.push_back(line_.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return true;
}

void CsvReader::fail(std::string_view expected, std::string_view got) const {
  throw ConfigError(path_ + ":" + std::to_string(line_number_) + ": expected " +
                    std::string(expected) + ", got '" + shorten(got) + "'");
}

void CsvReader::fail_message(std::string_view message) const {
  throw ConfigError(path_ + ":" + std::to_string(line_number_) + ": " + std::string(message));
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::optional<std::int64_t> parse_int(std::string_view s) {
  s = trim(s);
  std::int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

namespace {

// The length of the well-formed UTF-8 sequence of 2 to 4 bytes starting s[i], or 0.
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  const std::size_t n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  }
  return n;
}

}  // namespace

std::string shorten(std::string_view s, std::size_t max_chars) {
  std::string out;
  std::size_t i = 0;
  while (i < s.size()) {
    if (i >= max_chars) return out + "...";
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c >= 0x80 ? utf8_sequence(s, i) : 0;
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else if (c < 0x20 || c >= 0x7F) {  // a control byte, or no UTF-8: shown, never sent raw
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
      ++i;
    } else {
      out += static_cast<char>(c);
      ++i;
    }
  }
  return out;
}

}  // namespace servelab
