// `train --health-check` on the local 2-node SLURM cluster. A slow node (the fault
// TRAIN_FAULT_SLOW_NODE=node2:30 stretches its GEMM measurement 30x) is named, the step exits 69,
// and trainctl run launches it again without node2 in the same job (with --max-restarts 0 the job
// fails with exit status 69); with --exclude-bad-nodes the job requeues itself with ExcNodeList=node2
// and the requeued job trains on node1 alone (the test lets it shrink to one node: this cluster
// has no spare). With 2 ranks per node, each node's own all-reduce is measured and judged too
// (TRAIN_FAULT_SLOW_NODE_NET=node2:30 stretches node2's), and one between the nodes' first ranks.
// A script from `trainctl sbatch --health-check --interface lo` passes the check on both nodes and
// trains; its TRAIN_INTERFACE is checked on the nodes. Waits on the jobs' states and ends
// (sbatch --wait), not on durations.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <functional>
#include <thread>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "slurm_util.h"
#include "test_process.h"
#include "test_util.h"
#include "train/base/run_record.h"

namespace train {
namespace {

using test::Env;
using test::TestProcess;

constexpr double kJobTimeoutSeconds = 300;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
std::string bin(const std::string& name) { return std::string(TRAIN_BINARY_DIR) + "/bin/" + name; }

bool exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

class SlurmHealthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* flag = std::getenv("TRAIN_TEST_SLURM");
    if (flag != nullptr && std::string(flag) == "0") GTEST_SKIP() << "TRAIN_TEST_SLURM=0: the SLURM tests are turned off";
    env_ = test::slurm_env();
    env_["TRAIN_BIN"] = bin("train");
    env_["TRAINCTL_BIN"] = bin("trainctl");
    env_["TRAIN_FAULT_SLOW_NODE"] = "node2:30";
    const std::string problem = test::cluster_problem(env_);
    if (!problem.empty()) {
      FAIL() << "No usable SLURM cluster: " << problem
             << "\nHint: start the local one with `scripts/local-slurm.sh start` (as root; see docs/local-slurm.md), "
                "or set TRAIN_TEST_SLURM=0 to skip the slurm tests.";
    }
  }

  // A short CPU run's train arguments.
  static std::vector<std::string> short_run() {
    return {"--data", test::fashion_mnist_dir(), "--epochs", "1", "--max-steps", "3", "--limit-train-samples", "512",
            "--limit-test-samples", "100", "--threads", "1"};
  }

  // scripts/ddp.sh on its 2 nodes with a short CPU run and --health-check; `while_running(id)` runs
  // once the job is submitted. Returns the job id and its log once sbatch --wait returns (after a
  // requeue too). `sbatch_options` go before the script (e.g. --ntasks-per-node=2).
  std::pair<std::string, std::string> run_job(const std::string& dir, const std::vector<std::string>& extra,
                                              const std::function<void(const std::string&)>& while_running = nullptr,
                                              const std::vector<std::string>& sbatch_options = {}) {
    std::vector<std::string> args = sbatch_options;
    args.push_back(std::string(TRAIN_SOURCE_DIR) + "/scripts/ddp.sh");
    for (const std::string& a : short_run()) args.push_back(a);
    args.push_back("--health-check");
    args.insert(args.end(), extra.begin(), extra.end());
    return submit(dir, args, "ddp", while_running);
  }

  // sbatch --wait SCRIPT ARGS... from `dir`; the log is logs/JOBNAME-ID.out there.
  std::pair<std::string, std::string> submit(const std::string& dir, const std::vector<std::string>& script_and_args,
                                             const std::string& job_name,
                                             const std::function<void(const std::string&)>& while_running = nullptr) {
    mkdir((dir + "/logs").c_str(), 0755);  // the script's --output folder
    std::vector<std::string> argv = {"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", dir, test::find_on_path("sbatch"),
                                     "--parsable", "--wait"};
    argv.insert(argv.end(), script_and_args.begin(), script_and_args.end());
    TestProcess sbatch(argv, env_);
    const bool submitted = sbatch.wait_for_stdout([](const std::string& out) { return contains(out, "\n"); }, 30);
    std::string id = test::lines_of(sbatch.out()).empty() ? "" : test::lines_of(sbatch.out()).front();
    id = id.substr(0, id.find(';'));
    if (!submitted || id.empty()) {
      ADD_FAILURE() << "sbatch did not submit: " << sbatch.err();
      return {};
    }
    if (while_running) while_running(id);
    if (!sbatch.wait(kJobTimeoutSeconds)) {
      test::run_process({test::find_on_path("scancel"), id}, env_, 20);
      sbatch.wait(30);
      ADD_FAILURE() << "job " << id << " did not end within " << kJobTimeoutSeconds << " s; cancelled it";
    }
    return {id, test::read_text(dir + "/logs/" + job_name + "-" + id + ".out")};
  }

  // `trainctl sbatch` with the options given writes DIR/job.sh for 2 nodes x 1 task, Gloo on the CPU.
  std::string generate(const test::TempDir& dir, const std::string& job_name, const std::vector<std::string>& options) {
    std::vector<std::string> argv = {bin("trainctl"), "sbatch", "--job-name", job_name, "--nodes", "2",
                                     "--ntasks-per-node", "1", "--no-cluster-checks", "--out", dir.file("job.sh")};
    argv.insert(argv.end(), options.begin(), options.end());
    for (const char* a : {"--", "--backend", "gloo", "--device", "cpu"}) argv.push_back(a);
    const auto p = test::run_process(argv, env_, 60);
    EXPECT_EQ(p->exit_code(), 0) << p->err();
    return dir.file("job.sh");
  }

  std::string show_job(const std::string& id) {
    return test::run_process({test::find_on_path("scontrol"), "show", "job", "-o", id}, env_, 20)->out();
  }

  Env env_;
};

// The health table's row of `node` in `log`, split at blanks: node, ranks, GEMM GFLOP/s, its
// others' median, within-node GB/s, its others' median, then the verdict's words.
std::vector<std::string> row_of(const std::string& log, const std::string& node) {
  const size_t at = log.find("\n  " + node + " ");
  if (at == std::string::npos) return {};
  std::istringstream in(log.substr(at + 1, log.find('\n', at + 1) - at - 1));
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

bool is_positive_number(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  return !s.empty() && *end == '\0' && v > 0;
}

// The number after `label` in `log` up to " GB/s" ("" when the line is missing).
std::string gbps_after(const std::string& log, const std::string& label) {
  const size_t at = log.find(label);
  if (at == std::string::npos) return "";
  const size_t from = at + label.size();
  return log.substr(from, log.find(" GB/s", from) == std::string::npos ? 0 : log.find(" GB/s", from) - from);
}

// The generated script's trainctl run launches the step again without the node the health check
// names (srun --exclude=node2, one node), and the job finishes on fewer nodes.
TEST_F(SlurmHealthTest, ASlowNodeIsNamedAndLeftOutAndTheJobFinishesOnFewerNodes) {
  if (!exists(bin("train"))) GTEST_SKIP() << "no train program in this build (TRAIN_WITH_TORCH=OFF)";
  if (test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  test::TempDir dir("slurm-health", test::job_root());
  const auto [id, log] = run_job(dir.path(), {});
  ASSERT_FALSE(id.empty());
  EXPECT_TRUE(contains(log, "health check: 2 node(s), 2 rank(s)")) << log;
  EXPECT_TRUE(contains(log, "BAD: GEMM below 0.5 x others' median")) << log;
  EXPECT_TRUE(contains(log, "--health-check: node(s) node2: GEMM throughput below 0.5")) << log;
  EXPECT_FALSE(contains(log, "node(s) node1")) << log;
  // One rank per node: no within-node all-reduce ("-"), one between the 2 nodes' ranks.
  for (const std::string node : {"node1", "node2"}) {
    const auto row = row_of(log, node);
    ASSERT_GE(row.size(), 6u) << node << "\n" << log;
    EXPECT_EQ(row[4], "-") << log;
  }
  EXPECT_TRUE(is_positive_number(gbps_after(log, "between nodes (2 ranks, the lowest of each node), 4 MB, gloo: "))) << log;
  EXPECT_TRUE(contains(log, "Hint: sbatch --exclude=node2")) << log;
  EXPECT_TRUE(contains(log, "Exited with exit code 69")) << log;
  // The relaunch: node1 alone, in the same job, trains to the end.
  EXPECT_TRUE(contains(log, "trainctl run: restart 1/3: node failed health check on node2 (exit 69), left out node2; "
                            "relaunching on 1 node(s), 1 task(s)")) << log;
  EXPECT_TRUE(contains(log, "health check: 1 node(s), 1 rank(s)")) << log;
  const auto done = nlohmann::json::parse(test::event_line(log), nullptr, false);
  ASSERT_FALSE(done.is_discarded()) << log;
  EXPECT_EQ(done.value("event", ""), "done");
  EXPECT_EQ(done.value("world_size", 0), 1);
  EXPECT_TRUE(contains(show_job(id), "JobState=COMPLETED")) << show_job(id);
  const std::optional<RunRecord> record = RunRecord::load(RunRecord::path_for(dir.path(), id));
  ASSERT_TRUE(record.has_value());
  ASSERT_EQ(record->restarts.size(), 1u);
  EXPECT_TRUE(record->restarts[0].excluded);
  EXPECT_EQ(record->restarts[0].nodes, std::vector<std::string>{"node2"});
  EXPECT_EQ(record->restarts[0].exit_code, 69);
}

// With --max-restarts 0 the job fails with the health check's own status.
TEST_F(SlurmHealthTest, WithoutRestartsTheJobFailsWithItsOwnStatus) {
  if (!exists(bin("train"))) GTEST_SKIP() << "no train program in this build (TRAIN_WITH_TORCH=OFF)";
  if (test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  test::TempDir dir("slurm-health-norestart", test::job_root());
  const std::string script = generate(dir, "hc", {"--health-check", "--max-restarts", "0"});
  std::vector<std::string> args = {script};
  for (const std::string& a : short_run()) args.push_back(a);
  const auto [id, log] = submit(dir.path(), args, "hc");
  ASSERT_FALSE(id.empty());
  EXPECT_TRUE(contains(log, "--health-check: node(s) node2: GEMM throughput below 0.5")) << log;
  // The first rank to end exits 69 (srun may then stop the other one: its status can differ).
  EXPECT_TRUE(contains(log, "Exited with exit code 69")) << log;
  EXPECT_TRUE(contains(log, "not restarted, 0 restart(s) done already (--max-restarts 0)")) << log;
  EXPECT_FALSE(contains(log, "\"event\":\"done\"")) << log;
  EXPECT_TRUE(contains(show_job(id), "JobState=FAILED")) << show_job(id);
}

TEST_F(SlurmHealthTest, ExcludeBadNodesRequeuesTheJobWithoutTheSlowNode) {
  if (!exists(bin("train"))) GTEST_SKIP() << "no train program in this build (TRAIN_WITH_TORCH=OFF)";
  if (test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  test::TempDir dir("slurm-health-exclude", test::job_root());
  std::string pending;  // the requeued job as scontrol showed it, pending without node2
  const auto [id, log] = run_job(dir.path(), {"--exclude-bad-nodes"}, [&](const std::string& job) {
    // The requeued job waits for 2 nodes other than node2, which this 2-node cluster lacks (a real
    // one has spares): once it is pending with node2 excluded, let it shrink to one node.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
    while (std::chrono::steady_clock::now() < deadline) {
      const std::string shown = show_job(job);
      if (contains(shown, "JobState=PENDING") && contains(shown, "ExcNodeList=node2") &&
          !contains(shown, "Reason=job_requeued_in_held_state")) {
        pending = shown;
        break;
      }
      if (contains(shown, "JobState=COMPLETED") || contains(shown, "JobState=FAILED")) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    const auto p = test::run_process({test::find_on_path("scontrol"), "update", "JobId=" + job, "NumNodes=1", "NumTasks=1"}, env_, 20);
    EXPECT_EQ(p->exit_code(), 0) << p->err();
  });
  ASSERT_FALSE(id.empty());
  EXPECT_TRUE(contains(pending, "ExcNodeList=node2")) << "the requeued job never showed pending without node2\n" << log;
  EXPECT_TRUE(contains(pending, "libtrain_health_requeues=1")) << pending;
  EXPECT_TRUE(contains(log, "--health-check: node(s) node2: GEMM throughput below 0.5")) << log;
  EXPECT_TRUE(contains(log, "requeued job " + id + " without node2 (health requeue 1 of 3)")) << log;
  EXPECT_TRUE(contains(log, "Requeued job " + id + " with ExcNodeList=node2")) << log;
  // The requeued run: node1 alone, one rank, trained to the end.
  EXPECT_TRUE(contains(log, "ddp: job " + id + ", restart 1: 1 node(s) node1")) << log;
  EXPECT_TRUE(contains(log, "health check: 1 node(s), ")) << log;
  EXPECT_TRUE(contains(log, "all-reduce bus bandwidth between nodes, one rank per node: - (one node)")) << log;
  // No rank of the requeued run is on node2 (SLURM may start the job's tasks on node1 alone).
  const size_t restart = log.find("restart 1:");
  EXPECT_FALSE(restart == std::string::npos || contains(log.substr(restart), " node2]")) << log;
  const auto done = nlohmann::json::parse(test::event_line(log), nullptr, false);
  ASSERT_FALSE(done.is_discarded()) << log;
  EXPECT_EQ(done.value("event", ""), "done");
  EXPECT_GE(done.value("world_size", 0), 1);
  const std::string shown = show_job(id);
  EXPECT_TRUE(contains(shown, "JobState=COMPLETED")) << shown;
  EXPECT_TRUE(contains(shown, "NodeList=node1 ")) << shown;
}

// 2 nodes x 2 ranks: each node's own all-reduce, one between the nodes' first ranks, one over all.
TEST_F(SlurmHealthTest, TwoRanksPerNodeMeasureWithinAndBetweenNodes) {
  if (!exists(bin("train"))) GTEST_SKIP() << "no train program in this build (TRAIN_WITH_TORCH=OFF)";
  if (test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  env_.erase("TRAIN_FAULT_SLOW_NODE");
  test::TempDir dir("slurm-health-2x2", test::job_root());
  // Every "node" here shares one loaded machine: a tiny fraction keeps noise from failing the check.
  const auto [id, log] = run_job(dir.path(), {"--health-min-fraction", "0.01"}, nullptr, {"--ntasks-per-node=2"});
  ASSERT_FALSE(id.empty());
  EXPECT_TRUE(contains(log, "health check: 2 node(s), 4 rank(s)")) << log;
  const auto node1 = row_of(log, "node1");
  const auto node2 = row_of(log, "node2");
  ASSERT_EQ(node1.size(), 7u) << log;
  ASSERT_EQ(node2.size(), 7u) << log;
  EXPECT_EQ(node1[1], "0,1");
  EXPECT_EQ(node2[1], "2,3");
  EXPECT_TRUE(is_positive_number(node1[4]) && is_positive_number(node2[4])) << log;  // within-node GB/s
  EXPECT_TRUE(is_positive_number(node1[5]) && is_positive_number(node2[5])) << log;  // the other node's
  EXPECT_DOUBLE_EQ(std::stod(node1[5]), std::stod(node2[4]));
  EXPECT_TRUE(is_positive_number(gbps_after(log, "between nodes (2 ranks, the lowest of each node), 4 MB, gloo: "))) << log;
  EXPECT_TRUE(is_positive_number(gbps_after(log, "over all 4 rank(s), 4 MB, gloo: "))) << log;
  EXPECT_TRUE(contains(log, "health check passed")) << log;
  const auto done = nlohmann::json::parse(test::event_line(log), nullptr, false);
  ASSERT_FALSE(done.is_discarded()) << log;
  EXPECT_EQ(done.value("event", ""), "done");
  EXPECT_EQ(done.value("world_size", 0), 4);
}

// TRAIN_FAULT_SLOW_NODE_NET=node2:30: node2's own all-reduce takes 30x as long; node2 is named
// for it (not for its GEMM) and the job fails with exit status 69.
TEST_F(SlurmHealthTest, ASlowWithinNodeAllReduceNamesItsNode) {
  if (!exists(bin("train"))) GTEST_SKIP() << "no train program in this build (TRAIN_WITH_TORCH=OFF)";
  if (test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  env_.erase("TRAIN_FAULT_SLOW_NODE");
  env_["TRAIN_FAULT_SLOW_NODE_NET"] = "node2:30";
  test::TempDir dir("slurm-health-net", test::job_root());
  const auto [id, log] = run_job(dir.path(), {}, nullptr, {"--ntasks-per-node=2"});
  ASSERT_FALSE(id.empty());
  EXPECT_TRUE(contains(log, "node(s) node2: within-node all-reduce bus bandwidth below 0.5 x the median of the other nodes'"))
      << log;
  EXPECT_FALSE(contains(log, "node(s) node1: within-node")) << log;
  const auto node2 = row_of(log, "node2");
  ASSERT_GE(node2.size(), 7u) << log;
  EXPECT_EQ(node2[6], "BAD:") << log;
  EXPECT_TRUE(contains(log, "within-node all-reduce below 0.5 x others' median")) << log;
  EXPECT_TRUE(contains(log, "Hint: sbatch --exclude=node2")) << log;
  EXPECT_TRUE(contains(log, "Exited with exit code 69")) << log;
  // trainctl run leaves node2 out: node1's 2 tasks train to the end in the same job.
  EXPECT_TRUE(contains(log, "restart 1/3: node failed health check on node2 (exit 69), left out node2; relaunching on "
                            "1 node(s), 2 task(s)")) << log;
  EXPECT_TRUE(contains(log, "health check: 1 node(s), 2 rank(s)")) << log;
  EXPECT_TRUE(contains(show_job(id), "JobState=COMPLETED")) << show_job(id);
}

// `trainctl sbatch --health-check --interface lo`: the options are in the generated script
// itself, not given at submission. Both nodes pass the check over lo (TRAIN_INTERFACE, which the
// script exports) with Gloo on the CPU, and the run trains to the end.
TEST_F(SlurmHealthTest, GeneratedScriptWithHealthCheckAndInterfaceTrains) {
  if (!exists(bin("train"))) GTEST_SKIP() << "no train program in this build (TRAIN_WITH_TORCH=OFF)";
  if (test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  env_.erase("TRAIN_FAULT_SLOW_NODE");  // no slow node: both pass
  test::TempDir dir("slurm-health-generated", test::job_root());
  // Both "nodes" share one loaded machine: a tiny fraction keeps a GEMM slowed by the other tests
  // (measured once at 0.5x of the other node's under the full suite) from failing the check.
  const std::string script =
      generate(dir, "hc", {"--health-check", "--health-min-fraction", "0.01", "--interface", "lo"});
  EXPECT_TRUE(contains(test::read_text(script), "\nexport TRAIN_INTERFACE=lo\n"));
  std::vector<std::string> args = {script};
  for (const std::string& a : short_run()) args.push_back(a);
  const auto [id, log] = submit(dir.path(), args, "hc");
  ASSERT_FALSE(id.empty());
  EXPECT_TRUE(contains(log, "health check: 2 node(s), 2 rank(s)")) << log;
  EXPECT_TRUE(contains(log, "node1")) << log;
  EXPECT_TRUE(contains(log, "node2")) << log;
  EXPECT_FALSE(contains(log, "BAD:")) << log;
  const auto done = nlohmann::json::parse(test::event_line(log), nullptr, false);
  ASSERT_FALSE(done.is_discarded()) << log;
  EXPECT_EQ(done.value("event", ""), "done") << log;
  EXPECT_EQ(done.value("world_size", 0), 2) << log;
  EXPECT_TRUE(contains(show_job(id), "JobState=COMPLETED")) << show_job(id);
}

// The exported TRAIN_INTERFACE reaches train on the nodes: an interface they lack stops it there with
// train's own error (trainctl checks only the name's form: the submit host's interfaces don't count).
TEST_F(SlurmHealthTest, GeneratedScriptsInterfaceIsCheckedOnTheNodes) {
  if (!exists(bin("train"))) GTEST_SKIP() << "no train program in this build (TRAIN_WITH_TORCH=OFF)";
  if (test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  env_.erase("TRAIN_FAULT_SLOW_NODE");
  test::TempDir dir("slurm-health-no-interface", test::job_root());
  const std::string script = generate(dir, "nif", {"--interface", "nosuch0"});
  std::vector<std::string> args = {script};
  for (const std::string& a : short_run()) args.push_back(a);
  const auto [id, log] = submit(dir.path(), args, "nif");
  ASSERT_FALSE(id.empty());
  EXPECT_TRUE(contains(log, "--interface 'nosuch0': expected a network interface of this host")) << log;
  EXPECT_FALSE(contains(log, "\"event\":\"done\"")) << log;
  EXPECT_TRUE(contains(show_job(id), "JobState=FAILED")) << show_job(id);
}

}  // namespace
}  // namespace train
