// Message passing between the processes of one `mpirun` job, for `sim sweep --mpi`
// (sim/sweep_mpi.h). The interface holds no MPI type: MPI itself lives in one plugin,
// libservelab_mpi.so (sim/mpi_plugin.cc), built only where CMake found MPI and loaded at run time
// from the `sim` executable's folder. So neither `sim` nor any library (the Python module, the
// tests) links MPI, a GPU bundle (scripts/gpu-bundle copies the programs, not the plugin) carries
// no MPI libraries, and a build without MPI still builds.
//
// Every call blocks. Messages between a pair of ranks arrive in the order they were sent.
// Collectives (all_gather, broadcast) must be called by every rank in the same order. A failure
// of the transport itself aborts the whole job (MPI's default error handler): there is nothing
// for a rank to recover.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace servelab {

class MessagePassing {
 public:
  MessagePassing() = default;
  // Leaves the job (MPI_Finalize): no rank may call anything afterwards.
  virtual ~MessagePassing() = default;
  MessagePassing(const MessagePassing&) = delete;
  MessagePassing& operator=(const MessagePassing&) = delete;

  // This process's rank in [0, size()).
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Sends `bytes` (shorter than 2 GiB) to rank `dest` != rank().
  virtual void send(int dest, std::string_view bytes) = 0;
  // The next message from rank `source` != rank(), whole.
  virtual std::string receive(int source) = 0;
  // Every rank's `value`, indexed by rank.
  virtual std::vector<std::int64_t> all_gather(std::int64_t value) = 0;
  // Rank `root`'s `bytes` on every rank (the others' argument is ignored).
  virtual std::string broadcast(int root, std::string bytes) = 0;
};

// Joins the job this process was started in by mpirun (MPI_Init; a process started alone is a
// job of one). Throws ConfigError "built without MPI" when the plugin is not beside the
// executable (a build without MPI, a GPU bundle), and ConfigError naming the file when it cannot
// be loaded. At most one per process.
std::unique_ptr<MessagePassing> join_mpi_job();

}  // namespace servelab
