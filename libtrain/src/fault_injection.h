// Faults a test injects into a run through the environment, at an exact step (private: not part
// of libtrain's API). TRAIN_FAULT_SIGNAL_AT_STEP=STEP:SIG[:RANK] makes the rank(s) raise SIG
// right after optimizer step STEP, so a test can stop a run where it wants.
// TRAIN_FAULT_NAN_AT_STEP=STEP[-LAST][:RANK] makes the rank(s)' training loss NaN (multiplied by
// NaN on the device, before the backward) at steps STEP to LAST (issue 24).
#pragma once

#include <cstdint>

namespace train::detail {

class FaultInjection {
 public:
  /// Reads the environment for this rank. Throws train::ConfigError for a malformed value.
  static FaultInjection from_env(int rank);
  /// Called after every optimizer step.
  void after_step(int64_t step) const;
  /// Whether this rank's loss is to be NaN at optimizer step `step` (counted from 1).
  bool nan_at(int64_t step) const { return nan_first_ > 0 && step >= nan_first_ && step <= nan_last_; }
  bool injects_nan() const { return nan_first_ > 0; }

 private:
  int64_t signal_step_ = -1;
  int signal_ = 0;
  int64_t nan_first_ = -1, nan_last_ = -1;
};

}  // namespace train::detail
