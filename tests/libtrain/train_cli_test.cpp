// End-to-end tests of the `train` program: real Fashion-MNIST, determinism, and bad input.
#include "gpu_count.h"
#include "test_util.h"
#include "train/base/files.h"
#include "train/base/version.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>

using train::test::bin;
using train::test::run_program;

namespace {

nlohmann::json done_line(const train::test::RunResult& r) {
  std::string last = train::test::last_line(r.out);
  auto j = nlohmann::json::parse(last, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << "last stdout line is not JSON: '" << last << "'\nstderr:\n" << r.err;
  return j;
}

std::vector<std::string> small_run(const std::string& dir, const std::string& extra_samples = "5000") {
  return {bin("train"), "--model", "mnist", "--dataset", "fashion-mnist", "--data", dir, "--epochs", "1",
          "--limit-train-samples", extra_samples, "--device", "cpu", "--threads", "2", "--log-interval", "20"};
}

}  // namespace

// The foundation issue's acceptance run: 5000 samples, 1 epoch, >= 0.72 accuracy, and the
// same params_sha256 twice.
TEST(TrainCli, FashionMnist5000IsAccurateAndDeterministic) {
  const std::string dir = train::test::fashion_mnist_dir();
  if (dir.empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  auto a = run_program(small_run(dir));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  auto ja = done_line(a);
  EXPECT_EQ(ja["event"], "done");
  EXPECT_EQ(ja["epochs"], 1);
  EXPECT_EQ(ja["steps"], 79);  // ceil(5000 / 64)
  EXPECT_EQ(ja["world_size"], 1);
  EXPECT_EQ(ja["precision"], "fp32");  // --precision auto: always fp32 on the CPU
  EXPECT_GE(ja["test_accuracy"].get<double>(), 0.72) << a.err;
  EXPECT_GT(ja["images_per_sec"].get<double>(), 0.0);
  EXPECT_EQ(ja["params_sha256"].get<std::string>().size(), 64u);
  EXPECT_EQ(ja["version"], TRAIN_VERSION_STRING);  // the libtrain that trained (train/base/version.h)
  EXPECT_NE(a.err.find("Train Epoch: 1 [0/5000 (0%)]"), std::string::npos) << a.err;
  EXPECT_NE(a.err.find("Test set: Average loss:"), std::string::npos) << a.err;

  auto b = run_program(small_run(dir));
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(done_line(b)["params_sha256"], ja["params_sha256"]);

  // A different seed must give different parameters (the hash is not a constant).
  auto args = small_run(dir, "640");
  args.insert(args.end(), {"--seed", "2"});
  auto c = run_program(args);
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(done_line(c)["params_sha256"], ja["params_sha256"]);
}

// --ddp-single-rank runs one rank through the process group and DDP (to measure what DDP costs):
// the rendezvous takes a port from the OS, DDP's hooks average over one rank, and the parameters
// come out bit for bit as without DDP (checkpoints every 5 steps change nothing either). The done
// line also reports where the time went.
TEST(TrainCli, DdpOnOneRankTrainsTheSameParameters) {
  const std::string dir = train::test::fashion_mnist_dir();
  if (dir.empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  auto plain = run_program(small_run(dir, "1280"));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  train::test::TempDir tmp("ddp1");
  auto args = small_run(dir, "1280");
  args.insert(args.end(), {"--ddp-single-rank", "--checkpoint-dir", tmp.file("ck"), "--checkpoint-every", "5"});
  auto ddp = run_program(args);
  ASSERT_EQ(ddp.exit_code, 0) << ddp.err;
  EXPECT_NE(ddp.err.find("rendezvous: 1 ranks at 127.0.0.1:0"), std::string::npos) << ddp.err;
  EXPECT_EQ(plain.err.find("rendezvous:"), std::string::npos) << plain.err;
  auto jp = done_line(plain);
  auto jd = done_line(ddp);
  EXPECT_EQ(jd["params_sha256"], jp["params_sha256"]);
  EXPECT_EQ(jd["steps"], 20);
  for (const char* key : {"train_seconds", "eval_seconds"}) EXPECT_GT(jd[key].get<double>(), 0.0) << key;
  EXPECT_GT(jd["checkpoint_seconds"].get<double>(), 0.0);
  // Mid-epoch checkpoints are left out of the epoch's time, not restart it: one epoch's steady
  // speed is the run's speed.
  EXPECT_NEAR(jd["images_per_sec_steady"].get<double>(), jd["images_per_sec"].get<double>(),
              1e-9 * jd["images_per_sec"].get<double>());
  EXPECT_EQ(jp["checkpoint_seconds"].get<double>(), 0.0);  // no --checkpoint-dir
}

// --optimizer adam / adamw: torch::optim's, with torch.optim's defaults (lr 1e-3; AdamW weight
// decay 1e-2), deterministic, and different from each other and from the recipe's Adadelta.
TEST(TrainCli, AdamAndAdamWTrainDeterministically) {
  const std::string dir = train::test::fashion_mnist_dir();
  if (dir.empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  std::map<std::string, std::string> sha;
  for (const char* opt : {"adadelta", "adam", "adamw"}) {
    auto args = small_run(dir, "640");
    args.insert(args.end(), {"--optimizer", opt, "--limit-test-samples", "500"});
    auto r = run_program(args);
    ASSERT_EQ(r.exit_code, 0) << opt << ": " << r.err;
    auto j = done_line(r);
    EXPECT_EQ(j["steps"], 10);
    EXPECT_GT(j["test_accuracy"].get<double>(), 0.3) << opt << ": " << r.err;  // chance is 0.1
    sha[opt] = j["params_sha256"].get<std::string>();
    if (std::string(opt) == "adamw") {
      auto again = run_program(args);
      ASSERT_EQ(again.exit_code, 0) << again.err;
      EXPECT_EQ(done_line(again)["params_sha256"], j["params_sha256"]);
    }
  }
  EXPECT_NE(sha["adam"], sha["adamw"]);
  EXPECT_NE(sha["adam"], sha["adadelta"]);
}

TEST(TrainCli, TruncatedImagesFileFailsCleanlyNamingIt) {
  const std::string dir = train::test::fashion_mnist_dir();
  if (dir.empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  train::test::TempDir d("trunc");
  for (auto name : {"train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    ASSERT_EQ(train::files::copy_file(dir + "/" + name, d.file(name)), "");
  }
  // The images file, decompressed and cut short.
  auto full = run_program({"sh", "-c", "gzip -dc " + dir + "/train-images-idx3-ubyte.gz | head -c 1000000 > " +
                                           d.file("train-images-idx3-ubyte")});
  ASSERT_EQ(full.exit_code, 0) << full.err;
  auto r = run_program(small_run(d.path()));
  EXPECT_EQ(r.signal, 0) << "must not die of a signal";
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(d.file("train-images-idx3-ubyte")), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("truncated"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Hint:"), std::string::npos) << r.err;
}

TEST(TrainCli, MissingDataFolder) {
  auto r = run_program(small_run("/nonexistent/data"));
  EXPECT_EQ(r.signal, 0);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("/nonexistent/data"), std::string::npos) << r.err;
}

TEST(TrainCli, BadFlagsGiveClearErrors) {
  auto unknown = run_program({bin("train"), "--epochz", "3"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("train: unknown flag --epochz: expected a flag this program takes"), std::string::npos)
      << unknown.err;
  EXPECT_NE(unknown.err.find("Hint: did you mean --epochs?"), std::string::npos) << unknown.err;
  // `train` reads every recipe flag: its errors never say they exist only in other programs.
  EXPECT_EQ(unknown.err.find("exists only in programs"), std::string::npos) << unknown.err;
  auto typo = run_program({bin("train"), "--optimiser", "sgd"});
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_NE(typo.err.find("Hint: did you mean --optimizer?"), std::string::npos) << typo.err;

  auto version = run_program({bin("train"), "--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out, std::string("libtrain ") + TRAIN_VERSION_STRING + "\n");

  auto not_a_number = run_program({bin("train"), "--epochs", "many"});
  EXPECT_EQ(not_a_number.exit_code, 2);
  EXPECT_NE(not_a_number.err.find("many"), std::string::npos) << not_a_number.err;

  auto zero = run_program({bin("train"), "--epochs", "0", "--device", "cpu"});
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_NE(zero.err.find("--epochs: expected at least 1 epoch, found 0. Hint:"), std::string::npos) << zero.err;

  auto device = run_program({bin("train"), "--device", "tpu"});
  EXPECT_EQ(device.exit_code, 2);
  EXPECT_NE(device.err.find("--device: expected one of auto, cpu, cuda, found 'tpu'. Hint:"), std::string::npos) << device.err;

  auto model = run_program({bin("train"), "--model", "gpt"});
  EXPECT_EQ(model.exit_code, 2);
  EXPECT_NE(model.err.find("unknown model 'gpt'"), std::string::npos) << model.err;

  auto heap = run_program({bin("train"), "--heap", "bogus"});
  EXPECT_EQ(heap.exit_code, 2);
  EXPECT_NE(heap.err.find("--heap: expected one of reuse, default, found 'bogus'. Hint:"), std::string::npos) << heap.err;

  auto shm = run_program({bin("train"), "--shm-allreduce", "sometimes", "--device", "cpu"});
  EXPECT_EQ(shm.exit_code, 2);
  EXPECT_NE(shm.err.find("--shm-allreduce: expected one of auto, off, found 'sometimes'. Hint:"), std::string::npos) << shm.err;

  auto precision = run_program({bin("train"), "--precision", "fp16"});
  EXPECT_EQ(precision.exit_code, 2);
  EXPECT_NE(precision.err.find("--precision: expected one of auto, fp32, tf32, bf16, found 'fp16'. Hint:"),
            std::string::npos) << precision.err;

  auto peer = run_program({bin("train"), "--peer-allreduce", "nvlink"});
  EXPECT_EQ(peer.exit_code, 2);
  EXPECT_NE(peer.err.find("--peer-allreduce: expected one of auto, on, off, found 'nvlink'. Hint:"), std::string::npos)
      << peer.err;

  auto peer_on_cpu = run_program({bin("train"), "--peer-allreduce", "on", "--device", "cpu"});
  EXPECT_EQ(peer_on_cpu.exit_code, 2);
  EXPECT_NE(peer_on_cpu.err.find("--peer-allreduce on: expected a CUDA device, found the run on cpu"), std::string::npos)
      << peer_on_cpu.err;

  auto bf16_on_cpu = run_program({bin("train"), "--precision", "bf16", "--device", "cpu"});
  EXPECT_EQ(bf16_on_cpu.exit_code, 2);
  EXPECT_NE(bf16_on_cpu.err.find("--precision bf16: expected a CUDA device, found --device cpu"), std::string::npos)
      << bf16_on_cpu.err;

  auto help = run_program({bin("train"), "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--limit-train-samples"), std::string::npos);
}

// Zero or negative where a count is meant is an error naming the flag; leaving the flag out means
// the default. Flags where 0 means something (no limit, auto) take 0 and refuse negatives.
TEST(TrainCli, EveryNumericFlagIsChecked) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--batch-size", "0"}, "--batch-size: expected a positive per-rank batch size, found 0. Hint:"},
      {{"--batch-size", "-64"}, "--batch-size: expected a positive per-rank batch size, found -64. Hint:"},
      {{"--batch_size", "0"}, "--batch-size: expected a positive per-rank batch size, found 0. Hint:"},
      // Every multi-word flag takes underscores, the recipe's too.
      {{"--checkpoint_every", "-1"}, "--checkpoint-every: expected 0 (epoch ends only) or a positive number of steps"},
      {{"--limit_train_samples", "-5"}, "--limit-train-samples: expected 0 (all) or a positive count, found -5."},
      {{"--test-batch-size", "0"}, "--test-batch-size: expected a positive batch size, found 0."},
      {{"--epochs", "1.5"}, "--epochs: expected at least 1 epoch, found 1.5."},
      {{"--lr", "0"}, "--lr: expected a positive learning rate, found 0."},
      {{"--lr", "fast"}, "--lr: expected a positive learning rate, found 'fast', which is not a number."},
      {{"--gamma", "1.5"}, "--gamma: expected a factor in (0, 1], found 1.5."},
      {{"--momentum", "-0.1"}, "--momentum: expected a momentum in [0, 1), found -0.1."},
      {{"--weight-decay", "-1e-4"}, "--weight-decay: expected a weight decay of 0 or more, found -1e-4."},
      {{"--max-steps", "-1"}, "--max-steps: expected 0 (no limit) or a positive number of steps, found -1."},
      {{"--limit-train-samples", "-5"}, "--limit-train-samples: expected 0 (all) or a positive count, found -5."},
      {{"--limit-test-samples", "-5"}, "--limit-test-samples: expected 0 (all) or a positive count, found -5."},
      {{"--threads", "-2"}, "--threads: expected 0 (auto) or a positive number of threads, found -2."},
      {{"--log-interval", "0"}, "--log-interval: expected a positive number of steps, found 0."},
      {{"--dist-timeout", "0"}, "--dist-timeout: expected a positive number of seconds, found 0."},
      {{"--bucket-cap-mb", "0"}, "--bucket-cap-mb: expected a positive size in MB, found 0."},
      {{"--checkpoint-every", "-1"}, "--checkpoint-every: expected 0 (epoch ends only) or a positive number of steps"},
      {{"--keep-checkpoints", "0"}, "--keep-checkpoints: expected a positive count, found 0."},
      {{"--time-margin", "-5"}, "--time-margin: expected 0 or more seconds, found -5."},
      {{"--world-size", "0"}, "--world-size: expected a positive number of ranks, found 0."},
      {{"--preempt-signals", "USR9"}, "--preempt-signals: expected a comma list of signal names"},
      {{"--preempt-signals", "USR2,KILL"}, "--preempt-signals: expected signals a program can catch, found 'KILL'"},
  };
  for (const Case& k : cases) {
    std::vector<std::string> argv = {bin("train"), "--device", "cpu", "--data", "/nonexistent"};
    argv.insert(argv.end(), k.args.begin(), k.args.end());
    auto r = run_program(argv);
    EXPECT_EQ(r.exit_code, 2) << k.args[0] << " " << k.args[1] << ": " << r.err;
    EXPECT_NE(r.err.find(k.message), std::string::npos) << "missing '" << k.message << "' in: " << r.err;
    EXPECT_NE(r.err.find("Hint:"), std::string::npos) << r.err;
  }
}

// A typo in TRAIN_LOG_LEVEL must never hide the error that ends a run.
TEST(TrainCli, UnknownLogLevelWarnsAndTheErrorIsStillPrinted) {
  auto r = run_program({bin("train"), "--data", "/nonexistent/data", "--device", "cpu"}, {"TRAIN_LOG_LEVEL=verbose"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("TRAIN_LOG_LEVEL='verbose': expected debug, info, warn or error"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("error [rank 0/1 "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/data"), std::string::npos) << r.err;
  // Even at the quietest level the fatal error is printed.
  auto quiet = run_program({bin("train"), "--data", "/nonexistent/data", "--device", "cpu"}, {"TRAIN_LOG_LEVEL=error"});
  EXPECT_EQ(quiet.exit_code, 1);
  EXPECT_NE(quiet.err.find("/nonexistent/data"), std::string::npos) << quiet.err;
}

// SLURM gave the job GPUs but CUDA has none (this CPU machine, a CPU-only torch): --device auto
// stops at start naming both, instead of training on the CPU without a word.
TEST(TrainCli, GpuJobWithoutCudaStopsInsteadOfTrainingOnTheCpu) {
  const std::string dir = train::test::fashion_mnist_dir();
  if (dir.empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  const int gpus = train::test::nvidia_gpus();
  if (gpus > 0) GTEST_SKIP() << "this machine has " << gpus << " GPU(s): CUDA works here, so the check cannot fire";
  // (No SLURM_JOB_ID: train would ask squeue about that job.)
  const std::vector<std::string> gpu_job = {"SLURM_GPUS_ON_NODE=1", "SLURM_JOB_GPUS=0", "CUDA_VISIBLE_DEVICES=0"};
  auto r = run_program({bin("train"), "--data", dir, "--epochs", "1", "--limit-train-samples", "64"}, gpu_job);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("SLURM allocated GPUs to this job (SLURM_GPUS_ON_NODE=1, SLURM_JOB_GPUS=0, "
                       "CUDA_VISIBLE_DEVICES=0)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("torch reports 0 CUDA devices"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--device cpu"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("Train Epoch"), std::string::npos) << "it trained anyway:\n" << r.err;
  // --device cpu is the explicit way to train on the CPU in such a job.
  auto cpu = run_program({bin("train"), "--data", dir, "--epochs", "1", "--limit-train-samples", "64",
                          "--limit-test-samples", "100", "--device", "cpu"}, gpu_job);
  EXPECT_EQ(cpu.exit_code, 0) << cpu.err;
}

TEST(TrainCli, WorldSizeAndInitMethodAreChecked) {
  auto single = run_program({bin("train"), "--world-size", "2", "--device", "cpu"});
  EXPECT_EQ(single.exit_code, 2);
  EXPECT_NE(single.err.find("--world-size 2: expected the ranks to come from SLURM (srun) or torchrun, found a "
                            "single process"), std::string::npos) << single.err;
  // Under SLURM, --world-size must equal the step's tasks.
  const std::vector<std::string> slurm = {"SLURM_JOB_ID=7", "SLURM_PROCID=0", "SLURM_STEP_ID=0", "SLURM_NTASKS=2",
                                          "SLURM_NNODES=1", "SLURM_LOCALID=0", "SLURM_NODEID=0"};
  auto wrong = run_program({bin("train"), "--world-size", "4", "--device", "cpu"}, slurm);
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_NE(wrong.err.find("--world-size=4: expected the 2 tasks that SLURM started in this step"), std::string::npos)
      << wrong.err;
  auto bad = run_program({bin("train"), "--init_method", "tcp://node1", "--device", "cpu"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--init-method 'tcp://node1': expected tcp://HOST:PORT"), std::string::npos) << bad.err;
}

TEST(TrainCli, Cifar10OnWrittenFiles) {
  train::test::TempDir d("cifarcli");
  std::vector<uint8_t> rec;
  for (int r = 0; r < 300; ++r) {
    rec.push_back(static_cast<uint8_t>(r % 10));
    for (int p = 0; p < 3072; ++p) rec.push_back(static_cast<uint8_t>((r * 31 + p) % 256));
  }
  for (int i = 1; i <= 5; ++i) train::test::write_file(d.file("data_batch_" + std::to_string(i) + ".bin"), rec);
  train::test::write_file(d.file("test_batch.bin"), rec);
  auto r = run_program({bin("train"), "--model", "cifar10", "--dataset", "cifar10", "--data", d.path(), "--epochs", "1",
                        "--device", "cpu", "--threads", "1", "--metrics", d.file("m.jsonl")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = done_line(r);
  EXPECT_EQ(j["steps"], 6);  // 1500 samples / batch 256
  EXPECT_TRUE(std::isfinite(j["train_loss"].get<double>()));
  // metrics: JSON lines, the last one the epoch summary
  std::ifstream m(d.file("m.jsonl"));
  std::string line, last;
  int lines = 0;
  while (std::getline(m, line)) {
    ASSERT_FALSE(nlohmann::json::parse(line, nullptr, false).is_discarded()) << line;
    last = line;
    ++lines;
  }
  EXPECT_GE(lines, 2);
  EXPECT_EQ(nlohmann::json::parse(last)["event"], "epoch");
}

// --profile traces the chosen optimizer steps with torch's profiler into one Chrome trace per
// rank, and changes no numbers; a range the run never reaches is reported, not silently empty;
// a malformed range or an unwritable folder is a clear error.
TEST(TrainCli, ProfileTracesTheChosenStepsAndChangesNothing) {
  const std::string dir = train::test::fashion_mnist_dir();
  if (dir.empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  train::test::TempDir d("profile");
  auto args = small_run(dir, "640");
  args.insert(args.end(), {"--max-steps", "8"});
  auto plain = run_program(args);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  auto traced_args = args;
  traced_args.insert(traced_args.end(), {"--profile", d.file("trace"), "--profile-steps", "3:5"});
  auto traced = run_program(traced_args);
  ASSERT_EQ(traced.exit_code, 0) << traced.err;
  EXPECT_NE(traced.err.find("--profile: steps 3-5 traced to " + d.file("trace") + "/trace-rank0.json"),
            std::string::npos) << traced.err;
  EXPECT_EQ(traced.err.find("ERROR"), std::string::npos) << traced.err;
  EXPECT_EQ(done_line(traced)["params_sha256"], done_line(plain)["params_sha256"]);
  std::ifstream f(d.file("trace") + "/trace-rank0.json");
  ASSERT_TRUE(f.good());
  const auto trace = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(trace.is_discarded());
  size_t convolutions = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("cat", "") == "cpu_op" && e.value("name", "") == "aten::convolution") ++convolutions;
  }
  EXPECT_EQ(convolutions, 3u * 2u) << "3 steps of a model with 2 convolutions";

  auto late_args = args;
  late_args.insert(late_args.end(), {"--profile", d.file("late"), "--profile-steps", "20:30"});
  auto late = run_program(late_args);
  ASSERT_EQ(late.exit_code, 0) << late.err;
  EXPECT_NE(late.err.find("--profile-steps 20:30: the run ended after step 8, before the range began: no trace"),
            std::string::npos) << late.err;

  auto malformed = run_program({bin("train"), "--device", "cpu", "--profile", d.file("x"), "--profile-steps", "5-9"});
  EXPECT_EQ(malformed.exit_code, 2);
  EXPECT_NE(malformed.err.find("--profile-steps: expected FROM:TO, optimizer steps counted from 1 with FROM <= TO, "
                               "found '5-9'. Hint:"),
            std::string::npos) << malformed.err;
  auto backwards = run_program({bin("train"), "--device", "cpu", "--profile", d.file("x"), "--profile-steps", "9:5"});
  EXPECT_EQ(backwards.exit_code, 2);
  EXPECT_NE(backwards.err.find("found '9:5'"), std::string::npos) << backwards.err;
  auto unwritable = run_program(
      {bin("train"), "--device", "cpu", "--data", dir, "--profile", "/proc/no-such-folder", "--max-steps", "1"});
  EXPECT_NE(unwritable.exit_code, 0);
  EXPECT_NE(unwritable.err.find("--profile /proc/no-such-folder: expected a folder the trace can be written to"),
            std::string::npos) << unwritable.err;
}

// One rule and one exit code (2) for every output path, checked before the data and the
// rendezvous. A folder flag that is a file, a file flag that is a folder, and a path under a file
// are flag errors naming the flag, the path, what was expected and found, with a hint.
TEST(TrainCli, OutputPathsFollowOneRuleAndExit2) {
  train::test::TempDir d("outpaths");
  train::test::write_file(d.file("plain"), {'x'});
  train::files::make_dirs(d.file("folder"));
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--checkpoint-dir", d.file("plain")}, "--checkpoint-dir " + d.file("plain") + ": expected a folder (created if missing), found a file."},
      {{"--tensorboard", d.file("plain") + "/tb"}, "--tensorboard " + d.file("plain") + "/tb: expected a folder that can be created, found '" + d.file("plain") + "', a file, in its path."},
      {{"--profile", d.file("plain")}, "--profile " + d.file("plain") + ": expected a folder (created if missing), found a file."},
      {{"--metrics", d.file("folder")}, "--metrics " + d.file("folder") + ": expected a file (its folder is created if missing), found a folder."},
      {{"--metrics", d.file("plain") + "/sub/m.jsonl"}, "--metrics " + d.file("plain") + "/sub/m.jsonl: expected a file whose folder can be created, found '" + d.file("plain") + "', a file, in its path."},
      {{"--save-model", d.file("folder")}, "--save-model " + d.file("folder") + ": expected a file (its folder is created if missing), found a folder."},
  };
  for (const Case& k : cases) {
    // No data there: the path is refused before the data is read.
    std::vector<std::string> argv = {bin("train"), "--device", "cpu", "--data", d.file("no-data")};
    argv.insert(argv.end(), k.args.begin(), k.args.end());
    auto r = run_program(argv);
    EXPECT_EQ(r.exit_code, 2) << k.args[0] << ": " << r.err;
    EXPECT_NE(r.err.find(k.message), std::string::npos) << "missing '" << k.message << "' in: " << r.err;
    EXPECT_NE(r.err.find("Hint:"), std::string::npos) << r.err;
  }
}

// A bad --metrics ends each rank of a 2-rank run before the rendezvous, with the flag's error: each
// rank started alone here, with no peer to meet (a rendezvous first would wait for it, and end as a
// timeout, exit 1), exits 2 at once; so no rank is left to report a failed all-reduce.
TEST(TrainCli, ABadOutputPathStopsEveryRankBeforeTheRendezvous) {
  train::test::TempDir d("outpaths2");
  train::test::write_file(d.file("plain"), {'x'});
  const std::string port = std::to_string(train::test::free_port());
  for (const char* rank : {"0", "1"}) {
    auto r = run_program({bin("train"), "--device", "cpu", "--data", d.file("no-data"), "--dist-timeout", "60",
                          "--metrics", d.file("plain") + "/m.jsonl"},
                         {std::string("RANK=") + rank, "WORLD_SIZE=2", std::string("LOCAL_RANK=") + rank,
                          "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port},
                         120);
    EXPECT_EQ(r.exit_code, 2) << "rank " << rank << ": " << r.err;
    EXPECT_NE(r.err.find("[rank " + std::string(rank) + "/2"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--metrics " + d.file("plain") + "/m.jsonl: expected a file whose folder can be created"),
              std::string::npos)
        << r.err;
  }
}

// --metrics creates its folder, as --tensorboard and --checkpoint-dir do; so does --save-model.
TEST(TrainCli, MetricsAndSaveModelCreateTheirFolders) {
  const std::string dir = train::test::fashion_mnist_dir();
  if (dir.empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  train::test::TempDir d("outpaths3");
  auto args = small_run(dir, "128");
  args.insert(args.end(), {"--limit-test-samples", "100", "--metrics", d.file("new/sub/m.jsonl"), "--save-model",
                           d.file("models/mnist.pt")});
  auto r = run_program(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(train::files::is_regular_file(d.file("new/sub/m.jsonl"))) << r.err;
  EXPECT_TRUE(train::files::is_regular_file(d.file("models/mnist.pt"))) << r.err;
}
