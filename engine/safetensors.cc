#include "engine/safetensors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "core/json_depth.h"
#include "serving/config_node.h"
#include "traces/json_duplicate_keys.h"

namespace servelab {
namespace {

// The reference implementation refuses larger headers (MAX_HEADER_SIZE).
constexpr std::uint64_t kMaxHeaderSize = 100'000'000;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw ConfigError("safetensors " + path + ": " + what);
}

[[noreturn]] void fail_tensor(const std::string& path, const std::string& tensor,
                              const std::string& what) {
  throw ConfigError("safetensors " + path + ": tensor '" + tensor + "': " + what);
}

std::uint64_t read_u64_le(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void write_u64_le(std::ofstream& out, std::uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
  out.write(reinterpret_cast<const char*>(b), 8);
}

SafetensorsEntry parse_entry(const std::string& path, const std::string& name,
                             const nlohmann::json& j) {
  if (!j.is_object()) fail_tensor(path, name, "entry is not an object");
  SafetensorsEntry e;
  if (!j.contains("dtype") || !j["dtype"].is_string()) fail_tensor(path, name, "missing dtype");
  e.dtype = j["dtype"].get<std::string>();
  if (safetensors_dtype_size(e.dtype) == 0 && e.dtype != "F4" && e.dtype != "F6_E2M3" &&
      e.dtype != "F6_E3M2") {
    fail_tensor(path, name, "unknown dtype '" + e.dtype + "'");
  }
  if (!j.contains("shape") || !j["shape"].is_array()) fail_tensor(path, name, "missing shape");
  for (const auto& d : j["shape"]) {
    if (!d.is_number_unsigned()) fail_tensor(path, name, "shape has a non-natural dimension");
    e.shape.push_back(d.get<std::int64_t>());
  }
  const auto& off = j.contains("data_offsets") ? j["data_offsets"] : nlohmann::json();
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned()) {
    fail_tensor(path, name, "data_offsets must be two natural numbers");
  }
  e.begin = off[0].get<std::uint64_t>();
  e.end = off[1].get<std::uint64_t>();
  if (e.begin > e.end) {
    fail_tensor(path, name,
                "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                    ") out of range (begin after end)");
  }
  const std::int32_t size = safetensors_dtype_size(e.dtype);
  if (size == 0) return e;  // sub-byte dtypes: listed, never loaded
  // In 128 bits, so a hostile shape cannot wrap around to the right byte count.
  unsigned __int128 expected = static_cast<unsigned __int128>(size);
  for (std::int64_t d : e.shape) {
    expected *= static_cast<std::uint64_t>(d);
    if (expected > (static_cast<unsigned __int128>(1) << 64)) break;  // already wrong; stop growing
  }
  if (expected != e.end - e.begin) {
    fail_tensor(path, name,
                "shape x dtype size is " +
                    (expected >> 64 ? std::string("over 2^64")
                                    : std::to_string(static_cast<std::uint64_t>(expected))) +
                    " bytes but data_offsets span " + std::to_string(e.end - e.begin));
  }
  return e;
}

}  // namespace

std::int64_t SafetensorsEntry::num_elements() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::int32_t safetensors_dtype_size(const std::string& dtype) {
  static const std::map<std::string, std::int32_t> kSizes = {
      {"BOOL", 1},    {"U8", 1},      {"I8", 1},          {"I16", 2},         {"U16", 2},
      {"F16", 2},     {"BF16", 2},    {"I32", 4},         {"U32", 4},         {"F32", 4},
      {"F64", 8},     {"I64", 8},     {"U64", 8},         {"C64", 8},         {"F8_E5M2", 1},
      {"F8_E4M3", 1}, {"F8_E8M0", 1}, {"F8_E4M3FNUZ", 1}, {"F8_E5M2FNUZ", 1},
  };
  const auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

std::uint16_t float_to_bf16(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffU) > 0x7f800000U) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffU + ((u >> 16) & 1U);  // round to nearest even
  return static_cast<std::uint16_t>(u >> 16);
}

float bf16_to_float(std::uint16_t h) { return std::bit_cast<float>(std::uint32_t{h} << 16); }

std::uint16_t float_to_f16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (u >> 16) & 0x8000U;
  const std::uint32_t a = u & 0x7fffffffU;
  if (a > 0x7f800000U) return static_cast<std::uint16_t>(sign | 0x7e00U);   // NaN
  if (a >= 0x477ff000U) return static_cast<std::uint16_t>(sign | 0x7c00U);  // overflow -> inf
  if (a < 0x38800000U) {
    // Subnormal or zero in f16: scale by 2^24 and round to an integer number of 2^-24 units.
    const float scaled = std::bit_cast<float>(a) * 16777216.0f;
    const float r = std::nearbyint(scaled);  // default rounding mode: nearest even
    return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(r));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits.
  std::uint32_t v = a - ((127U - 15U) << 23);
  v += 0xfffU + ((v >> 13) & 1U);
  return static_cast<std::uint16_t>(sign | (v >> 13));
}

float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t{h & 0x8000U} << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fU;
  const std::uint32_t man = h & 0x3ffU;
  if (exp == 0) {
    const float v = static_cast<float>(man) * 5.9604644775390625e-8f;  // man * 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000U | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112U) << 23) | (man << 13));
}

// A checkpoint file is read by offset: a FIFO or a device would block or read nothing useful.
static void require_regular_file(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (std::filesystem::exists(st) && !std::filesystem::is_regular_file(st)) {
    fail(path,
         "not a regular file (a .safetensors file, a model.safetensors.index.json, or a "
         "folder holding them)");
  }
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  require_regular_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open");
  in.seekg(0, std::ios::end);
  const std::uint64_t file_size = static_cast<std::uint64_t>(in.tellg());
  in.seekg(0);
  if (file_size < 8) fail(path, "file of " + std::to_string(file_size) + " bytes has no header");
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  const std::uint64_t n = read_u64_le(len_bytes);
  if (n > file_size - 8) {
    fail(path, "header length " + std::to_string(n) + " beyond the file (" +
                   std::to_string(file_size) + " bytes)");
  }
  if (n > kMaxHeaderSize) fail(path, "header length " + std::to_string(n) + " too large");
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  if (!in) fail(path, "cannot read the header");
  if (text.empty() || text[0] != '{') fail(path, "malformed JSON header: must begin with '{'");
  // Too deep, or a tensor named twice (the parser would keep the later entry without a word).
  if (const std::optional<std::string> problem = json_text_problem(text)) {
    fail(path, "malformed JSON header: " + *problem);
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("malformed JSON header: ") + e.what());
  }
  if (!j.is_object()) fail(path, "malformed JSON header: not an object");

  SafetensorsHeader h;
  h.path = path;
  h.data_start = 8 + n;
  h.data_size = file_size - 8 - n;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) fail(path, "__metadata__ is not an object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string()) fail(path, "__metadata__ '" + m.key() + "' is not a string");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    h.tensors[it.key()] = parse_entry(path, it.key(), it.value());
  }
  // Offsets against the data section, and pairwise disjointness (sorted by begin).
  std::vector<std::pair<const std::string*, const SafetensorsEntry*>> order;
  for (const auto& [name, e] : h.tensors) {
    if (e.end > h.data_size) {
      fail_tensor(path, name,
                  "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                      ") out of range: the data section has " + std::to_string(h.data_size) +
                      " bytes (truncated file?)");
    }
    order.emplace_back(&name, &e);
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.second->begin != b.second->begin ? a.second->begin < b.second->begin
                                              : a.second->end < b.second->end;
  });
  for (std::size_t i = 1; i < order.size(); ++i) {
    const auto& prev = order[i - 1];
    const auto& cur = order[i];
    // Empty tensors occupy no bytes and overlap nothing.
    if (cur.second->begin == cur.second->end || prev.second->begin == prev.second->end) continue;
    if (cur.second->begin < prev.second->end) {
      fail_tensor(path, *cur.first, "data_offsets overlap those of tensor '" + *prev.first + "'");
    }
  }
  return h;
}

TensorStore TensorStore::open(const std::string& path) {
  namespace fs = std::filesystem;
  TensorStore store;
  store.path_ = path;
  std::vector<std::string> files;
  std::string index_path;
  if (fs::is_directory(path)) {
    const fs::path dir(path);
    if (fs::exists(dir / "model.safetensors.index.json")) {
      index_path = (dir / "model.safetensors.index.json").string();
    } else if (fs::exists(dir / "model.safetensors")) {
      files.push_back((dir / "model.safetensors").string());
    } else {
      for (const auto& f : fs::directory_iterator(dir)) {
        if (f.path().extension() == ".safetensors") files.push_back(f.path().string());
      }
      std::sort(files.begin(), files.end());
      if (files.empty()) fail(path, "directory holds no .safetensors file");
    }
  } else if (path.ends_with(".json")) {
    index_path = path;
  } else {
    files.push_back(path);
  }

  std::map<std::string, std::string> weight_map;
  if (!index_path.empty()) {
    require_regular_file(index_path);
    std::ifstream in(index_path);
    if (!in) fail(index_path, "cannot open");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      fail(index_path, std::string("malformed JSON: ") + e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
      fail(index_path, "no weight_map object");
    }
    const fs::path dir = fs::path(index_path).parent_path();
    std::set<std::string> shards;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) fail_tensor(index_path, it.key(), "shard is not a string");
      const std::string shard = (dir / it.value().get<std::string>()).string();
      weight_map[it.key()] = shard;
      shards.insert(shard);
    }
    files.assign(shards.begin(), shards.end());
    store.path_ = index_path;  // errors about missing tensors then name the index
  }

  for (const std::string& f : files) {
    store.files_.push_back(read_safetensors_header(f));
    const std::size_t index = store.files_.size() - 1;
    for (const auto& [name, e] : store.files_.back().tensors) {
      const auto [it, fresh] = store.where_.emplace(name, index);
      if (!fresh) fail_tensor(f, name, "also present in " + store.files_[it->second].path);
    }
    for (const auto& [k, v] : store.files_.back().metadata) store.metadata_.emplace(k, v);
  }
  for (const auto& [name, shard] : weight_map) {
    const auto it = store.where_.find(name);
    if (it == store.where_.end() || store.files_[it->second].path != shard) {
      fail_tensor(index_path, name, "weight_map names shard " + shard + " which lacks it");
    }
  }
  return store;
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> out;
  for (const auto& [name, index] : where_) out.push_back(name);
  return out;
}

const SafetensorsEntry& TensorStore::entry(const std::string& name) const {
  const auto it = where_.find(name);
  if (it == where_.end()) fail_tensor(path_, name, "missing tensor");
  return files_[it->second].tensors.at(name);
}

const std::string& TensorStore::file_of(const std::string& name) const {
  return files_[where_.at(name)].path;
}

Tensor TensorStore::load(const std::string& name, bool allow_non_finite) const {
  const SafetensorsEntry& e = entry(name);
  const SafetensorsHeader& h = files_[where_.at(name)];
  if (e.dtype != "F32" && e.dtype != "F16" && e.dtype != "BF16") {
    fail_tensor(h.path, name, "dtype " + e.dtype + " cannot be loaded as fp32");
  }
  std::ifstream in(h.path, std::ios::binary);
  if (!in) fail_tensor(h.path, name, "cannot open");
  std::vector<char> bytes(e.end - e.begin);
  in.seekg(static_cast<std::streamoff>(h.data_start + e.begin));
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!in) fail_tensor(h.path, name, "truncated data (the file shrank after opening?)");
  Tensor t;
  t.shape = e.shape;
  const std::size_t n = static_cast<std::size_t>(e.num_elements());
  t.values.resize(n);
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  if (e.dtype == "F32") {
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t u = std::uint32_t{p[4 * i]} | std::uint32_t{p[4 * i + 1]} << 8 |
                              std::uint32_t{p[4 * i + 2]} << 16 | std::uint32_t{p[4 * i + 3]} << 24;
      t.values[i] = std::bit_cast<float>(u);
    }
  } else {
    const bool bf16 = e.dtype == "BF16";
    for (std::size_t i = 0; i < n; ++i) {
      const auto u = static_cast<std::uint16_t>(p[2 * i] | p[2 * i + 1] << 8);
      t.values[i] = bf16 ? bf16_to_float(u) : f16_to_float(u);
    }
  }
  if (!allow_non_finite) {
    for (std::size_t i = 0; i < n; ++i) {
      if (!std::isfinite(t.values[i])) {
        fail_tensor(h.path, name,
                    "holds a non-finite value (" + std::to_string(t.values[i]) + ") at element " +
                        std::to_string(i) + "; refusing to run a corrupt checkpoint");
      }
    }
  }
  return t;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  std::set<std::string> seen;
  for (const TensorToWrite& t : tensors) {
    if (!seen.insert(t.name).second) fail_tensor(path, t.name, "written twice");
    if (t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16") {
      fail_tensor(path, t.name, "cannot write dtype '" + t.dtype + "'");
    }
    std::int64_t n = 1;
    for (std::int64_t d : t.shape) n *= d;
    if (n != static_cast<std::int64_t>(t.values.size())) {
      fail_tensor(path, t.name,
                  "shape holds " + std::to_string(n) + " elements but " +
                      std::to_string(t.values.size()) + " values were given");
    }
    const std::uint64_t bytes = static_cast<std::uint64_t>(n) * safetensors_dtype_size(t.dtype);
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the reference writer aligns data to 8 bytes
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(path, "cannot open for writing");
  write_u64_le(out, text.size());
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::vector<unsigned char> buf;
  for (const TensorToWrite& t : tensors) {
    buf.clear();
    for (float v : t.values) {
      if (t.dtype == "F32") {
        const std::uint32_t u = std::bit_cast<std::uint32_t>(v);
        for (int i = 0; i < 4; ++i) buf.push_back(static_cast<unsigned char>(u >> (8 * i)));
      } else {
        const std::uint16_t u = t.dtype == "BF16" ? float_to_bf16(v) : float_to_f16(v);
        buf.push_back(static_cast<unsigned char>(u));
        buf.push_back(static_cast<unsigned char>(u >> 8));
      }
    }
    out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
  }
  if (!out) fail(path, "write failed");
}

}  // namespace servelab
