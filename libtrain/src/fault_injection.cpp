// The faults tests inject (fault_injection.h).
#include "fault_injection.h"

#include "train/error.h"
#include "train/signals.h"

#include <csignal>
#include <cstdlib>
#include <sstream>
#include <string>

namespace train::detail {

FaultInjection FaultInjection::from_env(int rank) {
  FaultInjection f;
  const char* fault = std::getenv("TRAIN_FAULT_SIGNAL_AT_STEP");
  if (fault == nullptr) return f;
  // STEP:SIG[:RANK]
  std::stringstream ss(fault);
  std::string step, sig, only_rank;
  std::getline(ss, step, ':');
  std::getline(ss, sig, ':');
  std::getline(ss, only_rank, ':');
  try {
    const int64_t s = std::stoll(step);
    const int n = signal_number(sig);
    if (n == 0 || s < 1) throw std::invalid_argument("bad");
    if (only_rank.empty() || std::stoi(only_rank) == rank) {
      f.signal_step_ = s;
      f.signal_ = n;
    }
  } catch (const std::exception&) {
    throw ConfigError(std::string("TRAIN_FAULT_SIGNAL_AT_STEP='") + fault + "': expected STEP:SIGNAL[:RANK], e.g. 12:USR2.",
                      "it is a testing aid; unset it for real runs.");
  }
  return f;
}

void FaultInjection::after_step(int64_t step) const {
  if (signal_step_ > 0 && step == signal_step_) std::raise(signal_);
}

}  // namespace train::detail
