// safetensors reader and writer: exact round trips in every loadable dtype, sharded models, and
// an error naming the file and the tensor for each kind of malformed file.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>

#include "engine/safetensors.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;

// A fresh scratch directory per test.
fs::path ScratchDir() {
  const auto* info = testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = servelab::test_util::temp_dir(std::string("st_") + info->name());
  return dir;
}

// Writes a raw file: u64 length, `header`, then `data_bytes` zero bytes.
void WriteRaw(const fs::path& path, const std::string& header, std::size_t data_bytes,
              std::uint64_t declared_len = std::numeric_limits<std::uint64_t>::max()) {
  std::ofstream out(path, std::ios::binary);
  const std::uint64_t n =
      declared_len == std::numeric_limits<std::uint64_t>::max() ? header.size() : declared_len;
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
  out << header;
  for (std::size_t i = 0; i < data_bytes; ++i) out.put('\0');
}

// Expects opening (and loading `tensor` when given) to throw a message containing every needle.
void ExpectError(const fs::path& path, const std::vector<std::string>& needles,
                 const std::string& load = "") {
  try {
    TensorStore store = TensorStore::open(path.string());
    if (!load.empty()) store.load(load);
    ADD_FAILURE() << "no error for " << path;
  } catch (const std::runtime_error& e) {
    for (const std::string& needle : needles) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "'" << e.what() << "' lacks '" << needle << "'";
    }
  }
}

TEST(EngineSafetensorsTest, RoundTripIsExactInEveryDtype) {
  const fs::path dir = ScratchDir();
  // Values exactly representable in each dtype, including signs, zero, subnormals and extremes.
  const std::vector<float> f32 = {
      0.0f,        -0.0f,  1.0f,   -2.5f,
      3.14159274f, 1e-38f, -1e30f, std::numeric_limits<float>::infinity()};
  const std::vector<float> bf16 = {
      0.0f,     1.0f,        -2.5f,         3.140625f,   1.17549435e-38f,
      65536.0f, -0.0078125f, 3.3895314e38f, 9.18355e-41f};
  const std::vector<float> f16 = {
      0.0f,           1.0f, -2.5f, 3.140625f, 65504.0f, 5.9604644775390625e-8f, -6.103515625e-5f,
      0.333251953125f};
  std::vector<TensorToWrite> tensors = {
      {"a.f32", "F32", {2, 4}, f32},    {"b.bf16", "BF16", {9}, bf16},
      {"c.f16", "F16", {2, 2, 2}, f16}, {"d.empty", "F32", {0, 3}, {}},
      {"e.scalar", "F32", {}, {7.0f}},
  };
  const fs::path file = dir / "model.safetensors";
  write_safetensors(file.string(), tensors, {{"format", "pt"}});

  const SafetensorsHeader h = read_safetensors_header(file.string());
  EXPECT_EQ(h.data_start % 8, 0u) << "header padded to 8 bytes";
  EXPECT_EQ(h.metadata.at("format"), "pt");

  // Open both the file and its directory.
  for (const std::string& path : {file.string(), dir.string()}) {
    TensorStore store = TensorStore::open(path);
    EXPECT_EQ(store.names().size(), tensors.size());
    for (const TensorToWrite& t : tensors) {
      const Tensor got = store.load(t.name, /*allow_non_finite=*/true);  // a.f32 holds +inf
      EXPECT_EQ(got.shape, t.shape) << t.name;
      ASSERT_EQ(got.values.size(), t.values.size()) << t.name;
      for (std::size_t i = 0; i < t.values.size(); ++i) {
        EXPECT_EQ(std::bit_cast<std::uint32_t>(got.values[i]),
                  std::bit_cast<std::uint32_t>(t.values[i]))
            << t.name << "[" << i << "] = " << got.values[i] << " want " << t.values[i];
      }
    }
  }
}

TEST(EngineSafetensorsTest, HalfConversionsRoundToNearestEven) {
  // 1 + 2^-8 lies halfway between two bf16 values: ties go to the even mantissa (1.0).
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.00390625f)), 1.0f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.01171875f)), 1.015625f);
  EXPECT_EQ(f16_to_float(float_to_f16(1.00048828125f)), 1.0f);  // 1 + 2^-11: tie to even
  EXPECT_EQ(f16_to_float(float_to_f16(1e6f)), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_float(float_to_f16(2.98e-8f)), 0.0f);  // below half the smallest subnormal
}

TEST(EngineSafetensorsTest, ShardedModelThroughTheIndex) {
  const fs::path dir = ScratchDir();
  write_safetensors((dir / "model-00001-of-00002.safetensors").string(),
                    {{"x", "F32", {2}, {1.0f, 2.0f}}});
  write_safetensors((dir / "model-00002-of-00002.safetensors").string(),
                    {{"y", "BF16", {1}, {3.0f}}});
  {
    std::ofstream idx(dir / "model.safetensors.index.json");
    idx << R"({"metadata": {"total_size": 10}, "weight_map": {"x": "model-00001-of-00002.safetensors",)"
        << R"( "y": "model-00002-of-00002.safetensors"}})";
  }
  TensorStore store = TensorStore::open(dir.string());
  EXPECT_EQ(store.load("x").values, (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(store.load("y").values, (std::vector<float>{3.0f}));
  EXPECT_NE(store.file_of("y").find("00002"), std::string::npos);
  ExpectError(dir, {"model.safetensors.index.json", "'z'", "missing"}, "z");

  // An index naming a shard that lacks the tensor.
  {
    std::ofstream idx(dir / "model.safetensors.index.json");
    idx << R"({"weight_map": {"x": "model-00002-of-00002.safetensors"}})";
  }
  ExpectError(dir, {"index.json", "'x'"});
}

TEST(EngineSafetensorsTest, HeaderLengthBeyondTheFile) {
  const fs::path f = ScratchDir() / "long.safetensors";
  WriteRaw(f, "{}", 0, 1000);
  ExpectError(f, {f.string(), "header length 1000 beyond the file"});
}

// A FIFO (or a device) is refused before it is opened: reading one would block or seek nowhere.
TEST(EngineSafetensorsTest, NotARegularFile) {
  const fs::path fifo = ScratchDir() / "pipe.safetensors";
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ExpectError(fifo, {fifo.string(), "not a regular file"});
  const fs::path index = ScratchDir() / "pipe.index.json";
  fs::remove(index);
  ASSERT_EQ(::mkfifo(index.c_str(), 0600), 0);
  ExpectError(index, {index.string(), "not a regular file"});
}

TEST(EngineSafetensorsTest, MalformedJson) {
  const fs::path dir = ScratchDir();
  WriteRaw(dir / "a.safetensors", R"({"w": {"dtype": "F32", "shape": [1], )", 4);
  ExpectError(dir / "a.safetensors", {"a.safetensors", "malformed JSON"});
  WriteRaw(dir / "b.safetensors", R"(["w"])", 0);
  ExpectError(dir / "b.safetensors", {"b.safetensors", "malformed JSON"});
  WriteRaw(dir / "c.safetensors", R"({"w": {"dtype": "F32", "shape": [1]}})", 4);
  ExpectError(dir / "c.safetensors", {"c.safetensors", "'w'", "data_offsets"});
  // A tensor named twice: the parser would keep the later entry without a word.
  WriteRaw(dir / "d.safetensors",
           R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
           R"( "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
           8);
  ExpectError(dir / "d.safetensors", {"d.safetensors", "key \"w\" appears twice"});
}

TEST(EngineSafetensorsTest, OverlappingOffsets) {
  const fs::path f = ScratchDir() / "overlap.safetensors";
  WriteRaw(f,
           R"({"first": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
           R"( "second": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
           12);
  ExpectError(f, {f.string(), "'second'", "overlap", "'first'"});
}

TEST(EngineSafetensorsTest, OutOfRangeOffsets) {
  const fs::path dir = ScratchDir();
  WriteRaw(dir / "rev.safetensors",
           R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", 8);
  ExpectError(dir / "rev.safetensors", {"rev.safetensors", "'w'", "out of range"});
  WriteRaw(dir / "far.safetensors",
           R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [100, 108]}})", 8);
  ExpectError(dir / "far.safetensors", {"far.safetensors", "'w'", "out of range"});
}

TEST(EngineSafetensorsTest, UnknownDtype) {
  const fs::path f = ScratchDir() / "dtype.safetensors";
  WriteRaw(f, R"({"w": {"dtype": "F13", "shape": [1], "data_offsets": [0, 2]}})", 2);
  ExpectError(f, {f.string(), "'w'", "unknown dtype 'F13'"});
  // A valid dtype that is not a float is listed but cannot be loaded.
  WriteRaw(f, R"({"ids": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", 8);
  EXPECT_TRUE(TensorStore::open(f.string()).contains("ids"));
  ExpectError(f, {f.string(), "'ids'", "I64"}, "ids");
}

TEST(EngineSafetensorsTest, ShapeDisagreesWithByteLength) {
  const fs::path f = ScratchDir() / "shape.safetensors";
  WriteRaw(f, R"({"w": {"dtype": "BF16", "shape": [3, 2], "data_offsets": [0, 8]}})", 8);
  ExpectError(f, {f.string(), "'w'", "12 bytes", "span 8"});
  // A shape whose byte count wraps around 2^64 to the right length is still refused.
  WriteRaw(f,
           R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 1], "data_offsets": [0, 0]}})",
           0);
  ExpectError(f, {f.string(), "'w'", "over 2^64"});
}

TEST(EngineSafetensorsTest, TruncatedData) {
  const fs::path f = ScratchDir() / "cut.safetensors";
  write_safetensors(f.string(), {{"a", "F32", {4}, {1, 2, 3, 4}}, {"b", "F32", {4}, {5, 6, 7, 8}}});
  fs::resize_file(f, fs::file_size(f) - 6);
  ExpectError(f, {f.string(), "'b'", "truncated"});
}

TEST(EngineSafetensorsTest, MissingTensor) {
  const fs::path f = ScratchDir() / "m.safetensors";
  write_safetensors(f.string(), {{"a", "F32", {1}, {1}}});
  ExpectError(f, {f.string(), "'model.norm.weight'", "missing"}, "model.norm.weight");
}

TEST(EngineSafetensorsTest, WriterRefusesBadInput) {
  const fs::path f = ScratchDir() / "w.safetensors";
  EXPECT_THROW(write_safetensors(f.string(), {{"a", "F32", {2}, {1}}}), std::runtime_error);
  EXPECT_THROW(write_safetensors(f.string(), {{"a", "I8", {1}, {1}}}), std::runtime_error);
  EXPECT_THROW(write_safetensors(f.string(), {{"a", "F32", {1}, {1}}, {"a", "F32", {1}, {1}}}),
               std::runtime_error);
}

}  // namespace
}  // namespace servelab
