#include "serving/interrupt.h"

#include <csignal>
#include <mutex>
#include <string>

namespace servelab {

namespace {

volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_signal(int sig) { g_signal = sig; }

std::mutex g_scope_mutex;
int g_scopes = 0;                    // live ScopedInterruptHandlers
struct sigaction g_saved_sigint {};  // the host program's action, restored by the last scope

}  // namespace

Interrupted::Interrupted(int signal)
    : std::runtime_error("interrupted by signal " + std::to_string(signal)), signal_(signal) {}

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;  // a second signal kills the process
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int interrupt_signal() { return g_signal; }

void reset_interrupt() { g_signal = 0; }

ScopedInterruptHandler::ScopedInterruptHandler() {
  const std::lock_guard<std::mutex> lock(g_scope_mutex);
  if (g_scopes++ > 0) return;
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &g_saved_sigint);
}

ScopedInterruptHandler::~ScopedInterruptHandler() {
  const std::lock_guard<std::mutex> lock(g_scope_mutex);
  if (--g_scopes > 0) return;
  sigaction(SIGINT, &g_saved_sigint, nullptr);
  g_signal = 0;
}

}  // namespace servelab
