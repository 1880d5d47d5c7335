// Tests for the trainctl program (launcher/app/trainctl_*.cpp and launcher/src/local_*.cpp),
// run as a real process: hostnames, hostlist, env, the command line's errors, and `trainctl local`
// (rank environments, output prefixes, failure propagation, signal forwarding, cleanup).
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_process.h"

namespace train {
namespace {

using test::Env;
using test::TestProcess;

std::string trainctl() { return std::string(TRAIN_BINARY_DIR) + "/bin/trainctl"; }

std::unique_ptr<TestProcess> run(const std::vector<std::string>& args, Env env = test::hermetic_env(),
                                 double timeout_s = 30) {
  std::vector<std::string> argv = {trainctl()};
  argv.insert(argv.end(), args.begin(), args.end());
  auto p = test::run_process(argv, env, timeout_s);
  EXPECT_TRUE(p->finished()) << "trainctl did not finish within " << timeout_s << " s; stderr: " << p->err();
  return p;
}

std::unique_ptr<TestProcess> start(const std::vector<std::string>& args, Env env = test::hermetic_env()) {
  std::vector<std::string> argv = {trainctl()};
  argv.insert(argv.end(), args.begin(), args.end());
  return std::make_unique<TestProcess>(argv, env);
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (std::size_t pos = text.find(part); pos != std::string::npos; pos = text.find(part, pos + 1)) ++n;
  return n;
}

/// True when the process no longer runs (gone, or a zombie waiting for init to reap it).
bool process_gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const std::size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

bool gone_within(pid_t pid, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!process_gone(pid)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// ---- hostnames / hostlist -----------------------------------------------------------------

TEST(TrainctlHostnames, PrintsOneHostPerLine) {
  const auto p = run({"hostnames", "a,b[1-2],c-ib[001,003]"});
  EXPECT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_EQ(p->out(), "a\nb1\nb2\nc-ib001\nc-ib003\n");
  EXPECT_EQ(p->err(), "");
}

TEST(TrainctlHostnames, InvalidExpressionExitsOne) {
  const auto p = run({"hostnames", "n[3-1]"});
  EXPECT_EQ(p->exit_code(), 1);
  EXPECT_EQ(p->out(), "");
  EXPECT_TRUE(contains(p->err(), "hostlist 'n[3-1]': expected")) << p->err();
  EXPECT_TRUE(contains(p->err(), "Hint: ")) << p->err();
}

TEST(TrainctlHostnames, DefaultsToSlurmJobNodelist) {
  Env env = test::hermetic_env();
  env["SLURM_JOB_NODELIST"] = "gpu[1-2]-ib[3-4]";
  const auto p = run({"hostnames"}, env);
  EXPECT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_EQ(p->out(), "gpu1-ib3\ngpu1-ib4\ngpu2-ib3\ngpu2-ib4\n");

  const auto none = run({"hostnames"});
  EXPECT_EQ(none->exit_code(), 1);
  EXPECT_TRUE(contains(none->err(), "SLURM_JOB_NODELIST unset")) << none->err();
}

TEST(TrainctlHostlist, Compresses) {
  const auto p = run({"hostlist", "n1", "n2", "n3,n5", "m1"});
  EXPECT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_EQ(p->out(), "n[1-3,5],m1\n");
}

// ---- command line ---------------------------------------------------------------------------

TEST(TrainctlCli, HelpForEverySubcommand) {
  const auto top = run({"--help"});
  EXPECT_EQ(top->exit_code(), 0);
  for (const char* sub : {"hostnames", "hostlist", "env", "local"}) {
    EXPECT_TRUE(contains(top->out(), sub)) << top->out();
    const auto p = run({sub, "--help"});
    EXPECT_EQ(p->exit_code(), 0) << sub;
    EXPECT_TRUE(contains(p->out(), std::string("Usage: trainctl ") + sub)) << p->out();
  }
  const auto version = run({"--version"});
  EXPECT_EQ(version->exit_code(), 0);
  EXPECT_TRUE(contains(version->out(), "trainctl ")) << version->out();
}

TEST(TrainctlCli, UnknownFlagsAndSubcommandsAreUsageErrors) {
  const auto flag = run({"local", "--nprocs", "2", "--", "true"});
  EXPECT_EQ(flag->exit_code(), 2);
  EXPECT_TRUE(contains(flag->err(), "--nprocs")) << flag->err();
  EXPECT_TRUE(contains(flag->err(), "Hint: did you mean --nproc? ")) << flag->err();

  const auto sub = run({"lcoal"});
  EXPECT_EQ(sub->exit_code(), 2);
  EXPECT_TRUE(contains(sub->err(), "unknown subcommand 'lcoal'")) << sub->err();
  EXPECT_TRUE(contains(sub->err(), "Hint: did you mean local? ")) << sub->err();

  const auto none = run({});
  EXPECT_EQ(none->exit_code(), 2);

  const auto bad_value = run({"local", "--nproc", "zero", "--", "true"});
  EXPECT_EQ(bad_value->exit_code(), 2);
  EXPECT_TRUE(contains(bad_value->err(), "--nproc")) << bad_value->err();

  const auto missing = run({"local", "--", "true"});
  EXPECT_EQ(missing->exit_code(), 1);
  EXPECT_TRUE(contains(missing->err(), "--nproc: expected")) << missing->err();
}

// ---- env ------------------------------------------------------------------------------------

TEST(TrainctlEnv, PrintsTheSlurmLayoutAsJson) {
  Env env = test::hermetic_env();
  env.insert({{"SLURM_JOB_ID", "12345"}, {"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NODELIST", "node[01-02]"},
              {"SLURM_STEP_NUM_NODES", "2"}, {"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
              {"SLURM_PROCID", "3"}, {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "1"}, {"CUDA_VISIBLE_DEVICES", ""}});
  const auto p = run({"env"}, env);
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  ASSERT_EQ(count_of(p->out(), "\n"), 1u) << "expected one line: " << p->out();
  const nlohmann::json j = nlohmann::json::parse(p->out());
  EXPECT_EQ(j["rank"], 3);
  EXPECT_EQ(j["world_size"], 4);
  EXPECT_EQ(j["local_rank"], 1);
  EXPECT_EQ(j["local_world_size"], 2);
  EXPECT_EQ(j["node_rank"], 1);
  EXPECT_EQ(j["num_nodes"], 2);
  EXPECT_EQ(j["master_addr"], "node01");
  EXPECT_EQ(j["master_port"], 20000 + 2345 * 16);
  EXPECT_EQ(j["backend"], "gloo");
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["source"], "slurm");
  EXPECT_EQ(j["job_id"], "12345");
  EXPECT_EQ(j["nodes"], nlohmann::json::array({"node01", "node02"}));
}

TEST(TrainctlEnv, SingleProcessOutsideAnyLauncher) {
  const auto p = run({"env", "--pretty"});
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  const nlohmann::json j = nlohmann::json::parse(p->out());
  EXPECT_EQ(j["source"], "single");
  EXPECT_EQ(j["world_size"], 1);
  EXPECT_EQ(j["master_port"], 29500);
  EXPECT_TRUE(j["job_id"].is_null());
}

TEST(TrainctlEnv, InvalidEnvironmentExitsOne) {
  Env env = test::hermetic_env();
  env.insert({{"SLURM_PROCID", "abc"}, {"SLURM_NTASKS", "2"}});
  const auto p = run({"env"}, env);
  EXPECT_EQ(p->exit_code(), 1);
  EXPECT_EQ(p->out(), "");
  EXPECT_TRUE(contains(p->err(), "SLURM_PROCID='abc': expected a non-negative integer")) << p->err();
  EXPECT_TRUE(contains(p->err(), "Hint: ")) << p->err();

  Env no_gpu = test::hermetic_env();
  no_gpu["CUDA_VISIBLE_DEVICES"] = "";
  const auto nccl = run({"env", "--backend", "nccl"}, no_gpu);
  EXPECT_EQ(nccl->exit_code(), 1);
  EXPECT_TRUE(contains(nccl->err(), "backend 'nccl': expected at least one visible GPU")) << nccl->err();

  const auto bad_backend = run({"env", "--backend", "mpi"});
  EXPECT_EQ(bad_backend->exit_code(), 2);
}

// ---- local ----------------------------------------------------------------------------------

TEST(TrainctlLocal, GivesEachRankItsEnvironment) {
  const auto p = run({"local", "--nproc", "3", "--", "sh", "-c",
                      "echo \"$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT\""});
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  std::vector<std::string> lines = test::lines_of(p->out());
  ASSERT_EQ(lines.size(), 3u) << p->out();
  std::sort(lines.begin(), lines.end());
  std::string port;
  for (int r = 0; r < 3; ++r) {
    std::istringstream in(lines[static_cast<std::size_t>(r)]);
    std::string prefix, rank, world, local_rank, local_world, group, addr, this_port;
    in >> prefix >> rank >> world >> local_rank >> local_world >> group >> addr >> this_port;
    EXPECT_EQ(prefix, "[r" + std::to_string(r) + "]");
    EXPECT_EQ(rank, std::to_string(r));
    EXPECT_EQ(world, "3");
    EXPECT_EQ(local_rank, std::to_string(r));
    EXPECT_EQ(local_world, "3");
    EXPECT_EQ(group, "0");
    EXPECT_EQ(addr, "127.0.0.1");
    if (r == 0) port = this_port;
    EXPECT_EQ(this_port, port);
  }
  const int port_number = std::stoi(port);
  EXPECT_GT(port_number, 0);
  EXPECT_LE(port_number, 65535);
}

TEST(TrainctlLocal, FixedMasterPortAndNoPrefix) {
  const auto p = run({"local", "--nproc", "2", "--master-port", "29999", "--no-prefix", "--", "sh", "-c",
                      "echo \"port=$MASTER_PORT\""});
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_EQ(p->out(), "port=29999\nport=29999\n");
}

TEST(TrainctlLocal, RanksResolveTheirEnvironmentOverSlurm) {
  Env env = test::hermetic_env();
  // Inside a SLURM step the torchrun-style variables set by `trainctl local` win.
  env.insert({{"SLURM_JOB_ID", "99"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"CUDA_VISIBLE_DEVICES", ""}});
  const auto p = run({"local", "--nproc", "2", "--", trainctl(), "env"}, env);
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  int seen = 0;
  for (const std::string& line : test::lines_of(p->out())) {
    ASSERT_EQ(line.rfind("[r", 0), 0u) << line;
    const int r = line[2] - '0';
    const nlohmann::json j = nlohmann::json::parse(line.substr(5));
    EXPECT_EQ(j["rank"], r);
    EXPECT_EQ(j["local_rank"], r);
    EXPECT_EQ(j["world_size"], 2);
    EXPECT_EQ(j["source"], "torchrun");
    EXPECT_EQ(j["job_id"], "99");
    EXPECT_EQ(j["device"], "cpu");
    ++seen;
  }
  EXPECT_EQ(seen, 2);
}

TEST(TrainctlLocal, KeepsStreamsApartAndLinesWhole) {
  // Long lines from several ranks at once must come out whole, each with its own prefix, and
  // the last stdout line of a rank (the trainer's JSON result) must stay intact.
  const std::string script =
      "i=0; while [ $i -lt 20 ]; do printf '%0200000d\\n' $((RANK+1)); echo \"err $RANK $i\" >&2; i=$((i+1)); done;"
      " printf '{\"rank\": %s, \"ok\": true}' $RANK";
  const auto p = run({"local", "--nproc", "3", "--", "sh", "-c", script});
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  int long_lines = 0, json_lines = 0;
  for (const std::string& line : test::lines_of(p->out())) {
    ASSERT_GE(line.size(), 5u);
    const std::string prefix = line.substr(0, 5);
    ASSERT_TRUE(prefix == "[r0] " || prefix == "[r1] " || prefix == "[r2] ") << line.substr(0, 40);
    const std::string body = line.substr(5);
    if (body[0] == '{') {
      const nlohmann::json j = nlohmann::json::parse(body);
      EXPECT_EQ(j["rank"], prefix[2] - '0');
      ++json_lines;
    } else {
      ASSERT_EQ(body.size(), 200000u);
      EXPECT_EQ(body.back(), prefix[2] + 1);
      EXPECT_EQ(body.find_first_not_of('0'), body.size() - 1);
      ++long_lines;
    }
  }
  EXPECT_EQ(long_lines, 60);
  EXPECT_EQ(json_lines, 3);
  EXPECT_EQ(count_of(p->err(), "\n"), 60u);
  for (const std::string& line : test::lines_of(p->err())) {
    EXPECT_TRUE(line.rfind("[r", 0) == 0 && contains(line, "] err ")) << line;
  }
}

TEST(TrainctlLocal, BrokenStdoutReachesTheRanks) {
  // `trainctl local ... | head -1`: once the reader is gone the ranks must see the broken pipe
  // (and end) rather than write into trainctl for ever.
  auto p = start({"local", "--nproc", "2", "--", "sh", "-c", "yes"});
  ASSERT_TRUE(p->wait_for_stdout([](const std::string& out) { return out.size() > 1000; }, 10)) << p->err();
  p->close_stdout();
  ASSERT_TRUE(p->wait(10)) << "trainctl kept running after its stdout closed: " << p->err();
  EXPECT_EQ(p->exit_code(), 128 + SIGPIPE) << p->err();
}

TEST(TrainctlLocal, StdinIsDevNull) {
  const auto p = run({"local", "--nproc", "1", "--", "sh", "-c", "read x; echo \"read:$?:$x\""}, test::hermetic_env(), 10);
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_EQ(p->out(), "[r0] read:1:\n");
}

TEST(TrainctlLocal, FailingRankStopsTheOthersQuickly) {
  const std::string dir = testing::TempDir();
  const std::string pidfile = dir + "/trainctl_test_bg_pid";
  std::remove(pidfile.c_str());
  const std::string finished = dir + "/trainctl_test_rank0_finished";
  std::remove(finished.c_str());
  const std::string script =
      "if [ \"$RANK\" = 1 ]; then sleep 0.3; echo failing >&2; exit 3; fi;"
      " sleep 30 & echo $! > " + pidfile + "; wait; touch " + finished;
  const auto p = run({"local", "--nproc", "2", "--", "sh", "-c", script});
  EXPECT_EQ(p->exit_code(), 3) << p->err();
  // Rank 0 was stopped, not left to finish its sleep.
  EXPECT_TRUE(contains(p->err(), "stopping the other 1 rank(s)")) << p->err();
  EXPECT_FALSE(std::ifstream(finished).good()) << "the sleeping rank ran to its end";
  EXPECT_TRUE(contains(p->err(), "[r1] failing")) << p->err();
  EXPECT_TRUE(contains(p->err(), "rank 1 (pid ")) << p->err();
  EXPECT_TRUE(contains(p->err(), "exit code 3")) << p->err();
  EXPECT_TRUE(contains(p->err(), "rank 1 failed first")) << p->err();
  // The background sleep of rank 0 was in its process group: it must be gone too.
  std::ifstream in(pidfile);
  pid_t bg = 0;
  ASSERT_TRUE(in >> bg) << "rank 0 did not write its background pid";
  EXPECT_TRUE(gone_within(bg, 3.0)) << "rank 0's background process " << bg << " survived";
}

TEST(TrainctlLocal, RankKilledBySignalGives128PlusSignal) {
  const auto p = run({"local", "--nproc", "2", "--", "sh", "-c", "if [ \"$RANK\" = 0 ]; then kill -KILL $$; fi; sleep 30"});
  EXPECT_EQ(p->exit_code(), 128 + SIGKILL) << p->err();
  EXPECT_TRUE(contains(p->err(), "stopping the other 1 rank(s)")) << p->err();
  EXPECT_TRUE(contains(p->err(), "rank 0 (pid ")) << p->err();
  EXPECT_TRUE(contains(p->err(), "killed by SIGKILL")) << p->err();
}

TEST(TrainctlLocal, RankIgnoringSigtermIsKilledAfterTheGracePeriod) {
  const std::string finished = testing::TempDir() + "/trainctl_test_ignorer_finished";
  std::remove(finished.c_str());
  const auto p = run({"local", "--nproc", "2", "--grace-period", "1", "--", "sh", "-c",
                      "if [ \"$RANK\" = 1 ]; then sleep 0.3; exit 5; fi; trap '' TERM; sleep 30; touch " + finished});
  EXPECT_EQ(p->exit_code(), 5) << p->err();
  EXPECT_TRUE(contains(p->err(), "(SIGTERM, SIGKILL after 1 s)")) << p->err();
  EXPECT_GE(p->seconds(), 1.0) << "the grace period was not given";
  // The rank that ignored SIGTERM was killed, not left to run its sleep out.
  EXPECT_FALSE(std::ifstream(finished).good()) << "the rank ignoring SIGTERM ran to its end";
}

TEST(TrainctlLocal, AllRanksSucceedingExitsZero) {
  const auto p = run({"local", "--nproc", "4", "--", "true"});
  EXPECT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_EQ(p->err(), "");
}

TEST(TrainctlLocal, ProgramNotFound) {
  const auto p = run({"local", "--nproc", "2", "--", "no-such-program-xyz", "--flag"});
  EXPECT_EQ(p->exit_code(), 127);
  EXPECT_TRUE(contains(p->err(), "PROGRAM 'no-such-program-xyz': expected an executable on PATH")) << p->err();
  EXPECT_TRUE(contains(p->err(), "Hint: ")) << p->err();

  const auto dir = run({"local", "--nproc", "1", "--", "/tmp"});
  EXPECT_EQ(dir->exit_code(), 127);
  EXPECT_TRUE(contains(dir->err(), "a directory")) << dir->err();
}

/// Starts `trainctl local` with ranks that print "ready" once their traps are set.
std::unique_ptr<TestProcess> start_ready_ranks(int nproc, const std::string& traps,
                                               const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"local", "--nproc", std::to_string(nproc)};
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"--", "sh", "-c", traps + "; echo ready; while true; do sleep 0.05; done"});
  auto p = start(args);
  const bool ready = p->wait_for_stdout(
      [nproc](const std::string& out) { return count_of(out, "ready") == static_cast<std::size_t>(nproc); }, 20);
  EXPECT_TRUE(ready) << "ranks never got ready: " << p->out() << p->err();
  return p;
}

TEST(TrainctlLocal, ForwardsSigusr1ToEveryRank) {
  auto p = start_ready_ranks(2, "trap 'echo usr1 $RANK; exit 0' USR1");
  p->send(SIGUSR1);
  ASSERT_TRUE(p->wait(10)) << p->out() << p->err();
  EXPECT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_TRUE(contains(p->out(), "[r0] usr1 0")) << p->out();
  EXPECT_TRUE(contains(p->out(), "[r1] usr1 1")) << p->out();
}

TEST(TrainctlLocal, ForwardsSigtermAndReturnsTheRanksCode) {
  auto p = start_ready_ranks(2, "trap 'echo term $RANK; exit 7' TERM");
  p->send(SIGTERM);
  ASSERT_TRUE(p->wait(10)) << p->out() << p->err();
  EXPECT_EQ(p->exit_code(), 7) << p->err();
  EXPECT_TRUE(contains(p->out(), "[r0] term 0")) << p->out();
  EXPECT_TRUE(contains(p->out(), "[r1] term 1")) << p->out();
  EXPECT_TRUE(contains(p->err(), "got SIGTERM")) << p->err();
}

TEST(TrainctlLocal, SecondSigintKillsAtOnce) {
  auto p = start_ready_ranks(2, "trap '' INT TERM", {"--grace-period", "60"});
  p->send(SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  p->send(SIGINT);
  ASSERT_TRUE(p->wait(10)) << "a second SIGINT should kill the ranks at once: " << p->err();
  EXPECT_EQ(p->exit_code(), 128 + SIGKILL) << p->err();
  EXPECT_TRUE(contains(p->err(), "second SIGINT")) << p->err();
}

}  // namespace
}  // namespace train
