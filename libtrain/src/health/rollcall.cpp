// The hung-rank roll-call (rollcall.h): the watchdog that publishes, detects a stall (rank 0) and
// ends a stalled run on every rank.
#include "health/rollcall.h"

#include "dist/process_group_impl.h"
#include "train/base/error.h"
#include "train/base/log.h"
#include "train/base/text.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

namespace train::detail {

void check_stall_timeout(double stall_timeout_sec, double dist_timeout_sec) {
  if (stall_timeout_sec < 0 || (stall_timeout_sec > 0 && stall_timeout_sec >= dist_timeout_sec)) {
    throw ConfigError("--stall-timeout " + text::format("%g", stall_timeout_sec) + ": expected 0 (automatic) or fewer "
                          "seconds than --dist-timeout (" + text::format("%g", dist_timeout_sec) + "), found " +
                          (stall_timeout_sec < 0 ? "a negative value." : "one that is not below it."),
                      "the roll-call must come before the process group's own timeout: lower --stall-timeout or "
                      "raise --dist-timeout.");
  }
}

double auto_stall_timeout(double median_step_sec, double dist_timeout_sec) {
  const double cap = 0.8 * dist_timeout_sec;
  if (!(median_step_sec > 0)) return cap;
  return std::min(cap, std::max(60.0, 10.0 * median_step_sec));
}

namespace {
std::atomic<bool> verdict_seen{false};
// Should the training thread end the process first (a collective failing as peers exit), its
// status is still the stall's.
void exit_as_stalled() {
  if (verdict_seen.load()) std::_Exit(kExitStalled);
}
}  // namespace

RollCallRecord* rollcall_of(ProcessGroup* pg) { return pg ? &details::core_of(*pg).rollcall : nullptr; }

RollCall::RollCall(ProcessGroup& pg, RollCallOptions options) : core_(details::core_of(pg)), options_(std::move(options)) {
  if (core_.env.world_size <= 1 || !core_.store) return;
  static std::once_flag registered;
  std::call_once(registered, [] { std::atexit(exit_as_stalled); });
  last_progress_ns_ = RollCallRecord::now_ns();
  thread_ = std::thread([this] { loop(); });
}

RollCall::~RollCall() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void RollCall::loop() {
  c10::intrusive_ptr<c10d::Store> own;
  try {
    own = core_.store->clone();  // its own connection: the group's may be busy or stuck
    own->setTimeout(std::chrono::seconds(5));
  } catch (const std::exception& e) {
    log::warn(std::string("roll-call: no connection to the rendezvous store, no roll-call on a stall: ") + e.what());
    return;
  }
  const std::string key = "rollcall/" + std::to_string(core_.env.rank);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    try {
      const std::string rec = encode(core_.rollcall);
      own->set(key, std::vector<uint8_t>(rec.begin(), rec.end()));
      if (own->check({"rollcall/verdict"})) {  // rank 0 found the run stalled
        announce("");
        own->add("rollcall/ack", 1);
        end_process(*own, lock);
      }
      if (core_.env.rank == 0 && watch_for_stall(RollCallRecord::now_ns())) {
        const std::string verdict = read_roll_call(core_.store.get(), core_.env.rank, core_.env.world_size, core_.rollcall);
        announce(verdict);
        own->set("rollcall/verdict", std::vector<uint8_t>(verdict.begin(), verdict.end()));
        end_process(*own, lock);
      }
    } catch (const std::exception&) {
      // The store is gone (rank 0 ended) or slow: the process group's own errors take over.
    }
    cv_.wait_for(lock, std::chrono::seconds(1));
  }
}

// Rank 0: whether its record has not moved for the stall timeout. Its own record is enough: when
// any rank stalls, rank 0 stalls too, in the next collective, or it is the stalled one.
bool RollCall::watch_for_stall(int64_t now_ns) {
  const RollCallRecord& r = core_.rollcall;
  const int64_t p = r.progress.load(std::memory_order_relaxed);
  const int64_t step_ns = r.step_ns.load(std::memory_order_relaxed);
  if (step_ns > 0 && step_ns != last_step_ns_) {
    last_step_ns_ = step_ns;
    step_samples_.push_back(static_cast<double>(step_ns) / 1e9);
    if (step_samples_.size() > 101) step_samples_.erase(step_samples_.begin());
  }
  if (p != last_progress_) {
    last_progress_ = p;
    last_progress_ns_ = now_ns;
    return false;
  }
  // Rank 0 writing a checkpoint (its own file system) is not a hang; the group's timeout still holds.
  if (static_cast<Phase>(r.phase.load(std::memory_order_relaxed)) == Phase::checkpoint) return false;
  double timeout = options_.stall_timeout_sec;
  if (!(timeout > 0)) {
    double median = 0;
    if (!step_samples_.empty()) {
      std::vector<double> s = step_samples_;
      std::nth_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(s.size() / 2), s.end());
      median = s[s.size() / 2];
    }
    timeout = auto_stall_timeout(median, options_.dist_timeout_sec);
  }
  stall_seconds_ = static_cast<double>(now_ns - last_progress_ns_) / 1e9;
  return stall_seconds_ >= timeout;
}


void RollCall::announce(const std::string& verdict) {
  verdict_seen.store(true);
  const std::string status = std::to_string(kExitStalled);
  if (core_.env.rank == 0) {
    log::error("stalled: no progress for " + text::format("%.0f", stall_seconds_) + " s. Roll-call: " + verdict +
               ". Hint: the rank(s) named after the first group are the odd ones out: look at what they were "
               "doing (a slow file system in get_batch, a collective only some ranks call). --stall-timeout sets how "
               "long to wait. Every rank exits with status " + status + ".");
  } else {
    log::error("stopping: rank 0 found the run stalled (its roll-call names the ranks); exiting with status " +
               status + ".");
  }
  const std::string dumped = dump_flight_recorder(core_, options_.dump_dir);
  if (!dumped.empty()) log::error("NCCL flight recorder of this rank written to " + dumped);
}

// Every rank waits until all have read the verdict: the store lives in rank 0's process, and a
// peer that ended early would make the others' collectives fail with another error first. The
// others look every second; a frozen rank never does, so the wait ends once no rank has read it
// for 3 s (at most 10 s): a restart (trainctl run) then needn't wait for the frozen one.
void RollCall::end_process(c10d::Store& store, std::unique_lock<std::mutex>& lock) {
  try {
    int64_t acks = -1;
    auto last_ack = std::chrono::steady_clock::now();
    for (int i = 0; i < 100; ++i) {
      const int64_t now_acks = store.add("rollcall/ack", 0);
      if (now_acks >= core_.env.world_size - 1) break;
      if (now_acks != acks) {
        acks = now_acks;
        last_ack = std::chrono::steady_clock::now();
      } else if (std::chrono::steady_clock::now() - last_ack > std::chrono::seconds(3)) {
        break;
      }
      cv_.wait_for(lock, std::chrono::milliseconds(100));
    }
  } catch (const std::exception&) {
    // rank 0 has ended: everyone has read the verdict
  }
  std::fflush(stdout);
  std::fflush(stderr);
  // The training thread may be stuck in user code or a collective: nothing would unwind it.
  std::_Exit(kExitStalled);
}

}  // namespace train::detail
