// The side work around every optimizer step (the profiler, the roll-call's phases, a test's faults,
// the non-finite watch, the weights' moving average, the schedule's next rate, the progress lines
// and run record, the user's callbacks, a checkpoint's collection) behind one small interface, so
// that the loop reads as: observers before, the step, observers after. Private.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace train::detail {

/// Where a finished step stands in its epoch, once the run's counters moved past it.
struct StepDone {
  int epoch = 0;
  int64_t step = 0;       ///< optimizer steps so far (this one included)
  int64_t batch = 0;      ///< the step's index in the epoch (from 0)
  int64_t batches = 0;    ///< the epoch's steps on this rank
  int64_t start = 0;      ///< the step's first sample in this rank's share of the epoch
  int64_t samples = 0;    ///< the step's samples on this rank
  int64_t world_size = 1;
  bool last = false;      ///< the epoch's (or the run's) last step
  at::Tensor loss;        ///< the step's mean loss, on the device
  double lr = 0;          ///< the rate the step ran with
};

/// Side work around each optimizer step. Every method is optional.
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  /// Optimizer step `step` (counted from 1) is about to run.
  virtual void before_step(int64_t step) { (void)step; }
  /// Step `step` ran; `loss` is its loss on the device (an observer may replace it: a test's NaN).
  virtual void after_step(int64_t step, at::Tensor& loss) {
    (void)step;
    (void)loss;
  }
  /// The run's counters moved past the step: its place in the epoch.
  virtual void step_done(const StepDone& done) { (void)done; }
  /// The run's last step is behind it (done or stopped).
  virtual void steps_end() {}
};

/// A StepObserver made of functions (any may be empty).
struct StepHooks : StepObserver {
  std::function<void(int64_t)> before;
  std::function<void(int64_t, at::Tensor&)> after;
  std::function<void(const StepDone&)> done;
  std::function<void()> end;

  void before_step(int64_t step) override {
    if (before) before(step);
  }
  void after_step(int64_t step, at::Tensor& loss) override {
    if (after) after(step, loss);
  }
  void step_done(const StepDone& d) override {
    if (done) done(d);
  }
  void steps_end() override {
    if (end) end();
  }
};

/// The run's observers. before_step and step_done call them in the order they were added,
/// after_step in reverse, as scopes close: the first to see a step begin is the last to see it
/// end (the profiler's step spans all the others' work).
class StepObservers {
 public:
  /// Adds an observer that the list owns.
  void add(std::unique_ptr<StepObserver> observer);
  /// Adds an observer that outlives the list.
  void add(StepObserver* observer) { list_.push_back(observer); }
  /// Removes every observer (before the parts they point to go).
  void clear();

  void before_step(int64_t step);
  void after_step(int64_t step, at::Tensor& loss);
  void step_done(const StepDone& done);
  void steps_end();

 private:
  std::vector<std::unique_ptr<StepObserver>> owned_;
  std::vector<StepObserver*> list_;
};

}  // namespace train::detail
