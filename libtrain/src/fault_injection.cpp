// The faults tests inject (fault_injection.h).
#include "fault_injection.h"

#include "train/error.h"
#include "train/signals.h"

#include <csignal>
#include <cstdlib>
#include <sstream>
#include <string>

namespace train::detail {

namespace {

// TRAIN_FAULT_NAN_AT_STEP=STEP[-LAST][:RANK]
void read_nan_fault(int rank, int64_t& first, int64_t& last) {
  const char* fault = std::getenv("TRAIN_FAULT_NAN_AT_STEP");
  if (fault == nullptr) return;
  std::stringstream ss(fault);
  std::string steps, only_rank;
  std::getline(ss, steps, ':');
  std::getline(ss, only_rank, ':');
  try {
    const size_t dash = steps.find('-');
    const int64_t a = std::stoll(steps.substr(0, dash));
    const int64_t b = dash == std::string::npos ? a : std::stoll(steps.substr(dash + 1));
    if (a < 1 || b < a) throw std::invalid_argument("bad");
    if (only_rank.empty() || std::stoi(only_rank) == rank) {
      first = a;
      last = b;
    }
  } catch (const std::exception&) {
    throw ConfigError(std::string("TRAIN_FAULT_NAN_AT_STEP='") + fault + "': expected STEP[-LAST][:RANK], e.g. 12:1.",
                      "it is a testing aid; unset it for real runs.");
  }
}

}  // namespace

FaultInjection FaultInjection::from_env(int rank) {
  FaultInjection f;
  read_nan_fault(rank, f.nan_first_, f.nan_last_);
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
