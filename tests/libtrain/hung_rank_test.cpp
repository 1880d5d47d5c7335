// A stalled run names where every rank is (the roll-call) and ends on every rank; a slow rank is
// named by the straggler report. Real processes over Gloo on loopback, with faults injected
// through the environment (libtrain/src/fault_injection.h).
#include "gpu_count.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

using train::test::bin;
using train::test::run_program;

namespace {

constexpr const char* kNoData = "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";

std::string train_command(const std::string& extra) {
  std::string cmd = bin("train") + " --data " + train::test::fashion_mnist_dir() +
                    " --epochs 1 --limit-train-samples 3000 --limit-test-samples 200 --batch-size 16 --no-dropout "
                    "--device cpu --threads 1 --log-interval 1 ";
  return cmd + extra;
}

// How many times `what` occurs in `text`.
size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

// Three ranks started by hand (trainctl would end the others itself once one fails): rank 1
// sleeps in get_batch at step 5 far longer than the test may run. Each rank must end on its own,
// with the stall's status, and rank 0 must name rank 1 in get_batch.
TEST(HungRank, ASleepingRankIsNamedAndEveryRankExits) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << kNoData;
  train::test::TempDir d("hungrank");
  const std::string cmd = train_command("--stall-timeout 3 --dist-timeout 120");
  std::string script = "export MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(train::test::free_port()) +
                       " WORLD_SIZE=3 TRAIN_FAULT_SLEEP_AT_STEP=5:3600:1\n";
  for (int r = 0; r < 3; ++r) {
    const std::string rs = std::to_string(r);
    script += "RANK=" + rs + " LOCAL_RANK=" + rs + " " + cmd + " > " + d.file("r" + rs + ".out") + " 2> " +
              d.file("r" + rs + ".err") + " & p" + rs + "=$!\n";
  }
  script += "wait $p0; echo rc0=$?; wait $p1; echo rc1=$?; wait $p2; echo rc2=$?\n";
  // The time limit only guards against a hang; the ranks' exits are what the test waits for.
  auto r = run_program({"bash", "-c", script}, {}, 600);
  const std::string err0 = train::test::read_text(d.file("r0.err"));
  const std::string err1 = train::test::read_text(d.file("r1.err"));
  EXPECT_EQ(r.signal, 0) << "the ranks did not end on their own";
  EXPECT_NE(r.out.find("rc0=79"), std::string::npos) << r.out << err0;
  EXPECT_NE(r.out.find("rc1=79"), std::string::npos) << r.out << err1;
  EXPECT_NE(r.out.find("rc2=79"), std::string::npos) << r.out;
  EXPECT_NE(err0.find("Roll-call: ranks 0,2 in all-reduce of bucket 0 #"), std::string::npos) << err0;
  // The odd one out names its node (the roll-call reads each rank's from the store).
  EXPECT_NE(err0.find("(step 5); rank 1 on "), std::string::npos) << err0;
  EXPECT_NE(err0.find(" in get_batch at step 5 for "), std::string::npos) << err0;
  EXPECT_EQ(count(err0, "Roll-call:"), 1u) << err0;
  EXPECT_NE(err0.find("Hint:"), std::string::npos) << err0;
  EXPECT_NE(err1.find("found the run stalled"), std::string::npos) << err1;
  // Found by the roll-call, not by running into the process group's timeout.
  EXPECT_EQ(err0.find("(timeout 120 s)"), std::string::npos) << err0;
}

// Under trainctl local: rank 1 skips the stop check's all-reduce after step 4 and goes on to the
// next step's gradients, so it waits in another collective than the others. trainctl shows the
// roll-call on its stderr and exits with the stall's status.
TEST(HungRank, ARankThatSkipsACollectiveIsNamedThroughTrainctlLocal) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << kNoData;
  auto r = run_program({"bash", "-c", bin("trainctl") + " local --nproc 3 --no-prefix -- " +
                                          train_command("--stall-timeout 3 --dist-timeout 120")},
                       {"TRAIN_FAULT_SKIP_COLLECTIVE_AT_STEP=4:1"}, 600);
  EXPECT_EQ(r.exit_code, 79) << r.err;
  EXPECT_NE(r.err.find("Roll-call: ranks 0,2 in all-reduce #"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(stop check, step 4); rank 1 on "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" in all-reduce of bucket 0 #"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(step 5) for "), std::string::npos) << r.err;
}

// Rank 1 takes 1 s longer in every get_batch: over three epochs the epoch lines name it as the
// slowest, and then a warning names it as a straggler. Rank 0 is never named. (Rank 1 stays 20%
// over the median of two as long as a step computes in under 4 s, however loaded the machine.)
TEST(HungRank, ASlowRankIsNamedAsAStraggler) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << kNoData;
  auto r = run_program({"bash", "-c", bin("trainctl") + " local --nproc 2 --no-prefix -- " + bin("train") + " --data " +
                                          train::test::fashion_mnist_dir() +
                                          " --epochs 3 --limit-train-samples 128 --limit-test-samples 100 "
                                          "--batch-size 32 --device cpu --threads 1 --log-interval 100"},
                       {"TRAIN_FAULT_STEP_DELAY=1:1"}, 600);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count(r.err, "slowest rank 1 "), 3u) << r.err;
  EXPECT_NE(r.err.find("straggler: rank 1 ("), std::string::npos) << r.err;
  EXPECT_EQ(count(r.err, "straggler:"), 1u) << r.err;
  EXPECT_EQ(r.err.find("straggler: rank 0"), std::string::npos) << r.err;
}

TEST(HungRank, AMalformedFaultIsAClearError) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << kNoData;
  auto r = run_program({bin("train"), "--data", train::test::fashion_mnist_dir(), "--device", "cpu", "--epochs", "1",
                        "--limit-train-samples", "64"},
                       {"TRAIN_FAULT_SLEEP_AT_STEP=five"}, 120);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("TRAIN_FAULT_SLEEP_AT_STEP='five': expected STEP:SECONDS[:RANK]"), std::string::npos) << r.err;
}

TEST(HungRank, AStallTimeoutNotBelowTheGroupTimeoutIsRefused) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << kNoData;
  auto r = run_program({bin("train"), "--data", train::test::fashion_mnist_dir(), "--device", "cpu", "--stall-timeout",
                        "400", "--dist-timeout", "300", "--limit-train-samples", "64"},
                       {}, 120);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--stall-timeout 400: expected 0 (automatic) or fewer seconds than --dist-timeout (300)"),
            std::string::npos) << r.err;
}

// On 2 GPUs over NCCL: rank 1 sleeps in get_batch at step 30.
// The roll-call names it, every rank exits with the stall's status, and each rank writes torch's
// NCCL flight recorder into the checkpoint folder, says where, and the file is the pickle torch's
// analyser (python -m torch.distributed.flight_recorder.fr_trace) reads, with the all-reduces in it.
TEST(HungRankGpu, AnNcclStallIsNamedAndEachRankDumpsTheFlightRecorder) {
  const int n = train::test::nvidia_gpus();
  if (n < 2) GTEST_SKIP() << "needs 2 NVIDIA GPUs, found " << n << ": run scripts/gpu-check.sh on a node with 2 GPUs (docs/gpu.md)";
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << kNoData;
  train::test::TempDir d("frdump");
  auto r = run_program({"bash", "-c", bin("trainctl") + " local --nproc 2 --no-prefix -- " + bin("train") + " --data " +
                                          train::test::fashion_mnist_dir() +
                                          " --epochs 1 --limit-train-samples 6400 --limit-test-samples 200 --batch-size 64 "
                                          "--device cuda --backend nccl --peer-allreduce off --stall-timeout 5 "
                                          "--dist-timeout 120 --log-interval 10 --checkpoint-dir " + d.path()},
                       {"TRAIN_FAULT_SLEEP_AT_STEP=30:3600:1", "NCCL_NVLS_ENABLE=0"}, 600);
  EXPECT_EQ(r.exit_code, 79) << r.err;
  EXPECT_NE(r.err.find("; rank 1 on "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" in get_batch at step 30 for "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("(timeout 120 s)"), std::string::npos) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string dump = d.file("nccl_trace_rank_" + std::to_string(rank));
    EXPECT_NE(r.err.find("NCCL flight recorder of this rank written to " + dump), std::string::npos) << r.err;
    ASSERT_FALSE(train::test::read_text(dump).empty()) << dump << " missing or empty\n" << r.err;
    const std::string py = train::test::venv_python();
    if (py.empty()) {
      std::printf("note: no Python with torch (TRAIN_TEST_PYTHON): %s not unpickled, only its presence checked\n", dump.c_str());
      continue;
    }
    auto check = run_program({py, "-c",
                              "import pickle, sys\n"
                              "d = pickle.load(open(sys.argv[1], 'rb'))\n"
                              "e = d['entries']\n"
                              "names = {x.get('profiling_name', '') for x in e}\n"
                              "print(len(e), 'entries', sorted(names))\n"
                              "assert any('all_reduce' in s or 'allreduce' in s for s in names), names\n",
                              dump},
                             {}, 120);
    EXPECT_EQ(check.exit_code, 0) << dump << ": " << check.out << check.err;
    std::printf("rank %d's flight recorder: %s", rank, check.out.c_str());
  }
}
