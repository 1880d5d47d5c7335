// Early stopping (early_stop.h): the decision on rank 0, shared with every rank.
#include "trainer/early_stop.h"

#include "train/base/log.h"
#include "train/process_group.h"
#include "train/base/text.h"

#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

namespace train::detail {

EarlyStop::EarlyStop(EarlyStopping setting) : setting_(std::move(setting)), minimize_(setting_.metric == "test_loss") {}

double EarlyStop::value_of(const EvalResult& eval) const {
  if (setting_.metric == "test_loss") return eval.loss;
  const auto it = eval.metrics.find(setting_.metric.substr(5));  // after "test_"
  return it == eval.metrics.end() ? 0.0 : it->second;
}

std::string EarlyStop::best_text() const {
  if (!have_best_) return "";
  return text::format("%.6g", best_) + " at epoch " + std::to_string(best_epoch_);
}

bool EarlyStop::after_epoch(int epoch, const EvalResult& eval, ProcessGroup* pg, int rank, const at::Device& device) {
  if (!enabled()) return false;
  // Every rank keeps the same record (the evaluation is all-reduced); rank 0's decision counts.
  const double v = value_of(eval);
  const bool better = !have_best_ || (minimize_ ? v < best_ - setting_.min_delta : v > best_ + setting_.min_delta);
  if (better) {
    have_best_ = true;
    best_ = v;
    best_epoch_ = epoch;
    bad_epochs_ = 0;
  } else {
    ++bad_epochs_;
  }
  bool stop = rank == 0 && bad_epochs_ >= setting_.patience;
  if (pg != nullptr) {
    at::Tensor flag = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(device));
    if (stop) flag.fill_(1);
    pg->allreduce_sum(flag);
    stop = flag.cpu().item<float>() > 0;
  }
  if (!stop) return false;
  stopped_ = true;
  log::info("early stopping: " + setting_.metric + " has not improved by more than " +
            text::format("%g", setting_.min_delta) + " for " + std::to_string(bad_epochs_) + " epoch" +
            (bad_epochs_ == 1 ? "" : "s") + " (best " + best_text() + ", now " + text::format("%.6g", v) +
            "); the run stops after epoch " + std::to_string(epoch));
  return true;
}

void EarlyStop::save(torch::serialize::OutputArchive& a) const {
  if (!enabled()) return;
  a.write("early_stop", at::tensor({have_best_ ? 1.0 : 0.0, best_, static_cast<double>(best_epoch_),
                                    static_cast<double>(bad_epochs_), stopped_ ? 1.0 : 0.0},
                                   at::TensorOptions().dtype(at::kDouble)));
}

void EarlyStop::load(torch::serialize::InputArchive* a) {
  at::Tensor t;
  if (!enabled() || a == nullptr || !a->try_read("early_stop", t)) return;
  t = t.cpu();
  have_best_ = t[0].item<double>() > 0;
  best_ = t[1].item<double>();
  best_epoch_ = static_cast<int>(t[2].item<double>());
  bad_epochs_ = static_cast<int>(t[3].item<double>());
  stopped_ = t[4].item<double>() > 0;
}

}  // namespace train::detail
