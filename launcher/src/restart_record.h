// The run record's side of a restart, shared by `trainctl run` (run_step.cpp, srun in a SLURM
// allocation) and `trainctl local --max-restarts` (local_restart.cpp, ranks on this machine): the
// record before the first launch, a restart's entry when it is decided and its completion once the
// relaunch trains, and the record's state when no launch follows. Private to the launcher library.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "train/launcher/restart.h"
#include "train/base/run_record.h"

namespace train::detail {

/// Wall-clock seconds since the epoch (the run record's clock).
double now_seconds();

/// The last value of `flag` among the program's arguments (`--flag V`, `--flag=V`, or with
/// underscores), as train reads it: its last copy wins. "" when absent.
std::string flag_value(const std::vector<std::string>& args, const std::string& flag);

/// The record from the run's start, before train runs: the folders its arguments name, so that
/// `trainctl status` finds them while the first launch starts (train writes the same, and more).
void start_record(const std::string& path, const std::vector<std::string>& program);

/// The run record when a launch ended (std::nullopt: none or unreadable).
std::optional<RunRecord> record_at_end(const std::string& path);

/// The record's state once no launch follows, where train left it "running" (a rank was lost and
/// no restart follows) or the launcher left it "restarting": done, cancelled, preempted or failed.
void settle_state(const std::string& path, int exit_code, bool got_term);

/// A relaunch waiting to be seen training: its run-record entry is completed once train writes the record.
struct PendingRestart {
  int index = -1;  ///< into the record's restarts (-1: no record)
  int launch = 0;  ///< the relaunch's number (TRAIN_RESTART_COUNT)
  double failed_at = 0;
  double launched_at = 0;
};

/// Records the restart `decision` of launch `launch` (0-based) in the record (state "restarting",
/// a new entry with the failed step from `at_end`), says one line through `say` (the entry, then
/// `relaunch_text`, the step train had reached and the seconds since `failed_at`) and returns what
/// complete_restart() needs.
PendingRestart begin_restart(const std::string& record, int launch, const RestartDecision& decision, int exit_code,
                             double failed_at, const std::optional<RunRecord>& at_end, int max_restarts,
                             const std::string& relaunch_text, const std::function<void(const std::string&)>& say);

/// Once the relaunch has trained its first step (train's record says so), the restart's entry gets
/// the launch's times, the step it resumed from and the seconds from the failure to then; says
/// the completed line through `say` and clears `pending`. Call it often while the relaunch runs.
void complete_restart(const std::string& record, std::optional<PendingRestart>& pending, int max_restarts,
                      const std::function<void(const std::string&)>& say);

}  // namespace train::detail
