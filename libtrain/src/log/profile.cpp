#include "log/profile.h"

#include "train/base/error.h"
#include "train/base/log.h"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <filesystem>
#include <set>

namespace train::detail {
namespace {

namespace kp = torch::profiler::impl;

kp::ProfilerConfig profiler_config() { return kp::ProfilerConfig(kp::ProfilerState::KINETO); }

std::set<kp::ActivityType> activities(bool cuda) {
  std::set<kp::ActivityType> a{kp::ActivityType::CPU};
  if (cuda) a.insert(kp::ActivityType::CUDA);
  return a;
}

}  // namespace

StepRange parse_profile_steps(const std::string& text) {
  const auto bad = [&]() {
    return ConfigError("--profile-steps: expected FROM:TO, optimizer steps counted from 1 with FROM <= TO, found '" +
                           text + "'.",
                       "e.g. --profile-steps 20:30 traces 11 steps after the warm-up.");
  };
  const size_t colon = text.find(':');
  if (colon == std::string::npos) throw bad();
  StepRange r;
  try {
    size_t used_from = 0, used_to = 0;
    const std::string from = text.substr(0, colon), to = text.substr(colon + 1);
    r.from = std::stoll(from, &used_from);
    r.to = std::stoll(to, &used_to);
    if (used_from != from.size() || used_to != to.size()) throw bad();
  } catch (const std::logic_error&) {
    throw bad();
  }
  if (r.from < 1 || r.to < r.from) throw bad();
  return r;
}

StepProfiler::StepProfiler(const std::string& dir, StepRange range, int rank, bool cuda) : range_(range), cuda_(cuda) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    throw ConfigError("--profile " + dir + ": expected a folder the trace can be written to, could not create it (" +
                          (ec ? ec.message() : std::string("not a folder")) + ").",
                      "give a writable folder, e.g. --profile profile.");
  }
  path_ = (std::filesystem::path(dir) / ("trace-rank" + std::to_string(rank) + ".json")).string();
  // A CPU run: kineto's probe for GPUs would log an ERROR line that means nothing here (a
  // KINETO_LOG_LEVEL of the user's own wins).
  if (!cuda_) setenv("KINETO_LOG_LEVEL", "5", /*overwrite=*/0);
  torch::autograd::profiler::prepareProfiler(profiler_config(), activities(cuda_));
}

StepProfiler::~StepProfiler() {
  if (!active_) return;
  try {
    (void)torch::autograd::profiler::disableProfiler();
  } catch (...) {
  }
}

void StepProfiler::before_step(int64_t step) {
  if (done_ || active_ || step != range_.from) return;
  // The device finishes the steps before first: they don't spill into the trace.
  if (cuda_) torch::cuda::synchronize();
  torch::autograd::profiler::enableProfiler(profiler_config(), activities(cuda_));
  active_ = true;
}

void StepProfiler::after_step(int64_t step) {
  if (active_ && step >= range_.to) stop_and_save(step);
}

void StepProfiler::finish(int64_t last_step) {
  if (active_) {
    stop_and_save(last_step);
  } else if (!done_) {
    log::warn("--profile-steps " + std::to_string(range_.from) + ":" + std::to_string(range_.to) +
              ": the run ended after step " + std::to_string(last_step) + ", before the range began: no trace");
  }
}

void StepProfiler::stop_and_save(int64_t last_step) {
  if (cuda_) torch::cuda::synchronize();  // the traced steps' kernels are all in
  auto result = torch::autograd::profiler::disableProfiler();
  active_ = false;
  done_ = true;
  if (result == nullptr) {
    log::warn("--profile: the profiler returned no trace for steps " + std::to_string(range_.from) + "-" +
              std::to_string(range_.to));
    return;
  }
  result->save(path_);
  log::info("--profile: steps " + std::to_string(range_.from) + "-" + std::to_string(last_step) + " traced to " + path_ +
            " (open it in https://ui.perfetto.dev or chrome://tracing)");
}

}  // namespace train::detail
