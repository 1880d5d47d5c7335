// Process supervision for `trainctl local`: fork/exec of the ranks in their own process groups,
// a poll loop over their output pipes and a self-pipe fed by signal handlers, forwarding, and
// teardown (SIGTERM, grace period, SIGKILL) when a rank fails.
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

#include "train/error.h"

namespace train {
namespace {

using Clock = std::chrono::steady_clock;

/// Output a rank writes without a newline is flushed once it reaches this size.
constexpr std::size_t kMaxLineBytes = 1 << 20;
/// Bytes read from a pipe at a time.
constexpr std::size_t kReadChunk = 64 * 1024;
/// After every rank has exited, how long processes they left behind may keep their output open.
constexpr std::chrono::milliseconds kDrainTimeout{2000};

/// Signals forwarded to the ranks; the first four also stop them.
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
constexpr int kForwardOnlySignals[] = {SIGUSR1, SIGUSR2};

/// Write end of the self-pipe the handlers write signal numbers to. One launch at a time.
int g_signal_write_fd = -1;

extern "C" void on_signal(int sig) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  if (g_signal_write_fd >= 0) (void)!write(g_signal_write_fd, &byte, 1);
  errno = saved;
}

std::string errno_text(int err) { return std::strerror(err); }

[[noreturn]] void system_fail(const std::string& what, int err) {
  throw Error("trainctl local: " + what + " failed: " + errno_text(err) + ".",
              "the machine may be out of processes or file descriptors (check `ulimit -u` and `ulimit -n`).");
}

void write_all(int fd, const std::string& data, bool& broken) {
  std::size_t done = 0;
  while (!broken && done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      (void)poll(&p, 1, 100);
    } else {
      broken = true;  // reader gone (EPIPE): drop output, keep supervising the ranks
    }
  }
}

/// A message from trainctl itself, on stderr, in one write.
void say(const std::string& message) {
  bool broken = false;
  write_all(STDERR_FILENO, "trainctl: " + message + "\n", broken);
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGPIPE: return "SIGPIPE";
    case SIGTSTP: return "SIGTSTP";
    default: return "signal " + std::to_string(sig);
  }
}

/// One output stream of a rank, relayed line by line to trainctl's own stdout or stderr.
struct Stream {
  int fd = -1;          ///< read end of the pipe, -1 once closed
  int target = -1;      ///< STDOUT_FILENO or STDERR_FILENO
  std::string prefix;   ///< "[rN] "
  std::string pending;  ///< the start of a line not yet ended
  bool mid_line = false;  ///< the current line's start was already flushed (very long line)
};

struct Rank {
  int index = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  int exec_errno = 0;
  Stream out, err;
};

class Supervisor {
 public:
  Supervisor(const LocalLaunchOptions& options, std::string program)
      : options_(options), program_(std::move(program)) {}

  ~Supervisor() { cleanup(); }

  int run() {
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

 private:
  static int exit_code_of(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
  }

  static std::string describe_status(const Rank& rank) {
    if (rank.exec_errno != 0) return "could not be executed: " + errno_text(rank.exec_errno);
    if (WIFEXITED(rank.status)) return "exit code " + std::to_string(WEXITSTATUS(rank.status));
    if (WIFSIGNALED(rank.status)) {
      return "killed by " + signal_name(WTERMSIG(rank.status)) +
             (WCOREDUMP(rank.status) ? ", core dumped" : "");
    }
    return "status " + std::to_string(rank.status);
  }

  void install_signal_handlers() {
    if (pipe2(signal_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) system_fail("pipe2", errno);
    g_signal_write_fd = signal_pipe_[1];
    std::vector<int> signals(std::begin(kStopSignals), std::end(kStopSignals));
    signals.insert(signals.end(), std::begin(kForwardOnlySignals), std::end(kForwardOnlySignals));
    signals.push_back(SIGCHLD);
    signals.push_back(SIGTSTP);
    for (const int sig : signals) {
      struct sigaction old {};
      sigaction(sig, nullptr, &old);
      // A signal ignored at start stays ignored, for trainctl and the ranks (nohup, `&` in scripts);
      // SIGTSTP is only relayed when job control applies (default disposition).
      if (sig != SIGCHLD && old.sa_handler == SIG_IGN) continue;
      struct sigaction act {};
      act.sa_handler = on_signal;
      sigemptyset(&act.sa_mask);
      act.sa_flags = SA_RESTART | (sig == SIGCHLD ? SA_NOCLDSTOP : 0);
      sigaction(sig, &act, &old);
      saved_actions_.push_back({sig, old});
    }
    // Writing to a closed stdout must not kill the supervisor; ranks get the original disposition.
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    struct sigaction old {};
    sigaction(SIGPIPE, &ignore, &old);
    saved_actions_.push_back({SIGPIPE, old});
  }

  void restore_signal_handlers() {
    for (auto it = saved_actions_.rbegin(); it != saved_actions_.rend(); ++it) {
      sigaction(it->first, &it->second, nullptr);
    }
    saved_actions_.clear();
    g_signal_write_fd = -1;
  }

  std::vector<std::vector<std::string>> build_environments() const {
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

  int port_or_free() const { return options_.master_port > 0 ? options_.master_port : find_free_port(); }

  /// Starts rank r; false when it could not be started (the failure is recorded).
  bool spawn(int r, const std::vector<std::string>& env_entries) {
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

  void signal_groups(int sig, bool running_only) {
    for (Rank& rank : ranks_) {
      if (rank.pid > 0 && (rank.running || !running_only)) kill(-rank.pid, sig);
    }
  }

  void start_stopping(int sig) {
    if (stopping_) return;
    stopping_ = true;
    kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(options_.grace_seconds));
    signal_groups(sig, /*running_only=*/false);
  }

  void reap() {
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
      const bool failed = rank.exec_errno != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
      if (!failed || first_failure_ >= 0) continue;
      first_failure_ = rank.index;
      if (stopping_) continue;  // stopping on request: ranks ending now are expected
      int still_running = 0;
      for (const Rank& other : ranks_) still_running += other.running ? 1 : 0;
      say("rank " + std::to_string(rank.index) + " (pid " + std::to_string(rank.pid) + ") " +
          describe_status(rank) +
          (still_running > 0 ? "; stopping the other " + std::to_string(still_running) +
                                   " rank(s) (SIGTERM, SIGKILL after " + grace_text() + ")"
                             : "") +
          (rank.exec_errno != 0 ? ". Hint: check that '" + program_ +
                                      "' is an executable for this machine (a script needs a #! line)."
                                : ""));
      start_stopping(SIGTERM);
    }
  }

  std::string grace_text() const {
    std::string s = std::to_string(options_.grace_seconds);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s + " s";
  }

  void on_signal_received(int sig) {
    if (sig == SIGCHLD) {
      reap();
      return;
    }
    if (sig == SIGTSTP) {
      // Job control: the ranks live in their own process groups, so stop them explicitly.
      signal_groups(SIGTSTP, /*running_only=*/true);
      struct sigaction dfl {}, mine {};
      dfl.sa_handler = SIG_DFL;
      sigemptyset(&dfl.sa_mask);
      sigaction(SIGTSTP, &dfl, &mine);
      raise(SIGTSTP);  // stops here until SIGCONT
      sigaction(SIGTSTP, &mine, nullptr);
      signal_groups(SIGCONT, /*running_only=*/true);
      return;
    }
    const bool stop = std::find(std::begin(kStopSignals), std::end(kStopSignals), sig) != std::end(kStopSignals);
    if (!stop) {
      signal_groups(sig, /*running_only=*/true);
      return;
    }
    if (stopping_ && sig == SIGINT && got_sigint_) {
      say("second SIGINT: killing the ranks now");
      signal_groups(SIGKILL, /*running_only=*/false);
      return;
    }
    got_sigint_ = got_sigint_ || sig == SIGINT;
    if (stopping_) {
      signal_groups(sig, /*running_only=*/true);
      return;
    }
    by_request_ = true;
    say("got " + signal_name(sig) + ": forwarding it to the ranks; SIGKILL after " + grace_text() +
        (sig == SIGINT ? " (press Ctrl-C again to kill now)" : ""));
    start_stopping(sig);
  }

  void relay(Stream& s, const char* data, std::size_t n) {
    bool& broken = s.target == STDOUT_FILENO ? stdout_broken_ : stderr_broken_;
    s.pending.append(data, n);
    std::size_t start = 0;
    std::string batch;
    for (std::size_t nl; (nl = s.pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      if (!s.mid_line) batch += s.prefix;
      batch.append(s.pending, start, nl + 1 - start);
      s.mid_line = false;
    }
    s.pending.erase(0, start);
    if (s.pending.size() >= kMaxLineBytes) {
      if (!s.mid_line) batch += s.prefix;
      batch += s.pending;
      s.pending.clear();
      s.mid_line = true;
    }
    if (!batch.empty()) write_all(s.target, batch, broken);
    if (broken) drop_streams_to(s.target);
  }

  /// trainctl's own stdout or stderr is gone (`trainctl local ... | head`): close the ranks' ends
  /// too, so that they see the broken pipe as they would without trainctl in between.
  void drop_streams_to(int target) {
    for (Rank& rank : ranks_) {
      for (Stream* s : {&rank.out, &rank.err}) {
        if (s->target == target && s->fd >= 0) {
          close(s->fd);
          s->fd = -1;
          s->pending.clear();
        }
      }
    }
  }

  void close_stream(Stream& s) {
    if (s.fd < 0) return;
    if (!s.pending.empty()) {
      bool& broken = s.target == STDOUT_FILENO ? stdout_broken_ : stderr_broken_;
      write_all(s.target, (s.mid_line ? "" : s.prefix) + s.pending + "\n", broken);
      s.pending.clear();
    } else if (s.mid_line) {
      bool& broken = s.target == STDOUT_FILENO ? stdout_broken_ : stderr_broken_;
      write_all(s.target, "\n", broken);
    }
    close(s.fd);
    s.fd = -1;
  }

  void read_stream(Stream& s) {
    char buffer[kReadChunk];
    while (s.fd >= 0) {
      const ssize_t n = read(s.fd, buffer, sizeof(buffer));
      if (n > 0) {
        relay(s, buffer, static_cast<std::size_t>(n));
        if (static_cast<std::size_t>(n) < sizeof(buffer)) return;
      } else if (n == 0) {
        close_stream(s);
      } else if (errno == EINTR) {
        continue;
      } else if (errno == EAGAIN) {
        return;
      } else {
        close_stream(s);
      }
    }
  }

  static int ms_until(Clock::time_point t) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
    return static_cast<int>(std::clamp<long long>(left + 1, 0, 60 * 1000));
  }

  void loop() {
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

  void cleanup() {
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

 public:
  /// Opens /dev/null for the ranks' stdin (called once before run()).
  void open_dev_null() { dev_null_ = open("/dev/null", O_RDONLY | O_CLOEXEC); }

 private:
  const LocalLaunchOptions& options_;
  const std::string program_;
  std::vector<Rank> ranks_;
  std::vector<std::pair<int, struct sigaction>> saved_actions_;
  int signal_pipe_[2] = {-1, -1};
  int dev_null_ = -1;
  int first_failure_ = -1;
  bool stopping_ = false;
  bool by_request_ = false;  ///< stopping because of a signal to trainctl, not a rank failure
  bool got_sigint_ = false;
  bool stdout_broken_ = false;
  bool stderr_broken_ = false;
  std::optional<Clock::time_point> kill_deadline_;
};

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

}  // namespace

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
  Supervisor supervisor(options, program);
  supervisor.open_dev_null();
  return supervisor.run();
}

}  // namespace train
