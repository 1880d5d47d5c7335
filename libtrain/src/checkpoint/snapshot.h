// In-memory snapshots: every few steps one rank per node keeps the newest training state in
// node-local memory (/dev/shm), written off the training thread in the checkpoint file format
// (same trailer and SHA-256), so a restart inside the allocation resumes from seconds ago instead
// of from the last checkpoint on the shared file system. Private (train::detail).
#pragma once

#include "train/checkpoint.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <atomic>
#include <cstdint>
#include <algorithm>
#include <future>
#include <optional>
#include <memory>
#include <string>
#include <vector>

namespace train {
class ProcessGroup;
namespace detail {

/// Where this run's snapshots live on node `node`: under $TRAIN_SNAPSHOT_DIR when set, else under
/// /dev/shm/libtrain-<uid>-<job_id>, the folder <key>-<node>, key = 16 hex digits of the SHA-256 of
/// the checkpoint folder's absolute path, so another run (another job, or another --checkpoint-dir
/// in the same job) never reads them; the node's name keeps nodes apart where they share a host.
/// "" when there is no job (snapshots need a job to end with) and no TRAIN_SNAPSHOT_DIR.
std::string snapshot_dir(const std::string& job_id, const std::string& node, const std::string& checkpoint_dir);

/// The folder of one job's snapshots on this node (what to remove when the job ends), "" for none.
std::string snapshot_job_dir(const std::string& job_id);

/// One node's snapshots of one run: `ckpt-<step>.pt` files in a CheckpointDir kept to `keep`.
/// Contract: write_async is called from one thread (the training loop); at most one write runs
/// at a time, and a snapshot that comes while one is running is dropped, never waited for.
class SnapshotStore {
 public:
  /// @param dir from snapshot_dir(); created if missing. Throws train::CheckpointError if it can't be.
  explicit SnapshotStore(std::string dir, int keep = 2);
  ~SnapshotStore();  ///< waits for the write in flight
  SnapshotStore(const SnapshotStore&) = delete;
  SnapshotStore& operator=(const SnapshotStore&) = delete;

  /// Whether a write is running now (the next write_async would drop its snapshot).
  bool busy() const;
  /// Hands `bytes` (CheckpointDir::serialize's output) to a background write. Returns false, and
  /// drops them, when the previous write still runs.
  bool write_async(std::shared_ptr<const std::string> bytes, int64_t step);
  /// Waits for the write in flight. Returns "" or its error (a failed snapshot never stops training).
  std::string wait();

  /// The newest snapshot in this folder whose trailer and checksum verify, with its archive bytes
  /// (step -1 and no bytes when there is none). Damaged files are skipped with a warning.
  struct Found {
    int64_t step = -1;
    std::string path;
    std::vector<char> bytes;
  };
  Found newest_valid() const;

  /// Removes this run's snapshots, and the job's folder when nothing else is in it.
  void remove_all();

  const std::string& dir() const { return dir_.dir(); }
  int64_t written() const { return written_.load(); }        ///< snapshots written so far
  int64_t dropped() const { return dropped_.load(); }        ///< snapshots dropped (a write was running)
  double last_write_seconds() const { return last_seconds_.load(); }  ///< the last background write's duration
  double write_seconds() const { return total_seconds_.load(); }      ///< all background writes' time

 private:
  CheckpointDir dir_;
  std::future<std::string> writing_;
  std::atomic<int64_t> written_{0}, dropped_{0};
  std::atomic<double> last_seconds_{0};
  std::atomic<double> total_seconds_{0};
};

/// When snapshots are taken: every N steps, or (auto) as often as costs at most kBudget of the
/// training time, from the last snapshot's measured cost and the steps' measured time. Every rank
/// keeps one and moves it with the same numbers (rank 0's proposal travels in an all-reduce), so
/// every rank takes the same steps.
class SnapshotClock {
 public:
  /// auto, where the ranks' threads take every core and the background write counts too (it runs on
  /// a core that trains): a larger share, or snapshots would come too seldom to spare recomputing.
  static constexpr double kSharedCoresBudget = 0.007;
  static constexpr double kBudget = 0.005;  ///< auto: a snapshot's cost over the time between two
  static constexpr int64_t kFirst = 5;      ///< auto: the first snapshot this many steps after the start
  static constexpr int64_t kMaxInterval = 10000000;

  /// @param every --snapshot-every (unset: auto; must not be 0). @param start the step the run starts at.
  SnapshotClock(std::optional<int64_t> every, int64_t start)
      : every_(every), next_(start + (every ? *every : kFirst)) {}
  /// Whether a snapshot is due after optimizer step `step`.
  bool due(int64_t step) const { return step >= next_; }
  /// The interval after a snapshot: fixed, or auto from the last snapshot's cost (0: none yet) and
  /// `train_seconds` spent on `steps` steps since the snapshot before.
  int64_t propose(double last_cost_seconds, double train_seconds, int64_t steps, double budget = kBudget) const;
  /// The next snapshot comes `interval` steps after `step`.
  void advance(int64_t step, int64_t interval) { next_ = step + std::max<int64_t>(1, interval); }
  int64_t next() const { return next_; }

 private:
  std::optional<int64_t> every_;
  int64_t next_;
};

/// A snapshot chosen for every rank by share_newest_snapshot.
struct SharedSnapshot {
  int64_t step = -1;     ///< -1: no snapshot newer than the checkpoint
  int holder = -1;       ///< the rank whose node held it
  std::string path;      ///< on the holder's node
  std::vector<char> bytes;  ///< the verified archive bytes, on every rank
};

/// Every rank must call it. Each rank looks at its node's snapshots (`store` may be null: none);
/// the newest one any rank holds wins when it is newer than `newer_than` (the shared checkpoint's
/// step, -1 for none), the lowest such rank broadcasts its bytes, and every rank returns them.
/// `device` is where the group's tensors live (NCCL: the rank's GPU). Throws train::CommError.
SharedSnapshot share_newest_snapshot(ProcessGroup* group, const at::Device& device, const SnapshotStore* store,
                                     int64_t newer_than);

}  // namespace detail
}  // namespace train
