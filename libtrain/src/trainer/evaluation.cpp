// The accuracy metric (train/trainer.h) and an evaluation's accuracy.
#include "train/trainer.h"

namespace train {

Metric accuracy() {
  return {"accuracy", [](const at::Tensor& out, const at::Tensor& target) { return out.argmax(1).eq(target).sum(); }};
}

double EvalResult::accuracy() const {
  const auto it = metrics.find("accuracy");
  return it == metrics.end() ? 0.0 : it->second;
}

}  // namespace train
