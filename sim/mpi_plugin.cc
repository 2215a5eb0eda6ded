// libservelab_mpi.so: MessagePassing (sim/message_passing.h) over MPI, the only file of ServeLab
// that includes <mpi.h>. Built as a plugin beside `sim` when CMake finds MPI (sim/CMakeLists.txt)
// and loaded by join_mpi_job(). Only the thread that created the object calls MPI
// (MPI_THREAD_FUNNELED): the sweep's worker threads never do.
#include <mpi.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "sim/message_passing.h"

namespace servelab {
namespace {

constexpr int kTag = 17;

class MpiMessagePassing final : public MessagePassing {
 public:
  MpiMessagePassing() {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiMessagePassing() override { MPI_Finalize(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void send(int dest, std::string_view bytes) override {
    MPI_Send(bytes.data(), count(bytes.size()), MPI_BYTE, dest, kTag, MPI_COMM_WORLD);
  }

  std::string receive(int source) override {
    MPI_Status status;
    MPI_Probe(source, kTag, MPI_COMM_WORLD, &status);
    int n = 0;
    MPI_Get_count(&status, MPI_BYTE, &n);
    std::string bytes(static_cast<std::size_t>(n), '\0');
    MPI_Recv(bytes.data(), n, MPI_BYTE, source, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return bytes;
  }

  std::vector<std::int64_t> all_gather(std::int64_t value) override {
    std::vector<std::int64_t> all(static_cast<std::size_t>(size_));
    MPI_Allgather(&value, 1, MPI_INT64_T, all.data(), 1, MPI_INT64_T, MPI_COMM_WORLD);
    return all;
  }

  std::string broadcast(int root, std::string bytes) override {
    std::int64_t n = static_cast<std::int64_t>(bytes.size());
    MPI_Bcast(&n, 1, MPI_INT64_T, root, MPI_COMM_WORLD);
    bytes.resize(static_cast<std::size_t>(n));
    MPI_Bcast(bytes.data(), count(bytes.size()), MPI_BYTE, root, MPI_COMM_WORLD);
    return bytes;
  }

 private:
  static int count(std::size_t n) {
    if (n > 0x7fffffffu) throw std::length_error("an MPI message of 2 GiB or more");
    return static_cast<int>(n);
  }

  int rank_ = 0, size_ = 1;
};

}  // namespace
}  // namespace servelab

extern "C" __attribute__((visibility("default"))) servelab::MessagePassing* servelab_mpi_open() {
  return new servelab::MpiMessagePassing();
}
