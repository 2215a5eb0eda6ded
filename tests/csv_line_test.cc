// CsvLine must print exactly what the printf formats it replaced print (outputs are compared
// byte for byte across versions).
#include "serving/csv_line.h"

#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

#include "core/rng.h"

namespace servelab {
namespace {

// Runs `fill` on a CsvLine and returns the row it writes (newline included).
template <typename Fill>
std::string row(Fill fill) {
  char* data = nullptr;
  std::size_t size = 0;
  std::FILE* f = open_memstream(&data, &size);
  CsvLine line;
  fill(line);
  line.end(f);
  std::fclose(f);
  std::string out(data, size);
  std::free(data);
  return out;
}

std::string printf_fixed(std::int64_t t, std::int64_t unit, int digits) {
  if (t < 0) return "";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%" PRId64 ".%0*" PRId64, t / unit, digits, t % unit);
  return buf;
}

std::string printf_f6(double v) {
  char buf[400];  // DBL_MAX takes 316 characters
  std::snprintf(buf, sizeof(buf), "%.6f", v);
  return buf;
}

TEST(CsvLine, IntegersWordsAndSeparators) {
  EXPECT_EQ(row([](CsvLine& l) {
              l.add(std::int64_t{-12}).add(0).add(std::uint64_t{1} << 63).add("decode");
            }),
            "-12,0,9223372036854775808,decode\n");
  EXPECT_EQ(row([](CsvLine& l) { l.add(std::numeric_limits<std::int64_t>::min()); }),
            "-9223372036854775808\n");
  // An empty first field still gets its separator.
  EXPECT_EQ(row([](CsvLine& l) { l.add_fixed(-1, 1000, 3).add(5).add_fixed(-1, 1000, 3); }),
            ",5,\n");
}

TEST(CsvLine, FixedPointMatchesPrintf) {
  Rng rng(11);
  for (int i = 0; i < 2000; ++i) {
    const std::int64_t t = i < 20 ? i : rng.uniform_int(0, std::int64_t{1} << 50);
    EXPECT_EQ(row([&](CsvLine& l) { l.add_fixed(t, 1'000'000'000, 9); }),
              printf_fixed(t, 1'000'000'000, 9) + "\n");
    EXPECT_EQ(row([&](CsvLine& l) { l.add_fixed(t, 1'000'000, 6); }),
              printf_fixed(t, 1'000'000, 6) + "\n");
  }
}

TEST(CsvLine, SixDecimalsMatchPrintf) {
  // Exact ties (k / 128 has 7 decimals) round as printf does; then fractions of block counts,
  // as kv_usage is, and random values.
  for (int k = 0; k <= 256; ++k) {
    const double v = k / 128.0;
    EXPECT_EQ(row([&](CsvLine& l) { l.add_fixed6(v); }), printf_f6(v) + "\n") << v;
  }
  Rng rng(5);
  for (int i = 0; i < 5000; ++i) {
    const auto usable = rng.uniform_int(1, 100'000);
    const double v = static_cast<double>(rng.uniform_int(0, usable)) / static_cast<double>(usable);
    EXPECT_EQ(row([&](CsvLine& l) { l.add_fixed6(v); }), printf_f6(v) + "\n") << v;
    const double w = rng.uniform() * 1e6;
    EXPECT_EQ(row([&](CsvLine& l) { l.add_fixed6(w); }), printf_f6(w) + "\n") << w;
  }
}

// Rows longer than the inline buffer grow it instead of writing past its end; the text is the
// same as printf's.
TEST(CsvLine, LongRowsGrowTheBuffer) {
  const std::string word(5000, 'w');
  EXPECT_EQ(row([&](CsvLine& l) { l.add(1).add(word).add(2); }), "1," + word + ",2\n");
  const double huge = std::numeric_limits<double>::max();
  const double neg = -std::numeric_limits<double>::max();
  std::string expected;
  for (int i = 0; i < 10; ++i) {
    if (i) expected += ',';
    expected += printf_f6(i % 2 ? neg : huge);
  }
  EXPECT_EQ(row([&](CsvLine& l) {
              for (int i = 0; i < 10; ++i) l.add_fixed6(i % 2 ? neg : huge);
            }),
            expected + "\n");
  // Many short fields, then the line is reused for a short row.
  std::string many;
  char* data = nullptr;
  std::size_t size = 0;
  std::FILE* f = open_memstream(&data, &size);
  CsvLine line;
  for (int i = 0; i < 1000; ++i) {
    line.add(std::numeric_limits<std::int64_t>::min());
    if (i) many += ',';
    many += std::to_string(std::numeric_limits<std::int64_t>::min());
  }
  line.end(f);
  line.add(7).add("decode").end(f);
  std::fclose(f);
  EXPECT_EQ(std::string(data, size), many + "\n7,decode\n");
  std::free(data);
}

}  // namespace
}  // namespace servelab
