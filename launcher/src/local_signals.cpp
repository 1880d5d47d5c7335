// `trainctl local`'s signals: handlers that feed a self-pipe the poll loop reads, forwarding to the
// ranks' process groups, stopping them (SIGTERM, then SIGKILL after the grace period) and job control.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <iterator>
#include <string>
#include <vector>

#include "local_supervisor.h"

namespace train::detail {
namespace {

/// Write end of the self-pipe the handlers write signal numbers to. One launch at a time.
int g_signal_write_fd = -1;

extern "C" void on_signal(int sig) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  if (g_signal_write_fd >= 0) (void)!write(g_signal_write_fd, &byte, 1);
  errno = saved;
}

}  // namespace

void Supervisor::install_signal_handlers() {
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

void Supervisor::restore_signal_handlers() {
  for (auto it = saved_actions_.rbegin(); it != saved_actions_.rend(); ++it) {
    sigaction(it->first, &it->second, nullptr);
  }
  saved_actions_.clear();
  g_signal_write_fd = -1;
}

void Supervisor::signal_groups(int sig, bool running_only) {
  for (Rank& rank : ranks_) {
    if (rank.pid > 0 && (rank.running || !running_only)) kill(-rank.pid, sig);
  }
}

void Supervisor::start_stopping(int sig, double grace) {
  if (stopping_) return;
  stopping_ = true;
  kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(grace >= 0 ? grace : options_.grace_seconds));
  signal_groups(sig, /*running_only=*/false);
  // A stopped rank (SIGSTOP: a frozen rank) handles nothing until it runs again; SLURM sends
  // SIGCONT with its SIGTERM too.
  signal_groups(SIGCONT, /*running_only=*/true);
}

std::string Supervisor::grace_text(double grace) const {
  std::string s = std::to_string(grace >= 0 ? grace : options_.grace_seconds);
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s + " s";
}

void Supervisor::on_signal_received(int sig) {
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

}  // namespace train::detail
