// train::run_command: fork/exec with pipes, a poll loop that feeds stdin and drains stdout and stderr,
// and SIGKILL at the deadline, so that a hung SLURM command can never hang trainctl.
#include "train/base/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <vector>

namespace train {
namespace {

// The child's stdin, stdout and stderr pipes, [0] the read end and [1] the write end of each.
struct Pipes {
  int in[2], out[2], err[2];
};

// The parent's ends once the child runs; -1 once closed.
struct ParentEnds {
  int in, out, err;
};

// All three pipes or none: a failure closes those already open. Close-on-exec, so the command gets
// only the copies dup2 puts on its 0, 1 and 2.
bool open_pipes(Pipes& p) {
  if (pipe2(p.in, O_CLOEXEC) != 0) return false;
  if (pipe2(p.out, O_CLOEXEC) != 0) {
    close(p.in[0]);
    close(p.in[1]);
    return false;
  }
  if (pipe2(p.err, O_CLOEXEC) != 0) {
    for (const int fd : {p.in[0], p.in[1], p.out[0], p.out[1]}) close(fd);
    return false;
  }
  return true;
}

// In the forked child. argv is built before fork, so the child does no more than these calls before
// exec. Exit code 127 with no output tells the parent that exec failed.
[[noreturn]] void exec_child(const Pipes& p, std::vector<char*>& cargv) {
  dup2(p.in[0], STDIN_FILENO);
  dup2(p.out[1], STDOUT_FILENO);
  dup2(p.err[1], STDERR_FILENO);
  signal(SIGPIPE, SIG_DFL);
  execvp(cargv[0], cargv.data());
  _exit(127);
}

// Writes what the pipe takes of the rest of `input`; closes stdin once all is written or the command
// stopped reading.
void feed_stdin(int& in_fd, const std::string& input, std::size_t& written) {
  const ssize_t n = write(in_fd, input.data() + written, input.size() - written);
  if (n > 0) written += static_cast<std::size_t>(n);
  if ((n < 0 && errno != EAGAIN && errno != EINTR) || written == input.size()) {
    close(in_fd);
    in_fd = -1;
  }
}

// Reads all one output has ready; closes it at end of file or on an error.
void drain(int& fd, std::string& into) {
  char buf[8192];
  while (fd >= 0) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      into.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      close(fd);
      fd = -1;
    } else {
      break;
    }
  }
}

// Feeds stdin and collects stdout and stderr until the command closes both, or kills it at the
// deadline. Polls with a short timeout, so the deadline is checked even while the command is silent.
void exchange(pid_t pid, ParentEnds& ends, const std::string& input, double timeout_s, CommandResult& result) {
  for (const int fd : {ends.in, ends.out, ends.err}) fcntl(fd, F_SETFL, O_NONBLOCK);
  std::size_t written = 0;
  if (input.empty()) {
    close(ends.in);
    ends.in = -1;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (ends.out >= 0 || ends.err >= 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid, SIGKILL);
      result.timed_out = true;
      break;
    }
    std::vector<pollfd> fds;
    if (ends.in >= 0) fds.push_back({ends.in, POLLOUT, 0});
    if (ends.out >= 0) fds.push_back({ends.out, POLLIN, 0});
    if (ends.err >= 0) fds.push_back({ends.err, POLLIN, 0});
    if (poll(fds.data(), fds.size(), 100) < 0 && errno != EINTR) break;
    if (ends.in >= 0) feed_stdin(ends.in, input, written);
    drain(ends.out, result.out);
    drain(ends.err, result.err);
  }
}

// Closes the ends still open first, so a command still writing gets EPIPE instead of filling a pipe
// nobody reads, then reaps it.
int close_and_wait(pid_t pid, const ParentEnds& ends) {
  for (const int fd : {ends.in, ends.out, ends.err}) {
    if (fd >= 0) close(fd);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

// Exit code as a shell reports it (128 + signal when killed). 127 with no output means exec failed:
// the command never started.
void record_exit(int status, CommandResult& result) {
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.exit_code = 128 + WTERMSIG(status);
  if (result.exit_code == 127 && result.out.empty() && result.err.empty()) result.started = false;
}

}  // namespace

CommandResult run_command(const std::vector<std::string>& argv, const std::string& input, double timeout_s) {
  CommandResult result;
  Pipes p;
  if (!open_pipes(p)) return result;
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) exec_child(p, cargv);
  close(p.in[0]);
  close(p.out[1]);
  close(p.err[1]);
  if (pid < 0) {
    for (const int fd : {p.in[1], p.out[0], p.err[0]}) close(fd);
    return result;
  }
  result.started = true;
  // Writes to a command that exited early must fail with EPIPE, not kill us.
  struct sigaction ignore {}, old {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &old);
  ParentEnds ends{p.in[1], p.out[0], p.err[0]};
  exchange(pid, ends, input, timeout_s, result);
  const int status = close_and_wait(pid, ends);
  sigaction(SIGPIPE, &old, nullptr);
  record_exit(status, result);
  return result;
}


}  // namespace train
