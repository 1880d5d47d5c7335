// Multi-process training through `trainctl local` over Gloo on loopback: parity with a single
// process, determinism, and a killed rank reported by the survivors.
#include "gpu_count.h"
#include "run_helpers.h"
#include "test_util.h"
#include "train/base/files.h"

#include <gtest/gtest.h>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

using train::test::bin;
using train::test::done_json;
using train::test::local_command;
using train::test::run_program;

namespace {

std::vector<std::string> train_args(int batch, const std::string& samples = "2000") {
  return {bin("train"), "--data", train::test::fashion_mnist_dir(), "--epochs", "1", "--limit-train-samples", samples,
          "--limit-test-samples", "2000", "--batch-size", std::to_string(batch), "--no-dropout", "--device", "cpu",
          "--threads", "1", "--log-interval", "50"};
}

}  // namespace

TEST(DistTrain, TwoRanksMatchOneRankWithDoubleBatch) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  // DDP's math makes 2 ranks x 32 the same step as 1 rank x 64, up to float32 rounding, which
  // depends on the kernels this CPU gets (oneDNN picks them at run time). Adadelta magnifies that
  // rounding step after step (6e-3 apart after 32 steps on one CPU, 1e-3 on another), so the
  // trajectories are compared over their first 4 steps, where they agree to ~1e-7 on any CPU.
  auto four_steps = [](int batch) {
    auto a = train_args(batch);
    a.insert(a.end(), {"--max-steps", "4"});
    return a;
  };
  auto one = run_program(four_steps(64));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto two = run_program(local_command(2, four_steps(32)));
  ASSERT_EQ(two.exit_code, 0) << two.err;
  auto j1 = done_json(one), j2 = done_json(two);
  EXPECT_EQ(j2["world_size"], 2);
  EXPECT_EQ(j1["steps"], 4);
  EXPECT_EQ(j2["steps"], 4);
  const double l1 = j1["test_loss"], l2 = j2["test_loss"];
  EXPECT_LE(std::abs(l1 - l2) / l1, 1e-5) << "1 rank: " << l1 << ", 2 ranks: " << l2;
  // The test loss moved: the 4 steps trained something (2.30 is chance for 10 classes).
  EXPECT_LT(l1, 2.2);
  // Exactly one done line: only rank 0 prints it.
  EXPECT_EQ(two.out.find("\"event\":\"done\""), two.out.rfind("\"event\":\"done\""));
}

// The same parity at the world sizes of the 4- and 8-GPU goal, on CPU ranks: 4 x 16 (through the
// shared-memory sum and through Gloo) and 8 x 8 take the same 4 steps as 1 x 64, and 8 ranks
// twice give the same bits.
TEST(DistTrain, FourAndEightRanksMatchOneRankWithTheWholeBatch) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  auto four_steps = [](int batch, std::vector<std::string> extra = {}) {
    auto a = train_args(batch);
    a.insert(a.end(), {"--max-steps", "4"});
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  auto one = run_program(four_steps(64));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const double l1 = done_json(one)["test_loss"];
  EXPECT_LT(l1, 2.2);  // the 4 steps trained something (2.30 is chance)
  struct Case {
    int ranks;
    std::vector<std::string> extra;
    const char* allreduce;
  };
  std::string eight_sha;
  for (const Case& c : {Case{4, {}, "shared memory"}, Case{4, {"--shm-allreduce", "off"}, "gloo"},
                        Case{8, {}, "shared memory"}, Case{8, {}, "shared memory, again"}}) {
    auto many = run_program(local_command(c.ranks, four_steps(64 / c.ranks, c.extra)));
    ASSERT_EQ(many.exit_code, 0) << many.err;
    const auto j = done_json(many);
    EXPECT_EQ(j["world_size"], c.ranks);
    EXPECT_EQ(j["steps"], 4);
    const double l = j["test_loss"];
    std::printf("[parity] %d ranks x %d (%s): test loss %.9f vs 1 rank x 64 %.9f\n", c.ranks, 64 / c.ranks,
                c.allreduce, l, l1);
    EXPECT_LE(std::abs(l - l1) / l1, 1e-5) << c.ranks << " ranks (" << c.allreduce << ")";
    EXPECT_EQ(many.out.find("\"event\":\"done\""), many.out.rfind("\"event\":\"done\""));
    if (c.ranks == 8) {
      if (eight_sha.empty()) {
        eight_sha = j["params_sha256"];
      } else {
        EXPECT_EQ(j["params_sha256"], eight_sha) << "8 ranks twice";
      }
    }
  }
}

TEST(DistTrain, WorldTwoIsDeterministicOverAWholeEpoch) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  auto first = run_program(local_command(2, train_args(32)));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  auto again = run_program(local_command(2, train_args(32)));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(done_json(first)["steps"], 32);
  EXPECT_EQ(done_json(again)["params_sha256"], done_json(first)["params_sha256"]);
  EXPECT_EQ(done_json(again)["test_loss"], done_json(first)["test_loss"]);
  // An epoch of 2000 samples learns (chance is 0.1).
  EXPECT_GT(done_json(first)["test_accuracy"].get<double>(), 0.5);
}

TEST(DistTrain, SharedMemoryAllreduceGivesGloosBitsAndLogsItsChoice) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  // Ranks on one machine sum gradients through shared memory by default; --shm-allreduce off
  // sends them through Gloo. For 2 ranks both are a + b: the trained parameters are the same bits.
  auto args = train_args(32, "1000");
  args.push_back("--max-steps");
  args.push_back("12");
  auto shm = run_program(local_command(2, args), {"TRAIN_LOG_LEVEL=debug"});
  ASSERT_EQ(shm.exit_code, 0) << shm.err;
  EXPECT_NE(shm.err.find("DDP: gradients are summed in shared memory"), std::string::npos) << shm.err;
  args.push_back("--shm-allreduce");
  args.push_back("off");
  auto gloo = run_program(local_command(2, args), {"TRAIN_LOG_LEVEL=debug"});
  ASSERT_EQ(gloo.exit_code, 0) << gloo.err;
  EXPECT_NE(gloo.err.find("DDP: Gloo sums the gradients"), std::string::npos) << gloo.err;
  EXPECT_EQ(done_json(shm)["params_sha256"], done_json(gloo)["params_sha256"]);
  EXPECT_EQ(done_json(shm)["test_loss"], done_json(gloo)["test_loss"]);
  // Nothing is left behind in /dev/shm: the segment's name (libtrain-<pid of rank 0>-...) is
  // unlinked once every rank has mapped it, so no name may outlive its creator.
  auto left = run_program({"bash", "-c",
                           "for f in /dev/shm/libtrain-*; do [ -e \"$f\" ] || continue; p=${f#/dev/shm/libtrain-}; "
                           "kill -0 ${p%%-*} 2>/dev/null || echo \"stale $f\"; done; echo checked"});
  EXPECT_EQ(left.out, "checked\n");
}

TEST(DistTrain, KilledRankIsReportedByTheOthers) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  train::test::TempDir d("killrank");
  std::string args;
  for (const auto& a : train_args(32, "20000")) args += a + " ";
  args += "--log-interval 1 --dist-timeout 60";
  // Two ranks started by hand (not trainctl, which would end the survivor itself); rank 1 is
  // SIGKILLed once training runs. Rank 0 must fail on its own, quickly, naming rank 1.
  const std::string script =
      "export MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(train::test::free_port()) + " WORLD_SIZE=2\n"
      "RANK=0 LOCAL_RANK=0 " + args + " > " + d.file("r0.out") + " 2> " + d.file("r0.err") + " & p0=$!\n"
      "RANK=1 LOCAL_RANK=1 " + args + " > /dev/null 2>&1 & p1=$!\n"
      "while ! grep -q 'Train Epoch: 1 \\[640/' " + d.file("r0.err") + " 2>/dev/null; do\n"
      "  kill -0 $p0 2>/dev/null || break; sleep 0.05; done\n"
      "kill -9 $p1\n"
      "wait $p0; echo rc0=$?\n";
  auto r = run_program({"bash", "-c", script}, {}, 200);
  const std::string err = train::test::read_text(d.file("r0.err"));
  EXPECT_NE(r.out.find("rc0=1"), std::string::npos) << r.out << err;
  EXPECT_NE(err.find("rank 0/2"), std::string::npos) << err;
  EXPECT_NE(err.find("Not responding (dead or frozen): rank 1 on"), std::string::npos) << err;
  EXPECT_NE(err.find("Hint:"), std::string::npos) << err;
  // Found dead by the heartbeat, not by running into the distributed timeout.
  EXPECT_EQ(err.find("(timeout 60 s)"), std::string::npos) << err;
}

TEST(DistTrain, LauncherEndsTheJobWhenARankFails) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  // Rank 1 gets a data folder that doesn't exist: it fails at start; rank 0 must not wait for it
  // until the timeout, because trainctl ends the job with rank 1's exit code.
  auto r = run_program({"bash", "-c", bin("trainctl") + " local --nproc 2 -- bash -c '"
                                      "if [ $RANK = 1 ]; then exec " + bin("train") + " --data /nonexistent --device cpu; "
                                      "else exec " + bin("train") + " --data " + train::test::fashion_mnist_dir() +
                                      " --device cpu --dist-timeout 120; fi'"}, {}, 100);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("/nonexistent"), std::string::npos) << r.err;
  // trainctl ended rank 0 when rank 1 failed; rank 0 did not wait into its timeout.
  EXPECT_NE(r.err.find("stopping the other 1 rank(s)"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("(timeout 120 s)"), std::string::npos) << r.err;
}

// torchrun runs a compiled program with --no-python. Its agent serves the rendezvous store on
// MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True): the ranks must connect to it as clients
// rather than bind it again.
TEST(DistTrain, TorchrunStandaloneTrainsLikeTrainctlLocal) {
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  const std::string torchrun = std::string(TRAIN_SOURCE_DIR) + "/.venv/bin/torchrun";
  if (train::test::venv_python().empty() || !train::files::exists(torchrun)) {
    GTEST_SKIP() << "no torchrun in the venv (" << torchrun << "): scripts/setup.sh installs torch there";
  }
  auto args = train_args(32, "1000");
  args.insert(args.end(), {"--max-steps", "8"});
  std::vector<std::string> cmd = {torchrun, "--standalone", "--nproc_per_node", "2", "--no-python"};
  cmd.insert(cmd.end(), args.begin(), args.end());
  auto r = run_program(cmd, {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.err.find("failed to bind"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("has failed to bind"), std::string::npos) << r.err;
  // torchrun gives every rank's stdout to the terminal; rank 0 alone prints the done line.
  auto j = done_json(r);
  EXPECT_EQ(j["world_size"], 2);
  EXPECT_EQ(j["steps"], 8);
  auto ref = run_program(local_command(2, args));
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  EXPECT_EQ(j["params_sha256"], done_json(ref)["params_sha256"]);
}

// On a node with 2 GPUs: the same parity with NCCL, one GPU per rank, against the single-process
// batch-64 run on the CPU (plain float32, no algorithm that depends on the batch size).
//
// Measured on 2x H200 (docs/gpu.md): with SGD over a full epoch, 2 GPUs land 7.5e-5 from the
// CPU reference, while 1 GPU at batch 64 lands 1.7e-3 from both: cuDNN picks different
// convolution algorithms for batch 64 than for 32, so the single-GPU run is the one that rounds
// differently. Adadelta's first steps divide by running RMS values near eps, which magnifies any
// rounding into ~1% after an epoch, so Adadelta is compared over its first 10 steps. On CUDA the
// fused Adadelta kernel rounds differently from the CPU's separate ops (fused multiply-adds):
// measured on 4x H100, 1, 2 and 4 GPUs land 1.4e-5, 1.4e-5 and 5e-8 from the CPU after 10 steps.
TEST(DistTrainGpu, TwoGpuRanksMatchOneRankWithDoubleBatch) {
  const int gpus = train::test::nvidia_gpus();
  if (gpus < 2) GTEST_SKIP() << "needs 2 NVIDIA GPUs, found " << gpus << ": run scripts/gpu-check.sh on a node with 2 GPUs (docs/gpu.md)";
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  auto args = [](const std::string& device, int batch, std::vector<std::string> extra) {
    auto a = train_args(batch);
    for (auto& s : a) if (s == "cpu") s = device;
    a.insert(a.end(), {"--tf32", "off", "--deterministic"});
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  struct Case {
    std::vector<std::string> extra;
    double multi_gpu_tolerance, one_gpu_tolerance;
  };
  // Several GPUs: the default CUDA-graph step (NCCL averages captured in the graph), the
  // fallback (one eager all-reduce between two graphs), and 4 ranks where the node has 4 GPUs.
  // In the graph, two GPUs of one machine average the buckets through each other's memory
  // (--peer-allreduce auto, the default; the process group is then Gloo), or with NCCL (off); 4
  // ranks of one machine through peer memory (auto, on: the CNN's gradients fit it whole, so the
  // group is Gloo; with --backend nccl an NCCL group) or with NCCL (off).
  struct Multi {
    int ranks;
    std::string graph_allreduce, peer_allreduce, log_says;
    bool peer_used;
    std::string backend;
    std::vector<std::string> flags = {};
  };
  const std::string in_graph = "gradients averaged inside the graph";
  const std::string between = "one eager all-reduce between two graphs";
  std::vector<Multi> multis = {{2, "in-graph", "auto", in_graph, true, "gloo"},
                               {2, "in-graph", "off", in_graph, false, "nccl"},
                               {2, "between", "auto", between, false, "nccl"}};
  if (gpus >= 4) {
    multis.push_back({4, "in-graph", "auto", in_graph, true, "gloo"});
    multis.push_back({4, "in-graph", "auto", in_graph, true, "nccl", {"--backend", "nccl"}});
    multis.push_back({4, "in-graph", "off", in_graph, false, "nccl"});
    multis.push_back({4, "in-graph", "on", in_graph, true, "gloo"});
  }
  for (const Case& k : {Case{{"--optimizer", "sgd", "--lr", "0.02", "--weight-decay", "0"}, 1e-3, 5e-3},
                        Case{{"--max-steps", "10"}, 1e-4, 1e-4}}) {
    auto ref = run_program(args("cpu", 64, k.extra));
    ASSERT_EQ(ref.exit_code, 0) << ref.err;
    auto one = run_program(args("cuda", 64, k.extra));
    ASSERT_EQ(one.exit_code, 0) << one.err;
    const double l0 = done_json(ref)["test_loss"], l1 = done_json(one)["test_loss"];
    std::printf("[gpu parity] %s %s: CPU 1 rank %.9f, 1 GPU %.9f (rel %.2e)\n", k.extra[0].c_str(),
                k.extra[1].c_str(), l0, l1, std::abs(l1 - l0) / l0);
    EXPECT_LE(std::abs(l1 - l0) / l0, k.one_gpu_tolerance) << "1 GPU vs the single-process reference";
    for (const Multi& m : multis) {
      std::vector<std::string> extra = k.extra;
      extra.insert(extra.end(), {"--graph-allreduce", m.graph_allreduce, "--peer-allreduce", m.peer_allreduce});
      extra.insert(extra.end(), m.flags.begin(), m.flags.end());
      auto many = run_program(local_command(m.ranks, args("cuda", 64 / m.ranks, extra)));
      ASSERT_EQ(many.exit_code, 0) << many.err;
      EXPECT_NE(many.err.find("backend " + m.backend), std::string::npos) << many.err;
      EXPECT_NE(many.err.find(m.log_says), std::string::npos) << many.err;
      EXPECT_EQ(many.err.find("capturing the step failed"), std::string::npos) << many.err;
      EXPECT_EQ(many.err.find("falling back"), std::string::npos) << many.err;
      const bool peer_used = many.err.find("averaged through the GPUs' peer memory") != std::string::npos;
      EXPECT_EQ(peer_used, m.peer_used) << many.err;
      const double l2 = done_json(many)["test_loss"];
      std::printf("[gpu parity]   %d GPUs, backend %s (%s, peer all-reduce %s) %.9f (rel %.2e)\n", m.ranks,
                  m.backend.c_str(), m.graph_allreduce.c_str(), peer_used ? "used" : "not used", l2,
                  std::abs(l2 - l0) / l0);
      EXPECT_LE(std::abs(l2 - l0) / l0, k.multi_gpu_tolerance)
          << m.ranks << " GPUs (" << m.graph_allreduce << ") vs the single-process reference";
    }
  }
}

// On a node with 2 GPUs: the peer all-reduce (each GPU reads the other's gradients and sums them
// in rank order) gives NCCL's bits. Two ranks' average is (a + b) / 2 either way, exact in
// float32 up to the order of a commutative sum; the test fails on any difference, which would
// mean a lost or stale chunk, or a fused update (small buckets update in the same kernel) that
// rounds unlike the separate one. Two epochs with the default CUDA-graph step and Adadelta,
// dropout on, each epoch's last, smaller batch averaged eagerly (peer memory or NCCL); the
// default run's process group is Gloo (no NCCL at all), --peer-allreduce off's is NCCL. The CNN's
// small buckets (the convolutions') go the low-latency way, its large one (the linear layers')
// one-shot: both kernels' sums are checked. A second peer run shows the peer path repeats itself
// bit for bit.
TEST(DistTrainGpu, PeerAllreduceGivesNcclsBitsOnTwoGpus) {
  const int gpus = train::test::nvidia_gpus();
  if (gpus < 2) GTEST_SKIP() << "needs 2 NVIDIA GPUs, found " << gpus << ": run scripts/gpu-check.sh on a node with 2 GPUs (docs/gpu.md)";
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  auto run = [](const std::string& peer) {
    std::vector<std::string> a = {bin("train"), "--data", train::test::fashion_mnist_dir(), "--epochs", "2",
                                  "--limit-train-samples", "8100", "--limit-test-samples", "2000", "--batch-size", "32",
                                  "--device", "cuda", "--deterministic", "--log-interval", "1000",
                                  "--peer-allreduce", peer};
    auto r = run_program(local_command(2, a));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err.find("capturing the step failed"), std::string::npos) << r.err;
    const bool used = r.err.find("averaged through the GPUs' peer memory") != std::string::npos;
    EXPECT_EQ(used, peer == "auto") << r.err;
    EXPECT_NE(r.err.find(peer == "auto" ? "backend gloo" : "backend nccl"), std::string::npos) << r.err;
    if (used) {
      // "3 of 3 gradient buckets (... bytes) averaged through the GPUs' peer memory (2 small ones the low-latency way)"
      int buckets = 0, total = 0, low_latency = -1;
      const size_t at = r.err.find(" gradient buckets (");
      const size_t ll = r.err.find(" small ones the low-latency way", at);
      if (at != std::string::npos && ll != std::string::npos) {
        const size_t line = r.err.rfind(": ", at);
        std::sscanf(r.err.c_str() + line + 2, "%d of %d", &buckets, &total);
        low_latency = std::atoi(r.err.c_str() + r.err.rfind('(', ll) + 1);
      }
      EXPECT_EQ(buckets, total) << r.err;
      EXPECT_GT(low_latency, 0) << "no bucket went the low-latency way\n" << r.err;
      EXPECT_LT(low_latency, buckets) << "no bucket went one-shot\n" << r.err;
    }
    auto j = done_json(r);
    std::printf("[peer all-reduce] --peer-allreduce %s: %s steps %d test_loss %.9f\n", peer.c_str(),
                j.value("params_sha256", std::string("?")).c_str(), j.value("steps", 0), j.value("test_loss", 0.0));
    return j;
  };
  const auto nccl = run("off");
  const auto peer = run("auto");
  const auto again = run("auto");
  EXPECT_GT(nccl.value("steps", 0), 200);
  EXPECT_EQ(peer["params_sha256"], nccl["params_sha256"]);
  EXPECT_EQ(again["params_sha256"], peer["params_sha256"]);
}

// On a node with 4 GPUs: the peer all-reduce's large bucket (the CNN's linear layers, 4.7 MB) goes
// in two passes (each rank sums a quarter of every chunk in rank order, the others copy it) and
// gives the one-shot kernel's bits (every rank sums every element, TRAIN_PEER_ONE_SHOT=1). Two
// epochs with the CUDA-graph step and Adadelta, dropout on, each epoch's last, smaller batch
// averaged eagerly through the same kernels.
TEST(DistTrainGpu, TwoPassPeerAllreduceGivesOneShotsBitsOnFourGpus) {
  const int gpus = train::test::nvidia_gpus();
  if (gpus < 4) GTEST_SKIP() << "needs 4 NVIDIA GPUs, found " << gpus << ": run it on a node with 4 GPUs (docs/gpu.md)";
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  auto run = [](bool one_shot) {
    std::vector<std::string> a = {bin("train"), "--data", train::test::fashion_mnist_dir(), "--epochs", "2",
                                  "--limit-train-samples", "8100", "--limit-test-samples", "2000", "--batch-size", "32",
                                  "--device", "cuda", "--deterministic", "--log-interval", "1000"};
    auto r = run_program(local_command(4, a), one_shot ? std::vector<std::string>{"TRAIN_PEER_ONE_SHOT=1"}
                                                       : std::vector<std::string>{});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err.find("capturing the step failed"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("averaged through the GPUs' peer memory"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(" 1 in two passes)") != std::string::npos, !one_shot) << r.err;
    auto j = done_json(r);
    std::printf("[peer all-reduce, 4 GPUs] %s: %s steps %d test_loss %.9f\n", one_shot ? "one-shot" : "two passes",
                j.value("params_sha256", std::string("?")).c_str(), j.value("steps", 0), j.value("test_loss", 0.0));
    return j;
  };
  const auto one_shot = run(true);
  const auto two_pass = run(false);
  EXPECT_GT(one_shot.value("steps", 0), 100);
  EXPECT_EQ(two_pass["steps"], one_shot["steps"]);
  EXPECT_EQ(two_pass["params_sha256"], one_shot["params_sha256"]);
}

// Two GPU ranks, the fused optimizers with a per-step warm-up + cosine schedule: the CUDA-graph
// step (gradients averaged inside the graph, NCCL or the peer all-reduce; Adam's and AdamW's
// update on each bucket as its average lands, inside the peer kernel for the small ones) lands on
// the eager step's bits, rate refreshes and all.
TEST(DistTrainGpu, FusedOptimizersWithPerStepScheduleGraphEqualsEagerOnTwoGpus) {
  const int gpus = train::test::nvidia_gpus();
  if (gpus < 2) GTEST_SKIP() << "needs 2 NVIDIA GPUs, found " << gpus << ": run scripts/gpu-check.sh on a node with 2 GPUs (docs/gpu.md)";
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  for (const char* opt : {"sgd", "adam", "adamw"}) {
    for (const char* peer : {"off", "auto"}) {
      auto run = [&](const std::string& graph) {
        std::vector<std::string> a = {bin("train"), "--data", train::test::fashion_mnist_dir(), "--epochs", "2",
                                      "--limit-train-samples", "3200", "--limit-test-samples", "1000", "--batch-size",
                                      "32", "--device", "cuda", "--deterministic", "--tf32", "off", "--precision",
                                      "fp32", "--no-dropout", "--log-interval", "1000", "--optimizer", opt,
                                      "--lr-schedule", "warmup-cosine", "--warmup-steps", "10", "--peer-allreduce",
                                      peer, "--cuda-graph", graph};
        if (std::string(opt) == "sgd") a.insert(a.end(), {"--lr", "0.05", "--momentum", "0.9", "--nesterov"});
        auto r = run_program(local_command(2, a));
        EXPECT_EQ(r.exit_code, 0) << r.err;
        if (graph == "on") {
          EXPECT_NE(r.err.find("training step: CUDA graph"), std::string::npos) << r.err;
          EXPECT_EQ(r.err.find("capturing the step failed"), std::string::npos) << r.err;
          // Adam and AdamW update each bucket after its average (inside the peer kernel where
          // the peer all-reduce takes the bucket); SGD after every average.
          const size_t at = r.err.find("the optimizer updates each gradient bucket once it is averaged (");
          EXPECT_EQ(at != std::string::npos, std::string(opt) != "sgd") << r.err;
          if (at != std::string::npos) {
            const std::string line = r.err.substr(at, r.err.find('\n', at) - at);
            std::printf("[%s, --peer-allreduce %s] %s\n", opt, peer, line.c_str());
            EXPECT_EQ(line.find("(0 of") == std::string::npos, std::string(peer) == "auto") << line;
          }
        }
        return done_json(r);
      };
      const auto eager = run("off");
      const auto graph = run("on");
      std::printf("[2 GPUs, %s + warmup-cosine, --peer-allreduce %s] graph %s vs eager %s\n", opt, peer,
                  graph.value("params_sha256", std::string("?")).c_str(),
                  eager.value("params_sha256", std::string("?")).c_str());
      EXPECT_EQ(graph["steps"], eager["steps"]);
      EXPECT_EQ(graph["params_sha256"], eager["params_sha256"]) << opt << ", --peer-allreduce " << peer;
    }
  }
}

// Two GPU ranks with --accumulate-steps 4 (micro-batches of 8) and --clip-grad-norm: the captured
// step (3 micro-batches without averaging, the 4th averaged inside the graph by NCCL or the peer
// all-reduce, or by one eager all-reduce between two graphs; then the clipping and the update)
// lands on the eager step's bits. 3000 samples leave each epoch a last, shorter step, run eagerly.
// Without clipping, AdamW's update runs on each bucket after its average (the step counts advanced
// at the capture's start, before the micro-batches): the same bits.
TEST(DistTrainGpu, AccumulationAndClippingGraphEqualsEagerOnTwoGpus) {
  const int gpus = train::test::nvidia_gpus();
  if (gpus < 2) GTEST_SKIP() << "needs 2 NVIDIA GPUs, found " << gpus << ": run scripts/gpu-check.sh on a node with 2 GPUs (docs/gpu.md)";
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  struct Case {
    std::string optimizer, graph_allreduce, peer;
    bool clip = true;
  };
  for (const Case& k : {Case{"adamw", "in-graph", "off"}, Case{"adamw", "in-graph", "auto"},
                        Case{"adamw", "between", "off"}, Case{"adadelta", "in-graph", "auto"},
                        Case{"adamw", "in-graph", "auto", false}}) {
    auto run = [&](const std::string& graph) {
      std::vector<std::string> a = {bin("train"), "--data", train::test::fashion_mnist_dir(), "--epochs", "2",
                                    "--limit-train-samples", "3000", "--limit-test-samples", "1000", "--batch-size",
                                    "8", "--accumulate-steps", "4", "--device", "cuda",
                                    "--deterministic", "--tf32", "off", "--precision", "fp32", "--no-dropout",
                                    "--log-interval", "1000", "--optimizer", k.optimizer, "--graph-allreduce",
                                    k.graph_allreduce, "--peer-allreduce", k.peer, "--cuda-graph", graph};
      if (k.clip) a.insert(a.end(), {"--clip-grad-norm", "0.5"});
      auto r = run_program(local_command(2, a));
      EXPECT_EQ(r.exit_code, 0) << r.err;
      if (graph == "on") {
        EXPECT_NE(r.err.find("training step: CUDA graph"), std::string::npos) << r.err;
        EXPECT_NE(r.err.find("accumulated micro-batches of 8"), std::string::npos) << r.err;
        EXPECT_EQ(r.err.find("gradients clipped in the graph") != std::string::npos, k.clip) << r.err;
        EXPECT_EQ(r.err.find("updates each gradient bucket once it is averaged") != std::string::npos,
                  !k.clip && k.graph_allreduce == "in-graph")
            << r.err;
        EXPECT_EQ(r.err.find("capturing the step failed"), std::string::npos) << r.err;
      }
      return done_json(r);
    };
    const auto eager = run("off");
    const auto graph = run("on");
    std::printf("[2 GPUs, accumulate 4%s, %s, %s, --peer-allreduce %s] graph %s vs eager %s\n",
                k.clip ? " + clip" : "", k.optimizer.c_str(), k.graph_allreduce.c_str(), k.peer.c_str(),
                graph.value("params_sha256", std::string("?")).c_str(), eager.value("params_sha256", std::string("?")).c_str());
    EXPECT_EQ(graph["steps"], eager["steps"]);
    EXPECT_EQ(graph["params_sha256"], eager["params_sha256"])
        << k.optimizer << ", " << k.graph_allreduce << ", --peer-allreduce " << k.peer;
  }
}

namespace {

// Two GPUs of one machine: a USR2 on rank 0 at step 30 stops both ranks by step 60 with a
// checkpoint (exit 75) that resumes on the uninterrupted run's bits; a NaN loss on rank 1 at step
// 20 stops the run with exit 65 and names it. `backend` is the process group's; `peer` says
// whether the GPUs average through each other's memory (else NCCL inside the graph).
void stops_reach_both_gpu_ranks(const std::string& backend, bool peer = true) {
  const int gpus = train::test::nvidia_gpus();
  if (gpus < 2) GTEST_SKIP() << "needs 2 NVIDIA GPUs, found " << gpus << ": run scripts/gpu-check.sh on a node with 2 GPUs (docs/gpu.md)";
  if (train::test::fashion_mnist_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  train::test::TempDir d("stops-" + backend + (peer ? "" : "-nopeer"));
  auto args = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {bin("train"), "--data", train::test::fashion_mnist_dir(), "--epochs", "2",
                                  "--limit-train-samples", "3200", "--limit-test-samples", "500", "--batch-size", "32",
                                  "--device", "cuda", "--deterministic", "--tf32", "off", "--precision", "fp32",
                                  "--no-dropout", "--log-interval", "1000", "--backend", backend == "gloo" ? "auto" : backend,
                                  "--peer-allreduce", peer ? "auto" : "off"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const std::vector<std::string> ck = {"--checkpoint-dir", d.file("ck")};
  auto stopped = run_program(local_command(2, args(ck)), {"TRAIN_FAULT_SIGNAL_AT_STEP=30:USR2:0"}, 300);
  ASSERT_EQ(stopped.exit_code, 75) << stopped.err;
  EXPECT_NE(stopped.err.find("backend " + backend), std::string::npos) << stopped.err;
  EXPECT_EQ(stopped.err.find("averaged through the GPUs' peer memory") != std::string::npos, peer) << stopped.err;
  const int at = done_json(stopped)["steps"].get<int>();
  EXPECT_GE(at, 30);
  // Checks every 20 steps, read a check later: the flags posted at step 40, drained by the epoch's
  // end at step 50, are the answer of the check at step 60.
  EXPECT_LE(at, 60) << "the stop came a check after it was posted";
  auto resumed = run_program(local_command(2, args(ck)), {}, 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  auto whole = run_program(local_command(2, args({})), {}, 300);
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  std::printf("[2 GPUs, %s group%s] stopped at step %d; resumed %s, uninterrupted %s\n", backend.c_str(),
              peer ? "" : ", NCCL in the graph", at,
              done_json(resumed)["params_sha256"].get<std::string>().c_str(),
              done_json(whole)["params_sha256"].get<std::string>().c_str());
  EXPECT_EQ(done_json(resumed)["params_sha256"], done_json(whole)["params_sha256"]);
  auto nan = run_program(local_command(2, args({})), {"TRAIN_FAULT_NAN_AT_STEP=20:1"}, 300);
  EXPECT_EQ(nan.exit_code, 65) << nan.err;
  EXPECT_NE(nan.err.find("rank 1: the loss at step 20"), std::string::npos) << nan.err;
}

}  // namespace

// With the defaults (--backend auto takes Gloo: the peer all-reduce averages in the graph) the
// stop flags are copied back without a host sync and summed by Gloo on the host a check later.
TEST(DistTrainGpu, TheGlooGroupsStopsReachBothGpuRanks) { stops_reach_both_gpu_ranks("gloo"); }

// With an NCCL group (--backend nccl, as several machines get, or 3-4 GPUs of one whose model
// outgrows the peer all-reduce) NCCL sums the flags on
// the device, on a stream that the steps don't wait for, and the host reads them a check later.
// Where the graph itself calls NCCL on the group's communicator (--peer-allreduce off), the
// flags' all-reduce stays in the steps' stream order.
TEST(DistTrainGpu, TheNcclGroupsStopsReachBothGpuRanks) {
  stops_reach_both_gpu_ranks("nccl");
  stops_reach_both_gpu_ranks("nccl", /*peer=*/false);
}
