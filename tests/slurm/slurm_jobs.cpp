// The shared helpers of the SLURM job tests (slurm_jobs.h).
#include "slurm_jobs.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

namespace train::slurmtest {

using test::cluster_problem;
using test::run_in;
using test::TestProcess;

/// train's arguments for a short run: 2000 images per rank on 2 ranks, one thread each.
const std::vector<std::string> kQuickTrainArgs = {"--epochs", "1", "--limit-train-samples", "4000",
                                                  "--limit-test-samples", "500", "--threads", "1"};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
std::string source_path(const std::string& rel) { return std::string(TRAIN_SOURCE_DIR) + "/" + rel; }
std::string bin(const std::string& name) { return std::string(TRAIN_BINARY_DIR) + "/bin/" + name; }

bool exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

std::string user_name() {
  const passwd* pw = getpwuid(getuid());
  return pw != nullptr ? pw->pw_name : "user";
}

/// The test's environment for SLURM commands and jobs: slurm_env() plus the train program this
/// build made.
Env slurm_env() {
  Env env = test::slurm_env();
  env["TRAIN_BIN"] = bin("train");
  env["TRAINCTL_BIN"] = bin("trainctl");
  return env;
}

void SlurmTest::SetUp() {
  const char* flag = std::getenv("TRAIN_TEST_SLURM");
  if (flag != nullptr && std::string(flag) == "0") {
    GTEST_SKIP() << "TRAIN_TEST_SLURM=0: the SLURM tests are turned off";
  }
  env_ = slurm_env();
  const std::string problem = cluster_problem(env_);
  if (!problem.empty()) {
    FAIL() << "No usable SLURM cluster: " << problem
           << "\nHint: start the local one with `scripts/local-slurm.sh start` (as root; see docs/local-slurm.md), "
              "or set TRAIN_TEST_SLURM=0 to skip the slurm tests.";
  }
}

/// Submits with `sbatch --parsable --wait ARGS` from `dir` and waits for the job's end; a job still
/// running after the timeout is cancelled and the test fails.
Job submit_and_wait(const std::string& dir, const std::vector<std::string>& args, const Env& env,
                    const std::function<void(const std::string& id)>& while_running) {
  std::vector<std::string> argv = {"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", dir, test::find_on_path("sbatch"),
                                   "--parsable", "--wait"};
  argv.insert(argv.end(), args.begin(), args.end());
  TestProcess sbatch(argv, env);
  Job job;
  const bool submitted = sbatch.wait_for_stdout([](const std::string& out) { return out.find('\n') != std::string::npos; }, 30);
  job.id = test::lines_of(sbatch.out()).empty() ? "" : test::lines_of(sbatch.out()).front();
  job.id = job.id.substr(0, job.id.find(';'));
  if (!submitted || job.id.empty()) {
    sbatch.wait(5);
    ADD_FAILURE() << "sbatch did not submit (exit " << sbatch.exit_code() << "): " << sbatch.err();
    return job;
  }
  if (while_running) while_running(job.id);
  if (!sbatch.wait(kJobTimeoutSeconds)) {
    test::run_process({test::find_on_path("scancel"), job.id}, env, 20);
    sbatch.wait(30);
    ADD_FAILURE() << "job " << job.id << " did not end within " << kJobTimeoutSeconds << " s; cancelled it";
  }
  job.sbatch_exit = sbatch.exit_code();
  job.sbatch_err = sbatch.err();
  return job;
}

/// The lines for job `id` run from `workdir` in the local cluster's jobcomp file. A requeued job has
/// several; the work dir tells this job apart from an earlier cluster's job of the same id.
std::vector<std::string> jobcomp_lines(const std::string& id, const std::string& workdir, const Env& env) {
  const std::string conf = env.count("SLURM_CONF") ? env.at("SLURM_CONF") : "";
  std::vector<std::string> found;
  for (const std::string& line : test::lines_of(test::read_text(conf.substr(0, conf.rfind('/') + 1) + "jobcomp.txt"))) {
    if (line.rfind("JobId=" + id + " ", 0) == 0 && contains(line, " WorkDir=" + workdir + " ")) found.push_back(line);
  }
  return found;
}

/// The last jobcomp line of job `id` run from `workdir`, waiting up to 30 s for slurmctld to write
/// it ("" when it never comes).
std::string jobcomp_line(const std::string& id, const std::string& workdir, const Env& env) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (true) {
    const std::vector<std::string> lines = jobcomp_lines(id, workdir, env);
    if (!lines.empty() || std::chrono::steady_clock::now() >= deadline) return lines.empty() ? "" : lines.back();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

/// The job's state from `scontrol show job` (kept for MinJobAge after the end), else from its last
/// line in the local cluster's jobcomp file (a requeued job has several).
std::string job_state(const std::string& id, const Env& env, const std::string& workdir) {
  const auto p = test::run_process({test::find_on_path("scontrol"), "show", "job", id}, env, 20);
  const std::size_t at = p->out().find("JobState=");
  if (p->exit_code() == 0 && at != std::string::npos) {
    return p->out().substr(at + 9, p->out().find_first_of(" \n", at) - at - 9);
  }
  const std::string line = workdir.empty() ? "" : jobcomp_line(id, workdir, env);
  const std::size_t s = line.find("JobState=");
  if (s == std::string::npos) return "unknown (scontrol: " + p->err() + ")";
  return line.substr(s + 9, line.find(' ', s) - s - 9);
}

/// The trainer's done line: the log's last line that starts with {"event" (test::event_line), parsed.
nlohmann::json done_line(const std::string& log) {
  const std::string last = test::event_line(log);
  try {
    return nlohmann::json::parse(last);
  } catch (const std::exception&) {
    ADD_FAILURE() << "the log has no event line: '" << last << "'\nlog:\n" << log;
    return nlohmann::json::object();
  }
}

/// params_sha256 of the same training under `trainctl local --nproc N`, in `dir`.
std::string local_reference(const std::string& dir, int nproc, const std::vector<std::string>& train_args) {
  std::vector<std::string> argv = {bin("trainctl"), "local", "--nproc", std::to_string(nproc), "--no-prefix", "--",
                                   bin("train")};
  argv.insert(argv.end(), train_args.begin(), train_args.end());
  const auto p = run_in(dir, argv, test::hermetic_env(), 300);
  EXPECT_EQ(p->exit_code(), 0) << p->err();
  const nlohmann::json done = nlohmann::json::parse(test::last_line(p->out()), nullptr, false);
  if (done.is_discarded() || !done.contains("params_sha256")) {
    ADD_FAILURE() << "trainctl local printed no done line: " << p->out() << p->err();
    return "";
  }
  EXPECT_EQ(done.value("world_size", 0), nproc);
  return done["params_sha256"];
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// The pid of the train task with this job id and SLURM_PROCID, found through /proc/*/environ.
int find_task_pid(const std::string& job_id, int procid) {
  for (const std::string& entry : train::test::lines_of(train::test::run_process(
           {"/bin/sh", "-c", "ls /proc | grep -E '^[0-9]+$'"}, test::hermetic_env(), 10)->out())) {
    const std::string comm = test::read_text("/proc/" + entry + "/comm");
    if (comm.rfind("train", 0) != 0 || comm.rfind("trainctl", 0) == 0) continue;
    std::string environ = test::read_text("/proc/" + entry + "/environ");
    for (char& c : environ) if (c == '\0') c = '\n';
    if (contains(environ, "\nSLURM_JOB_ID=" + job_id + "\n") &&
        contains(environ, "\nSLURM_PROCID=" + std::to_string(procid) + "\n")) {
      return std::stoi(entry);
    }
  }
  return -1;
}

}  // namespace train::slurmtest
