// Faults a test injects into a run through the environment, at an exact step (private: not part
// of libtrain's API).
// - TRAIN_FAULT_SIGNAL_AT_STEP=STEP:SIG[:RANK]: the rank(s) raise SIG right after optimizer step
//   STEP, so a test can stop a run where it wants.
// - TRAIN_FAULT_SLEEP_AT_STEP=STEP:SECONDS[:RANK]: the rank(s) sleep SECONDS in get_batch of step
//   STEP (a rank stuck on a slow file system: the roll-call must name it).
// - TRAIN_FAULT_SKIP_COLLECTIVE_AT_STEP=STEP[:RANK]: the rank(s) skip the stop check's all-reduce
//   after step STEP (a collective the others call alone: the roll-call must name it).
// - TRAIN_FAULT_STEP_DELAY=SECONDS[:RANK]: the rank(s) sleep SECONDS in get_batch of every step
//   (a slow node: the straggler report must name it).
// - TRAIN_FAULT_NAN_AT_STEP=STEP[-LAST][:RANK]: the rank(s)' training loss is NaN (multiplied by
//   NaN on the device, before the backward) at steps STEP to LAST (--nonfinite's tests).
// - TRAIN_FAULT_THROW_AT_STEP=STEP[:RANK]: the rank(s) throw an error right after optimizer step
//   STEP (a bug that fails at the same step every time: `trainctl run` must not restart it).
// - TRAIN_FAULT_LAUNCH=N: the faults above apply only on launch N of the step (TRAIN_RESTART_COUNT,
//   which `trainctl run` exports; 0 is the first launch), so that a relaunch doesn't meet them again.
// - TRAIN_FAULT_SLOW_NODE=NODE:FACTOR and TRAIN_FAULT_SLOW_NODE_NET=NODE:FACTOR: --health-check's
//   GEMM, or its all-reduce among the node's own ranks, takes FACTOR times as long on node NODE
//   (slow_node_factor below).
#pragma once

#include <cstdint>
#include <string>

namespace train::detail {

/// The fault TRAIN_FAULT_SLOW_NODE=NODE:FACTOR: FACTOR on node NODE, else 1. The health check's
/// GEMM measurement there takes FACTOR times as long. With `variable` TRAIN_FAULT_SLOW_NODE_NET
/// (kSlowNodeNet), the all-reduce among that node's ranks does. Throws train::ConfigError for a
/// malformed value.
inline constexpr const char* kSlowNodeGemm = "TRAIN_FAULT_SLOW_NODE";
inline constexpr const char* kSlowNodeNet = "TRAIN_FAULT_SLOW_NODE_NET";
double slow_node_factor(const std::string& node, const char* variable = kSlowNodeGemm);

class FaultInjection {
 public:
  /// Reads the environment for this rank. Throws train::ConfigError for a malformed value.
  static FaultInjection from_env(int rank);
  /// Called in get_batch's place, before every step (1-based).
  void before_step(int64_t step) const;
  /// Called after every optimizer step.
  void after_step(int64_t step) const;
  /// Whether this rank skips the stop check's collective after `step`.
  bool skips_collective(int64_t step) const { return skip_step_ > 0 && step == skip_step_; }
  /// Whether this rank's loss is to be NaN at optimizer step `step` (counted from 1).
  bool nan_at(int64_t step) const { return nan_first_ > 0 && step >= nan_first_ && step <= nan_last_; }
  bool injects_nan() const { return nan_first_ > 0; }

 private:
  int64_t signal_step_ = -1;
  int signal_ = 0;
  int64_t sleep_step_ = -1;
  double sleep_seconds_ = 0;
  int64_t skip_step_ = -1;
  double step_delay_ = 0;
  int64_t nan_first_ = -1, nan_last_ = -1;
  int64_t throw_step_ = -1;
};

}  // namespace train::detail
