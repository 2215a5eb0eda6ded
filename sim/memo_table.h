// MemoTable: a fixed-size table of doubles, each entry computed the first time it is read.
//
// For a pure function of a small index that is dear to compute (the roofline's GEMM time by token
// count takes a dozen pow() calls) and of which a run reads a fraction of the indices: filling
// every entry up front cost more than a short simulation itself. get(i, f) returns f(i), calling
// f only when entry i has not been filled yet.
//
// Contract: f is deterministic (the same i, the same double), so a result never depends on the
// order in which entries are read or on who fills them. Entries are relaxed atomics: threads that
// share the table may both compute an entry and store the same value, which is harmless, so an
// object holding a MemoTable stays safe to share between threads. A negative value marks an
// entry as not filled: an f that returns a negative number is still correct, only called again.
// Movable, not copyable.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace servelab {

class MemoTable {
 public:
  MemoTable() = default;
  explicit MemoTable(std::int64_t size)
      : cells_(std::make_unique<std::atomic<double>[]>(static_cast<std::size_t>(size))),
        size_(size) {
    for (std::int64_t i = 0; i < size; ++i) cells_[i].store(kEmpty, std::memory_order_relaxed);
  }

  // Entries 0 .. size() - 1.
  std::int64_t size() const { return size_; }
  bool holds(std::int64_t i) const { return i >= 0 && i < size_; }

  // f(i): from the table once the entry is filled; an index outside the table is computed every
  // time (nothing kept).
  template <class F>
  double get(std::int64_t i, F&& f) const {
    if (!holds(i)) [[unlikely]] {
      return f(i);
    }
    double v = cells_[i].load(std::memory_order_relaxed);
    if (v < 0) [[unlikely]] {
      v = f(i);
      cells_[i].store(v, std::memory_order_relaxed);
    }
    return v;
  }

 private:
  static constexpr double kEmpty = -1.0;
  std::unique_ptr<std::atomic<double>[]> cells_;
  std::int64_t size_ = 0;
};

}  // namespace servelab
