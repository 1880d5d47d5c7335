// The faults tests inject (fault_injection.h).
#include "health/fault_injection.h"

#include "train/base/error.h"
#include "train/base/signals.h"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace train::detail {

namespace {

struct OtherRanks {};  // the fault is another rank's

// NAME=A:B[:RANK] split at ':'; `apply` gets the fields before the rank when the fault is this
// rank's. Anything malformed is a ConfigError naming the variable and its form.
void read_fault(const char* name, const char* form, size_t fields, int rank,
                const std::function<void(const std::vector<std::string>&)>& apply) {
  const char* value = std::getenv(name);
  if (value == nullptr) return;
  std::vector<std::string> parts;
  std::stringstream ss(value);
  for (std::string part; std::getline(ss, part, ':');) parts.push_back(part);
  try {
    if (parts.size() != fields && parts.size() != fields + 1) throw std::invalid_argument("fields");
    const bool ours = parts.size() == fields || std::stoi(parts.back()) == rank;
    parts.resize(fields);
    apply(parts);  // validates even when the fault is another rank's
    if (!ours) throw OtherRanks{};
  } catch (const OtherRanks&) {
    apply({});  // another rank's fault: undo
  } catch (const std::exception&) {
    throw ConfigError(std::string(name) + "='" + value + "': expected " + form + ".",
                      "it is a testing aid; unset it for real runs.");
  }
}

int64_t positive_step(const std::string& s) {
  const int64_t v = std::stoll(s);
  if (v < 1) throw std::invalid_argument("step");
  return v;
}

double seconds_of(const std::string& s) {
  const double v = std::stod(s);
  if (!(v >= 0)) throw std::invalid_argument("seconds");
  return v;
}

void sleep_for(double seconds) {
  if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

// TRAIN_FAULT_LAUNCH=N: whether this launch of the step is launch N (TRAIN_RESTART_COUNT, which
// `trainctl run` exports: 0 on the first launch, k on the k-th restart). True when it is unset.
bool faults_on_this_launch() {
  const char* only = std::getenv("TRAIN_FAULT_LAUNCH");
  if (only == nullptr || *only == '\0') return true;
  const char* count = std::getenv("TRAIN_RESTART_COUNT");
  try {
    size_t used = 0;
    const int n = std::stoi(only, &used);
    if (n < 0 || used != std::string(only).size()) throw std::invalid_argument("launch");
    return n == (count == nullptr || *count == '\0' ? 0 : std::stoi(count));
  } catch (const std::exception&) {
    throw ConfigError(std::string("TRAIN_FAULT_LAUNCH='") + only + "': expected a launch number (0 for the first), " +
                          "and TRAIN_RESTART_COUNT a number when set.",
                      "it is a testing aid; unset it for real runs.");
  }
}

}  // namespace

FaultInjection FaultInjection::from_env(int rank) {
  FaultInjection f;
  if (!faults_on_this_launch()) return f;
  read_fault("TRAIN_FAULT_SIGNAL_AT_STEP", "STEP:SIGNAL[:RANK], e.g. 12:USR2", 2, rank, [&](const auto& p) {
    f.signal_step_ = p.empty() ? -1 : positive_step(p[0]);
    f.signal_ = p.empty() ? 0 : signal_number(p[1]);
    if (!p.empty() && f.signal_ == 0) throw std::invalid_argument("signal");
  });
  read_fault("TRAIN_FAULT_SLEEP_AT_STEP", "STEP:SECONDS[:RANK], e.g. 5:60:1", 2, rank, [&](const auto& p) {
    f.sleep_step_ = p.empty() ? -1 : positive_step(p[0]);
    f.sleep_seconds_ = p.empty() ? 0 : seconds_of(p[1]);
  });
  read_fault("TRAIN_FAULT_SKIP_COLLECTIVE_AT_STEP", "STEP[:RANK], e.g. 5:1", 1, rank,
             [&](const auto& p) { f.skip_step_ = p.empty() ? -1 : positive_step(p[0]); });
  read_fault("TRAIN_FAULT_STEP_DELAY", "SECONDS[:RANK], e.g. 0.2:1", 1, rank,
             [&](const auto& p) { f.step_delay_ = p.empty() ? 0 : seconds_of(p[0]); });
  read_fault("TRAIN_FAULT_THROW_AT_STEP", "STEP[:RANK], e.g. 12:1", 1, rank,
             [&](const auto& p) { f.throw_step_ = p.empty() ? -1 : positive_step(p[0]); });
  read_fault("TRAIN_FAULT_NAN_AT_STEP", "STEP[-LAST][:RANK], e.g. 12:1", 1, rank, [&](const auto& p) {
    f.nan_first_ = f.nan_last_ = -1;
    if (p.empty()) return;
    const size_t dash = p[0].find('-');
    f.nan_first_ = positive_step(p[0].substr(0, dash));
    f.nan_last_ = dash == std::string::npos ? f.nan_first_ : positive_step(p[0].substr(dash + 1));
    if (f.nan_last_ < f.nan_first_) throw std::invalid_argument("range");
  });
  return f;
}

double slow_node_factor(const std::string& node, const char* variable) {
  const char* fault = std::getenv(variable);
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
    throw ConfigError(std::string(variable) + "='" + v + "': expected NODE:FACTOR with a FACTOR of 1 or more, e.g. node2:10.",
                      "it is a testing aid; unset it for real runs.");
  }
  return v.substr(0, colon) == node ? factor : 1;
}

void FaultInjection::before_step(int64_t step) const {
  sleep_for(step_delay_);
  if (sleep_step_ > 0 && step == sleep_step_) sleep_for(sleep_seconds_);
}

void FaultInjection::after_step(int64_t step) const {
  if (signal_step_ > 0 && step == signal_step_) std::raise(signal_);
  if (throw_step_ > 0 && step == throw_step_) {
    throw Error("TRAIN_FAULT_THROW_AT_STEP: an injected error after step " + std::to_string(step) +
                " (a testing aid standing for a bug that fails at the same step every time).",
                "unset TRAIN_FAULT_THROW_AT_STEP for real runs.");
  }
}

}  // namespace train::detail
