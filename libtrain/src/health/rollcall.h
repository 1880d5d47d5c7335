// The hung-rank roll-call (private): a watchdog thread per rank that publishes the rank's record
// (rank_record.h) to the rendezvous store, where rank 0 reads every rank's when the run stalls,
// and ends a stalled run on every rank.
#pragma once

#include "health/rank_record.h"

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace c10d {
class Store;
}  // namespace c10d

namespace train {
class ProcessGroup;
}  // namespace train

namespace train::detail {

struct ProcessGroupImpl;

/// The exit status of every rank of a run that the roll-call found stalled (docs/reference.md).
constexpr int kExitStalled = 79;

/// The record of the rank behind `pg`; null without a process group (one rank).
RollCallRecord* rollcall_of(ProcessGroup* pg);

struct RollCallOptions {
  double stall_timeout_sec = 0;  // 0: automatic (docs/reference.md, --stall-timeout)
  double dist_timeout_sec = 300;
  std::string dump_dir;          // where NCCL's flight recorder is dumped ("" = the working directory)
};

/// Throws ConfigError unless --stall-timeout is 0 (automatic) or below --dist-timeout.
void check_stall_timeout(double stall_timeout_sec, double dist_timeout_sec);

/// The automatic stall timeout: 10 times the median step, at least 60 s, but at most 80% of the
/// process group's timeout (that, before any step finished), so the roll-call comes first.
double auto_stall_timeout(double median_step_sec, double dist_timeout_sec);

/// The watchdog of one rank (started for a process group of two ranks or more). Every second it
/// publishes the rank's record as rollcall/<rank>; rank 0's also checks for a stall. On a stall
/// rank 0 prints the roll-call and publishes it as the verdict; then every rank's watchdog says
/// so, dumps NCCL's flight recorder where there is one, and ends its process with kExitStalled:
/// a rank stuck in user code or in a collective can't be interrupted otherwise.
class RollCall {
 public:
  RollCall(ProcessGroup& pg, RollCallOptions options);
  ~RollCall();
  RollCall(const RollCall&) = delete;
  RollCall& operator=(const RollCall&) = delete;

 private:
  void loop();
  bool watch_for_stall(int64_t now_ns);
  void announce(const std::string& verdict);  // the roll-call line on rank 0, a short one elsewhere
  [[noreturn]] void end_process(c10d::Store& store, std::unique_lock<std::mutex>& lock);

  ProcessGroupImpl& core_;
  RollCallOptions options_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  int64_t last_progress_ = -1, last_progress_ns_ = 0, last_step_ns_ = 0;
  double stall_seconds_ = 0;
  std::vector<double> step_samples_;  // seconds, rank 0's recent steps
};


}  // namespace train::detail
