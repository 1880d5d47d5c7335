// What the SLURM job tests share (slurm_test.cpp, slurm_restart_test.cpp, node_loss_test.cpp): the fixture that needs a live
// cluster, submitting a job and waiting for it, its state and done line, the reference run under
// `trainctl local`, and finding a job's train task. Test code only.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "slurm_util.h"
#include "test_process.h"
#include "test_util.h"

namespace train::slurmtest {

using test::Env;

/// How long one job may take from submission to its end before the test cancels it.
constexpr double kJobTimeoutSeconds = 240;
/// train's arguments for a short run: 2000 images per rank on 2 ranks, one thread each.
extern const std::vector<std::string> kQuickTrainArgs;

bool contains(const std::string& text, const std::string& part);
std::string source_path(const std::string& rel);
std::string bin(const std::string& name);
bool exists(const std::string& path);
std::string user_name();

/// The test's environment for SLURM commands and jobs: test::slurm_env() plus the train program
/// this build made.
Env slurm_env();

/// Base of the SLURM tests: fails when the cluster is down, skips when TRAIN_TEST_SLURM=0.
class SlurmTest : public ::testing::Test {
 protected:
  void SetUp() override;
  /// Skips a test that needs the LibTorch train program when this build has none.
  bool have_train() const { return exists(bin("train")); }

  Env env_;
};

/// A job submitted with `sbatch --parsable --wait` and what became of it.
struct Job {
  std::string id;
  int sbatch_exit = -1;
  std::string sbatch_err;
};

/// Submits with `sbatch --parsable --wait ARGS` from `dir` and waits for the job's end; a job still
/// running after the timeout is cancelled and the test fails.
Job submit_and_wait(const std::string& dir, const std::vector<std::string>& args, const Env& env,
                    const std::function<void(const std::string& id)>& while_running = nullptr);

/// The lines for job `id` run from `workdir` in the local cluster's jobcomp file. A requeued job has
/// several; the work dir tells this job apart from an earlier cluster's job of the same id.
std::vector<std::string> jobcomp_lines(const std::string& id, const std::string& workdir, const Env& env);

/// The last jobcomp line of job `id` run from `workdir`, waiting up to 30 s for slurmctld to write
/// it ("" when it never comes).
std::string jobcomp_line(const std::string& id, const std::string& workdir, const Env& env);

/// The job's state from `scontrol show job` (kept for MinJobAge after the end), else from its last
/// line in the local cluster's jobcomp file (a requeued job has several).
std::string job_state(const std::string& id, const Env& env, const std::string& workdir = "");

/// The trainer's done line: the log's last line that starts with {"event" (test::event_line), parsed.
nlohmann::json done_line(const std::string& log);

/// params_sha256 of the same training under `trainctl local --nproc N`, in `dir`.
std::string local_reference(const std::string& dir, int nproc, const std::vector<std::string>& train_args);

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b);

/// The pid of the train task with this job id and SLURM_PROCID, found through /proc/*/environ (-1: none).
int find_task_pid(const std::string& job_id, int procid);

}  // namespace train::slurmtest
