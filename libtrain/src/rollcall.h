// The hung-rank roll-call (private): each rank's record of where it is (phase, step, collective
// number), written with a few relaxed atomics, and a watchdog thread per rank that publishes it
// to the rendezvous store, where rank 0 reads every rank's when the run stalls.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace c10d {
class Store;
}  // namespace c10d

namespace train {
class ProcessGroup;
}  // namespace train

namespace train::detail {

struct ProcessGroupImpl;

/// The exit status of every rank of a run that the roll-call found stalled (docs/reference.md).
constexpr int kExitStalled = 79;

/// Where a rank is in the training loop.
enum class Phase : uint8_t {
  idle, get_batch, forward, backward, bucket_allreduce, optimizer, step_end, stop_check, evaluation, checkpoint,
  epoch_end
};
const char* phase_name(Phase p);

/// Collectives a rank may be blocked in (RollCallRecord::kind).
enum class CollectiveKind : uint8_t { none, allreduce, broadcast, barrier };

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

/// The record of the rank behind `pg`; null without a process group (one rank).
RollCallRecord* rollcall_of(ProcessGroup* pg);
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
/// positions[r] is nullopt for a rank with no record.
std::string format_roll_call(const std::vector<std::optional<RankPosition>>& positions);

struct RollCallOptions {
  double stall_timeout_sec = 0;  // 0: automatic (docs/reference.md, --stall-timeout)
  double dist_timeout_sec = 300;
  std::string dump_dir;          // where NCCL's flight recorder is dumped ("" = the working directory)
};

/// Throws ConfigError unless --stall-timeout is 0 (automatic) or below --dist-timeout.
void check_stall_timeout(double stall_timeout_sec, double dist_timeout_sec);

/// The automatic stall timeout: 10 times the median step, at least 60 s, but at most 80% of the
/// process group's timeout (that, before any step finished), so the roll-call comes first.
double auto_stall_timeout(double median_step_sec, double dist_timeout_sec);

/// The watchdog of one rank (started for a process group of two ranks or more). Every second it
/// publishes the rank's record as rollcall/<rank>; rank 0's also checks for a stall. On a stall
/// rank 0 prints the roll-call and publishes it as the verdict; then every rank's watchdog says
/// so, dumps NCCL's flight recorder where there is one, and ends its process with kExitStalled:
/// a rank stuck in user code or in a collective can't be interrupted otherwise.
class RollCall {
 public:
  RollCall(ProcessGroup& pg, RollCallOptions options);
  ~RollCall();
  RollCall(const RollCall&) = delete;
  RollCall& operator=(const RollCall&) = delete;

 private:
  void loop();
  bool watch_for_stall(int64_t now_ns);
  void announce(const std::string& verdict);  // the roll-call line on rank 0, a short one elsewhere
  [[noreturn]] void end_process(c10d::Store& store, std::unique_lock<std::mutex>& lock);

  ProcessGroupImpl& core_;
  RollCallOptions options_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  int64_t last_progress_ = -1, last_progress_ns_ = 0, last_step_ns_ = 0;
  double stall_seconds_ = 0;
  std::vector<double> step_samples_;  // seconds, rank 0's recent steps
};

/// Every rank's published position, read from the store (rank 0's watchdog; a timed-out
/// collective's message). "" when the store can't be read.
std::string read_roll_call(ProcessGroupImpl& core);

/// NCCL: sets TORCH_FR_BUFFER_SIZE (unless it or the older TORCH_NCCL_TRACE_BUFFER_SIZE is set) before the backend is created, so that
/// torch's flight recorder keeps the last collectives (cuda/nccl_backend.cpp; no-op without CUDA).
void enable_flight_recorder();
/// NCCL: writes this rank's flight recorder to dir/nccl_trace_rank_<rank>.json and returns the
/// path; "" where there is none (Gloo, no CUDA) or it can't be written.
std::string dump_flight_recorder(const ProcessGroupImpl& core, const std::string& dir);

}  // namespace train::detail
