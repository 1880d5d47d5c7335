// The supervisor behind `trainctl local` (private to the launcher library): the ranks it starts and
// their output streams. Its parts live in local_launch.cpp (starting, reaping and stopping the ranks,
// the poll loop), local_output.cpp (relaying the ranks' output with the '[rN] ' prefix) and
// local_signals.cpp (the signal handlers, forwarding signals to the ranks).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "train/launcher/local_launch.h"
#include "train/base/signals.h"  // signal_name: the one table of signal names

namespace train::detail {

using Clock = std::chrono::steady_clock;

/// Output a rank writes without a newline is flushed once it reaches this size.
constexpr std::size_t kMaxLineBytes = 1 << 20;
/// Bytes read from a pipe at a time.
constexpr std::size_t kReadChunk = 64 * 1024;
/// After every rank has exited, how long processes they left behind may keep their output open.
constexpr std::chrono::milliseconds kDrainTimeout{2000};
/// With --max-restarts, the seconds the other ranks get before SIGKILL when one was lost (killed by
/// a signal, or train's exit 79): they can't finish a collective or agree a checkpoint without it,
/// and a GPU rank waiting for the lost one's data may never return to handle SIGTERM (srun's
/// --kill-on-bad-exit does not wait either).
constexpr double kLostRankGraceSeconds = 1.0;
/// How often (ms) the tick of set_tick() runs while the ranks run.
constexpr int kTickMs = 500;

/// Signals forwarded to the ranks; the first four also stop them.
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
constexpr int kForwardOnlySignals[] = {SIGUSR1, SIGUSR2};

/// `trainctl local --max-restarts N` (local_restart.cpp): launches the ranks again after a lost or
/// stalled rank. @return what the last launch returned.
int launch_local_restarting(const LocalLaunchOptions& options, const std::string& program);

/// strerror(err) as a string.
std::string errno_text(int err);

/// Throws "trainctl local: WHAT failed: ERROR." with a hint about process and file limits.
[[noreturn]] void system_fail(const std::string& what, int err);

/// Writes all of `data` to `fd`; sets `broken` (and drops the rest) when the reader is gone.
void write_all(int fd, const std::string& data, bool& broken);

/// A message from trainctl itself, on stderr, in one write.
void say(const std::string& message);

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
  bool ended_on_its_own = false;  ///< it ended before trainctl began stopping the ranks (or ended first)
  Stream out, err;
};

/// How one launch of the ranks ended (for `trainctl local --max-restarts`).
struct LaunchEnd {
  int exit_code = 0;        ///< what trainctl local returns for it (the first failing rank's)
  int first_failure = -1;   ///< that rank, -1 when every rank exited 0
  bool by_request = false;  ///< trainctl got a stop signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT)
  double failed_at = 0;     ///< wall-clock seconds when the first failure was seen (0: none)
  /// Ranks that ended on their own, with their wait() status: {rank, status}.
  std::vector<std::pair<int, int>> ended;
};

class Supervisor {
 public:
  Supervisor(const LocalLaunchOptions& options, std::string program)
      : options_(options), program_(std::move(program)) {}

  ~Supervisor() { cleanup(); }

  int run();
  /// After run(): how the launch ended.
  LaunchEnd end() const;
  /// Called about twice a second while the ranks run (a relaunch's run record is read there).
  void set_tick(std::function<void()> tick) { tick_ = std::move(tick); }

 private:
  static int exit_code_of(int status);
  static std::string describe_status(const Rank& rank);

  // local_signals.cpp
  void install_signal_handlers();
  void restore_signal_handlers();
  void signal_groups(int sig, bool running_only);
  /// Signals every rank's group with `sig` (and SIGCONT); SIGKILL follows after `grace` seconds
  /// (default: --grace-period).
  void start_stopping(int sig, double grace = -1);
  std::string grace_text(double grace = -1) const;
  void on_signal_received(int sig);

  std::vector<std::vector<std::string>> build_environments() const;
  int port_or_free() const { return options_.master_port > 0 ? options_.master_port : find_free_port(); }

  /// Starts rank r; false when it could not be started (the failure is recorded).
  bool spawn(int r, const std::vector<std::string>& env_entries);
  void reap();

  // local_output.cpp
  void relay(Stream& s, const char* data, std::size_t n);
  /// trainctl's own stdout or stderr is gone (`trainctl local ... | head`): close the ranks' ends
  /// too, so that they see the broken pipe as they would without trainctl in between.
  void drop_streams_to(int target);
  void close_stream(Stream& s);
  void read_stream(Stream& s);

  static int ms_until(Clock::time_point t);
  void loop();
  void cleanup();

 public:
  /// Opens /dev/null for the ranks' stdin (called once before run()).
  void open_dev_null();

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
  double failed_at_ = 0;
  std::function<void()> tick_;
};

}  // namespace train::detail
