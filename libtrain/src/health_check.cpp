// `train --health-check` (health_check.h): measuring, the table, and the requeue without bad nodes.
#include "health_check.h"

#include "device/train_device.h"
#include "health_verdict.h"
#include "net_health_options.h"
#include "process_group_impl.h"

#include "train/error.h"
#include "train/log.h"
#include "train/net_interfaces.h"
#include "train/process_group.h"
#include "train/subprocess.h"
#include "train/text.h"

#include <ATen/ops/full.h>
#include <ATen/ops/mm.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

namespace train::detail {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kSlurmCommandTimeoutSec = 30;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string node_name(const DistEnv& env) {
  if (env.node_rank >= 0 && env.node_rank < static_cast<int>(env.nodes.size())) return env.nodes[env.node_rank];
  return env.host;
}

struct Gemm {
  int64_t n = 0;
  double gflops = 0;
};

// n x n fp32 matrix products on the rank's device; constant inputs (no random numbers drawn: the
// run's seeded results stay the same). TRAIN_FAULT_SLOW_NODE stretches the timed span.
Gemm measure_gemm(const TrainDevice& dev, double slow_factor) {
  Gemm g;
  g.n = dev.gpu() ? 4096 : 256;
  const int iters = 20;
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(dev.device());
  const at::Tensor a = at::full({g.n, g.n}, 0.5, opts);
  const at::Tensor b = at::full({g.n, g.n}, 0.25, opts);
  at::Tensor c = at::mm(a, b);  // warm-up: kernels and workspace
  dev.synchronize();
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) at::mm_out(c, a, b);
  dev.synchronize();
  if (slow_factor > 1) std::this_thread::sleep_for(std::chrono::duration<double>((slow_factor - 1) * seconds_since(t0)));
  const double s = seconds_since(t0);
  g.gflops = 2.0 * static_cast<double>(g.n) * g.n * g.n * iters / s / 1e9;
  return g;
}

// Bus bandwidth of an all-reduce over every rank (nccl-tests' definition: bytes x 2(n-1)/n per
// second), in GB/s.
double measure_allreduce(ProcessGroup& pg, const TrainDevice& dev, int64_t bytes) {
  at::Tensor t = at::full({bytes / 4}, 1.0, at::TensorOptions().dtype(at::kFloat).device(dev.device()));
  pg.allreduce_sum(t);  // warm-up: connections and buffers
  dev.synchronize();
  const int iters = 5;
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) pg.allreduce_sum(t);
  dev.synchronize();
  const double per = seconds_since(t0) / iters;
  const int n = pg.size();
  return static_cast<double>(bytes) * 2.0 * (n - 1) / n / per / 1e9;
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

std::string table(const std::vector<NodeVerdict>& verdicts, const std::vector<std::string>& node_of_rank,
                  const std::string& what, double fraction) {
  std::string t = "health check: " + what + "\n  " + pad("node", 14) + pad("ranks", 10) + pad("GEMM GFLOP/s", 15) +
                  pad("others' median", 16) + "verdict";
  for (const NodeVerdict& v : verdicts) {
    std::string ranks;
    for (size_t r = 0; r < node_of_rank.size(); ++r) {
      if (node_of_rank[r] == v.node) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    }
    const std::string ref = std::isfinite(v.reference) ? text::format("%.2f", v.reference) : "-";
    t += "\n  " + pad(v.node, 14) + pad(ranks, 10) + pad(text::format("%.2f", v.value), 15) + pad(ref, 16) +
         (v.bad ? "BAD: below " + text::format("%g", fraction) + " x others' median" : "ok");
  }
  return t;
}

std::string field_of(const std::string& show, const std::string& key) {
  const size_t at = show.find(" " + key + "=");
  if (at == std::string::npos) return "";
  const size_t from = at + key.size() + 2;
  const size_t end = show.find_first_of(" \n", from);
  return show.substr(from, end == std::string::npos ? std::string::npos : end - from);
}

// Detached from the job's processes (its own session, parent init), so that it outlives the
// requeue: once the job is pending again, it excludes the nodes and releases the hold.
void spawn_exclude_watcher(const std::string& id, const std::string& exclude) {
  const std::string script = "i=0; while [ $i -lt 900 ]; do case \"$(scontrol show job -o " + id +
                             " 2>/dev/null)\" in *JobState=PENDING*) scontrol update JobId=" + id + " ExcNodeList=" +
                             exclude + " && scontrol release " + id + " && exit;; esac; i=$((i+1)); sleep 1; done";
  const pid_t child = fork();
  if (child == 0) {
    setsid();
    if (fork() == 0) {
      const int null = open("/dev/null", O_RDWR);
      for (int fd = 0; fd < 3; ++fd) dup2(null, fd);
      for (int fd = 3; fd < 1024; ++fd) close(fd);
      execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    }
    _exit(0);
  }
  if (child > 0) waitpid(child, nullptr, 0);
}

// Rank 0 under SLURM with --exclude-bad-nodes: counts the requeue in the job's comment, holds and
// requeues the job, and leaves the watcher that excludes `bad`. Says what it did, in words.
std::string requeue_without(const DistEnv& env, const std::string& bad) {
  if (env.job_id.empty()) return " Not requeued: not a SLURM job.";
  const char* array_job = std::getenv("SLURM_ARRAY_JOB_ID");
  const char* array_task = std::getenv("SLURM_ARRAY_TASK_ID");
  const std::string id = array_job != nullptr && array_task != nullptr ? std::string(array_job) + "_" + array_task : env.job_id;
  const CommandResult show = run_command({"scontrol", "show", "job", "-o", id}, "", kSlurmCommandTimeoutSec);
  if (show.exit_code != 0) return " Not requeued: scontrol show job " + id + " failed: " + show.err;
  std::string comment = field_of(show.out, "Comment");
  if (comment == "(null)") comment.clear();
  const std::string token = "libtrain_health_requeues=";
  const size_t at = comment.find(token);
  const int done = at == std::string::npos ? 0 : std::atoi(comment.c_str() + at + token.size());
  if (done >= kMaxHealthRequeues) {
    return " Not requeued: job " + id + " was requeued for failed health checks " + std::to_string(done) +
           " times already (the cap is " + std::to_string(kMaxHealthRequeues) + ").";
  }
  if (at != std::string::npos) comment.erase(at, comment.find(',', at) == std::string::npos ? std::string::npos : comment.find(',', at) - at + 1);
  if (!comment.empty() && comment.back() == ',') comment.pop_back();
  comment += (comment.empty() ? "" : ",") + token + std::to_string(done + 1);
  std::string exclude = field_of(show.out, "ExcNodeList");
  exclude = exclude.empty() || exclude == "(null)" ? bad : exclude + "," + bad;
  run_command({"scontrol", "update", "JobId=" + id, "Comment=" + comment}, "", kSlurmCommandTimeoutSec);
  // Held, the job is pending at once (its steps are being stopped, this one too: train takes the
  // SIGTERM as a stop request), which is when SLURM lets ExcNodeList change. scontrol may itself be
  // stopped by that signal, so the job's state says whether it worked, not scontrol's status.
  const CommandResult hold = run_command({"scontrol", "requeuehold", id}, "", kSlurmCommandTimeoutSec);
  bool released = false;
  for (int attempt = 0; attempt < 3 && !released; ++attempt) {
    const CommandResult u = run_command({"scontrol", "update", "JobId=" + id, "ExcNodeList=" + exclude}, "", kSlurmCommandTimeoutSec);
    released = u.exit_code == 0 && run_command({"scontrol", "release", id}, "", kSlurmCommandTimeoutSec).exit_code == 0;
  }
  if (!released) {
    const std::string state = field_of(run_command({"scontrol", "show", "job", "-o", id}, "", kSlurmCommandTimeoutSec).out, "JobState");
    if (state != "PENDING") return " Not requeued: scontrol requeuehold " + id + " failed (" + hold.err + hold.out + "), job " + state + ".";
    spawn_exclude_watcher(id, exclude);  // it finishes the update and the release once it can
  }
  log::warn("requeued job " + id + " without " + bad + " (health requeue " + std::to_string(done + 1) + " of " +
            std::to_string(kMaxHealthRequeues) + "); if it stays held, run: scontrol update JobId=" + id +
            " ExcNodeList=" + exclude + "; scontrol release " + id);
  return " Requeued job " + id + " with ExcNodeList=" + exclude + ".";
}

}  // namespace

NetHealthOptions& net_health_options() {
  static NetHealthOptions options;
  return options;
}

std::string chosen_interface() {
  if (!net_health_options().interface.empty()) return net_health_options().interface;
  const char* from_env = std::getenv("TRAIN_INTERFACE");
  return from_env != nullptr ? from_env : "";
}

void validate(const NetHealthOptions& c) {
  if (!chosen_interface().empty()) net::require_interface(chosen_interface(), "--interface");
  if (!(c.health_min_fraction > 0 && c.health_min_fraction <= 1)) {
    throw ConfigError("--health-min-fraction: expected a fraction in (0, 1], found " + text::format("%g", c.health_min_fraction) + ".",
                      "the default is 0.5");
  }
  if ((c.health_warn_only || c.exclude_bad_nodes) && !c.health_check) {
    throw ConfigError(std::string(c.exclude_bad_nodes ? "--exclude-bad-nodes" : "--health-warn-only") +
                          ": expected --health-check too, found it alone.", "add --health-check");
  }
  if (c.health_warn_only && c.exclude_bad_nodes) {
    throw ConfigError("--exclude-bad-nodes: expected a failing check to act on, found --health-warn-only as well.",
                      "keep one of the two");
  }
}

void run_health_check(const NetHealthOptions& c, const DistEnv& env, ProcessGroup* pg, const TrainDevice& dev) {
  const std::string node = node_name(env);
  const Gemm gemm = measure_gemm(dev, slow_node_factor(node));
  const int64_t bytes = dev.gpu() ? (int64_t{256} << 20) : (int64_t{4} << 20);
  const double busbw = pg != nullptr && pg->size() > 1 ? measure_allreduce(*pg, dev, bytes) : NAN;
  const int world = pg != nullptr ? pg->size() : 1;
  std::vector<std::string> node_of_rank{node};
  std::vector<double> gflops{gemm.gflops};
  c10::intrusive_ptr<c10d::Store> store;
  if (pg != nullptr) store = details::core_of(*pg).store;
  auto text_of = [](const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); };
  if (store && env.rank != 0) {
    const std::string mine = node + "\t" + text::format("%.17g", gemm.gflops);
    store->set("health/" + std::to_string(env.rank), std::vector<uint8_t>(mine.begin(), mine.end()));
  }
  std::string verdict;
  if (env.rank == 0) {
    for (int r = 1; r < world; ++r) {
      const std::string got = text_of(store->get("health/" + std::to_string(r)));
      node_of_rank.push_back(got.substr(0, got.find('\t')));
      gflops.push_back(std::strtod(got.c_str() + got.find('\t') + 1, nullptr));
    }
    const std::vector<NodeVerdict> verdicts = judge_nodes(node_of_rank, gflops, c.health_min_fraction);
    const std::string what = std::to_string(verdicts.size()) + " node(s), " + std::to_string(world) + " rank(s); GEMM " +
                             std::to_string(gemm.n) + "x" + std::to_string(gemm.n) + " fp32 on " + dev.device().str();
    std::string t = table(verdicts, node_of_rank, what, c.health_min_fraction);
    t += "\n  all-reduce bus bandwidth over all " + std::to_string(world) + " rank(s), " +
         std::to_string(bytes >> 20) + " MB, " + (pg != nullptr ? to_string(pg->backend()) : std::string("-")) + ": " +
         (std::isfinite(busbw) ? text::format("%.3f", busbw) + " GB/s" : std::string("- (one rank)"));
    log::info(t);
    verdict = bad_node_list(verdicts);
    std::string note;
    if (!verdict.empty() && c.exclude_bad_nodes) note = requeue_without(env, verdict);
    verdict = verdict.empty() ? "" : verdict + "\t" + note;
    const std::string sent = verdict.empty() ? "ok" : verdict;  // the store's values are never empty
    if (store) store->set("health/verdict", std::vector<uint8_t>(sent.begin(), sent.end()));
  } else {
    verdict = text_of(store->get("health/verdict"));
    if (verdict == "ok") verdict.clear();
  }
  if (verdict.empty()) {
    if (env.rank == 0) log::info("health check passed");
    return;
  }
  const std::string bad = verdict.substr(0, verdict.find('\t'));
  const std::string msg = "--health-check: node(s) " + bad + ": GEMM throughput below " +
                          text::format("%g", c.health_min_fraction) + " x the median of the other nodes' (the table on rank 0).";
  if (c.health_warn_only) {
    if (env.rank == 0) log::warn(msg + " Training anyway (--health-warn-only).");
    return;
  }
  throw HealthError(msg + verdict.substr(verdict.find('\t') + 1),
                    c.exclude_bad_nodes ? "the requeued job runs without them; check the nodes (nvidia-smi, dmesg) with the admins."
                                        : "sbatch --exclude=" + bad + " (or --exclude-bad-nodes to requeue without them), "
                                          "and tell the admins; --health-warn-only trains anyway.");
}

}  // namespace train::detail
