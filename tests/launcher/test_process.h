// Test helper: runs a program with a chosen environment, captures stdout and stderr, sends it
// signals and waits with a deadline, so that launcher tests never hang and never leak processes.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

extern char** environ;

namespace train::test {

using Env = std::map<std::string, std::string>;

/// This process's environment without the variables that steer the launcher (SLURM_*, torchrun's,
/// CUDA_VISIBLE_DEVICES), so that tests see the same thing inside and outside a SLURM job.
inline Env hermetic_env() {
  static const char* kDropped[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                                   "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES",
                                   "OMP_NUM_THREADS"};
  Env env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv(*e);
    const std::size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = kv.substr(0, eq);
    bool dropped = key.rfind("SLURM_", 0) == 0;
    for (const char* name : kDropped) dropped = dropped || key == name;
    if (!dropped) env.emplace(key, kv.substr(eq + 1));
  }
  return env;
}

/// The first executable named `name` on PATH, or "".
inline std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    std::size_t colon = dirs.find(':', start);
    if (colon == std::string::npos) colon = dirs.size();
    const std::string candidate = dirs.substr(start, colon - start) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = colon + 1;
  }
  return "";
}

/// A child process with captured output. The destructor kills and reaps it if still running.
class TestProcess {
 public:
  using Clock = std::chrono::steady_clock;

  TestProcess(const std::vector<std::string>& argv, const Env& env) : start_(Clock::now()) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) std::abort();
    std::vector<std::string> entries;
    for (const auto& [k, v] : env) entries.push_back(k + "=" + v);
    std::vector<char*> cargv, cenv;
    for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    for (const auto& e : entries) cenv.push_back(const_cast<char*>(e.c_str()));
    cenv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      // Signals start at their defaults whatever the test runner ignores or blocks.
      for (const int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGTSTP, SIGCHLD}) {
        signal(sig, SIG_DFL);
      }
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      dup2(out[1], STDOUT_FILENO);
      dup2(err[1], STDERR_FILENO);
      execve(cargv[0], cargv.data(), cenv.data());
      _exit(126);
    }
    close(out[1]);
    close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
    fcntl(out_fd_, F_SETFL, O_NONBLOCK);
    fcntl(err_fd_, F_SETFL, O_NONBLOCK);
  }

  TestProcess(const TestProcess&) = delete;
  TestProcess& operator=(const TestProcess&) = delete;

  ~TestProcess() {
    if (running_) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
    if (out_fd_ >= 0) close(out_fd_);
    if (err_fd_ >= 0) close(err_fd_);
  }

  pid_t pid() const { return pid_; }
  /// Stops reading its stdout, as `| head` does: its next writes there fail with EPIPE.
  void close_stdout() {
    if (out_fd_ >= 0) close(out_fd_);
    out_fd_ = -1;
  }
  /// Whether it exited and closed its output.
  bool finished() const { return !running_ && out_fd_ < 0 && err_fd_ < 0; }
  void send(int sig) { kill(pid_, sig); }

  /// Reads output until `ready(stdout)` holds; false when timeout_s passes first or it exits.
  bool wait_for_stdout(const std::function<bool(const std::string&)>& ready, double timeout_s) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (!ready(out_)) {
      if (Clock::now() >= deadline || (out_fd_ < 0 && !running_)) return false;
      pump(20);
      reap();
    }
    return true;
  }

  /// Waits for the exit and the end of its output; false when timeout_s passes first.
  bool wait(double timeout_s) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (running_ || out_fd_ >= 0 || err_fd_ >= 0) {
      if (Clock::now() >= deadline) return false;
      pump(20);
      reap();
    }
    return true;
  }

  /// Exit code, or 128 + signal when a signal ended it.
  int exit_code() const {
    if (WIFEXITED(status_)) return WEXITSTATUS(status_);
    if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
    return -1;
  }
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }
  /// Seconds from start to exit (or to now while it runs).
  double seconds() const {
    return std::chrono::duration<double>((running_ ? Clock::now() : end_) - start_).count();
  }

 private:
  void reap() {
    if (!running_) return;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      running_ = false;
      status_ = status;
      end_ = Clock::now();
    }
  }

  void pump(int timeout_ms) {
    std::vector<pollfd> fds;
    if (out_fd_ >= 0) fds.push_back({out_fd_, POLLIN, 0});
    if (err_fd_ >= 0) fds.push_back({err_fd_, POLLIN, 0});
    if (fds.empty()) {
      usleep(static_cast<useconds_t>(timeout_ms) * 1000);
      return;
    }
    poll(fds.data(), fds.size(), timeout_ms);
    drain(out_fd_, out_);
    drain(err_fd_, err_);
  }

  static void drain(int& fd, std::string& into) {
    char buf[65536];
    while (fd >= 0) {
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n > 0) {
        into.append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        close(fd);
        fd = -1;
      } else if (errno == EAGAIN) {
        return;
      }
    }
  }

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  bool running_ = true;
  int status_ = 0;
  std::string out_, err_;
  Clock::time_point start_, end_;
};

/// Runs a program to completion (killed after timeout_s) and returns it for inspection.
inline std::unique_ptr<TestProcess> run_process(const std::vector<std::string>& argv, const Env& env,
                                                double timeout_s = 30) {
  auto p = std::make_unique<TestProcess>(argv, env);
  p->wait(timeout_s);
  return p;
}

/// The lines of a text (without their '\n').
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

}  // namespace train::test
