// The checkpoint session of a run: when to write (--checkpoint-every, epoch ends, stops), the
// state serialized to a file's bytes once on the training thread and written in the background,
// which checkpoints are kept, and which one a run resumes from. Private.
#pragma once

#include "checkpoint/snapshot.h"
#include "train/checkpoint.h"
#include "train/base/checkpoint_budget.h"
#include "train/config.h"
#include "train/base/env.h"
#include "train/training_state.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>

namespace train {
class ProcessGroup;
struct TrainSpec;
}  // namespace train

namespace train::detail {

/// What shapes a run, stored in checkpoints and compared on resume: the spec's names, the
/// Trainer's own settings (`base_lr`: the optimizer's rate as built), and the program's recipe
/// (TrainSpec::recipe) as it described it; --accumulate-steps and --clip-grad-norm only where
/// set (so a run without them keeps its shape). JSON.
std::string run_shape_json(const TrainSpec& spec, int64_t batch, double base_lr, uint64_t seed, int epochs,
                           int64_t accumulate = 1, std::optional<double> clip_grad_norm = std::nullopt);

/// One checkpoint as the bytes of its file: serialized once, on the training thread; what they
/// hold is fixed from then on. Every destination takes the same bytes.
struct CheckpointBytes {
  std::shared_ptr<const std::string> data;
  Progress progress;  ///< where a run resumed from it starts
};

/// `state` as it would be with `progress` and `loss_sum` (the state itself is left as it was),
/// in a checkpoint file's bytes. Copies the tensors to the host: the training thread waits for it.
CheckpointBytes serialize_checkpoint(TrainingState& state, const Progress& progress, const at::Tensor& loss_sum,
                                     const at::Device& device);

/// Snapshots taken by this rank and their seconds: on the training thread (every rank: the agreement,
/// and on the node's writer the state's serialization) and in the background write (the writer).
struct SnapshotTotals {
  int64_t taken = 0;
  double seconds = 0;
  double write_seconds = 0;
};

/// Which saves are due after a step: a checkpoint file (--checkpoint-every), a snapshot in memory.
struct SavesDue {
  bool checkpoint = false;
  bool snapshot = false;
};

/// What resume() loaded: its path ("" for a fresh start) and "snapshot", "checkpoint" or "".
struct Resumed {
  std::string path;
  std::string source;
};

/// What checkpoints and snapshots cost this run (the done line's fields).
struct SaveTotals {
  double waited_seconds = 0;  ///< training waited for checkpoints (rank 0: the state's copy)
  SnapshotTotals snapshots;
};

class CheckpointSession {
 public:
  /// A checkpoint that became durable: its file, what it resumes at, the seconds writing took.
  using Saved = std::function<void(const std::string& path, const Progress& progress, double seconds)>;

  /// `config.dir` empty: no checkpoints (and nothing to resume automatically). `device`: where
  /// the run's tensors live (a resumed archive is loaded there). `pg`: the process group whose
  /// ranks resume together and share the loss sum (null: one process). `snapshots`: take
  /// in-memory snapshots where the configuration allows (on with a folder, --resume auto, a SLURM
  /// job or TRAIN_SNAPSHOT_DIR, --snapshot-every not 0; the node's local rank 0 writes them); every
  /// rank must pass the same. `on_saved`: rank 0, on the training thread, for each checkpoint written.
  CheckpointSession(const CheckpointConfig& config, const DistEnv& env, const at::Device& device, ProcessGroup* pg,
                    bool snapshots, Saved on_saved = {});
  ~CheckpointSession();
  CheckpointSession(const CheckpointSession&) = delete;
  CheckpointSession& operator=(const CheckpointSession&) = delete;

  /// The folder, "" without --checkpoint-dir (then nothing is written).
  std::string dir() const { return dir_ ? dir_->dir() : std::string(); }
  /// What optimizer step `step` saves: a checkpoint where it is one of --checkpoint-every's, a
  /// snapshot where the snapshots' clock says so (the same answer on every rank).
  SavesDue due(int64_t step) const;

  /// Every rank: the ranks' mean of `loss_sum`, the sum a checkpoint saves. Mid-epoch each rank
  /// holds the sum of its own losses, but every rank resumes from rank 0's file: with the mean,
  /// the resumed epoch's mean loss equals the uninterrupted one.
  at::Tensor shared_loss_sum(const at::Tensor& loss_sum) const;
  /// Rank 0: a checkpoint of `state` at `progress` with `loss_sum`. Serializes on this thread (the
  /// time counts in the waited seconds), then writes the file in the background (checksum, fsync,
  /// rename, pruning to --keep-checkpoints) while training goes on. One write at a time, in order.
  void write(TrainingState& state, const Progress& progress, const at::Tensor& loss_sum);
  /// Every rank, at a step due() named for a snapshot, with the state at `progress`: one
  /// all-reduce gives the ranks' mean loss sum and rank 0's choice of the next snapshot's step;
  /// the node's writer then serializes `state` and hands the bytes to the background write
  /// (dropped, never waited for, while one still runs).
  void snapshot(TrainingState& state, const Progress& progress, const at::Tensor& loss_sum);
  /// The background write's outcome, on the training thread: its log line and on_saved, or its
  /// error (train::CheckpointError: earlier checkpoints are intact). `wait` false only looks.
  void collect(bool wait);

  /// Every rank, before DDP's broadcast: loads --resume's checkpoint (or a newer snapshot) into
  /// `state` (with --resume auto rank 0 picks the newest valid one and the others load the same
  /// step), and starts the snapshots' clock at its step. With `deadlines` (rank 0, a training
  /// run), warns for each deadline shorter than a checkpoint of `state` would take, estimated from
  /// its size and the folder's measured write speed; each durable checkpoint checks its measured
  /// time against them again (once warned, silent).
  /// @throws train::CheckpointError for a checkpoint of another model or data set.
  Resumed resume(TrainingState& state, const std::optional<CheckpointDeadlines>& deadlines);
  /// At the run's end (done, stopped): waits for the last write, removes this node's snapshots of
  /// the run (nothing resumes from them), and says what saving cost.
  SaveTotals finish();

 private:
  std::unique_ptr<torch::serialize::InputArchive> find_resume(std::string& path, bool& snapshot) const;
  std::unique_ptr<torch::serialize::InputArchive> newer_snapshot(int64_t checkpoint_step, std::string& path) const;
  void check_measured_budget(int64_t step, double seconds);
  void check_budget(const TrainingState& state, const CheckpointDeadlines& deadlines);
  void enable_snapshots(const DistEnv& env, std::optional<int64_t> every);
  void start_snapshots(int64_t step);
  void drop_snapshots();

  // Snapshots in this node's memory: whether the run takes them (the same on every rank, so the
  // collectives match), this node's store (null where its folder could not be made), whether this
  // rank writes them, when.
  struct Snapshots {
    bool active = false;
    std::unique_ptr<SnapshotStore> store;
    bool writer = false;
    std::optional<int64_t> every;          // --snapshot-every (unset: auto)
    SnapshotClock clock{std::nullopt, 0};
    double last_cost = 0;                  // rank 0: the last snapshot's seconds on the training thread
    bool shares_cores = false;             // CPU ranks x threads >= cores: the background write slows training
    SnapshotTotals totals;
    std::chrono::steady_clock::time_point last_end{};
    int64_t last_step = 0;
  };
  // The checkpoint time budget: the deadlines a checkpoint must fit, and whether a measured one warned.
  struct Budget {
    CheckpointDeadlines deadlines;
    bool warned = false;
  };
  void apply(torch::serialize::InputArchive& archive, const std::string& path, TrainingState& state) const;

  std::unique_ptr<CheckpointDir> dir_;
  std::optional<int64_t> every_;
  ResumeMode resume_;
  std::string resume_path_;
  int rank_;
  at::Device device_;
  ProcessGroup* pg_ = nullptr;
  Saved on_saved_;
  std::future<std::pair<std::string, double>> writing_;  // path, seconds writing
  Progress writing_progress_;
  double waited_seconds_ = 0;
  Snapshots snapshots_;
  Budget budget_;
};

}  // namespace train::detail
