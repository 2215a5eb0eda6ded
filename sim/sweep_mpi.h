// `mpirun -np N sim sweep EXP --mpi`: the points of a sweep (sim/sweep.h) shared among the N
// processes (ranks) of an MPI job, possibly on several machines, with the files of
// `sim sweep EXP --jobs K` byte for byte, for any N and K.
//
// Who does what:
//   - every rank parses the command line and validates the whole grid (the experiment, its
//     traces and catalogues must be readable at the same paths on every machine);
//   - rank r runs the points i with i % N == r, on --jobs threads (default 1): rank 0 into the
//     staging folder of OUT (serving/output_file.h StagedDir), the others into a private
//     temporary folder, whose files they then send to rank 0 with their sweep.csv and table
//     rows; so OUT needs no shared file system, and only rank 0 ever writes under it;
//   - rank 0 checks OUT as `sim sweep` does (an existing OUT may hold only an earlier sweep),
//     writes sweep.csv, moves the staged entries into OUT, prints the table and makes the figures.
// After each phase the ranks agree on the outcome: when any rank failed (bad input, a point's
// error, an I/O error, an interrupt) every rank stops, rank 0 reports the first failure (in grid
// order for a point's error, else the lowest rank's) once, as `sim sweep` would, every rank exits
// with its code (2 bad input, 1 an internal error, 128 + signal when interrupted), and OUT is
// left as it was. Ctrl-C on mpirun, or SIGTERM to the ranks, is such an interrupt. A rank that
// dies outright (or SIGTERM to mpirun itself, after which Open MPI kills the ranks at once) ends
// the job without cleaning up: OUT is still untouched, but the staging folder .NAME.tmp-PID
// beside it and the ranks' servelab-sweep-* temporaries may remain.
#pragma once

#include <string>
#include <vector>

namespace servelab {

// The whole `sim sweep ... --mpi` command on this rank; returns the exit code. On rank 0 a failure
// is thrown (for the caller's run_command to report); the other ranks return its code silently.
// Throws ConfigError "built without MPI" when this sim has no MPI plugin (sim/message_passing.h).
int sweep_mpi_command(const std::vector<std::string>& args);

}  // namespace servelab
