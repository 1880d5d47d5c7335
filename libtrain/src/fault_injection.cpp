// The faults tests inject (fault_injection.h).
#include "fault_injection.h"
#include "net_health_options.h"

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

double slow_node_factor(const std::string& node) {
  const char* fault = std::getenv("TRAIN_FAULT_SLOW_NODE");
  if (fault == nullptr || *fault == '\0') return 1;
  const std::string v = fault;
  const size_t colon = v.rfind(':');
  double factor = 0;
  try {
    size_t used = 0;
    if (colon != std::string::npos && colon > 0) factor = std::stod(v.substr(colon + 1), &used);
    if (colon == std::string::npos || used != v.size() - colon - 1) factor = 0;
  } catch (const std::exception&) {
    factor = 0;
  }
  if (!(factor >= 1)) {
    throw ConfigError("TRAIN_FAULT_SLOW_NODE='" + v + "': expected NODE:FACTOR with a FACTOR of 1 or more, e.g. node2:10.",
                      "it is a testing aid; unset it for real runs.");
  }
  return v.substr(0, colon) == node ? factor : 1;
}

void FaultInjection::after_step(int64_t step) const {
  if (signal_step_ > 0 && step == signal_step_) std::raise(signal_);
}

}  // namespace train::detail
