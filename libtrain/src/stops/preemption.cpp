// Preemption: signal handlers that only set flags, the job's end time from squeue, the agreement
// among ranks (one small all-reduce), and `scontrol requeue`.
#include "train/preemption.h"

#include "comm/comm_in_graphs.h"

#include "train/base/error.h"
#include "train/base/slurm_time.h"
#include "train/base/log.h"
#include "train/process_group.h"
#include "train/base/signals.h"
#include "train/base/subprocess.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <chrono>
#include <ctime>
#include <sstream>

namespace train {
namespace {

/// Seconds before the end time within which a SIGTERM is taken for the time limit's own.
constexpr double kTimeLimitTermWindowSec = 10;
/// squeue and scontrol must answer within this; a busy controller only costs the check.
constexpr double kSlurmCommandTimeoutSec = 30;

// Set by the handlers, read at step boundaries (async-signal-safe: lock-free atomics only).
std::atomic<int> g_requeue_signal{0};
std::atomic<int> g_stop_signal{0};
std::atomic<bool> g_installed{false};
// Which signals mean what, for the handler (fixed while a Preemption lives).
std::atomic<uint64_t> g_requeue_mask{0};

extern "C" void on_signal(int sig) {
  if (sig > 0 && sig < 64 && (g_requeue_mask.load() & (uint64_t{1} << sig)) != 0) {
    g_requeue_signal.store(sig);
  } else {
    g_stop_signal.store(sig);
  }
}

// The SLURM job's end time from squeue (%e), or 0 when unknown or not under SLURM; `unlimited` is set
// when it has no time limit (%l UNLIMITED, or the year Slurm puts in its place: no deadline then).
int64_t slurm_job_end_time(const std::string& job_id, bool& unlimited) {
  unlimited = false;
  if (job_id.empty()) return 0;
  const CommandResult r = run_command({"squeue", "-h", "-j", job_id, "-o", "%e %l"}, "", kSlurmCommandTimeoutSec);
  if (!r.started || r.timed_out || r.exit_code != 0) {
    log::debug("squeue -j " + job_id + " gave no end time (" + (r.started ? r.err : "squeue not found") + ")");
    return 0;
  }
  const std::string line = r.out.substr(0, r.out.find('\n'));
  const std::size_t space = line.find(' ');
  const std::string limit = space == std::string::npos ? "" : line.substr(space + 1);
  if (is_no_time_limit(limit)) {
    unlimited = true;
    return 0;
  }
  return parse_slurm_timestamp(line.substr(0, space));
}

}  // namespace

std::string to_string(StopKind kind) {
  switch (kind) {
    case StopKind::preempt: return "preempt";
    case StopKind::time_limit: return "time_limit";
    case StopKind::cancel: return "cancel";
    case StopKind::nonfinite: return "nonfinite";
    case StopKind::none: break;
  }
  return "none";
}

std::vector<int> parse_signal_list(const std::string& list, const std::string& flag) {
  std::vector<int> out;
  if (list.empty() || list == "none") return out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const int sig = signal_number(item);
    if (sig == SIGKILL || sig == SIGSTOP) {
      throw ConfigError(flag + ": expected signals a program can catch, found '" + item + "', which no handler sees.",
                        "SLURM's --signal sends USR2 by default here; use " + flag + " USR2.");
    }
    if (sig == 0) {
      throw ConfigError(flag + ": expected a comma list of signal names such as USR1, USR2, TERM, INT, HUP, "
                               "XCPU (or none), found '" + item + "'.",
                        "match the signal your sbatch --signal option sends, e.g. " + flag + " USR2.");
    }
    out.push_back(sig);
  }
  return out;
}

Preemption::Preemption(PreemptionOptions options, const DistEnv& env) : options_(std::move(options)), env_(env) {
  if (g_installed.exchange(true)) {
    throw ConfigError("Preemption: expected one per process, found a second one while the first lives.",
                      "keep one Trainer (or one Preemption) running at a time in a process.");
  }
  g_requeue_signal.store(0);
  g_stop_signal.store(0);
  uint64_t mask = 0;
  for (int sig : options_.requeue_signals) {
    if (sig > 0 && sig < 64) mask |= uint64_t{1} << sig;
  }
  g_requeue_mask.store(mask);
  std::vector<int> all = options_.requeue_signals;
  for (int sig : options_.stop_signals) {
    if (std::find(all.begin(), all.end(), sig) == all.end()) all.push_back(sig);
  }
  for (int sig : all) {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    auto* old = new struct sigaction;
    sigaction(sig, &sa, old);
    previous_.emplace_back(sig, old);
  }
  if (env_.rank == 0) end_time_ = slurm_job_end_time(env_.job_id, no_time_limit_);
}

Preemption::~Preemption() {
  for (auto& [sig, old] : previous_) {
    auto* sa = static_cast<struct sigaction*>(old);
    sigaction(sig, sa, nullptr);
    delete sa;
  }
  g_requeue_mask.store(0);
  g_installed.store(false);
}

std::vector<int64_t> Preemption::local_flags() const {
  const int stop = g_stop_signal.load();
  // Sub-second: a margin of 59.9 s must not wait for the next whole second (time() rounds down).
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const bool deadline = end_time_ > 0 && now >= static_cast<double>(end_time_) - options_.time_margin_sec;
  // A SIGTERM right at the end time is SLURM's time limit, not a user's scancel.
  const bool term_at_limit = stop == SIGTERM && end_time_ > 0 &&
                             now >= static_cast<double>(end_time_) - kTimeLimitTermWindowSec;
  return {g_requeue_signal.load() != 0 ? 1 : 0, stop != 0 ? 1 : 0, deadline || term_at_limit ? 1 : 0};
}

StopRequest Preemption::decide(const std::vector<int64_t>& summed) const {
  StopRequest r;
  const int requeue_sig = g_requeue_signal.load();
  const int stop_sig = g_stop_signal.load();
  if (summed.size() != 3 && summed.size() != 4) return r;
  if (summed.size() == 4 && summed[3] > 0) {
    r.kind = StopKind::nonfinite;  // the weights may be bad: no checkpoint, whatever else was asked
    r.reason = "a non-finite loss or gradient";
  } else if (summed[2] > 0) {
    r.kind = StopKind::time_limit;
    r.reason = "the job's time limit";
  } else if (summed[1] > 0) {
    r.kind = StopKind::cancel;
    r.signal = stop_sig != 0 ? stop_sig : SIGTERM;
    r.reason = (stop_sig != 0 ? signal_name(stop_sig) : std::string("a stop signal on another rank")) +
               " (cancelled: no requeue)";
  } else if (summed[0] > 0) {
    r.kind = StopKind::preempt;
    r.reason = requeue_sig != 0 ? "signal " + signal_name(requeue_sig) : "a preemption signal on another rank";
  }
  return r;
}

StopRequest Preemption::poll(ProcessGroup* pg, const at::Device& device, const at::Tensor& nonfinite) const {
  std::vector<int64_t> flags = local_flags();
  if (nonfinite.defined()) flags.push_back(nonfinite.item<int64_t>());
  if (pg != nullptr) {
    at::Tensor t = at::tensor(flags, at::TensorOptions().dtype(at::kLong));
    if (device.is_cuda() && pg->backend() == Backend::nccl) t = t.to(device);  // NCCL sums device memory only
    pg->allreduce_sum(t);
    t = t.cpu();
    for (size_t i = 0; i < flags.size(); ++i) flags[i] = t[static_cast<int64_t>(i)].item<int64_t>();
  }
  return decide(flags);
}

namespace {

// What collect() waits for on a device: the event after the flags' copy back, and the device
// tensor that the copy reads (alive until then: its last reader runs on another stream). Made at
// the first post, with the stream that NCCL's posts take: a high-priority pool stream, never the
// step's (a low-priority one), and the same one every time.
struct PostedOnDevice {
  PostedOnDevice(c10::impl::VirtualGuardImpl& guard, const at::Device& device)
      : event(device.type()), side(guard.getStreamFromGlobalPool(device, /*isHighPriority=*/true)) {}
  c10::Event event;
  c10::Stream side;
  at::Tensor flags;
};

}  // namespace

void Preemption::post(ProcessGroup* pg, const at::Device& device, const at::Tensor& nonfinite) {
  const std::vector<int64_t> flags = local_flags();
  const int64_t n = nonfinite.defined() ? 4 : 3;
  if (!posted_.defined() || posted_.numel() != n) {
    posted_ = at::empty({n}, at::TensorOptions().dtype(at::kLong).pinned_memory(device.is_cuda()));
  }
  // NCCL sums device memory, queued on the device; any other group (Gloo) sums on the host when
  // the copy is collected, so the host never waits for the device here either.
  posted_group_ = pg != nullptr && !(device.is_cuda() && pg->backend() == Backend::nccl) ? pg : nullptr;
  posted_pending_ = true;
  const bool on_device = posted_group_ == nullptr && pg != nullptr;
  // On a side stream only while no graph calls NCCL on the group's communicator: the steps' NCCL
  // calls and the flags' all-reduce would otherwise reach the GPUs in different orders.
  const bool on_side = on_device && !detail::comm_in_graphs(*pg);
  if (!on_device) {
    for (size_t i = 0; i < flags.size(); ++i) posted_.data_ptr<int64_t>()[i] = flags[i];
    if (nonfinite.defined()) posted_.narrow(0, 3, 1).copy_(nonfinite.reshape({1}).to(at::kLong), /*non_blocking=*/true);
    if (device.is_cpu()) return;  // the copies are done: nothing to wait for
  }
  c10::impl::VirtualGuardImpl guard(device.type());
  if (!posted_event_) posted_event_ = std::make_shared<PostedOnDevice>(guard, device);
  PostedOnDevice& posted = *static_cast<PostedOnDevice*>(posted_event_.get());
  const c10::Stream step_stream = guard.getStream(device);
  if (!on_device) {
    posted.event.record(step_stream);
    return;
  }
  at::Tensor t = at::tensor(flags, at::TensorOptions().dtype(at::kLong)).to(device, /*non_blocking=*/true);
  if (nonfinite.defined()) t = at::cat({t, nonfinite.reshape({1}).to(at::kLong)});  // device ops: no host sync
  // The all-reduce and the copy back: on the side stream, which waits for the step's (the flags'
  // values) and which no later step waits for, so the steps go on while the ranks agree; or on
  // the step's stream, whose next steps wait for them.
  const c10::Stream on = on_side ? posted.side : step_stream;
  if (on_side) {
    posted.event.record(step_stream);
    posted.event.block(on);
  }
  {
    const c10::StreamGuard on_stream(on);
    pg->allreduce_sum(t);  // queued on the device, the host goes on
    posted_.copy_(t, /*non_blocking=*/true);
  }
  posted.flags = t;
  posted.event.record(on);
}

StopRequest Preemption::collect() {
  if (!posted_pending_) return {};
  posted_pending_ = false;
  if (posted_event_) {
    PostedOnDevice& posted = *static_cast<PostedOnDevice*>(posted_event_.get());
    posted.event.synchronize();
    posted.flags.reset();
  }
  const int64_t* posted = posted_.data_ptr<int64_t>();
  std::vector<int64_t> flags(posted, posted + posted_.numel());
  if (posted_group_ != nullptr) {
    at::Tensor t = at::tensor(flags, at::TensorOptions().dtype(at::kLong));
    posted_group_->allreduce_sum(t);
    posted_group_ = nullptr;
    for (size_t i = 0; i < flags.size(); ++i) flags[i] = t.data_ptr<int64_t>()[i];
  }
  return decide(flags);
}

namespace {

// Whether SLURM already counts a requeue of `id` beyond this run's (SLURM_RESTART_COUNT): a
// requeue cancels the job's step at once, and the step's signal may reach the scontrol that asked
// for it before scontrol has printed its answer.
bool requeue_counted(const std::string& id) {
  const CommandResult r = run_command({"scontrol", "show", "job", "-o", id}, "", kSlurmCommandTimeoutSec);
  const size_t at = r.out.find("Restarts=");
  if (!r.started || r.timed_out || r.exit_code != 0 || at == std::string::npos) return false;
  const long restarts = std::strtol(r.out.c_str() + at + 9, nullptr, 10);
  const char* mine = std::getenv("SLURM_RESTART_COUNT");
  return restarts > (mine != nullptr ? std::strtol(mine, nullptr, 10) : 0);
}

}  // namespace

bool Preemption::requeue_job() const {
  const char* array_job = std::getenv("SLURM_ARRAY_JOB_ID");
  const char* array_task = std::getenv("SLURM_ARRAY_TASK_ID");
  std::string id = env_.job_id;
  if (array_job != nullptr && array_task != nullptr) id = std::string(array_job) + "_" + array_task;
  const CommandResult r = run_command({"scontrol", "requeue", id}, "", kSlurmCommandTimeoutSec);
  const bool killed = r.started && !r.timed_out && r.exit_code > 128;
  if (r.started && !r.timed_out && r.exit_code != 0 && requeue_counted(id)) {
    log::warn("requeued job " + id + " (scontrol ended with status " + std::to_string(r.exit_code) +
              ", likely stopped by the requeue's own cancel of this step, but SLURM counts the requeue); it "
              "resumes from the checkpoint when it starts again");
    return true;
  }
  if (!r.started || r.timed_out || r.exit_code != 0) {
    const std::string said = r.err + r.out;
    const std::string why = !r.started      ? "scontrol not found"
                            : r.timed_out   ? "no answer within 30 s"
                            : !said.empty() ? said
                            : killed        ? "scontrol was killed by signal " + std::to_string(r.exit_code - 128) +
                                                  " and SLURM counts no new restart"
                                            : "exit status " + std::to_string(r.exit_code) + ", no message";
    log::error("scontrol requeue " + id + " failed: " + why +
               " Hint: the job needs --requeue (the generated scripts set it) and JobRequeue allowed by the cluster.");
    return false;
  }
  log::warn("requeued job " + id + "; it resumes from the checkpoint when it starts again");
  return true;
}

}  // namespace train
