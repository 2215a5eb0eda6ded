#include "traces/length_table.h"

#include <cassert>
#include <limits>

#include "serving/config_node.h"
#include "traces/csv_reader.h"

namespace servelab {

std::shared_ptr<const LengthTable> LengthTable::load(const std::string& path) {
  CsvReader csv(path);
  if (!csv.next_row()) {
    throw ConfigError(path +
                      ": empty file, expected a header with columns num_prefill_tokens "
                      "and num_decode_tokens");
  }
  const std::size_t num_fields = csv.fields().size();
  std::size_t prefill_col = num_fields, decode_col = num_fields;
  for (std::size_t i = 0; i < num_fields; ++i) {
    const std::string_view name = trim(csv.fields()[i]);
    if (name == "num_prefill_tokens") prefill_col = i;
    if (name == "num_decode_tokens") decode_col = i;
  }
  if (prefill_col == num_fields || decode_col == num_fields) {
    csv.fail("a header with columns num_prefill_tokens and num_decode_tokens", csv.line());
  }

  std::vector<std::int32_t> prefill, decode;
  while (csv.next_row()) {
    if (csv.fields().size() != num_fields) {
      csv.fail(std::to_string(num_fields) + " comma-separated fields as in the header", csv.line());
    }
    auto count = [&](std::size_t col, const char* name) {
      const std::string_view text = csv.fields()[col];
      const std::optional<std::int64_t> v = parse_int(text);
      if (!v || *v < 1 || *v > std::numeric_limits<std::int32_t>::max()) {
        csv.fail(std::string("a positive integer ") + name, text);
      }
      return static_cast<std::int32_t>(*v);
    };
    prefill.push_back(count(prefill_col, "num_prefill_tokens"));
    decode.push_back(count(decode_col, "num_decode_tokens"));
  }
  if (prefill.empty()) throw ConfigError(path + ": empty table (no data rows after the header)");
  return std::make_shared<const LengthTable>(path, std::move(prefill), std::move(decode));
}

LengthTable::LengthTable(std::string source, std::vector<std::int32_t> prefill,
                         std::vector<std::int32_t> decode)
    : source_(std::move(source)), prefill_(std::move(prefill)), decode_(std::move(decode)) {
  assert(!prefill_.empty() && prefill_.size() == decode_.size());
}

}  // namespace servelab
