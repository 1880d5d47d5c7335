// `train --health-check` (health_check.h): measuring, the table, and the requeue without bad nodes.
#include "health/health_check.h"

#include "device/train_device.h"
#include "health/health_groups.h"
#include "health/health_verdict.h"
#include "health/fault_injection.h"
#include "dist/process_group_impl.h"

#include "train/base/error.h"
#include "train/base/log.h"
#include "train/base/net_interfaces.h"
#include "train/process_group.h"
#include "train/base/subprocess.h"
#include "train/base/text.h"

#include <ATen/ops/full.h>
#include <ATen/ops/mm.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
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

// The fastest of `iters` timed runs of `once` (each waited for on the device), in seconds: a busy
// machine's pauses lengthen some runs, not the best one. A fault's `slow_factor` stretches it
// (and sleeps that long, as a slow node would take).
double best_seconds(int iters, const std::function<void()>& once, const TrainDevice& dev, double slow_factor) {
  double best = 0;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    once();
    dev.synchronize();
    const double s = seconds_since(t0);
    best = i == 0 ? s : std::min(best, s);
  }
  if (slow_factor > 1) {
    std::this_thread::sleep_for(std::chrono::duration<double>((slow_factor - 1) * best * iters));
    best *= slow_factor;
  }
  return best;
}

// n x n fp32 matrix products on the rank's device; constant inputs (no random numbers drawn: the
// run's seeded results stay the same). TRAIN_FAULT_SLOW_NODE stretches the timed span.
Gemm measure_gemm(const TrainDevice& dev, double slow_factor) {
  Gemm g;
  g.n = dev.traits().gpu ? 4096 : 256;
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(dev.device());
  const at::Tensor a = at::full({g.n, g.n}, 0.5, opts);
  const at::Tensor b = at::full({g.n, g.n}, 0.25, opts);
  at::Tensor c = at::mm(a, b);  // warm-up: kernels and workspace
  dev.synchronize();
  const double s = best_seconds(20, [&] { at::mm_out(c, a, b); }, dev, slow_factor);
  g.gflops = 2.0 * static_cast<double>(g.n) * g.n * g.n / s / 1e9;
  return g;
}

// Bus bandwidth of `allreduce` among `n` ranks (nccl-tests' definition: bytes x 2(n-1)/n per
// second), in GB/s, from the fastest of a few. TRAIN_FAULT_SLOW_NODE_NET's `slow_factor` stretches it.
double measure_allreduce(const std::function<void(at::Tensor&)>& allreduce, int n, const TrainDevice& dev, int64_t bytes,
                         double slow_factor) {
  at::Tensor t = at::full({bytes / 4}, 1.0, at::TensorOptions().dtype(at::kFloat).device(dev.device()));
  allreduce(t);  // warm-up: connections, communicators and buffers
  dev.synchronize();
  const double per = best_seconds(5, [&] { allreduce(t); }, dev, slow_factor);
  return static_cast<double>(bytes) * 2.0 * (n - 1) / n / per / 1e9;
}

std::string text_of(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
void put(c10d::Store& store, const std::string& key, const std::string& value) {
  store.set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

// This check's store keys: "health/N/", N counting this rank's checks on the store. Every rank
// counts its own and the check is collective, so they agree, and a check run again on the same
// store (a resumed run in the same process, torchrun's agent store) never reads an earlier one's.
std::string round_prefix(c10d::Store& store, int rank) {
  return "health/" + std::to_string(store.add("health/checks/" + std::to_string(rank), 1)) + "/";
}

// Every rank's node name, on every rank: each rank sets its own, rank 0 reads them all and sets
// the list, which the others read (2 x world store requests, not world^2).
std::vector<std::string> exchange_nodes(c10d::Store* store, const std::string& prefix, int rank, int world,
                                        const std::string& node) {
  if (store == nullptr || world <= 1) return {node};
  if (rank != 0) {
    put(*store, prefix + "node/" + std::to_string(rank), node);
    std::vector<std::string> nodes = text::split(text_of(store->get(prefix + "nodes")), '\n');
    if (static_cast<int>(nodes.size()) != world) {
      throw CommError("health check: rank " + std::to_string(rank) + " expected " + std::to_string(world) +
                          " node names from rank 0, found " + std::to_string(nodes.size()) + ".",
                      "a node name with a line break? Check the SLURM node list and host names.");
    }
    return nodes;
  }
  std::vector<std::string> nodes{node};
  std::string list = node;
  for (int r = 1; r < world; ++r) {
    nodes.push_back(text_of(store->get(prefix + "node/" + std::to_string(r))));
    list += "\n" + nodes.back();
  }
  put(*store, prefix + "nodes", list);
  return nodes;
}

// All-reduce bus bandwidths this rank took part in (NaN where it took part in none).
struct Network {
  double all = NAN;      // over every rank
  double within = NAN;   // among this node's ranks (nodes of 2 ranks or more)
  double between = NAN;  // among the lowest rank of each node (2 nodes or more; those ranks only)
  int nodes = 1;
};

bool has_rank(const std::vector<int>& ranks, int rank) { return std::find(ranks.begin(), ranks.end(), rank) != ranks.end(); }

// The main group's all-reduce, then the node's own ranks' (concurrently on every node), then the
// one among one rank per node. A subgroup is built by its members alone and shut down after.
Network measure_network(ProcessGroup* pg, const TrainDevice& dev, int64_t bytes,
                        const std::vector<std::string>& node_of_rank, const std::string& prefix, double net_factor) {
  Network net;
  const std::vector<std::vector<int>> nodes = ranks_by_node(node_of_rank);
  net.nodes = static_cast<int>(nodes.size());
  if (pg == nullptr || pg->size() <= 1) return net;
  net.all = measure_allreduce([&](at::Tensor& t) { pg->allreduce_sum(t); }, pg->size(), dev, bytes, 1);
  ProcessGroupImpl& core = details::core_of(*pg);
  std::vector<int> leaders;
  for (size_t i = 0; i < nodes.size(); ++i) {
    leaders.push_back(nodes[i].front());
    if (nodes[i].size() < 2 || !has_rank(nodes[i], pg->rank())) continue;
    HealthGroup group(core, nodes[i], prefix + "group/node" + std::to_string(i) + "/");
    net.within = measure_allreduce([&](at::Tensor& t) { group.allreduce_sum(t); }, group.size(), dev, bytes, net_factor);
  }
  if (leaders.size() >= 2 && has_rank(leaders, pg->rank())) {
    HealthGroup group(core, leaders, prefix + "group/between/");
    net.between = measure_allreduce([&](at::Tensor& t) { group.allreduce_sum(t); }, group.size(), dev, bytes, 1);
  }
  return net;
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

const NodeVerdict* find_node(const std::vector<NodeVerdict>& verdicts, const std::string& node) {
  for (const NodeVerdict& v : verdicts) {
    if (v.node == node) return &v;
  }
  return nullptr;
}

// Rank 0's table: per node its ranks, its GEMM and within-node all-reduce (value, the other
// nodes' median) and the measures it fails. `measures` holds GEMM's verdicts, then within-node's.
std::string table(const std::vector<MeasureVerdicts>& measures, const std::vector<std::string>& node_of_rank,
                  const std::string& what, double fraction) {
  const char* label[] = {"GEMM", "within-node all-reduce"};
  std::string t = "health check: " + what + "\n  " + pad("node", 14) + pad("ranks", 10) + pad("GEMM GFLOP/s", 15) +
                  pad("others' median", 16) + pad("within-node GB/s", 18) + pad("others' median", 16) + "verdict";
  auto ref_of = [](const NodeVerdict* v, const char* form) {
    return v == nullptr || !std::isfinite(v->reference) ? std::string("-") : text::format(form, v->reference);
  };
  for (const NodeVerdict& v : measures[0].nodes) {
    std::string ranks;
    for (size_t r = 0; r < node_of_rank.size(); ++r) {
      if (node_of_rank[r] == v.node) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    }
    const NodeVerdict* within = find_node(measures[1].nodes, v.node);
    std::string failed;
    for (size_t m = 0; m < measures.size(); ++m) {
      const NodeVerdict* mine = find_node(measures[m].nodes, v.node);
      if (mine != nullptr && mine->bad) failed += (failed.empty() ? "" : ", ") + std::string(label[m]);
    }
    t += "\n  " + pad(v.node, 14) + pad(ranks, 10) + pad(text::format("%.2f", v.value), 15) + pad(ref_of(&v, "%.2f"), 16) +
         pad(within != nullptr ? text::format("%.3f", within->value) : "-", 18) + pad(ref_of(within, "%.3f"), 16) +
         (failed.empty() ? "ok" : "BAD: " + failed + " below " + text::format("%g", fraction) + " x others' median");
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

HealthCheckOptions health_check_options(const TrainConfig& config) {
  HealthCheckOptions o;
  o.min_fraction = config.health.min_fraction;
  o.warn_only = config.health.warn_only;
  o.exclude_bad_nodes = config.health.exclude_bad_nodes;
  return o;
}

void validate_network(const TrainConfig& config) {
  const std::string interface = chosen_interface(config.distributed.interface);
  if (!interface.empty()) net::require_interface(interface, "--interface");
  const HealthConfig& c = config.health;
  if (!(c.min_fraction > 0 && c.min_fraction <= 1)) {
    throw ConfigError("--health-min-fraction: expected a fraction in (0, 1], found " + text::format("%g", c.min_fraction) + ".",
                      "the default is 0.5");
  }
  if ((c.warn_only || c.exclude_bad_nodes) && !c.check) {
    throw ConfigError(std::string(c.exclude_bad_nodes ? "--exclude-bad-nodes" : "--health-warn-only") +
                          ": expected --health-check too, found it alone.", "add --health-check");
  }
  if (c.warn_only && c.exclude_bad_nodes) {
    throw ConfigError("--exclude-bad-nodes: expected a failing check to act on, found --health-warn-only as well.",
                      "keep one of the two");
  }
}

namespace {

// What every rank measured, gathered on rank 0 (one entry per rank; NaN where a rank has none).
struct RankResults {
  std::vector<double> gflops, within;
};

RankResults gather_results(c10d::Store* store, const std::string& prefix, int rank, int world, double gflops,
                           double within) {
  RankResults r{{gflops}, {within}};
  if (store == nullptr || world <= 1) return r;
  if (rank != 0) {
    put(*store, prefix + "result/" + std::to_string(rank), text::format("%.17g", gflops) + "\t" + text::format("%.17g", within));
    return r;
  }
  for (int i = 1; i < world; ++i) {
    const std::string got = text_of(store->get(prefix + "result/" + std::to_string(i)));
    r.gflops.push_back(std::strtod(got.c_str(), nullptr));
    r.within.push_back(got.find('\t') == std::string::npos ? NAN : std::strtod(got.c_str() + got.find('\t') + 1, nullptr));
  }
  return r;
}

// Rank 0: judges the nodes, logs the table, and with --exclude-bad-nodes requeues the job.
// Returns "" when no node is bad, else "BAD NODES\tWHICH MEASURE FAILED\tREQUEUE NOTE".
std::string judge_and_report(const HealthCheckOptions& c, const DistEnv& env, const std::vector<std::string>& node_of_rank,
                             const RankResults& results, const Network& net, const std::string& what,
                             const std::string& size) {
  // Within-node bandwidth is judged among the nodes of 2 ranks or more (the others have none).
  std::vector<std::string> within_nodes;
  std::vector<double> within_values;
  for (const std::vector<int>& ranks : ranks_by_node(node_of_rank)) {
    for (const int r : ranks) {
      if (ranks.size() < 2) continue;
      within_nodes.push_back(node_of_rank[r]);
      within_values.push_back(results.within[r]);
    }
  }
  const std::vector<MeasureVerdicts> measures = {
      {"GEMM throughput", judge_nodes(node_of_rank, results.gflops, c.min_fraction)},
      {"within-node all-reduce bus bandwidth", judge_nodes(within_nodes, within_values, c.min_fraction)}};
  const int world = static_cast<int>(node_of_rank.size());
  std::string t = table(measures, node_of_rank, what, c.min_fraction);
  auto gbps = [](double v, const char* none) { return std::isfinite(v) ? text::format("%.3f", v) + " GB/s" : std::string(none); };
  t += "\n  all-reduce bus bandwidth between nodes" +
       (net.nodes >= 2 ? " (" + std::to_string(net.nodes) + " ranks, the lowest of each node), " + size + ": " + gbps(net.between, "-")
                       : std::string(", one rank per node: - (one node)"));
  t += "\n  all-reduce bus bandwidth over all " + std::to_string(world) + " rank(s), " + size + ": " + gbps(net.all, "- (one rank)");
  log::info(t);
  const std::string bad = bad_node_list(measures);
  if (bad.empty()) return "";
  return bad + "\t" + failed_measures(measures, c.min_fraction) + "\t" +
         (c.exclude_bad_nodes ? requeue_without(env, bad) : std::string());
}

}  // namespace

void run_health_check(const HealthCheckOptions& c, const DistEnv& env, ProcessGroup* pg, const TrainDevice& dev) {
  const std::string node = node_name(env);
  const double net_factor = slow_node_factor(node, kSlowNodeNet);  // a malformed fault fails before any collective
  const Gemm gemm = measure_gemm(dev, slow_node_factor(node, kSlowNodeGemm));
  const int64_t bytes = dev.traits().gpu ? (int64_t{256} << 20) : (int64_t{4} << 20);
  const int world = pg != nullptr ? pg->size() : 1;
  c10::intrusive_ptr<c10d::Store> store;
  if (pg != nullptr && world > 1) store = details::core_of(*pg).store;
  const std::string prefix = store ? round_prefix(*store, env.rank) : "";
  const std::vector<std::string> node_of_rank = exchange_nodes(store.get(), prefix, env.rank, world, node);
  const Network net = measure_network(pg, dev, bytes, node_of_rank, prefix, net_factor);
  const RankResults results = gather_results(store.get(), prefix, env.rank, world, gemm.gflops, net.within);
  std::string verdict;
  if (env.rank == 0) {
    const std::string what = std::to_string(ranks_by_node(node_of_rank).size()) + " node(s), " + std::to_string(world) +
                             " rank(s); GEMM " + std::to_string(gemm.n) + "x" + std::to_string(gemm.n) + " fp32 on " +
                             dev.device().str();
    const std::string size = std::to_string(bytes >> 20) + " MB, " + (pg != nullptr ? to_string(pg->backend()) : std::string("-"));
    verdict = judge_and_report(c, env, node_of_rank, results, net, what, size);
    if (store) put(*store, prefix + "verdict", verdict.empty() ? "ok" : verdict);  // the store's values are never empty
  } else {
    verdict = text_of(store->get(prefix + "verdict"));
    if (verdict == "ok") verdict.clear();
  }
  if (verdict.empty()) {
    if (env.rank == 0) log::info("health check passed");
    return;
  }
  // "BAD NODES\tFAILED MEASURES\tREQUEUE NOTE" (the note, scontrol's words, may hold tabs itself)
  const size_t tab1 = verdict.find('\t');
  const size_t tab2 = tab1 == std::string::npos ? std::string::npos : verdict.find('\t', tab1 + 1);
  const std::string bad = verdict.substr(0, tab1);
  const std::string failed = tab1 == std::string::npos ? bad : verdict.substr(tab1 + 1, tab2 - tab1 - 1);
  const std::string note = tab2 == std::string::npos ? "" : verdict.substr(tab2 + 1);
  const std::string msg = "--health-check: " + failed + " (the table on rank 0).";
  if (c.warn_only) {
    if (env.rank == 0) log::warn(msg + " Training anyway (--health-warn-only).");
    return;
  }
  throw HealthError(msg + note,
                    c.exclude_bad_nodes ? "the requeued job runs without them; check the nodes (nvidia-smi, dmesg) with the admins."
                                        : "sbatch --exclude=" + bad + " (or --exclude-bad-nodes to requeue without them), "
                                          "and tell the admins; --health-warn-only trains anyway.");
}

}  // namespace train::detail
