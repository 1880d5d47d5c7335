// train::run_command: fork/exec with pipes, a poll loop that feeds stdin and drains stdout and stderr,
// and SIGKILL at the deadline, so that a hung SLURM command can never hang trainctl.
#include "train/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace train {

CommandResult run_command(const std::vector<std::string>& argv, const std::string& input, double timeout_s) {
  CommandResult result;
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) != 0) return result;
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    return result;
  }
  if (pipe2(err, O_CLOEXEC) != 0) {
    for (const int fd : {in[0], in[1], out[0], out[1]}) close(fd);
    return result;
  }
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    signal(SIGPIPE, SIG_DFL);
    execvp(cargv[0], cargv.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  close(err[1]);
  if (pid < 0) {
    for (const int fd : {in[1], out[0], err[0]}) close(fd);
    return result;
  }
  result.started = true;
  // Writes to a command that exited early must fail with EPIPE, not kill us.
  struct sigaction ignore {}, old {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &old);
  int in_fd = in[1], out_fd = out[0], err_fd = err[0];
  for (const int fd : {in_fd, out_fd, err_fd}) fcntl(fd, F_SETFL, O_NONBLOCK);
  std::size_t written = 0;
  if (input.empty()) {
    close(in_fd);
    in_fd = -1;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (out_fd >= 0 || err_fd >= 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid, SIGKILL);
      result.timed_out = true;
      break;
    }
    std::vector<pollfd> fds;
    if (in_fd >= 0) fds.push_back({in_fd, POLLOUT, 0});
    if (out_fd >= 0) fds.push_back({out_fd, POLLIN, 0});
    if (err_fd >= 0) fds.push_back({err_fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), 100) < 0 && errno != EINTR) break;
    if (in_fd >= 0) {
      const ssize_t n = write(in_fd, input.data() + written, input.size() - written);
      if (n > 0) written += static_cast<std::size_t>(n);
      if ((n < 0 && errno != EAGAIN && errno != EINTR) || written == input.size()) {
        close(in_fd);
        in_fd = -1;
      }
    }
    for (auto [fd, into] : {std::pair<int*, std::string*>{&out_fd, &result.out}, {&err_fd, &result.err}}) {
      char buf[8192];
      while (*fd >= 0) {
        const ssize_t n = read(*fd, buf, sizeof(buf));
        if (n > 0) {
          into->append(buf, static_cast<std::size_t>(n));
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          close(*fd);
          *fd = -1;
        } else {
          break;
        }
      }
    }
  }
  for (const int fd : {in_fd, out_fd, err_fd}) {
    if (fd >= 0) close(fd);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  sigaction(SIGPIPE, &old, nullptr);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.exit_code = 128 + WTERMSIG(status);
  if (result.exit_code == 127 && result.out.empty() && result.err.empty()) result.started = false;
  return result;
}


}  // namespace train
