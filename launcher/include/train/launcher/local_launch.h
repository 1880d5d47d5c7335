// `trainctl local`: starts N ranks of a program on this machine with torchrun-style variables
// (like `torchrun --standalone`), forwards signals to them, prefixes their output with the rank,
// and stops them all as soon as one fails.
#pragma once

#include <string>
#include <vector>

#include "train/base/env.h"

namespace train {

/// Most ranks `trainctl local` starts on one machine.
constexpr int kMaxLocalRanks = 1024;
/// Most restarts `trainctl local --max-restarts` allows (as trainctl run).
constexpr int kMaxLocalRestarts = 1000;
/// Exit status when the program can't be found or executed (as in POSIX shells).
constexpr int kExitProgramNotFound = 127;

/// What launch_local() starts and how.
struct LocalLaunchOptions {
  int nproc = 1;                          ///< ranks to start, 1..kMaxLocalRanks
  std::string master_addr = "127.0.0.1";  ///< MASTER_ADDR given to the ranks
  int master_port = 0;                    ///< MASTER_PORT; 0 picks a free port with find_free_port()
  bool prefix_output = true;              ///< prefix every line of rank r's stdout/stderr with "[rN] "
  double grace_seconds = 10.0;            ///< SIGTERM -> SIGKILL delay when stopping ranks
  /// Launches of all ranks again after a lost rank (one killed by a signal other than SIGTERM/SIGINT)
  /// or train's exit 79 (a dead or stalled rank), as `trainctl run` decides (decide_restart in
  /// restart.h); 0: none (the default, as torchrun's --max-restarts).
  int max_restarts = 0;
  std::vector<std::string> command;       ///< program and its arguments
};

/// Starts `options.nproc` copies of the command, rank r with RANK=r, WORLD_SIZE=nproc,
/// LOCAL_RANK=r, LOCAL_WORLD_SIZE=nproc, GROUP_RANK=0, GROUP_WORLD_SIZE=1, MASTER_ADDR and
/// MASTER_PORT on top of this process's environment (and OMP_NUM_THREADS = cores / nproc when it is
/// unset), then waits for them. Each rank runs in its own process group with stdin from /dev/null.
///
/// - SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 received are forwarded to every rank's
///   process group; the first four also start stopping: ranks still running after the grace period
///   get SIGKILL (a second SIGINT kills at once). SIGTSTP stops the ranks along with trainctl.
/// - When a rank exits non-zero or by a signal, the others get SIGTERM, then SIGKILL after the grace
///   period, and the failure is reported on stderr naming the rank.
/// - Output lines stay whole: stdout goes to stdout, stderr to stderr, each line written at once.
/// - When it returns, no process of the ranks' process groups is left running.
///
/// With `max_restarts` > 0, a launch that ended with a lost or stalled rank is started again (all
/// ranks, a new MASTER_PORT unless one is given, TRAIN_RESTART_COUNT=1, 2, ...), at most that
/// often; a failure that is not a lost rank (exit 1, 2, 65, 75, a stop signal to trainctl), the
/// same failure at the same step twice in a row, or the last restart used ends it. One line per
/// restart on stderr. The ranks get TRAIN_RUN_RECORD and TRAIN_SNAPSHOT_DIR (a run record in a
/// temporary folder and a folder in /dev/shm, both removed at the end) unless they are set.
///
/// Installs signal handlers for its duration: one call at a time per process.
/// @return 0 when every rank exited 0; else the exit code of the first rank that failed, or
///   128 + signal number when that rank was killed by a signal.
/// @throws train::ConfigError for invalid options or a program that can't be found, before
///   anything starts; train::Error when processes or pipes can't be created.
int launch_local(const LocalLaunchOptions& options);

/// The path execvp() would run for `program`: itself when it contains '/', else the first
/// executable file named so in the PATH of `env` (the system default path when PATH is unset).
/// @throws train::ConfigError when there is no such executable file.
std::string find_program(const std::string& program, const EnvMap& env);

/// A TCP port that is free on 127.0.0.1 right now (bound to port 0, then released; another
/// process can take it before it is used, as with torchrun).
/// @throws train::Error when no socket can be bound.
int find_free_port();

}  // namespace train
