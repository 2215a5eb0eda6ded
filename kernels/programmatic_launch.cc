#include "kernels/programmatic_launch.h"

namespace servelab::kernels {

namespace {
thread_local bool programmatic_launch_on = false;
}  // namespace

ProgrammaticLaunch::ProgrammaticLaunch(bool on) : previous_(programmatic_launch_on) {
  programmatic_launch_on = on;
}

ProgrammaticLaunch::~ProgrammaticLaunch() { programmatic_launch_on = previous_; }

bool ProgrammaticLaunch::active() { return programmatic_launch_on; }

}  // namespace servelab::kernels
