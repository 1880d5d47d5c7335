// A node that dies mid-training on the real cluster: node2's slurmd and its train task
// are killed with SIGKILL, as when a node crashes. trainctl run relaunches the step in the same job,
// leaves node2 out once SLURM can't launch there (srun --exclude), and the job finishes on one
// node from the newest snapshot or checkpoint. It stops a slurmd, so it runs alone (RUN_SERIAL),
// and it starts node2's slurmd again and returns the node to service whatever the outcome.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "slurm_jobs.h"
#include "train/base/run_record.h"

namespace train {
namespace {

using namespace slurmtest;  // NOLINT: the shared helpers of the SLURM job tests

// The pid of node `node`'s slurmd (its command line: slurmd -D -f CONF -N NODE), -1 when none runs.
int slurmd_pid(const std::string& node) {
  const auto ls = test::run_process({"/bin/sh", "-c", "ls /proc | grep -E '^[0-9]+$'"}, test::hermetic_env(), 10);
  for (const std::string& entry : test::lines_of(ls->out())) {
    std::string cmdline = test::read_text("/proc/" + entry + "/cmdline");
    for (char& c : cmdline) c = c == '\0' ? ' ' : c;
    if (cmdline.rfind("slurmd ", 0) == 0 && contains(cmdline, " -N " + node + " ")) return std::stoi(entry);
  }
  return -1;
}

// node2's state in `scontrol show node`: IDLE, MIXED, DOWN+NOT_RESPONDING, IDLE+COMPLETING, ...
std::string node2_state(const Env& env) {
  const auto p = test::run_process({test::find_on_path("scontrol"), "show", "node", "node2"}, env, 20);
  const std::size_t at = p->out().find("State=");
  return at == std::string::npos ? "" : p->out().substr(at + 6, p->out().find_first_of(" \n", at) - at - 6);
}

// Starts node2's slurmd again (scripts/local-slurm.sh start starts what is missing). The node may
// then stay COMPLETING until SLURM gives up on the dead slurmd's job end (over a minute): setting it
// DOWN ends that, and RESUME returns it. Waits up to 180 s for scontrol to say IDLE.
class Node2Back {
 public:
  explicit Node2Back(const Env& env) : env_(env) {}
  ~Node2Back() {
    test::run_process({source_path("scripts/local-slurm.sh"), "start"}, env_, 120);
    const std::string scontrol = test::find_on_path("scontrol");
    const auto start = std::chrono::steady_clock::now();
    auto last_nudge = start - std::chrono::seconds(60);
    std::string state;
    while (std::chrono::steady_clock::now() - start < std::chrono::seconds(180)) {
      state = node2_state(env_);
      if (state == "IDLE") return;
      if (std::chrono::steady_clock::now() - last_nudge > std::chrono::seconds(20)) {
        test::run_process({scontrol, "update", "nodename=node2", "state=down", "reason=node_loss_test"}, env_, 20);
        test::run_process({scontrol, "update", "nodename=node2", "state=resume"}, env_, 20);
        last_nudge = std::chrono::steady_clock::now();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    ADD_FAILURE() << "node2 did not come back to IDLE after the test (State=" << state << ")";
  }

 private:
  Env env_;
};

TEST_F(SlurmTest, ANodeThatDiesIsLeftOutAndTheJobFinishesOnFewerNodes) {
  if (!have_train()) GTEST_SKIP() << "no train program in this build (TRAIN_WITH_TORCH=OFF)";
  test::TempDir dir("slurm-node-loss", test::job_root());
  mkdir(dir.file("logs").c_str(), 0755);
  const auto generated = test::run_process({bin("trainctl"), "sbatch", "--job-name", "ddp", "--nodes", "2",
                                            "--ntasks-per-node", "1", "--no-cluster-checks", "--out", dir.file("job.sh")},
                                           env_, 60);
  ASSERT_EQ(generated->exit_code(), 0) << generated->err();
  const std::vector<std::string> args = {"--epochs", "1", "--limit-train-samples", "8000", "--limit-test-samples",
                                         "300", "--threads", "1", "--snapshot-every", "5", "--log-interval", "5"};
  Node2Back restore(env_);
  bool killed = false;
  const Job job = submit_and_wait(dir.path(), concat({dir.file("job.sh")}, args), env_, [&](const std::string& id) {
    // Once train has reported step 10 (a snapshot at step 10 is then in the nodes' memory or on its way).
    const std::string record = RunRecord::path_for(dir.path(), id);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
      std::optional<RunRecord> r;
      try {
        r = RunRecord::load(record);
      } catch (const std::exception&) {
      }
      if (r && r->progress_step >= 10) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const int slurmd = slurmd_pid("node2");
    const int task = find_task_pid(id, 1);
    ASSERT_GT(slurmd, 0) << "no slurmd for node2";
    ASSERT_GT(task, 0) << "no train process with SLURM_PROCID=1 for job " << id;
    ASSERT_EQ(::kill(slurmd, SIGKILL), 0);
    ASSERT_EQ(::kill(task, SIGKILL), 0);
    killed = true;
  });
  ASSERT_FALSE(job.id.empty());
  ASSERT_TRUE(killed);
  const std::string log = test::read_text(dir.file("logs/ddp-" + job.id + ".out"));
  // The job's script ended with 0; node2's share of the job may still be ending (its slurmd died).
  EXPECT_EQ(job.sbatch_exit, 0) << job.sbatch_err << log;
  const std::string state = job_state(job.id, env_);
  EXPECT_TRUE(state == "COMPLETED" || state == "COMPLETING") << state << "\n" << log;
  const nlohmann::json done = done_line(log);
  EXPECT_EQ(done.value("event", ""), "done") << log;
  EXPECT_EQ(done.value("world_size", 0), 1) << log;
  EXPECT_TRUE(contains(log, "left out node2; relaunching on 1 node(s), 1 task(s)")) << log;
  const std::optional<RunRecord> record = RunRecord::load(RunRecord::path_for(dir.path(), job.id));
  ASSERT_TRUE(record.has_value());
  ASSERT_FALSE(record->restarts.empty());
  const RestartEntry& last = record->restarts.back();
  EXPECT_EQ(last.cause, "lost node") << log;
  EXPECT_EQ(last.nodes, std::vector<std::string>{"node2"});
  EXPECT_TRUE(last.excluded);
  EXPECT_GE(last.resumed_step, 5) << "from a snapshot or checkpoint, not from the start\n" << log;
  EXPECT_GT(done.value("steps", 0), last.resumed_step) << log;
}

}  // namespace
}  // namespace train
