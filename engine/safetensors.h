// Reading and writing safetensors checkpoints (huggingface/safetensors "Format").
//
// A file is: an unsigned little-endian u64 N, N bytes of JSON header that begins with '{'
// (possibly padded with spaces), then the data section. The header maps each tensor name to
// {"dtype", "shape", "data_offsets": [BEGIN, END)} with offsets relative to the data section;
// an optional "__metadata__" maps strings to strings. Data is little-endian, row-major.
//
// A model is a single file or a sharded set: model.safetensors.index.json whose "weight_map"
// names the shard file of every tensor. TensorStore opens either and loads tensors converted to
// fp32 (from F32, F16 or BF16; other valid dtypes are listed but cannot be loaded).
//
// Errors: every malformed input throws ConfigError (a std::runtime_error; the commands exit
// with code 2) whose message names the file and,
// where one is involved, the tensor: a header length beyond the file, malformed JSON, an unknown
// dtype, shape x dtype size != byte length, offsets reversed, overlapping or beyond the data
// section (a truncated file), and a tensor asked for but not present.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace servelab {

// Where one tensor lies in one file (offsets already validated against that file).
struct SafetensorsEntry {
  std::string dtype;                 // "F32", "F16", "BF16", ... as written in the header
  std::vector<std::int64_t> shape;   // row-major
  std::uint64_t begin = 0, end = 0;  // byte range within the data section
  std::int64_t num_elements() const;
};

// The parsed and validated header of one file.
struct SafetensorsHeader {
  std::string path;
  std::uint64_t data_start = 0;  // file offset of the data section (8 + N)
  std::uint64_t data_size = 0;   // bytes after the header
  std::map<std::string, SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;
};

// Parses and validates the header of `path` (reads only the header and the file size).
SafetensorsHeader read_safetensors_header(const std::string& path);

// Bytes per element of a safetensors dtype string; 0 when the string is not a dtype (sub-byte
// types F4/F6 report 0 too: they cannot be loaded here).
std::int32_t safetensors_dtype_size(const std::string& dtype);

// fp32 <-> half-precision conversions (round to nearest even), exposed for tests.
std::uint16_t float_to_bf16(float f);
float bf16_to_float(std::uint16_t h);
std::uint16_t float_to_f16(float f);
float f16_to_float(std::uint16_t h);

// A tensor as loaded: fp32 values, row-major.
struct Tensor {
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};

// The tensors of a single file or of a sharded model. Not copyable (holds the headers only;
// every load() reopens the file, so a store is cheap and never maps whole checkpoints).
class TensorStore {
 public:
  // `path` is a .safetensors file, a model.safetensors.index.json, or a directory holding an
  // index (preferred), model.safetensors, or else every *.safetensors file in it. Throws
  // std::runtime_error naming the file on any malformed header, or on an index whose weight_map
  // names a tensor its shard lacks, or a tensor present in two files.
  static TensorStore open(const std::string& path);

  TensorStore(TensorStore&&) = default;
  TensorStore& operator=(TensorStore&&) = default;
  TensorStore(const TensorStore&) = delete;
  TensorStore& operator=(const TensorStore&) = delete;

  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  std::vector<std::string> names() const;
  // The header entry of `name`; throws std::runtime_error naming the store and the tensor when
  // it is missing.
  const SafetensorsEntry& entry(const std::string& name) const;
  // The file that holds `name`. REQUIRES: contains(name).
  const std::string& file_of(const std::string& name) const;
  // Reads `name` converted to fp32. Throws ConfigError (file and tensor named) when the tensor
  // is missing, its dtype cannot be converted, the file is short, or (unless allow_non_finite)
  // a value is NaN or infinite: a checkpoint with such weights would run silently to garbage.
  Tensor load(const std::string& name, bool allow_non_finite = false) const;
  // What the store was opened from (the index file for a sharded model).
  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  TensorStore() = default;
  std::string path_;
  std::vector<SafetensorsHeader> files_;
  std::map<std::string, std::size_t> where_;  // tensor name -> index into files_
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: `values` (row-major, size = product of shape) stored as `dtype`
// ("F32", "F16" or "BF16"; values are rounded to nearest even).
struct TensorToWrite {
  std::string name;
  std::string dtype = "F32";
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};

// Writes a safetensors file (tensors in the given order, header padded to 8 bytes). Throws
// std::runtime_error on an unsupported dtype, a size mismatch, a duplicate name or an I/O error.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace servelab
