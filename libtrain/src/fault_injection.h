// Faults a test injects into a run through the environment, at an exact step (private: not part
// of libtrain's API). TRAIN_FAULT_SIGNAL_AT_STEP=STEP:SIG[:RANK] makes the rank(s) raise SIG
// right after optimizer step STEP, so a test can stop a run where it wants.
#pragma once

#include <cstdint>

namespace train::detail {

class FaultInjection {
 public:
  /// Reads the environment for this rank. Throws train::ConfigError for a malformed value.
  static FaultInjection from_env(int rank);
  /// Called after every optimizer step.
  void after_step(int64_t step) const;

 private:
  int64_t signal_step_ = -1;
  int signal_ = 0;
};

}  // namespace train::detail
