// Process supervision for `trainctl local`: fork/exec of the ranks in their own process groups,
// a poll loop over their output pipes and a self-pipe fed by signal handlers, and teardown
// (SIGTERM, grace period, SIGKILL) when a rank fails. The output relay is in local_output.cpp, the
// signal handling and forwarding in local_signals.cpp.
#include "train/launcher/local_launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "local_supervisor.h"
#include "train/launcher/restart.h"
#include "train/base/error.h"

namespace train {
namespace detail {

std::string errno_text(int err) { return std::strerror(err); }

[[noreturn]] void system_fail(const std::string& what, int err) {
  throw Error("trainctl local: " + what + " failed: " + errno_text(err) + ".",
              "the machine may be out of processes or file descriptors (check `ulimit -u` and `ulimit -n`).");
}

int Supervisor::run() {
  install_signal_handlers();
  const std::vector<std::vector<std::string>> envs = build_environments();
  for (int r = 0; r < options_.nproc; ++r) {
    if (!spawn(r, envs[static_cast<std::size_t>(r)])) break;
  }
  loop();
  if (first_failure_ < 0) return 0;
  const Rank& rank = ranks_[static_cast<std::size_t>(first_failure_)];
  const int code = exit_code_of(rank.status);
  say(std::string(by_request_ ? "stopped on request; " : "") + "rank " + std::to_string(rank.index) +
      (by_request_ ? " ended first with a failure (" : " failed first (") + describe_status(rank) +
      "); exit code " + std::to_string(code) + ".");
  return code;
}

LaunchEnd Supervisor::end() const {
  LaunchEnd e;
  e.first_failure = first_failure_;
  e.by_request = by_request_;
  e.failed_at = failed_at_;
  if (first_failure_ >= 0) e.exit_code = exit_code_of(ranks_[static_cast<std::size_t>(first_failure_)].status);
  for (const Rank& rank : ranks_) {
    if (rank.ended_on_its_own && rank.exec_errno == 0) e.ended.emplace_back(rank.index, rank.status);
  }
  return e;
}

int Supervisor::exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string Supervisor::describe_status(const Rank& rank) {
  if (rank.exec_errno != 0) return "could not be executed: " + errno_text(rank.exec_errno);
  if (WIFEXITED(rank.status)) return "exit code " + std::to_string(WEXITSTATUS(rank.status));
  if (WIFSIGNALED(rank.status)) {
    return "killed by " + signal_name(WTERMSIG(rank.status)) +
           (WCOREDUMP(rank.status) ? ", core dumped" : "");
  }
  return "status " + std::to_string(rank.status);
}

std::vector<std::vector<std::string>> Supervisor::build_environments() const {
  EnvMap base = current_environment();
  if (options_.nproc > 1 && base.count("OMP_NUM_THREADS") == 0) {
    // Like torchrun: ranks sharing a machine shouldn't each start one thread per core.
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    base["OMP_NUM_THREADS"] = std::to_string(std::max(1u, cores / static_cast<unsigned>(options_.nproc)));
  }
  base["WORLD_SIZE"] = std::to_string(options_.nproc);
  base["LOCAL_WORLD_SIZE"] = std::to_string(options_.nproc);
  base["GROUP_RANK"] = "0";
  base["GROUP_WORLD_SIZE"] = "1";
  base["MASTER_ADDR"] = options_.master_addr;
  base["MASTER_PORT"] = std::to_string(port_or_free());
  std::vector<std::vector<std::string>> envs;
  for (int r = 0; r < options_.nproc; ++r) {
    EnvMap env = base;
    env["RANK"] = std::to_string(r);
    env["LOCAL_RANK"] = std::to_string(r);
    std::vector<std::string> entries;
    entries.reserve(env.size());
    for (const auto& [key, value] : env) entries.push_back(key + "=" + value);
    envs.push_back(std::move(entries));
  }
  return envs;
}

bool Supervisor::spawn(int r, const std::vector<std::string>& env_entries) {
  Rank rank;
  rank.index = r;
  const std::string prefix = "[r" + std::to_string(r) + "] ";
  int out_pipe[2] = {-1, -1};
  int err_pipe[2] = {-1, -1};
  int exec_pipe[2] = {-1, -1};
  if (options_.prefix_output) {
    if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) system_fail("pipe2", errno);
  }
  if (pipe2(exec_pipe, O_CLOEXEC) != 0) system_fail("pipe2", errno);

  // Everything the child needs is prepared before fork: it may only make async-signal-safe calls.
  std::vector<char*> argv;
  argv.reserve(options_.command.size() + 1);
  for (const std::string& arg : options_.command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  envp.reserve(env_entries.size() + 1);
  for (const std::string& entry : env_entries) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = getpid();

  // Block signals across fork so that no handler of ours runs in the child before exec.
  sigset_t all, previous;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &previous);
  const pid_t pid = fork();
  if (pid == 0) {
    for (const auto& [sig, action] : saved_actions_) sigaction(sig, &action, nullptr);
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // trainctl killed with SIGKILL takes the ranks along
    if (getppid() != parent) _exit(kExitProgramNotFound);
    if (dev_null_ >= 0) dup2(dev_null_, STDIN_FILENO);
    if (options_.prefix_output) {
      dup2(out_pipe[1], STDOUT_FILENO);
      dup2(err_pipe[1], STDERR_FILENO);
    }
    sigprocmask(SIG_SETMASK, &previous, nullptr);
    execve(program_.c_str(), argv.data(), envp.data());
    const int err = errno;
    (void)!write(exec_pipe[1], &err, sizeof(err));
    _exit(kExitProgramNotFound);
  }
  const int fork_errno = errno;
  if (pid > 0) setpgid(pid, pid);  // also here, so that signals can't race the child's setpgid
  sigprocmask(SIG_SETMASK, &previous, nullptr);
  for (int fd : {out_pipe[1], err_pipe[1], exec_pipe[1]}) {
    if (fd >= 0) close(fd);
  }
  if (pid < 0) {
    for (int fd : {out_pipe[0], err_pipe[0], exec_pipe[0]}) {
      if (fd >= 0) close(fd);
    }
    // The ranks already started are killed and reaped by the destructor.
    system_fail("starting rank " + std::to_string(r) + " (fork)", fork_errno);
  }
  rank.pid = pid;
  rank.running = true;
  // The exec pipe closes on a successful exec, or carries errno when exec failed.
  int exec_errno = 0;
  ssize_t n;
  do {
    n = read(exec_pipe[0], &exec_errno, sizeof(exec_errno));
  } while (n < 0 && errno == EINTR);
  close(exec_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof(exec_errno))) rank.exec_errno = exec_errno;
  if (options_.prefix_output) {
    rank.out = Stream{out_pipe[0], STDOUT_FILENO, prefix, "", false};
    rank.err = Stream{err_pipe[0], STDERR_FILENO, prefix, "", false};
    fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
    fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
  }
  ranks_.push_back(std::move(rank));
  return ranks_.back().exec_errno == 0;
}

void Supervisor::reap() {
  // Ranks reaped in the pass that starts the stopping ended before any signal of ours: a rank
  // killed with SIGKILL found after its peer's exit 79 (same pass, lower index first) is still the
  // lost one.
  const bool was_stopping = stopping_;
  for (Rank& rank : ranks_) {
    if (!rank.running) continue;
    int status = 0;
    pid_t got;
    do {
      got = waitpid(rank.pid, &status, WNOHANG);
    } while (got < 0 && errno == EINTR);
    if (got < 0 && errno == ECHILD) {
      status = 1 << 8;  // reaped elsewhere (it can't be by us): count it as a failure, not a hang
      got = rank.pid;
    }
    if (got != rank.pid) continue;
    rank.running = false;
    rank.status = status;
    rank.ended_on_its_own = !was_stopping || first_failure_ < 0;
    const bool failed = rank.exec_errno != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    if (!failed || first_failure_ >= 0) continue;
    first_failure_ = rank.index;
    failed_at_ = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    if (stopping_) continue;  // stopping on request: ranks ending now are expected
    const bool lost = (WIFSIGNALED(status) && WTERMSIG(status) != SIGTERM && WTERMSIG(status) != SIGINT) ||
                      (WIFEXITED(status) && WEXITSTATUS(status) == train_exit::kStalled);
    const double grace = options_.max_restarts > 0 && lost ? std::min(options_.grace_seconds, kLostRankGraceSeconds)
                                                           : options_.grace_seconds;
    int still_running = 0;
    for (const Rank& other : ranks_) still_running += other.running ? 1 : 0;
    say("rank " + std::to_string(rank.index) + " (pid " + std::to_string(rank.pid) + ") " +
        describe_status(rank) +
        (still_running > 0 ? "; stopping the other " + std::to_string(still_running) +
                                 " rank(s) (SIGTERM, SIGKILL after " + grace_text(grace) + ")"
                           : "") +
        (rank.exec_errno != 0 ? ". Hint: check that '" + program_ +
                                    "' is an executable for this machine (a script needs a #! line)."
                              : ""));
    start_stopping(SIGTERM, grace);
  }
}

int Supervisor::ms_until(Clock::time_point t) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left + 1, 0, 60 * 1000));
}

void Supervisor::loop() {
  std::optional<Clock::time_point> drain_deadline;
  while (true) {
    reap();
    const bool any_running =
        std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; });
    std::vector<pollfd> fds;
    std::vector<Stream*> streams;
    fds.push_back({signal_pipe_[0], POLLIN, 0});
    for (Rank& rank : ranks_) {
      for (Stream* s : {&rank.out, &rank.err}) {
        if (s->fd >= 0) {
          fds.push_back({s->fd, POLLIN, 0});
          streams.push_back(s);
        }
      }
    }
    if (!any_running) {
      if (streams.empty()) break;
      // The ranks are gone but something they started still holds their output open.
      if (!drain_deadline) drain_deadline = Clock::now() + kDrainTimeout;
      if (Clock::now() >= *drain_deadline) break;
    }
    if (stopping_ && kill_deadline_ && Clock::now() >= *kill_deadline_) {
      signal_groups(SIGKILL, /*running_only=*/false);
      kill_deadline_.reset();
    }
    int timeout = -1;
    if (kill_deadline_) timeout = ms_until(*kill_deadline_);
    if (drain_deadline) timeout = timeout < 0 ? ms_until(*drain_deadline) : std::min(timeout, ms_until(*drain_deadline));
    if (tick_) {
      tick_();
      timeout = timeout < 0 ? kTickMs : std::min(timeout, kTickMs);
    }
    const int ready = poll(fds.data(), fds.size(), timeout);
    if (ready < 0) {
      if (errno == EINTR) continue;
      system_fail("poll", errno);
    }
    if (fds[0].revents & POLLIN) {
      unsigned char sigs[64];
      ssize_t n;
      while ((n = read(signal_pipe_[0], sigs, sizeof(sigs))) > 0) {
        for (ssize_t i = 0; i < n; ++i) on_signal_received(sigs[i]);
      }
    }
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_stream(*streams[i - 1]);
    }
  }
}

void Supervisor::cleanup() {
  // Whatever the ranks left in their process groups goes with them; then every rank is reaped.
  bool any_running = false;
  for (Rank& rank : ranks_) any_running = any_running || rank.running;
  signal_groups(SIGKILL, /*running_only=*/false);
  if (any_running) {
    for (Rank& rank : ranks_) {
      if (!rank.running) continue;
      int status = 0;
      while (waitpid(rank.pid, &status, 0) < 0 && errno == EINTR) {
      }
      rank.running = false;
      rank.status = status;
    }
  }
  for (Rank& rank : ranks_) {
    for (Stream* s : {&rank.out, &rank.err}) close_stream(*s);
  }
  restore_signal_handlers();
  for (int& fd : signal_pipe_) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
  if (dev_null_ >= 0) close(dev_null_);
  dev_null_ = -1;
}

void Supervisor::open_dev_null() { dev_null_ = open("/dev/null", O_RDONLY | O_CLOEXEC); }

}  // namespace detail

namespace {

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

}  // namespace

using detail::Supervisor;
using detail::errno_text;
using detail::system_fail;

std::string find_program(const std::string& program, const EnvMap& env) {
  const std::string hint =
      "check the spelling, give a path (e.g. ./build/bin/train), or build the program first.";
  if (program.empty()) {
    throw ConfigError("PROGRAM '': expected a program to run, found an empty name.",
                      "put the program after '--': trainctl local --nproc 2 -- ./build/bin/train ...");
  }
  if (program.find('/') != std::string::npos) {
    struct stat st {};
    if (stat(program.c_str(), &st) != 0) {
      throw ConfigError("PROGRAM '" + program + "': expected an executable file, found " +
                            errno_text(errno) + ".", hint);
    }
    if (!S_ISREG(st.st_mode) || access(program.c_str(), X_OK) != 0) {
      throw ConfigError("PROGRAM '" + program + "': expected an executable file, found " +
                            (S_ISDIR(st.st_mode) ? "a directory" : "a file without execute permission") + ".",
                        "chmod +x it, or run it through its interpreter (e.g. -- python3 script.py).");
    }
    return program;
  }
  const auto it = env.find("PATH");
  const std::string path = it != env.end() ? it->second : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t colon = path.find(':', start);
    if (colon == std::string::npos) colon = path.size();
    const std::string dir = colon == start ? "." : path.substr(start, colon - start);
    const std::string candidate = dir + "/" + program;
    if (is_executable_file(candidate)) return candidate;
    start = colon + 1;
  }
  throw ConfigError("PROGRAM '" + program + "': expected an executable on PATH, found none (PATH='" + path + "').",
                    hint);
}

int find_free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) system_fail("socket", errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    close(fd);
    system_fail("binding a socket to 127.0.0.1:0", err);
  }
  close(fd);
  return ntohs(addr.sin_port);
}

int launch_local(const LocalLaunchOptions& options) {
  const std::string hint = "see `trainctl local --help`.";
  if (options.nproc < 1 || options.nproc > kMaxLocalRanks) {
    throw ConfigError("--nproc " + std::to_string(options.nproc) + ": expected 1 to " +
                          std::to_string(kMaxLocalRanks) + " ranks.", hint);
  }
  if (options.master_port != 0 && (options.master_port < 1024 || options.master_port > 65535)) {
    throw ConfigError("--master-port " + std::to_string(options.master_port) +
                          ": expected a port in 1024-65535 (or none to pick a free one).", hint);
  }
  if (options.max_restarts < 0 || options.max_restarts > kMaxLocalRestarts) {
    throw ConfigError("--max-restarts " + std::to_string(options.max_restarts) + ": expected 0 to " +
                          std::to_string(kMaxLocalRestarts) + ".", hint);
  }
  if (!(options.grace_seconds >= 0.0)) {
    throw ConfigError("--grace-period " + std::to_string(options.grace_seconds) +
                          ": expected a non-negative number of seconds.", hint);
  }
  if (options.command.empty()) {
    throw ConfigError("PROGRAM: expected a program to run after '--', found none.",
                      "trainctl local --nproc 2 -- ./build/bin/train --epochs 1");
  }
  const std::string program = find_program(options.command.front(), current_environment());
  // Started with stdin, stdout or stderr closed, the pipes made below could land on fds 0-2 and be
  // clobbered by the ranks' dup2(); /dev/null keeps those slots taken.
  for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; ++fd) {
    if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) (void)open("/dev/null", O_RDWR);
  }
  if (options.max_restarts > 0) return detail::launch_local_restarting(options, program);
  Supervisor supervisor(options, program);
  supervisor.open_dev_null();
  return supervisor.run();
}

}  // namespace train
