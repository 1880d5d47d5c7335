// --profile: a torch-profiler trace (CPU operators; CUDA kernels, also those a CUDA graph
// replays) of a range of training steps, one Chrome/Perfetto JSON file per rank. Kept apart
// from the loop (trainer_loop.cpp): the profiler's headers are heavy.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace train::detail {

/// Optimizer steps FROM to TO, counted from 1 over the whole run, both included.
struct StepRange {
  int64_t from = 0;
  int64_t to = 0;
};

/// Parses --profile-steps "FROM:TO" (1 <= FROM <= TO). Throws train::ConfigError naming the flag.
StepRange parse_profile_steps(const std::string& text);

class StepProfiler {
 public:
  /// Creates `dir` (throws train::ConfigError when it can't). `cuda`: also trace the GPU.
  StepProfiler(const std::string& dir, StepRange range, int rank, bool cuda);
  ~StepProfiler();  // a trace still running is dropped (the run failed)
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  /// Around each optimizer step, with its number (1-based over the run).
  void before_step(int64_t step);
  void after_step(int64_t step);
  /// The run ended after `last_step`: a trace still running (the run stopped inside the range) is
  /// written; a range the run never reached is reported.
  void finish(int64_t last_step);
  /// The file this rank writes.
  const std::string& path() const { return path_; }

 private:
  void stop_and_save(int64_t last_step);
  StepRange range_;
  bool cuda_;
  bool active_ = false;
  bool done_ = false;
  std::string path_;
};

}  // namespace train::detail
