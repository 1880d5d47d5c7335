// The checkpoint session of a run: when to write (--checkpoint-every, epoch ends, stops), the
// state serialized to a file's bytes once on the training thread and written in the background,
// which checkpoints are kept, and which one a run resumes from. Private.
#pragma once

#include "snapshot.h"
#include "train/checkpoint.h"
#include "train/checkpoint_budget.h"
#include "train/config.h"
#include "train/env.h"
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

class CheckpointSession {
 public:
  /// A checkpoint that became durable: its file, what it resumes at, the seconds writing took.
  using Saved = std::function<void(const std::string& path, const Progress& progress, double seconds)>;

  /// `config.dir` empty: no checkpoints (and nothing to resume automatically). `device`: where
  /// the run's tensors live (a resumed archive is loaded there). `on_saved`: rank 0, on the
  /// training thread, for each checkpoint written.
  CheckpointSession(const CheckpointConfig& config, int rank, const at::Device& device, Saved on_saved = {});
  ~CheckpointSession();
  CheckpointSession(const CheckpointSession&) = delete;
  CheckpointSession& operator=(const CheckpointSession&) = delete;

  /// The process group whose ranks resume together and share the loss sum (null: one process).
  void connect(ProcessGroup* pg) { pg_ = pg; }

  /// --checkpoint-dir was given.
  bool enabled() const { return dir_ != nullptr; }
  /// The folder ("" without one).
  std::string dir() const { return dir_ ? dir_->dir() : std::string(); }
  /// Whether optimizer step `step` is one of --checkpoint-every's.
  bool due(int64_t step) const { return dir_ && every_ && step % *every_ == 0; }

  /// Every rank: the ranks' mean of `loss_sum`, the sum a checkpoint saves. Mid-epoch each rank
  /// holds the sum of its own losses, but every rank resumes from rank 0's file: with the mean,
  /// the resumed epoch's mean loss equals the uninterrupted one.
  at::Tensor shared_loss_sum(const at::Tensor& loss_sum) const;

  /// Rank 0: a checkpoint of `state` at `progress` with `loss_sum`. Serializes on this thread (the
  /// time counts in waited_seconds()), then writes the file in the background (checksum, fsync,
  /// rename, pruning to --keep-checkpoints) while training goes on. One write at a time, in order.
  void write(TrainingState& state, const Progress& progress, const at::Tensor& loss_sum);
  /// The background write's outcome, on the training thread: its log line and on_saved, or its
  /// error (train::CheckpointError: earlier checkpoints are intact). `wait` false only looks.
  void collect(bool wait);

  /// Every rank, before DDP's broadcast: loads --resume's checkpoint into `state` (with --resume
  /// auto rank 0 picks the newest valid one and the others load the same step). Throws
  /// train::CheckpointError for a checkpoint of another model or data set. Returns its path, or
  /// "" when the run starts fresh.
  std::string resume(TrainingState& state);
  /// What resume() loaded: "snapshot", "checkpoint", or "" (nothing: a fresh start).
  const std::string& resumed_source() const { return resumed_source_; }

  /// Seconds training waited for checkpoints (rank 0: the state's copy; files are written in the background).
  double waited_seconds() const { return waited_seconds_; }

  /// In-memory snapshots (snapshot.h), before resume(): on with a folder, --resume auto, a SLURM
  /// job (or TRAIN_SNAPSHOT_DIR) and --snapshot-every not 0. The node's local rank 0 writes them.
  /// Every rank must call it with the same configuration.
  void enable_snapshots(const DistEnv& env, std::optional<int64_t> every);
  /// After resume(): the snapshots' clock starts at optimizer step `step`.
  void start_snapshots(int64_t step);
  /// Whether the ranks take a snapshot after optimizer step `step` (the same answer on every rank).
  bool snapshot_due(int64_t step) const { return snapshots_.active && snapshots_.clock.due(step); }
  /// Every rank, at a step snapshot_due() named, with the state at `progress`: one all-reduce gives
  /// the ranks' mean loss sum and
  /// rank 0's choice of the next snapshot's step; the node's writer then serializes `state` and
  /// hands the bytes to the background write (dropped, never waited for, while one still runs).
  void snapshot(TrainingState& state, const Progress& progress, const at::Tensor& loss_sum);
  /// At the run's end (done, stopped): this node's snapshots of the run are removed.
  void drop_snapshots();
  /// What the snapshots cost this rank so far (the done line's snapshot fields).
  SnapshotTotals snapshot_totals() const;

  /// Rank 0 at the start: warns for each deadline (`deadlines`) shorter than a checkpoint of
  /// `state` would take, estimated from its size and the folder's measured write speed. Each
  /// durable checkpoint checks its measured time against them again (once warned, silent).
  void check_budget(const TrainingState& state, const CheckpointDeadlines& deadlines);

 private:
  std::unique_ptr<torch::serialize::InputArchive> find_resume(std::string& path, bool& snapshot) const;
  std::unique_ptr<torch::serialize::InputArchive> newer_snapshot(int64_t checkpoint_step, std::string& path) const;
  void check_measured_budget(int64_t step, double seconds);

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
  std::string resumed_source_;
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
