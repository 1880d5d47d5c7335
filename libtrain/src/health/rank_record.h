// Where each rank is (private): its record (phase, step, collective number), written with a few
// relaxed atomics by the training thread and read by the roll-call's watchdog (rollcall.h) and by
// the process group's timeout message; the record's text in the store and the one-line verdict.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace c10d {
class Store;
}  // namespace c10d

namespace train::detail {

/// Where a rank is in the training loop.
enum class Phase : uint8_t {
  idle, get_batch, forward, backward, bucket_allreduce, optimizer, step_end, stop_check, evaluation, checkpoint,
  epoch_end
};
const char* phase_name(Phase p);

/// Collectives a rank may be blocked in (RollCallRecord::kind).
enum class CollectiveKind : uint8_t { none, allreduce, broadcast, barrier, reduce_scatter, all_gather };

/// One rank's position. Written by the training thread (and the autograd engine's), read by the
/// watchdog: relaxed atomics, a steady-clock read per change, no lock and no system call.
struct RollCallRecord {
  std::atomic<uint8_t> phase{0};
  std::atomic<uint8_t> kind{0};       // the collective waited on now (CollectiveKind)
  std::atomic<int32_t> bucket{-1};    // the gradient bucket of a bucket_allreduce phase
  std::atomic<int64_t> step{0};       // the optimizer step being computed (1-based)
  std::atomic<int64_t> seq{0};        // collectives started so far
  std::atomic<int64_t> waiting{0};    // the number of the collective waited on now; 0 = none
  std::atomic<int64_t> since_ns{0};   // steady clock when the phase or the wait began
  std::atomic<int64_t> progress{0};   // bumped at every change: a stalled rank's stays put
  std::atomic<int64_t> wait_ns{0};    // time spent blocked in collectives (the straggler report)
  std::atomic<int64_t> step_ns{0};    // the last step's duration (the automatic stall timeout)

  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void set_phase(Phase p) {
    phase.store(static_cast<uint8_t>(p), std::memory_order_relaxed);
    since_ns.store(now_ns(), std::memory_order_relaxed);
    progress.fetch_add(1, std::memory_order_relaxed);
  }
  /// A new step begins in get_batch; `previous_ns` is the previous step's duration (0 = none).
  void begin_step(int64_t s) {
    const int64_t now = now_ns();
    const int64_t last = step_start_ns_;
    step_start_ns_ = now;
    if (last > 0 && step.load(std::memory_order_relaxed) == s - 1) step_ns.store(now - last, std::memory_order_relaxed);
    step.store(s, std::memory_order_relaxed);
    set_phase(Phase::get_batch);
  }
  /// Numbers a collective as it starts (ranks call them in the same order, so the same number
  /// on two ranks is the same collective).
  int64_t launch() { return seq.fetch_add(1, std::memory_order_relaxed) + 1; }
  void begin_wait(int64_t number, CollectiveKind k, int32_t bkt = -1) {
    bucket.store(bkt, std::memory_order_relaxed);
    kind.store(static_cast<uint8_t>(k), std::memory_order_relaxed);
    if (bkt >= 0) phase.store(static_cast<uint8_t>(Phase::bucket_allreduce), std::memory_order_relaxed);
    wait_start_ns_ = now_ns();
    since_ns.store(wait_start_ns_, std::memory_order_relaxed);
    waiting.store(number, std::memory_order_relaxed);
    progress.fetch_add(1, std::memory_order_relaxed);
  }
  void end_wait() {
    waiting.store(0, std::memory_order_relaxed);
    wait_ns.fetch_add(now_ns() - wait_start_ns_, std::memory_order_relaxed);
    progress.fetch_add(1, std::memory_order_relaxed);
  }

 private:
  int64_t step_start_ns_ = 0;  // the training thread's own
  int64_t wait_start_ns_ = 0;
};

/// Blocks on a collective between construction and destruction (the record may be null).
class CollectiveWait {
 public:
  CollectiveWait(RollCallRecord* r, CollectiveKind k) : r_(r) {
    if (r_) r_->begin_wait(r_->launch(), k);
  }
  ~CollectiveWait() {
    if (r_) r_->end_wait();
  }
  CollectiveWait(const CollectiveWait&) = delete;
  CollectiveWait& operator=(const CollectiveWait&) = delete;

 private:
  RollCallRecord* r_;
};

inline void mark_phase(RollCallRecord* r, Phase p) {
  if (r) r->set_phase(p);
}

/// A rank's published position, as rank 0 reads it back.
struct RankPosition {
  int rank = 0;
  Phase phase = Phase::idle;
  CollectiveKind kind = CollectiveKind::none;
  int bucket = -1;
  int64_t step = 0, seq = 0, waiting = 0;
  double seconds = 0;  // in this phase or wait
};
/// Serialised for the store, and back (nullopt for a malformed value).
std::string encode(const RollCallRecord& r);
std::optional<RankPosition> decode(int rank, const std::string& text);
/// One line naming who is where, the odd ones out with how long they have been there, e.g.
/// "ranks 0,2,3 in all-reduce of bucket 0 #812 (step 406); rank 1 in get_batch at step 406 for 94 s".
/// positions[r] is nullopt for a rank with no record. With `hosts` (each rank's node), the odd
/// ones out name their nodes ("rank 1 on node2 in forward ..."), so that a restart (trainctl run)
/// can tell which node held the stalled rank.
std::string format_roll_call(const std::vector<std::optional<RankPosition>>& positions,
                             const std::vector<std::string>& hosts = {});

/// Every rank's published position, read from `store` (keys rollcall/<rank>), with this rank's
/// own record fresh from `own`: rank 0's watchdog, a timed-out collective's message. "" when the
/// store can't be read or there is one rank.
std::string read_roll_call(c10d::Store* store, int rank, int world, const RollCallRecord& own);

}  // namespace train::detail
