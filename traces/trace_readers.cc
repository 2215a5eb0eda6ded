#include "traces/trace_readers.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "core/checked_time.h"
#include "core/json_depth.h"
#include "core/time.h"
#include "serving/interrupt.h"
#include "serving/output_file.h"
#include "traces/csv_reader.h"
#include "traces/json_duplicate_keys.h"

namespace servelab {

namespace {

constexpr std::string_view kServeLabHeader =
    "arrival_ns,prompt_tokens,output_tokens,priority,tenant,segments";
constexpr std::int64_t kMaxTokens = std::numeric_limits<std::int32_t>::max();
// Mixed into the seed for the fresh tail of a Mooncake prompt (tokens past its hash ids), so the
// tail never collides with another reader's streams under the same seed.
constexpr std::uint64_t kMooncakeTailSalt = 0x7461696c73ULL;  // "tails"

// A malformed data row: a ConfigError that lenient mode may skip. Errors about the file as a
// whole (header, read errors) stay plain ConfigErrors and are never skipped.
class MalformedRow : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

struct CommonOptions {
  std::optional<std::int64_t> max_requests;
  double time_scale = 1.0;
  TimeNs start_ns = 0;
  bool lenient = false;
  std::uint64_t content_seed = 0;
  bool rebase = true;  // arrival measured from the first row (false: times are already ours)
};

// One parsed data row. An empty `prompt` means "content unknown": the request gets a fresh
// stream of prompt_len tokens.
struct Row {
  TimeNs time_ns = 0;
  std::vector<PromptSegment> prompt;
  std::int32_t prompt_len = 0;
  std::int32_t output = 1;
  std::int32_t priority = 0;
  std::uint32_t tenant = 0;
};

// The machinery every reader shares: read-ahead of one row, time order, re-basing and scaling,
// max_requests, lenient skipping and id numbering. Subclasses parse one line into a Row.
class TraceReader : public Workload {
 public:
  TraceReader(const std::string& path, std::string kind, CommonOptions options)
      : csv_(path), kind_(std::move(kind)), options_(options) {}

  std::optional<RequestSpec> next() override {
    if (!has_pending_) return std::nullopt;
    RequestSpec spec;
    spec.id = next_id_;
    // Checked: a huge timestamp or time_scale is an error naming the row, never a wrap.
    const TimeNs delta = options_.rebase ? pending_.time_ns - first_ns_ : pending_.time_ns;
    const std::optional<TimeNs> scaled =
        options_.time_scale == 1.0
            ? std::optional<TimeNs>(delta)
            : checked_round_ns(static_cast<double>(delta) * options_.time_scale);
    const std::optional<TimeNs> arrival =
        scaled ? checked_add(options_.start_ns, *scaled) : std::nullopt;
    if (!arrival) {
      throw ConfigError(csv_.path() + ":" + std::to_string(previous_line_) +
                        ": the arrival time (after time_scale and start_s) is beyond ~292 years");
    }
    spec.arrival_ns = *arrival;
    if (pending_.prompt.empty()) {
      spec.prompt.push_back({unique_content_id(options_.content_seed, next_id_), 0,
                             static_cast<std::uint32_t>(pending_.prompt_len)});
    } else {
      spec.prompt = std::move(pending_.prompt);
    }
    spec.prompt_len = pending_.prompt_len;
    spec.max_output_tokens = pending_.output;
    spec.priority = pending_.priority;
    spec.tenant = pending_.tenant;
    ++next_id_;
    // Never read past max_requests, so rows beyond it are not even checked.
    has_pending_ =
        (!options_.max_requests || static_cast<std::int64_t>(next_id_) < *options_.max_requests) &&
        advance();
    return spec;
  }

  std::string describe() const override {
    std::string s = kind_ + " trace " + csv_.path();
    if (options_.max_requests) s += ", first " + std::to_string(*options_.max_requests);
    char buf[64];
    if (options_.time_scale != 1.0) {
      std::snprintf(buf, sizeof buf, ", time scale %g", options_.time_scale);
      s += buf;
    }
    if (options_.start_ns != 0) {
      std::snprintf(buf, sizeof buf, ", from %g s", ns_to_s(options_.start_ns));
      s += buf;
    }
    if (options_.lenient) s += ", lenient";
    return s;
  }

  std::int64_t skipped_rows() const override { return skipped_; }
  std::int64_t filtered_rows() const override { return filtered_; }

 protected:
  // Parses csv_'s current line into `row` (which arrives reset). Returns false for a row to drop
  // silently (a filter), its time_ns set (it still orders the file and may be its first row);
  // throws MalformedRow (through bad()) for a malformed one.
  virtual bool parse(Row& row) = 0;

  // Reads the first row; called at the end of each subclass constructor (after its header).
  void prime() {
    if (!advance()) throw ConfigError(csv_.path() + ": empty trace (no usable data rows)");
  }

  // The id the row being parsed will get (for content derived from it).
  RequestId pending_id() const { return next_id_; }
  std::uint64_t content_seed() const { return options_.content_seed; }

  [[noreturn]] void bad(std::string_view expected, std::string_view got) const {
    throw MalformedRow(csv_.path() + ":" + std::to_string(csv_.line_number()) + ": expected " +
                       std::string(expected) + ", got '" + shorten(got) + "'");
  }

  // A trace time for a message, in seconds from the file's zero, whatever unit the file uses.
  static std::string format_seconds(TimeNs t) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.9g s", ns_to_s(t));
    return buf;
  }

  // A token count in [min, 2^31-1].
  std::int32_t tokens(std::string_view text, std::string_view name, std::int64_t min) const {
    const std::optional<std::int64_t> v = parse_int(text);
    if (!v || *v < min || *v > kMaxTokens) {
      bad(std::string(min == 0 ? "a non-negative" : "a positive") + " integer " + std::string(name),
          text);
    }
    return static_cast<std::int32_t>(*v);
  }

  // A time `text` in units of `unit_ns` (an integer is converted exactly, otherwise a decimal
  // is rounded to the nearest ns).
  TimeNs time(std::string_view text, TimeNs unit_ns, std::string_view name) const {
    const std::string_view t = trim(text);
    if (const std::optional<std::int64_t> i = parse_int(t)) {
      if (*i >= 0 && *i <= std::numeric_limits<TimeNs>::max() / unit_ns) return *i * unit_ns;
    } else {
      double v = 0;
      const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
      const double ns = v * static_cast<double>(unit_ns);
      if (!t.empty() && ec == std::errc() && ptr == t.data() + t.size() && v >= 0 && ns < 9e18) {
        return static_cast<TimeNs>(std::llround(ns));
      }
    }
    bad("a non-negative time " + std::string(name), text);
  }

  // The current line of a JSONL trace as a JSON object; a malformed row (not an object, nested
  // past kMaxJsonDepth, a key twice) otherwise.
  nlohmann::json json_row(std::string_view line) const {
    if (json_too_deep(line)) {
      bad("a JSON object nested at most " + std::to_string(kMaxJsonDepth) + " levels deep", line);
    }
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) bad("a JSON object", line);
    if (const std::optional<std::string> dup = first_duplicate_key(line)) {
      bad("each key once in a row", "\"" + *dup + "\" twice");
    }
    return j;
  }

  // Index of header column `name`; a (non-skippable) ConfigError if the header lacks it.
  static std::size_t column(CsvReader& csv, const std::vector<std::string>& header,
                            std::string_view name) {
    for (std::size_t i = 0; i < header.size(); ++i) {
      if (header[i] == name) return i;
    }
    csv.fail("a header with a column '" + std::string(name) + "'", csv.line());
  }

  // Reads the header line into trimmed names.
  static std::vector<std::string> read_header(CsvReader& csv, std::string_view what) {
    if (!csv.next_row()) {
      throw ConfigError(csv.path() + ": empty file, expected a header " + std::string(what));
    }
    std::vector<std::string> names;
    for (std::string_view f : csv.fields()) {
      // A column named twice: which one a key maps to would be a guess.
      if (!f.empty() && std::find(names.begin(), names.end(), trim(f)) != names.end()) {
        csv.fail("each column named once in the header", std::string(trim(f)) + " twice");
      }
      names.emplace_back(trim(f));
    }
    return names;
  }

  CsvReader csv_;

 private:
  // Reads rows until one is usable (into pending_); false at the end of the file.
  bool advance() {
    for (;;) {
      if (!csv_.next_row()) return false;
      pending_.time_ns = 0;
      pending_.prompt.clear();
      pending_.prompt_len = 0;
      pending_.output = 1;
      pending_.priority = 0;
      pending_.tenant = 0;
      bool keep = false;
      try {
        keep = parse(pending_);
        if (has_previous_ && pending_.time_ns < previous_ns_) {
          bad("a time no earlier than line " + std::to_string(previous_line_) + "'s (" +
                  format_seconds(previous_ns_) + "; rows must be in time order)",
              format_seconds(pending_.time_ns));
        }
      } catch (const MalformedRow&) {
        if (!options_.lenient) throw;
        ++skipped_;
        continue;
      }
      // A row a filter drops still counts: times stay relative to the file's first row, so the
      // parts of one trace split by model keep their timing.
      if (!has_previous_) first_ns_ = pending_.time_ns;
      has_previous_ = true;
      previous_ns_ = pending_.time_ns;
      previous_line_ = csv_.line_number();
      if (!keep) {
        ++filtered_;
        continue;
      }
      has_pending_ = true;
      return true;
    }
  }

  std::string kind_;
  CommonOptions options_;
  Row pending_;
  bool has_pending_ = false;
  bool has_previous_ = false;
  TimeNs previous_ns_ = 0;
  std::int64_t previous_line_ = 0;
  TimeNs first_ns_ = 0;
  std::int64_t skipped_ = 0;
  std::int64_t filtered_ = 0;
  RequestId next_id_ = 0;
};

// --- Mooncake -----------------------------------------------------------------------------

class MooncakeReader : public TraceReader {
 public:
  MooncakeReader(const std::string& path, CommonOptions o, std::int32_t block_tokens)
      : TraceReader(path, "mooncake", o), block_tokens_(block_tokens) {
    prime();
  }

 protected:
  bool parse(Row& row) override {
    const std::string_view line = csv_.line();
    const nlohmann::json j = json_row(line);
    auto field = [&](const char* key) -> const nlohmann::json& {
      const auto it = j.find(key);
      if (it == j.end()) bad(std::string("a field \"") + key + "\"", line);
      return *it;
    };
    const nlohmann::json& ts = field("timestamp");
    if (!ts.is_number() || ts.get<double>() < 0) bad("a non-negative number timestamp", ts.dump());
    // Milliseconds; checked: a timestamp past the simulator's clock (2^62 ns, ~146 years) is an
    // error, integer or not, never a wrap.
    const std::optional<TimeNs> t =
        ts.is_number_unsigned() && ts.get<std::uint64_t>() > INT64_MAX ? std::nullopt
        : ts.is_number_integer() ? checked_mul(ts.get<std::int64_t>(), kNsPerMs)
                                 : checked_round_ns(ts.get<double>() * 1e6);
    if (!t || *t >= kTimeHorizonNs) bad("a timestamp (ms) below 4.6e12 (146 years)", ts.dump());
    row.time_ns = *t;
    auto count = [&](const char* key) {
      const nlohmann::json& v = field(key);
      if (!v.is_number_integer() || v.get<std::int64_t>() < 1 ||
          v.get<std::int64_t>() > kMaxTokens) {
        bad(std::string("a positive integer ") + key, v.dump());
      }
      return static_cast<std::int32_t>(v.get<std::int64_t>());
    };
    row.prompt_len = count("input_length");
    row.output = count("output_length");
    const nlohmann::json& ids = field("hash_ids");
    if (!ids.is_array()) bad("an array hash_ids", ids.dump());
    const std::int64_t n = static_cast<std::int64_t>(ids.size());
    if (n > 0 && row.prompt_len <= static_cast<std::int64_t>(block_tokens_) * (n - 1)) {
      bad("input_length > " + std::to_string(block_tokens_) + " * (" + std::to_string(n) +
              " hash ids - 1)",
          std::to_string(row.prompt_len));
    }
    std::int64_t left = row.prompt_len;
    for (const nlohmann::json& id : ids) {
      if (!id.is_number_unsigned() && !(id.is_number_integer() && id.get<std::int64_t>() >= 0)) {
        bad("a non-negative integer hash id", id.dump());
      }
      const auto len = static_cast<std::uint32_t>(std::min<std::int64_t>(left, block_tokens_));
      row.prompt.push_back({mooncake_content_id(id.get<std::uint64_t>()), 0, len});
      left -= len;
    }
    if (left > 0) {
      row.prompt.push_back({unique_content_id(content_seed() ^ kMooncakeTailSalt, pending_id()), 0,
                            static_cast<std::uint32_t>(left)});
    }
    return true;
  }

 private:
  std::int32_t block_tokens_;
};

// --- BurstGPT -----------------------------------------------------------------------------

class BurstGptReader : public TraceReader {
 public:
  BurstGptReader(const std::string& path, CommonOptions o, std::optional<std::string> model,
                 bool include_failed)
      : TraceReader(path, "burstgpt", o),
        model_(std::move(model)),
        include_failed_(include_failed) {
    const std::vector<std::string> h = read_header(csv_, "Timestamp,Model,Request tokens,...");
    width_ = h.size();
    timestamp_ = column(csv_, h, "Timestamp");
    model_col_ = column(csv_, h, "Model");
    request_ = column(csv_, h, "Request tokens");
    response_ = column(csv_, h, "Response tokens");
    prime();
  }

 protected:
  bool parse(Row& row) override {
    const auto f = csv_.fields();
    if (f.size() != width_) {
      bad(std::to_string(width_) + " comma-separated fields as in the header", csv_.line());
    }
    row.time_ns = time(f[timestamp_], kNsPerS, "Timestamp (s)");
    const std::int32_t request = tokens(f[request_], "Request tokens", 0);
    const std::int32_t response = tokens(f[response_], "Response tokens", 0);
    if (model_ && trim(f[model_col_]) != *model_) return false;
    if (response == 0 && !include_failed_) return false;
    // A failed request still arrived and was prefilled: keep it as the smallest real request.
    row.prompt_len = std::max(request, 1);
    row.output = std::max(response, 1);
    return true;
  }

 private:
  std::optional<std::string> model_;
  bool include_failed_;
  std::size_t width_ = 0, timestamp_ = 0, model_col_ = 0, request_ = 0, response_ = 0;
};

// --- CSV with named columns (vidur, csv) -----------------------------------------------------

struct ColumnNames {
  std::string arrival, prompt_tokens, output_tokens;
  std::optional<std::string> priority, tenant;
};

class ColumnCsvReader : public TraceReader {
 public:
  ColumnCsvReader(const std::string& path, std::string kind, CommonOptions o, ColumnNames names,
                  TimeNs unit_ns)
      : TraceReader(path, std::move(kind), o), names_(std::move(names)), unit_ns_(unit_ns) {
    const std::vector<std::string> h = read_header(csv_, "with the mapped columns");
    width_ = h.size();
    arrival_ = column(csv_, h, names_.arrival);
    prompt_ = column(csv_, h, names_.prompt_tokens);
    output_ = column(csv_, h, names_.output_tokens);
    if (names_.priority) priority_ = column(csv_, h, *names_.priority);
    if (names_.tenant) tenant_ = column(csv_, h, *names_.tenant);
    prime();
  }

 protected:
  bool parse(Row& row) override {
    const auto f = csv_.fields();
    if (f.size() != width_) {
      bad(std::to_string(width_) + " comma-separated fields as in the header", csv_.line());
    }
    row.time_ns = time(f[arrival_], unit_ns_, names_.arrival);
    row.prompt_len = tokens(f[prompt_], names_.prompt_tokens, 1);
    row.output = tokens(f[output_], names_.output_tokens, 1);
    if (priority_) {
      const std::optional<std::int64_t> p = parse_int(f[*priority_]);
      if (!p || *p < INT32_MIN || *p > INT32_MAX)
        bad("an integer " + *names_.priority, f[*priority_]);
      row.priority = static_cast<std::int32_t>(*p);
    }
    if (tenant_) {
      const std::optional<std::int64_t> t = parse_int(f[*tenant_]);
      if (!t || *t < 0 || *t > UINT32_MAX)
        bad("a non-negative integer " + *names_.tenant, f[*tenant_]);
      row.tenant = static_cast<std::uint32_t>(*t);
    }
    return true;
  }

 private:
  ColumnNames names_;
  TimeNs unit_ns_;
  std::size_t width_ = 0, arrival_ = 0, prompt_ = 0, output_ = 0;
  std::optional<std::size_t> priority_, tenant_;
};

// --- JSONL with named fields -----------------------------------------------------------------

class ColumnJsonlReader : public TraceReader {
 public:
  ColumnJsonlReader(const std::string& path, CommonOptions o, ColumnNames names, TimeNs unit_ns)
      : TraceReader(path, "jsonl", o), names_(std::move(names)), unit_ns_(unit_ns) {
    prime();
  }

 protected:
  bool parse(Row& row) override {
    const std::string_view line = csv_.line();
    const nlohmann::json j = json_row(line);
    auto number = [&](const std::string& key) -> const nlohmann::json& {
      const auto it = j.find(key);
      if (it == j.end()) bad("a field \"" + key + "\"", line);
      if (!it->is_number()) bad("a number \"" + key + "\"", it->dump());
      return *it;
    };
    auto integer = [&](const std::string& key, std::int64_t min, std::int64_t max) {
      const nlohmann::json& v = number(key);
      // (An unsigned beyond INT64_MAX would wrap to a negative int64: rejected first.)
      if (!v.is_number_integer() ||
          (v.is_number_unsigned() && v.get<std::uint64_t>() > INT64_MAX) ||
          v.get<std::int64_t>() < min || v.get<std::int64_t>() > max) {
        bad("an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "] \"" + key +
                "\"",
            v.dump());
      }
      return v.get<std::int64_t>();
    };
    const nlohmann::json& t = number(names_.arrival);
    if (t.is_number_integer()) {
      const std::int64_t v = t.get<std::int64_t>();
      if (v < 0 || v > std::numeric_limits<TimeNs>::max() / unit_ns_) {
        bad("a non-negative time \"" + names_.arrival + "\"", t.dump());
      }
      row.time_ns = v * unit_ns_;
    } else {
      const double ns = t.get<double>() * static_cast<double>(unit_ns_);
      if (!(ns >= 0 && ns < 9e18)) bad("a non-negative time \"" + names_.arrival + "\"", t.dump());
      row.time_ns = static_cast<TimeNs>(std::llround(ns));
    }
    row.prompt_len = static_cast<std::int32_t>(integer(names_.prompt_tokens, 1, kMaxTokens));
    row.output = static_cast<std::int32_t>(integer(names_.output_tokens, 1, kMaxTokens));
    if (names_.priority) {
      row.priority = static_cast<std::int32_t>(integer(*names_.priority, INT32_MIN, INT32_MAX));
    }
    if (names_.tenant)
      row.tenant = static_cast<std::uint32_t>(integer(*names_.tenant, 0, UINT32_MAX));
    return true;
  }

 private:
  ColumnNames names_;
  TimeNs unit_ns_;
};

// --- ServeLab's own format -------------------------------------------------------------------

class ServeLabReader : public TraceReader {
 public:
  ServeLabReader(const std::string& path, CommonOptions o)
      : TraceReader(path, "servelab", (o.rebase = false, o)) {
    if (!csv_.next_row()) {
      throw ConfigError(path + ": empty file, expected the header " + std::string(kServeLabHeader));
    }
    // Its fields, white space around each allowed (as format detection allows it).
    std::string header;
    for (const std::string_view field : csv_.fields()) {
      header += (header.empty() ? "" : ",") + std::string(trim(field));
    }
    if (header != kServeLabHeader) {
      csv_.fail("the header " + std::string(kServeLabHeader), csv_.line());
    }
    prime();
  }

 protected:
  bool parse(Row& row) override {
    const auto f = csv_.fields();
    if (f.size() != 6) bad("6 comma-separated fields " + std::string(kServeLabHeader), csv_.line());
    // Whole nanoseconds, as the format writes them (a fraction would be rounded silently).
    if (trim(f[0]).find_first_of(".eE") != std::string_view::npos) {
      bad("an integer arrival_ns", f[0]);
    }
    row.time_ns = time(f[0], 1, "arrival_ns");
    row.prompt_len = tokens(f[1], "prompt_tokens", 1);
    row.output = tokens(f[2], "output_tokens", 1);
    const std::optional<std::int64_t> p = parse_int(f[3]);
    if (!p || *p < INT32_MIN || *p > INT32_MAX) bad("an integer priority", f[3]);
    row.priority = static_cast<std::int32_t>(*p);
    const std::optional<std::int64_t> t = parse_int(f[4]);
    if (!t || *t < 0 || *t > UINT32_MAX) bad("a non-negative integer tenant", f[4]);
    row.tenant = static_cast<std::uint32_t>(*t);
    const std::string_view segs = trim(f[5]);
    std::int64_t sum = 0;
    std::size_t pos = 0;
    while (pos < segs.size()) {
      std::size_t end = segs.find(';', pos);
      if (end == std::string_view::npos) end = segs.size();
      const std::string_view s = segs.substr(pos, end - pos);
      PromptSegment seg;
      const char* p0 = s.data();
      const char* e = s.data() + s.size();
      auto r1 = std::from_chars(p0, e, seg.content_id);
      bool ok = r1.ec == std::errc() && r1.ptr < e && *r1.ptr == ':';
      if (ok) {
        auto r2 = std::from_chars(r1.ptr + 1, e, seg.offset);
        ok = r2.ec == std::errc() && r2.ptr < e && *r2.ptr == ':';
        if (ok) {
          auto r3 = std::from_chars(r2.ptr + 1, e, seg.length);
          // Its positions offset .. offset + length - 1 within the stream's 2^32.
          ok = r3.ec == std::errc() && r3.ptr == e && seg.length > 0 &&
               std::uint64_t{seg.offset} + seg.length - 1 <= UINT32_MAX;
        }
      }
      if (!ok) {
        bad("a segment content_id:offset:length (length >= 1, offset + length <= 2^32)", s);
      }
      sum += seg.length;
      row.prompt.push_back(seg);
      pos = end + 1;
    }
    if (sum != row.prompt_len) {
      bad("segments totalling prompt_tokens (" + std::to_string(row.prompt_len) + ")", segs);
    }
    return true;
  }
};

TimeNs unit_ns(const ConfigNode& section) {
  const std::string u = section.has("arrival_unit")
                            ? section.at("arrival_unit").as_choice({"s", "ms", "us", "ns"})
                            : "s";
  return u == "s" ? kNsPerS : u == "ms" ? kNsPerMs : u == "us" ? kNsPerUs : 1;
}

ColumnNames column_names(const ConfigNode& section) {
  const ConfigNode c = section.at("columns");
  c.allow_keys({"arrival", "prompt_tokens", "output_tokens", "priority", "tenant"});
  ColumnNames n;
  n.arrival = c.get_string("arrival");
  n.prompt_tokens = c.get_string("prompt_tokens");
  n.output_tokens = c.get_string("output_tokens");
  if (c.has("priority")) n.priority = c.get_string("priority");
  if (c.has("tenant")) n.tenant = c.get_string("tenant");
  return n;
}

}  // namespace

bool is_trace_reader_type(const std::string& type) {
  return type == "mooncake" || type == "burstgpt" || type == "vidur" || type == "csv" ||
         type == "jsonl" || type == "servelab";
}

void check_trace_reader_keys(const ConfigNode& s) {
  const std::string type =
      s.at("type").as_choice({"mooncake", "burstgpt", "vidur", "csv", "jsonl", "servelab"});
  std::vector<std::string> keys = {"type",       "path",       "max_requests", "time_scale",
                                   "start_s",    "lenient",    "transforms",   "sampling",
                                   "cache_salt", "multimodal", "lora"};
  if (type == "mooncake") keys.push_back("block_tokens");
  if (type == "burstgpt") keys.insert(keys.end(), {"model", "include_failed"});
  if (type == "csv" || type == "jsonl") keys.insert(keys.end(), {"columns", "arrival_unit"});
  s.allow_keys(keys);
}

std::unique_ptr<Workload> make_trace_reader(const ConfigNode& s, std::uint64_t seed,
                                            const std::string& path) {
  check_trace_reader_keys(s);
  const std::string type = s.at("type").as_string();
  CommonOptions o;
  if (s.has("max_requests")) o.max_requests = s.get_int("max_requests", 1, INT64_MAX);
  if (s.has("time_scale")) {
    o.time_scale = s.at("time_scale").as_double();
    if (!(o.time_scale > 0 && o.time_scale <= 1e6)) {
      s.at("time_scale").fail("a number > 0 and up to 1e6");
    }
  }
  o.start_ns = seconds_to_ns(s.get_double("start_s", 0.0, 0.0, 1e9));
  o.lenient = s.get_bool("lenient", false);
  o.content_seed = seed;

  if (type == "mooncake") {
    const auto block = static_cast<std::int32_t>(s.get_int("block_tokens", 512, 1, 1 << 20));
    return std::make_unique<MooncakeReader>(path, o, block);
  }
  if (type == "burstgpt") {
    std::optional<std::string> model;
    if (s.has("model")) model = s.get_string("model");
    return std::make_unique<BurstGptReader>(path, o, model, s.get_bool("include_failed", false));
  }
  if (type == "vidur") {
    return std::make_unique<ColumnCsvReader>(
        path, "vidur", o,
        ColumnNames{"arrived_at", "num_prefill_tokens", "num_decode_tokens", {}, {}}, kNsPerS);
  }
  if (type == "csv") {
    return std::make_unique<ColumnCsvReader>(path, "csv", o, column_names(s), unit_ns(s));
  }
  if (type == "jsonl") {
    return std::make_unique<ColumnJsonlReader>(path, o, column_names(s), unit_ns(s));
  }
  return std::make_unique<ServeLabReader>(path, o);
}

std::int64_t write_servelab_trace(Workload& w, const std::string& out_path) {
  // Written to a temporary sibling and renamed onto out_path only when every row converted.
  AtomicFile out(out_path);
  std::FILE* f = std::fopen(out.temp_path().c_str(), "wb");
  if (f == nullptr) throw_io_error(out_path, "writing", errno);
  std::string buf;
  buf.reserve(1 << 20);
  buf.append(kServeLabHeader).push_back('\n');
  char num[32];
  auto put = [&](auto v) {
    const auto r = std::to_chars(num, num + sizeof num, v);
    buf.append(num, r.ptr);
  };
  bool ok = true;
  std::int64_t count = 0;
  try {
    while (std::optional<RequestSpec> r = w.next()) {
      put(r->arrival_ns), buf.push_back(',');
      put(r->prompt_len), buf.push_back(',');
      put(r->max_output_tokens), buf.push_back(',');
      put(r->priority), buf.push_back(',');
      put(r->tenant), buf.push_back(',');
      for (std::size_t i = 0; i < r->prompt.size(); ++i) {
        if (i > 0) buf.push_back(';');
        put(r->prompt[i].content_id), buf.push_back(':');
        put(r->prompt[i].offset), buf.push_back(':');
        put(r->prompt[i].length);
      }
      buf.push_back('\n');
      ++count;
      if (buf.size() > (1 << 20) - 4096) {
        ok = ok && std::fwrite(buf.data(), 1, buf.size(), f) == buf.size();
        buf.clear();
        throw_if_interrupted();
      }
    }
  } catch (...) {
    std::fclose(f);
    throw;
  }
  ok = ok && std::fwrite(buf.data(), 1, buf.size(), f) == buf.size();
  const int err = errno;
  if (std::fclose(f) != 0 || !ok) throw_io_error(out_path, "writing", ok ? errno : err);
  out.commit();
  return count;
}

}  // namespace servelab
