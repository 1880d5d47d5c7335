// The list of step observers (step_observers.h).
#include "step/step_observers.h"

namespace train::detail {

void StepObservers::add(std::unique_ptr<StepObserver> observer) {
  list_.push_back(observer.get());
  owned_.push_back(std::move(observer));
}

void StepObservers::clear() {
  list_.clear();
  owned_.clear();
}

void StepObservers::before_step(int64_t step) {
  for (StepObserver* o : list_) o->before_step(step);
}

void StepObservers::after_step(int64_t step, at::Tensor& loss) {
  for (auto it = list_.rbegin(); it != list_.rend(); ++it) (*it)->after_step(step, loss);
}

void StepObservers::step_done(const StepDone& done) {
  for (StepObserver* o : list_) o->step_done(done);
}

void StepObservers::steps_end() {
  for (StepObserver* o : list_) o->steps_end();
}

}  // namespace train::detail
