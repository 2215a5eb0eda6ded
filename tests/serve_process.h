// ServeProcess: an `engine serve` child process for tests. It runs
// `engine serve EXPERIMENT --port 0 EXTRA...` with stdout and stderr in DIR/serve.out and
// DIR/serve.err, and returns from the constructor once the server printed the port it listens
// on (throws std::runtime_error if it exits first or prints nothing within 30 s). The destructor
// sends SIGTERM, waits up to 20 s, then SIGKILLs; the child is always reaped.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_util.h"

extern char** environ;

namespace servelab::test_util {

class ServeProcess {
 public:
  ServeProcess(const std::filesystem::path& dir, const std::filesystem::path& experiment,
               const std::vector<std::string>& extra)
      : dir_(dir) {
    std::vector<std::string> args = {servelab_program("engine"), "serve", experiment.string(),
                                     "--port", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, (dir / "serve.out").c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, (dir / "serve.err").c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) throw std::runtime_error("posix_spawn failed");
    const std::regex line("listening on http://127\\.0\\.0\\.1:([0-9]+)");
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < deadline) {
      std::smatch m;
      const std::string out = read_file(dir / "serve.out");
      if (std::regex_search(out, m, line)) {
        port_ = std::stoi(m[1]);
        return;
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("engine serve exited: " + read_file(dir / "serve.err"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw std::runtime_error("engine serve did not start");
  }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;
  ~ServeProcess() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    wait_exit(std::chrono::seconds(20));
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // The exit status once the process ended within `limit` (-1 if it did not).
  int wait_exit(std::chrono::seconds limit) {
    const auto deadline = Clock::now() + limit;
    while (pid_ > 0 && Clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  std::string stderr_text() const { return read_file(dir_ / "serve.err"); }

 private:
  using Clock = std::chrono::steady_clock;
  std::filesystem::path dir_;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace servelab::test_util
