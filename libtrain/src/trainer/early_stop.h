// Early stopping (TrainSpec::early_stopping, --early-stop-*): after each epoch's evaluation rank 0
// decides whether the metric has stopped improving, and every rank learns its decision, so all
// stop at the same epoch's end. Its state goes into checkpoints. Private.
#pragma once

#include "train/config.h"
#include "train/train_spec.h"

#include <c10/core/Device.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

namespace train {
class ProcessGroup;
}  // namespace train

namespace train::detail {

class EarlyStop {
 public:
  /// `setting.metric` empty: off (after_epoch never stops, nothing is shared).
  explicit EarlyStop(EarlyStopping setting = {});
  bool enabled() const { return !setting_.metric.empty(); }
  /// Every rank, at epoch `epoch`'s end with its evaluation: rank 0 decides and its decision
  /// reaches every rank over `pg` (null: one process) in one small all-reduce on `device`.
  /// Returns whether the run stops after this epoch; rank 0 logs why.
  bool after_epoch(int epoch, const EvalResult& eval, ProcessGroup* pg, int rank, const at::Device& device);
  /// Whether the run stopped early (also after a resume from the checkpoint of that epoch).
  bool stopped() const { return stopped_; }
  /// The best value and its epoch so far ("" before the first).
  std::string best_text() const;

  void save(torch::serialize::OutputArchive& archive) const;
  /// `archive` null (a checkpoint without it): the state stays fresh.
  void load(torch::serialize::InputArchive* archive);

 private:
  double value_of(const EvalResult& eval) const;

  EarlyStopping setting_;
  bool minimize_ = true;
  bool have_best_ = false;
  double best_ = 0;
  int best_epoch_ = 0;
  int bad_epochs_ = 0;  // epochs in a row without an improvement
  bool stopped_ = false;
};

}  // namespace train::detail
