// Checkpoints and preemption, end to end through the `train` program: bit-for-bit resume after
// signals at arbitrary steps (world 1 and 2), resuming with another world size, fallback from a
// corrupt newest checkpoint, a failed write that leaves the last good checkpoint usable, and the
// --save-model file loaded from C++ and from Python.
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/base/error.h"
#include "train/base/files.h"
#include "train/models/model.h"
#include "train/trainer.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

using train::test::bin;
using train::test::run_program;

namespace {

std::string dataset_dir() { return train::test::fashion_mnist_dir(); }

// 1200 samples, batch 64: 19 steps an epoch, 2 epochs.
std::string train_cmd(const std::string& ckdir, const std::string& extra = "") {
  return bin("train") + " --data " + dataset_dir() +
         " --epochs 2 --limit-train-samples 1200 --limit-test-samples 500 --device cpu --threads 1"
         " --log-interval 1 --checkpoint-dir " + ckdir + " " + extra;
}

nlohmann::json last_json(const std::string& out) {
  auto j = nlohmann::json::parse(train::test::last_line(out), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << out;
  return j;
}

// Runs `cmd` in the background, sends `sig` once its stderr holds `lines` progress lines (an
// event, not a delay), and waits for it. Returns the shell's output: the program's stdout, then
// "rc=N".
train::test::RunResult run_and_signal(const std::string& cmd, int lines, const std::string& sig,
                                      const std::string& err_file) {
  const std::string script =
      cmd + " 2> " + err_file + " & pid=$!\n"
      "while n=$(grep -c 'Train Epoch' " + err_file + " 2>/dev/null); [ \"${n:-0}\" -lt " + std::to_string(lines) +
      " ] && kill -0 $pid 2>/dev/null; do sleep 0.02; done\n"
      "kill -" + sig + " $pid 2>/dev/null\nwait $pid; echo rc=$?\n";
  return run_program({"bash", "-c", script}, {}, 300);
}

nlohmann::json uninterrupted_done(const std::string& launcher_prefix, const std::string& extra = "") {
  train::test::TempDir d("ckref");
  auto r = run_program({"bash", "-c", launcher_prefix + train_cmd(d.file("ck"), extra)}, {}, 300);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto j = last_json(r.out);
  EXPECT_EQ(j["event"], "done");
  return j;
}

std::string uninterrupted_sha(const std::string& launcher_prefix, const std::string& extra = "") {
  return uninterrupted_done(launcher_prefix, extra).value("params_sha256", std::string("missing"));
}

// Stops the run with SIGUSR2 right after each of `stop_steps` (TRAIN_FAULT_SIGNAL_AT_STEP raises
// it inside the rank at that exact step, so no timing decides where it lands), resumes each time,
// and checks the finished run equals an uninterrupted one bit for bit.
void check_resume_bit_for_bit(const std::string& launcher_prefix, const std::string& extra,
                              const std::vector<std::string>& stop_steps) {
  const nlohmann::json whole = uninterrupted_done(launcher_prefix, extra);
  const std::string want = whole.value("params_sha256", std::string("missing"));
  train::test::TempDir d("ckresume");
  const std::string ck = d.file("ck");
  int64_t last_step = 0;
  for (const std::string& at : stop_steps) {
    auto r = run_program({"bash", "-c", launcher_prefix + train_cmd(ck, extra)}, {"TRAIN_FAULT_SIGNAL_AT_STEP=" + at}, 300);
    EXPECT_EQ(r.exit_code, 75) << r.err;
    auto j = last_json(r.out);
    EXPECT_EQ(j["event"], "preempted") << r.out;
    const int64_t step = std::stoll(at.substr(0, at.find(':')));
    EXPECT_EQ(j["steps"], step) << "stops right after the step it was signalled in";
    EXPECT_GT(step, last_step);
    last_step = step;
    EXPECT_NE(r.err.find("stopping for"), std::string::npos) << r.err;
  }
  auto fin = run_program({"bash", "-c", launcher_prefix + train_cmd(ck, extra)}, {}, 300);
  ASSERT_EQ(fin.exit_code, 0) << fin.err;
  auto j = last_json(fin.out);
  EXPECT_EQ(j["event"], "done");
  EXPECT_EQ(j["steps"], 38);
  EXPECT_EQ(j["params_sha256"], want) << fin.err;
  // The epoch's mean loss is resumed too (the ranks' mean sum is checkpointed; summed in
  // another order, so equal to rounding).
  const double train_loss = whole["train_loss"];
  EXPECT_NEAR(j["train_loss"].get<double>(), train_loss, 1e-12 * std::abs(train_loss));
}

// Stops a run right after `stop_step` (mid-epoch 1) under `first_prefix`, resumes it under
// `second_prefix` with another world size but the same global batch (64), and checks the
// re-sharded run: a warning names both world sizes, it resumes `stop_step` batches into the
// epoch, and it finishes both epochs in exactly the uninterrupted run's 38 steps, so no batch of
// the re-sharded epoch was trained twice or skipped.
void check_resume_with_other_world(const std::string& first_prefix, const std::string& first_extra, int first_world,
                                   const std::string& second_prefix, const std::string& second_extra,
                                   int second_world, int stop_step) {
  train::test::TempDir d("ckworld");
  const std::string ck = d.file("ck");
  auto r = run_program({"bash", "-c", first_prefix + train_cmd(ck, first_extra)},
                       {"TRAIN_FAULT_SIGNAL_AT_STEP=" + std::to_string(stop_step) + ":USR2"}, 300);
  ASSERT_EQ(r.exit_code, 75) << r.err;
  auto stopped = last_json(r.out);
  EXPECT_EQ(stopped["event"], "preempted") << r.out;
  EXPECT_EQ(stopped["steps"], stop_step);
  EXPECT_EQ(stopped["world_size"], first_world);

  auto fin = run_program({"bash", "-c", second_prefix + train_cmd(ck, second_extra)}, {}, 300);
  ASSERT_EQ(fin.exit_code, 0) << fin.err;
  auto j = last_json(fin.out);
  EXPECT_EQ(j["event"], "done");
  EXPECT_EQ(j["world_size"], second_world);
  EXPECT_EQ(j["epochs"], 2);
  EXPECT_EQ(j["steps"], 38) << "19 steps an epoch at global batch 64, whatever the world size";
  EXPECT_NE(fin.err.find("resuming a world-size " + std::to_string(first_world) + " checkpoint with world size " +
                         std::to_string(second_world)),
            std::string::npos)
      << fin.err;
  EXPECT_NE(fin.err.find("step " + std::to_string(stop_step) + ", " + std::to_string(stop_step) +
                         " batches into the epoch"),
            std::string::npos)
      << fin.err;
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.5) << "it trained";
}

// Trains a few steps with --save-model and returns the done line.
nlohmann::json train_and_save_model(const std::string& path) {
  auto r = run_program({bin("train"), "--data", dataset_dir(), "--epochs", "1", "--limit-train-samples", "320",
                        "--limit-test-samples", "100", "--device", "cpu", "--threads", "1", "--save-model", path},
                       {}, 300);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return last_json(r.out);
}

}  // namespace

TEST(Checkpoint, ResumeWithAnotherWorldSizeReshardsTheEpoch) {
  if (dataset_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  const std::string two = bin("trainctl") + " local --nproc 2 --no-prefix -- ";
  // World 2 (batch 32 per rank) stopped after step 7, resumed on one rank with batch 64.
  check_resume_with_other_world(two, "--batch-size 32", 2, "", "--batch-size 64", 1, 7);
  // And the reverse: world 1 stopped after step 5, resumed on two ranks.
  check_resume_with_other_world("", "--batch-size 64", 1, two, "--batch-size 32", 2, 5);
}

// --save-model writes a torch::serialize::OutputArchive (a TorchScript zip): C++ reads each tensor
// by its parameter name into the same model; the result is the trained model, bit for bit.
TEST(SaveModel, LoadsInCppByParameterName) {
  if (dataset_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  train::test::TempDir d("savemodel");
  const std::string path = d.file("mnist.pt");
  auto done = train_and_save_model(path);
  ASSERT_EQ(done["event"], "done");

  auto model = train::models::make_model("mnist");
  torch::serialize::InputArchive archive;
  archive.load_from(path);
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) {
    at::Tensor t;
    ASSERT_TRUE(archive.try_read(p.key(), t)) << p.key() << " missing from " << path;
    p.value().copy_(t);
  }
  EXPECT_EQ(train::params_sha256(*model), done["params_sha256"].get<std::string>());

  // torch::load(module, path) does not read it: Module::load expects one nested archive per
  // submodule ("conv1" holding "weight"), and the file holds flat names ("conv1.weight").
  // docs/checkpoints.md says so; this fails when that changes.
  std::shared_ptr<torch::nn::Module> as_module = train::models::make_model("mnist");
  EXPECT_THROW(torch::load(as_module, path), c10::Error);
}

// The same file from Python: torch.jit.load gives a module whose state_dict has the parameter
// names of PyTorch's MNIST example (conv1.weight, ..., fc2.bias), loadable into that Net.
TEST(SaveModel, LoadsInPythonWithTorchJitLoad) {
  if (dataset_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  const std::string py = train::test::venv_python();
  if (py.empty()) GTEST_SKIP() << "no .venv with torch (scripts/setup.sh creates it)";
  train::test::TempDir d("savemodelpy");
  const std::string path = d.file("mnist.pt");
  auto done = train_and_save_model(path);
  ASSERT_EQ(done["event"], "done");
  const std::string script = R"(
import hashlib, sys
import torch, torch.nn as nn, torch.nn.functional as F
class Net(nn.Module):  # PyTorch's examples/mnist Net
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)
state = torch.jit.load(sys.argv[1]).state_dict()
net = Net()
net.load_state_dict(state)  # strict: the same names and shapes
h = hashlib.sha256()
for _, p in net.named_parameters():
    h.update(p.detach().float().contiguous().numpy().tobytes())
print(",".join(state.keys()))
print(h.hexdigest())
)";
  auto r = run_program({py, "-c", script, path}, {}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("conv1.weight,conv1.bias,conv2.weight,conv2.bias,fc1.weight,fc1.bias,fc2.weight,fc2.bias"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(train::test::last_line(r.out), done["params_sha256"].get<std::string>());
}

TEST(Checkpoint, ResumeIsBitForBitWorld1) {
  if (dataset_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  // Stops mid-epoch 1, mid-epoch 1 again, and mid-epoch 2 (step 19 ends epoch 1).
  check_resume_bit_for_bit("", "", {"5:USR2", "12:USR2", "23:USR2"});
}

TEST(Checkpoint, ResumeIsBitForBitWorld2) {
  if (dataset_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  // Batch 32 per rank keeps 19 steps an epoch.
  // The signal reaches one rank only (as a node-local preemption would); the ranks agree to stop.
  check_resume_bit_for_bit(bin("trainctl") + " local --nproc 2 --no-prefix -- ", "--batch-size 32",
                           {"7:USR2:1", "22:USR2:0"});
}

// --accumulate-steps 4 with micro-batches of 16 (8 on 2 ranks) keeps 19 optimizer steps an epoch;
// checkpoints fall between optimizer steps, so a resumed run with accumulation and
// --clip-grad-norm ends on the uninterrupted run's bits.
TEST(Checkpoint, ResumeWithAccumulationAndClippingIsBitForBit) {
  if (dataset_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  check_resume_bit_for_bit("", "--batch-size 16 --accumulate-steps 4 --clip-grad-norm 0.5", {"5:USR2", "23:USR2"});
  check_resume_bit_for_bit(bin("trainctl") + " local --nproc 2 --no-prefix -- ",
                           "--batch-size 8 --accumulate-steps 4 --clip-grad-norm 0.5", {"7:USR2:1"});
}

TEST(Checkpoint, CorruptNewestFallsBackToPrevious) {
  if (dataset_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  const std::string want = uninterrupted_sha("");
  train::test::TempDir d("ckcorrupt");
  const std::string ck = d.file("ck");
  auto first = run_program({"bash", "-c", train_cmd(ck, "--checkpoint-every 4 --max-steps 13")}, {}, 300);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  train::CheckpointDir dir(ck, 3);
  auto files = dir.list();
  ASSERT_EQ(files.size(), 3u);  // steps 4, 8, 12
  EXPECT_EQ(files.back().step, 12);
  // Truncate the newest (as a SIGKILL mid-copy would) and flip a byte in the middle one.
  auto r = run_program({"truncate", "-s", "100000", files.back().path});
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_THROW(train::CheckpointDir::read_verified(files.back().path), train::CheckpointError);
  auto resumed = run_program({"bash", "-c", train_cmd(ck)}, {}, 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("skipping checkpoint: " + files.back().path), std::string::npos) << resumed.err;
  EXPECT_NE(resumed.err.find("resumed from " + files[1].path), std::string::npos) << resumed.err;
  EXPECT_TRUE(train::files::exists(files.back().path)) << "a corrupt checkpoint must not be deleted silently";
  EXPECT_EQ(last_json(resumed.out)["params_sha256"], want);
}

TEST(Checkpoint, FlippedByteIsDetected) {
  train::test::TempDir d("ckflip");
  train::CheckpointDir dir(d.file("ck"), 2);
  torch::serialize::OutputArchive a;
  a.write("x", torch::arange(1000, torch::kFloat));
  const std::string path = dir.save(a, 7);
  EXPECT_NO_THROW(train::CheckpointDir::load_file(path));
  std::string bytes = train::test::read_text(path);
  bytes[bytes.size() / 2] ^= 0x40;
  train::test::write_file(path, std::vector<uint8_t>(bytes.begin(), bytes.end()));
  try {
    train::CheckpointDir::load_file(path);
    FAIL() << "expected CheckpointError";
  } catch (const train::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("SHA-256"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(dir.load_latest_valid().has_value());
}

TEST(Checkpoint, KeepsOnlyTheNewestK) {
  train::test::TempDir d("ckkeep");
  train::CheckpointDir dir(d.file("ck"), 2);
  for (int step : {1, 2, 3, 4}) {
    torch::serialize::OutputArchive a;
    a.write("step", torch::tensor({step}));
    dir.save(a, step);
  }
  auto files = dir.list();
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].step, 3);
  EXPECT_EQ(files[1].step, 4);
  auto latest = dir.load_latest_valid();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->second.step, 4);
}

TEST(Checkpoint, FailedWriteKeepsTheLastGoodOne) {
  if (dataset_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  const std::string want = uninterrupted_sha("");
  train::test::TempDir d("ckfail");
  const std::string ck = d.file("ck");
  auto first = run_program({"bash", "-c", train_cmd(ck, "--checkpoint-every 5 --max-steps 11")}, {}, 300);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  // A file-size limit makes the next checkpoint (~14 MB) fail with EFBIG, as a full disk would.
  auto failing = run_program({"bash", "-c", "trap '' XFSZ; ulimit -f 4096; " + train_cmd(ck, "--checkpoint-every 5")}, {}, 300);
  EXPECT_EQ(failing.signal, 0);
  EXPECT_NE(failing.exit_code, 0);
  EXPECT_NE(failing.err.find("write failed"), std::string::npos) << failing.err;
  EXPECT_NE(failing.err.find("earlier checkpoints are untouched"), std::string::npos) << failing.err;
  train::CheckpointDir dir(ck, 3);
  auto files = dir.list();
  ASSERT_FALSE(files.empty());
  EXPECT_EQ(files.back().step, 10);
  EXPECT_NO_THROW(train::CheckpointDir::load_file(files.back().path));
  for (const auto& name : train::files::list_dir(ck)) EXPECT_EQ(name.find(".tmp"), std::string::npos) << name;
  auto done = run_program({"bash", "-c", train_cmd(ck)}, {}, 300);
  ASSERT_EQ(done.exit_code, 0) << done.err;
  EXPECT_EQ(last_json(done.out)["params_sha256"], want);
}

TEST(Checkpoint, ARealSignalFromOutsideStopsTheRunAtAStepBoundary) {
  if (dataset_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  train::test::TempDir d("cksignal");
  // 20000 samples: 313 steps, so the signal sent after the third progress line always lands mid-run.
  const std::string cmd = bin("train") + " --data " + dataset_dir() +
                          " --epochs 1 --limit-train-samples 20000 --limit-test-samples 100 --device cpu --threads 1"
                          " --log-interval 1 --checkpoint-dir " + d.file("ck");
  auto r = run_and_signal(cmd, 3, "USR2", d.file("err.log"));
  const std::string err = train::test::read_text(d.file("err.log"));
  ASSERT_NE(r.out.find("rc=75"), std::string::npos) << r.out << err;
  auto j = last_json(r.out.substr(0, r.out.find("rc=")));
  EXPECT_EQ(j["event"], "preempted");
  EXPECT_EQ(j["reason"], "signal SIGUSR2");
  EXPECT_GE(j["steps"].get<int64_t>(), 3);
  EXPECT_LT(j["steps"].get<int64_t>(), 313);
  EXPECT_TRUE(train::files::exists(j["checkpoint"].get<std::string>())) << r.out;
}

TEST(Checkpoint, PreemptedWithoutCheckpointDirExitsWithTheDocumentedCode) {
  if (dataset_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  const std::string cmd = bin("train") + " --data " + dataset_dir() +
                          " --epochs 1 --limit-train-samples 2000 --limit-test-samples 100 --device cpu --threads 1";
  auto r = run_program({"bash", "-c", cmd}, {"TRAIN_FAULT_SIGNAL_AT_STEP=3:USR2"}, 300);
  EXPECT_EQ(r.exit_code, 75) << r.err;
  EXPECT_NE(r.err.find("no --checkpoint-dir"), std::string::npos) << r.err;
  EXPECT_EQ(last_json(r.out)["event"], "preempted");
}

// A plain scancel sends SIGTERM: checkpoint, never requeue, exit 128 + 15, and say so.
TEST(Checkpoint, SigtermCheckpointsAndStopsWithoutRequeue) {
  if (dataset_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  train::test::TempDir d("ckterm");
  const std::string ck = d.file("ck");
  // SLURM_JOB_ID makes the run believe it is a job; squeue and scontrol are stand-ins that record
  // their calls, so the test sees that a cancel never asks for a requeue.
  const std::string fake = d.file("bin");
  train::files::make_dirs(fake);
  const std::string calls = d.file("calls.log");
  for (const std::string tool : {"squeue", "scontrol"}) {
    const std::string body = "#!/bin/sh\necho \"" + tool + " $*\" >> " + calls + "\n";
    train::test::write_file(fake + "/" + tool, std::vector<uint8_t>(body.begin(), body.end()));
    ::chmod((fake + "/" + tool).c_str(), 0755);
  }
  auto r = run_program({"bash", "-c", "PATH=" + fake + ":$PATH " + train_cmd(ck)},
                       {"TRAIN_FAULT_SIGNAL_AT_STEP=6:TERM", "SLURM_JOB_ID=999999"}, 300);
  EXPECT_EQ(r.exit_code, 143) << r.err;
  auto j = last_json(r.out);
  EXPECT_EQ(j["event"], "cancelled") << r.out;
  EXPECT_EQ(j["requeued"], false);
  EXPECT_EQ(j["steps"], 6);
  EXPECT_NE(r.err.find("SIGTERM (cancelled: no requeue)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cancelled: not requeued; to go on, run train again with --checkpoint-dir " + ck + " (it resumes from " + ck + "/ckpt-6.pt)"),
            std::string::npos) << r.err;
  const std::string called = train::test::read_text(calls);
  EXPECT_NE(called.find("squeue"), std::string::npos) << "the job's end time is asked for";
  EXPECT_EQ(called.find("scontrol requeue"), std::string::npos) << called;  // (scontrol show config: the checkpoint budget)
  // The checkpoint it wrote resumes to the uninterrupted result.
  auto fin = run_program({"bash", "-c", train_cmd(ck)}, {}, 300);
  ASSERT_EQ(fin.exit_code, 0) << fin.err;
  EXPECT_EQ(last_json(fin.out)["params_sha256"], uninterrupted_sha(""));
}

TEST(Checkpoint, TermListedAsAPreemptionSignalRequeuesAsAsked) {
  if (dataset_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  train::test::TempDir d("cktermlisted");
  auto r = run_program({"bash", "-c", train_cmd(d.file("ck"), "--preempt-signals USR2,TERM")},
                       {"TRAIN_FAULT_SIGNAL_AT_STEP=4:TERM"}, 300);
  EXPECT_EQ(r.exit_code, 75) << r.err;
  EXPECT_EQ(last_json(r.out)["event"], "preempted");
}

// A requeue cancels the job's running step at once, and the cancel's signal can kill the very
// scontrol that asked for it before it answers (seen on the local cluster: "scontrol requeue 6
// failed:" with nothing after it, although the job came back). train then asks SLURM whether the
// requeue counted (Restarts beyond this run's SLURM_RESTART_COUNT). Stand-ins: `scontrol requeue`
// records its call and dies of SIGTERM; `scontrol show job` answers with the given restart count.
TEST(Checkpoint, RequeueWhoseScontrolIsKilledCountsWhenSlurmDoes) {
  if (dataset_dir().empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  for (const int restarts : {1, 0}) {
    train::test::TempDir d("ckrequeuekilled");
    const std::string fake = d.file("bin");
    train::files::make_dirs(fake);
    const std::string calls = d.file("calls.log");
    const std::string body = "#!/bin/sh\necho \"scontrol $*\" >> " + calls +
                             "\nif [ \"$1\" = requeue ]; then kill -TERM $$; fi\n"
                             "echo \"JobId=999999 JobName=t JobState=RUNNING Restarts=" + std::to_string(restarts) +
                             " BatchFlag=1\"\n";
    train::test::write_file(fake + "/scontrol", std::vector<uint8_t>(body.begin(), body.end()));
    ::chmod((fake + "/scontrol").c_str(), 0755);
    auto r = run_program({"bash", "-c", "PATH=" + fake + ":$PATH " + train_cmd(d.file("ck"))},
                         {"TRAIN_FAULT_SIGNAL_AT_STEP=3:USR2", "SLURM_JOB_ID=999999"}, 300);
    EXPECT_EQ(r.exit_code, 75) << r.err;
    const auto j = last_json(r.out);
    EXPECT_EQ(j["event"], "preempted") << r.out;
    EXPECT_EQ(j["requeued"], restarts == 1) << r.err;
    const std::string called = train::test::read_text(calls);
    EXPECT_NE(called.find("scontrol requeue 999999"), std::string::npos) << called;
    EXPECT_NE(called.find("scontrol show job -o 999999"), std::string::npos) << called;
    if (restarts == 1) {
      EXPECT_NE(r.err.find("requeued job 999999 (scontrol ended with status 143"), std::string::npos) << r.err;
    } else {
      EXPECT_NE(r.err.find("scontrol requeue 999999 failed: scontrol was killed by signal 15 and SLURM counts no new restart"),
                std::string::npos) << r.err;
    }
  }
}
