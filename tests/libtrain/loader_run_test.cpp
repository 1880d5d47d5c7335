// `train --dataset npy` end to end, through the loader's background threads (CPU): Fashion-MNIST
// written as .npy files here (from the IDX .gz files, the .npy v1.0 header written by hand) gives
// the IDX run's params_sha256; a run stopped by --max-steps, by a SIGUSR2 sent mid-epoch, or by a
// SIGKILL under `trainctl local --max-restarts` resumes with other --data-workers / --prefetch and
// ends on the uninterrupted run's bits; on another world size it resumes as docs/checkpoints.md
// promises; bad files (truncated, wrong dtype, rows that disagree, a label out of range) stop the
// run with the file, what was expected and found, and a hint, and never cost a checkpoint; skipped
// samples are counted across a resume.
#include "gunzip.h"
#include "run_helpers.h"
#include "test_util.h"
#include "train/base/files.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <stdexcept>

namespace train::test {
namespace {

// The subset written as .npy: the first 2048 training and 500 test images.
constexpr int64_t kTrain = 2048;
constexpr int64_t kTest = 500;
// Batch 64: 32 steps an epoch, 64 in the 2 epochs of the resume tests.
constexpr int kBatch = 64;
constexpr int kStepsPerEpoch = kTrain / kBatch;
constexpr int kEpochs = 2;
constexpr int kSteps = kStepsPerEpoch * kEpochs;

// ---- Fashion-MNIST's IDX files, and .npy files written from them -------------------------------

uint32_t big_endian32(const std::vector<uint8_t>& b, size_t at) {
  return (uint32_t{b.at(at)} << 24) | (uint32_t{b.at(at + 1)} << 16) | (uint32_t{b.at(at + 2)} << 8) | b.at(at + 3);
}

struct Split {
  std::vector<uint8_t> images;  // [n, 28, 28] uint8
  std::vector<int64_t> labels;  // [n]
  int64_t n = 0;
};

// The first `n` images and labels of DIR/PREFIX-images-idx3-ubyte.gz and -labels-idx1-ubyte.gz.
Split read_idx(const std::string& dir, const std::string& prefix, int64_t n) {
  const std::vector<uint8_t> images = gunzip(dir + "/" + prefix + "-images-idx3-ubyte.gz");
  const std::vector<uint8_t> labels = gunzip(dir + "/" + prefix + "-labels-idx1-ubyte.gz");
  if (big_endian32(images, 0) != 0x803 || big_endian32(labels, 0) != 0x801 || big_endian32(images, 8) != 28 ||
      big_endian32(images, 12) != 28 || big_endian32(images, 4) < n || big_endian32(labels, 4) < n) {
    throw std::runtime_error(dir + "/" + prefix + ": not the IDX files of 28x28 images expected");
  }
  Split s;
  s.n = n;
  s.images.assign(images.begin() + 16, images.begin() + 16 + n * 28 * 28);
  for (int64_t i = 0; i < n; ++i) s.labels.push_back(labels.at(8 + i));
  return s;
}

// An .npy file, format 1.0: magic, version, the header's length (uint16, little-endian) and the
// header dict padded with spaces and a newline to a multiple of 64 bytes, then the data.
std::vector<uint8_t> npy(const std::string& descr, const std::vector<int64_t>& shape, const void* data, size_t bytes) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  const size_t preamble = 10;
  while ((preamble + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::vector<uint8_t> out(preamble + header.size() + bytes);
  std::memcpy(out.data(), "\x93NUMPY\x01\x00", 8);
  out[8] = static_cast<uint8_t>(header.size() & 0xff);
  out[9] = static_cast<uint8_t>(header.size() >> 8);
  std::memcpy(out.data() + preamble, header.data(), header.size());
  if (bytes > 0) std::memcpy(out.data() + preamble + header.size(), data, bytes);
  return out;
}

void write_images(const std::string& path, const Split& s) {
  train::test::write_file(path, npy("|u1", {s.n, 28, 28}, s.images.data(), s.images.size()));
}

void write_labels(const std::string& path, const std::vector<int64_t>& labels) {
  train::test::write_file(path, npy("<i8", {static_cast<int64_t>(labels.size())}, labels.data(), labels.size() * 8));
}

// DIR/train_x.npy, train_y.npy, test_x.npy, test_y.npy.
void write_npy_dir(const std::string& dir, const Split& train, const Split& test) {
  train::files::make_dirs(dir);
  write_images(dir + "/train_x.npy", train);
  write_labels(dir + "/train_y.npy", train.labels);
  write_images(dir + "/test_x.npy", test);
  write_labels(dir + "/test_y.npy", test.labels);
}

// ---- Runs of `train` ------------------------------------------------------------------------------

// `train --dataset npy --data DIR`, 2 epochs of 32 steps, one progress line a step.
std::vector<std::string> npy_train(const std::string& data, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {bin("train"),          "--dataset",    "npy", "--data", data, "--epochs",
                                   std::to_string(kEpochs), "--batch-size", std::to_string(kBatch),
                                   "--limit-test-samples", "100",          "--device", "cpu", "--threads", "1",
                                   "--log-interval",       "1"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

// Whether the run's loader line says it ran `workers` threads, `prefetch` batches ahead (the flags
// reached the loader).
bool loader_said(const std::string& err, int workers, int prefetch) {
  return contains(err, std::to_string(workers) + " loader thread" + (workers == 1 ? "" : "s") + ", " +
                           std::to_string(prefetch) + " batch" + (prefetch == 1 ? "" : "es") + " ahead;");
}

// The step a run resumed from ("resumed from DIR/ckpt-7.pt: epoch 1, step 7, ..."), or -1.
int resumed_step(const std::string& err) {
  std::smatch m;
  if (!std::regex_search(err, m, std::regex(R"(resumed from \S+ckpt-\d+\.pt: epoch \d+, step (\d+),)"))) return -1;
  return std::stoi(m[1].str());
}

// The Fashion-MNIST subset as .npy files, written once for the suite, and the uninterrupted run
// on them (world 1), run once.
class LoaderRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (train::test::fashion_mnist_dir().empty()) return;
    dir_ = std::make_unique<train::test::TempDir>("loaderrun");
    train_ = read_idx(train::test::fashion_mnist_dir(), "train", kTrain);
    test_ = read_idx(train::test::fashion_mnist_dir(), "t10k", kTest);
    write_npy_dir(data(), train_, test_);
  }
  static void TearDownTestSuite() { dir_.reset(); }

  void SetUp() override {
    if (train::test::fashion_mnist_dir().empty()) {
      GTEST_SKIP() << "Fashion-MNIST's IDX files are not installed: neither $TRAIN_FASHION_MNIST_DIR nor "
                      "/usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist) holds "
                      "train-images-idx3-ubyte.gz";
    }
  }

  static std::string data() { return dir_->file("npy"); }
  static std::string file(const std::string& name) { return dir_->file(name); }

  // The uninterrupted run's params_sha256: 2 epochs, default loader settings, world 1.
  static std::string reference() {
    if (reference_.empty()) {
      train::test::TempDir d("loaderref");
      const RunResult r = run_program(npy_train(data(), {"--checkpoint-dir", d.file("ck")}), {}, 300);
      EXPECT_EQ(r.exit_code, 0) << r.err;
      const nlohmann::json j = event_of(r);
      EXPECT_EQ(j.value("event", ""), "done") << r.out;
      EXPECT_EQ(j.value("steps", -1), kSteps) << r.out;
      reference_ = j.value("params_sha256", std::string("missing"));
    }
    return reference_;
  }

  static std::unique_ptr<train::test::TempDir> dir_;
  static Split train_, test_;
  static std::string reference_;
};

std::unique_ptr<train::test::TempDir> LoaderRun::dir_;
Split LoaderRun::train_;
Split LoaderRun::test_;
std::string LoaderRun::reference_;

// ---- 1. The .npy files give the IDX run's bits ------------------------------------------------------

TEST_F(LoaderRun, NpyGivesTheIdxRunsBits) {
  const std::vector<std::string> common = {"--epochs", "1", "--max-steps", "30", "--batch-size", "64",
                                           "--device", "cpu", "--threads", "1", "--limit-test-samples",
                                           std::to_string(kTest)};
  const RunResult idx = run_program(plus({bin("train"), "--data", train::test::fashion_mnist_dir(),
                                          "--limit-train-samples", std::to_string(kTrain)}, common), {}, 300);
  ASSERT_EQ(idx.exit_code, 0) << idx.err;
  // --stream is accepted with npy, which always streams.
  const RunResult npy =
      run_program(plus({bin("train"), "--dataset", "npy", "--data", data(), "--stream"}, common), {}, 300);
  ASSERT_EQ(npy.exit_code, 0) << npy.err;
  const nlohmann::json a = event_of(idx), b = event_of(npy);
  EXPECT_EQ(b.value("event", ""), "done") << npy.out;
  EXPECT_EQ(b.value("steps", -1), 30) << npy.out;
  EXPECT_EQ(b.value("params_sha256", "npy"), a.value("params_sha256", "idx")) << npy.err;
  // The same test split too: evaluated on the same 500 images, the same accuracy.
  EXPECT_EQ(b.value("test_accuracy", -1.0), a.value("test_accuracy", -2.0));
  // A loader's run says what it skipped and how long the step waited for data; a run on data in
  // memory says neither.
  ASSERT_TRUE(b.contains("skipped_samples") && b.contains("data_wait_seconds")) << npy.out;
  EXPECT_EQ(b["skipped_samples"], 0);
  EXPECT_GE(b["data_wait_seconds"].get<double>(), 0.0);
  EXPECT_FALSE(a.contains("skipped_samples")) << idx.out;
  EXPECT_TRUE(std::regex_search(npy.err, std::regex(R"(data wait [0-9.]+% \([0-9.]+ s\))"))) << npy.err;
}

// ---- 2. Resumes bit for bit whatever the loader's threads --------------------------------------------

// (a) Stopped by --max-steps 13 (1 thread, 1 batch ahead; the checkpoint of step 7 is the last),
// resumed with 4 threads and --prefetch left out: 4 batches ahead, one per thread.
TEST_F(LoaderRun, ResumesExactlyAtAnyWorkerCount) {
  const std::string want = reference();
  train::test::TempDir d("loaderresume");
  const std::vector<std::string> ck = {"--checkpoint-dir", d.file("ck"), "--checkpoint-every", "7"};
  const RunResult first =
      run_program(npy_train(data(), plus(ck, {"--max-steps", "13", "--data-workers", "1", "--prefetch", "1"})), {}, 300);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(event_of(first).value("steps", -1), 13) << first.out;
  EXPECT_TRUE(loader_said(first.err, 1, 1)) << first.err;
  const RunResult rest = run_program(npy_train(data(), plus(ck, {"--data-workers", "4"})), {}, 300);
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  EXPECT_TRUE(loader_said(rest.err, 4, 4)) << rest.err;
  EXPECT_EQ(rest.err.find("threads wait"), std::string::npos) << rest.err;
  EXPECT_EQ(resumed_step(rest.err), 7) << rest.err;
  EXPECT_EQ(event_of(rest).value("steps", -1), kSteps) << rest.out;
  EXPECT_EQ(sha_of(rest), want) << rest.err;
}

// Each thread fills whole batches: an explicit --prefetch that leaves threads without a batch to
// fill is said, naming how many wait.
TEST_F(LoaderRun, APrefetchBelowTheThreadsIsWarnedOf) {
  const RunResult r = run_program(npy_train(data(), {"--max-steps", "2", "--data-workers", "4", "--prefetch", "1"}), {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(loader_said(r.err, 4, 1)) << r.err;
  EXPECT_NE(r.err.find("--prefetch 1 with --data-workers 4: each thread fills whole batches and only 2 are in the "
                       "ring, so 2 threads wait"), std::string::npos) << r.err;
}

// (b) A SIGUSR2 sent from outside once epoch 1's third progress line is out: the run checkpoints
// where it is, exits 75, and the run resumed with other loader settings ends on the same bits.
TEST_F(LoaderRun, ResumesExactlyAfterAPreemptionSignalMidEpoch) {
  const std::string want = reference();
  train::test::TempDir d("loaderusr2");
  const std::vector<std::string> ck = {"--checkpoint-dir", d.file("ck"), "--preempt-signals", "USR2"};
  int lines = 0;
  const RunResult stopped = run_program(
      npy_train(data(), plus(ck, {"--data-workers", "3", "--prefetch", "2"})), {}, 300,
      [&](pid_t pid, const std::string& line) {
        if (contains(line, "Train Epoch: 1 [") && ++lines == 3) kill(pid, SIGUSR2);
      });
  ASSERT_GE(lines, 3) << stopped.err;
  ASSERT_EQ(stopped.exit_code, 75) << stopped.err;
  const nlohmann::json p = event_of(stopped);
  EXPECT_EQ(p.value("event", ""), "preempted") << stopped.out;
  // It stopped at or after the step whose line the signal followed, and before the end: the
  // one-page pipe bounds how far the run can get past the test.
  const int at = p.value("steps", -1);
  EXPECT_GE(at, 3) << stopped.out;
  EXPECT_LT(at, kSteps) << stopped.out;
  EXPECT_TRUE(train::files::exists(d.file("ck/ckpt-" + std::to_string(at) + ".pt"))) << stopped.err;
  EXPECT_TRUE(loader_said(stopped.err, 3, 2)) << stopped.err;
  const RunResult rest = run_program(npy_train(data(), plus(ck, {"--data-workers", "1", "--prefetch", "4"})), {}, 300);
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  EXPECT_TRUE(loader_said(rest.err, 1, 4)) << rest.err;
  EXPECT_EQ(resumed_step(rest.err), at) << rest.err;
  EXPECT_EQ(event_of(rest).value("steps", -1), kSteps) << rest.out;
  EXPECT_EQ(sha_of(rest), want) << rest.err;
}

// (c) Another world size. docs/checkpoints.md ("Resuming with another world size"): allowed, the
// sampler re-shards the epoch and a warning says results will differ from the uninterrupted run;
// with the same global batch the epoch goes on where it stopped. So not the uninterrupted run's
// bits: what is checked is what the docs promise (the warning, the batches into the epoch, and the
// uninterrupted run's step count: no batch trained twice or skipped), and that on 2 ranks too the
// loader's threads don't change the bits (the same checkpoint resumed with 2 threads and with 1).
TEST_F(LoaderRun, ResumesOnAnotherWorldSizeAsTheDocsPromise) {
  train::test::TempDir d("loaderworld");
  const std::vector<std::string> ck = {"--checkpoint-dir", d.file("ck"), "--checkpoint-every", "7"};
  const RunResult first = run_program(npy_train(data(), plus(ck, {"--max-steps", "13", "--data-workers", "2"})), {}, 300);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto stopped = folder_bytes(d.file("ck"));
  ASSERT_EQ(stopped.count("ckpt-7.pt"), 1u) << first.err;
  train::files::make_dirs(d.file("ck2"));
  for (const auto& [name, bytes] : stopped) {
    train::test::write_file(d.file("ck2/" + name), std::vector<uint8_t>(bytes.begin(), bytes.end()));
  }
  // Two ranks of batch 32: the global batch of 64 again.
  const RunResult rest = run_program(
      train::test::local_command(2, npy_train(data(), plus(ck, {"--batch-size", "32", "--data-workers", "2"}))), {}, 300);
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  const nlohmann::json j = event_of(rest);
  EXPECT_EQ(j.value("event", ""), "done") << rest.out;
  EXPECT_EQ(j.value("world_size", -1), 2) << rest.out;
  EXPECT_EQ(j.value("steps", -1), kSteps) << "32 steps an epoch at global batch 64, whatever the world size\n" << rest.err;
  EXPECT_EQ(j.value("skipped_samples", -1), 0) << rest.out;
  EXPECT_TRUE(contains(rest.err, "resuming a world-size 1 checkpoint with world size 2")) << rest.err;
  EXPECT_TRUE(contains(rest.err, "step 7, 7 batches into the epoch")) << rest.err;
  EXPECT_GT(j.value("test_accuracy", 0.0), 0.5) << "it trained\n" << rest.out;

  const RunResult again = run_program(
      train::test::local_command(2, npy_train(data(), {"--checkpoint-dir", d.file("ck2"), "--batch-size", "32",
                                                       "--data-workers", "1", "--prefetch", "3"})), {}, 300);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(loader_said(again.err, 1, 3)) << "rank 0's loader (the others don't log)\n" << again.err;
  EXPECT_EQ(sha_of(again), sha_of(rest)) << again.err;
}

// ---- 3. A rank killed mid-run is relaunched and ends on the same bits ----------------------------------

// `trainctl local --max-restarts 1`: SIGKILL right after step 10 of the first launch (before any
// checkpoint: the first is epoch 1's end, step 32); the relaunch resumes from the newest snapshot
// in memory (every 3 steps) with 4 loader threads and ends on the uninterrupted run's bits.
TEST_F(LoaderRun, AKilledRunIsRelaunchedAndEndsBitExact) {
  const std::string want = reference();
  train::test::TempDir d("loaderkill");
  std::vector<std::string> cmd = {bin("trainctl"), "local", "--nproc", "1", "--max-restarts", "1", "--no-prefix", "--"};
  cmd = plus(cmd, npy_train(data(), {"--resume", "auto", "--checkpoint-dir", d.file("ck"), "--snapshot-every", "3",
                                     "--data-workers", "4"}));
  const RunResult r = run_program(cmd, {"TRAIN_FAULT_SIGNAL_AT_STEP=10:KILL", "TRAIN_FAULT_LAUNCH=0"}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "restart 1/1: lost rank (exit 137)")) << r.err;
  EXPECT_EQ(count(r.err, "4 loader threads,"), 2) << "the first launch's loader and the relaunch's\n" << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex(R"(resumed from the snapshot of step (\d+))"))) << r.err;
  const int step = std::stoi(m[1].str());
  EXPECT_TRUE(step % 3 == 0 && step >= 3 && step <= 9) << "step " << step << "\n" << r.err;
  EXPECT_EQ(event_of(r).value("steps", -1), kSteps) << r.out;
  EXPECT_EQ(sha_of(r), want) << r.err;
}

// ---- 4. Bad data: the file, what was expected and found, a hint; no checkpoint lost ------------------

class LoaderBadData : public LoaderRun {
 protected:
  // A good run of epoch 1 (of 2), its checkpoint of step 32 written (once for the suite), copied
  // into this test's `ck`; bad files are then written into a copy of the data and the run resumed
  // on them for epoch 2.
  void SetUp() override {
    LoaderRun::SetUp();
    if (IsSkipped()) return;
    if (good_.empty()) {
      const RunResult good = run_program(npy_train(data(), {"--checkpoint-dir", file("good"), "--epochs", "1"}), {}, 300);
      ASSERT_EQ(good.exit_code, 0) << good.err;
      good_ = folder_bytes(file("good"));
      ASSERT_EQ(good_.count("ckpt-" + std::to_string(kStepsPerEpoch) + ".pt"), 1u) << good.err;
    }
    work_ = std::make_unique<train::test::TempDir>("loaderbad");
    train::files::make_dirs(ck());
    for (const auto& [name, bytes] : good_) {
      train::test::write_file(ck() + "/" + name, std::vector<uint8_t>(bytes.begin(), bytes.end()));
    }
    bad_ = work_->file("bad");
    write_npy_dir(bad_, train_, test_);
  }
  std::string ck() const { return work_->file("ck"); }

  // Resumes in ck() on the bad data: it must fail with exit 1, and leave ck() as it was.
  RunResult resume_fails(const std::vector<std::string>& extra = {}) {
    const RunResult r = run_program(npy_train(bad_, plus({"--checkpoint-dir", ck()}, extra)), {}, 300);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_FALSE(contains(train::test::event_line(r.out), "\"done\"")) << r.out;
    EXPECT_TRUE(contains(r.err, "Hint: ")) << r.err;
    const auto after = folder_bytes(ck());
    EXPECT_EQ(after.size(), good_.size()) << "a checkpoint was added or removed\n" << r.err;
    for (const auto& [name, bytes] : good_) {
      EXPECT_TRUE(after.count(name) == 1 && after.at(name) == bytes) << name << " was changed or removed\n" << r.err;
    }
    return r;
  }

  static std::map<std::string, std::string> good_;  // the good run's checkpoint folder, names to bytes
  std::unique_ptr<train::test::TempDir> work_;
  std::string bad_;
};

std::map<std::string, std::string> LoaderBadData::good_;

TEST_F(LoaderBadData, ATruncatedFileIsNamedWithTheBytesExpectedAndFound) {
  const std::string x = bad_ + "/train_x.npy";
  std::vector<uint8_t> bytes = npy("|u1", {kTrain, 28, 28}, train_.images.data(), train_.images.size());
  bytes.resize(bytes.size() - 1000);  // an interrupted copy
  train::test::write_file(x, bytes);
  const RunResult r = resume_fails();
  const std::string expected = std::to_string(kTrain * 28 * 28);
  const std::string found = std::to_string(kTrain * 28 * 28 - 1000);
  EXPECT_TRUE(contains(r.err, x + ": expected " + expected + " bytes of data for shape (" + std::to_string(kTrain) +
                                  ", 28, 28) of dtype |u1, found " + found + " (truncated?)"))
      << r.err;
}

TEST_F(LoaderBadData, FloatLabelsAreRefused) {
  const std::string y = bad_ + "/train_y.npy";
  std::vector<double> labels(train_.labels.begin(), train_.labels.end());
  train::test::write_file(y, npy("<f8", {kTrain}, labels.data(), labels.size() * 8));
  const RunResult r = resume_fails();
  EXPECT_TRUE(contains(r.err, y + ": expected integer class indices (for 10 classes), found dtype '<f8'")) << r.err;
}

TEST_F(LoaderBadData, BigEndianInputsAreRefused) {
  const std::string x = bad_ + "/train_x.npy";
  std::vector<uint8_t> floats(train_.images.size() * 4, 0);  // the bytes don't matter: the header is refused
  train::test::write_file(x, npy(">f4", {kTrain, 28, 28}, floats.data(), floats.size()));
  const RunResult r = resume_fails();
  EXPECT_TRUE(contains(r.err, x + ": expected little-endian data ('<f4'), found big-endian '>f4'")) << r.err;
}

TEST_F(LoaderBadData, LabelsOfAnotherRowCountAreRefused) {
  const std::string y = bad_ + "/train_y.npy";
  write_labels(y, std::vector<int64_t>(train_.labels.begin(), train_.labels.end() - 1));
  const RunResult r = resume_fails();
  EXPECT_TRUE(contains(r.err, y + ": expected " + std::to_string(kTrain) + " targets, one per row of " + bad_ +
                                  "/train_x.npy (shape (" + std::to_string(kTrain) + ", 28, 28)), found " +
                                  std::to_string(kTrain - 1)))
      << r.err;
}

// A label of 12 for 10 classes at sample 1000, found by the loader in epoch 2: with --bad-samples
// fail the run stops naming the sample (the epoch's checkpoint kept as it was); with skip it ends,
// the sample replaced and counted.
TEST_F(LoaderBadData, ALabelOutOfRangeFailsNamingTheSampleOrIsSkipped) {
  const std::string y = bad_ + "/train_y.npy";
  std::vector<int64_t> labels = train_.labels;
  labels.at(1000) = 12;
  write_labels(y, labels);
  const RunResult r = resume_fails({"--bad-samples", "fail", "--data-workers", "2"});
  EXPECT_EQ(resumed_step(r.err), kStepsPerEpoch) << "it failed in epoch 2, after resuming\n" << r.err;
  EXPECT_TRUE(contains(r.err, y + ": expected class indices in 0..9, found 12 at sample 1000")) << r.err;
  EXPECT_TRUE(contains(r.err, "sample 1000 (position ")) << r.err;
  EXPECT_TRUE(contains(r.err, "--bad-samples skip")) << "the hint names the way around it\n" << r.err;

  // Skipped: a run of its own (a run that ends writes checkpoints, and ck() is checked above).
  // Sample 1000 is read once an epoch: 2 replaced, and the same run at any worker count.
  std::string skipped_sha;
  for (const auto& [workers, prefetch] : {std::pair{"2", "2"}, std::pair{"4", "1"}}) {
    const RunResult s =
        run_program(npy_train(bad_, {"--bad-samples", "skip", "--data-workers", workers, "--prefetch", prefetch}), {}, 300);
    ASSERT_EQ(s.exit_code, 0) << s.err;
    const nlohmann::json j = event_of(s);
    EXPECT_EQ(j.value("event", ""), "done") << s.out;
    EXPECT_EQ(j.value("steps", -1), kSteps) << s.out;
    EXPECT_EQ(j.value("skipped_samples", -1), kEpochs) << s.out;
    if (skipped_sha.empty()) skipped_sha = sha_of(s);
    EXPECT_EQ(sha_of(s), skipped_sha) << "--data-workers " << workers << " --prefetch " << prefetch << "\n" << s.err;
  }
}

// --bad-samples skip, stopped in epoch 2 (--max-steps 40, the checkpoint of step 35) and resumed:
// the samples replaced before the stop are counted too, so the done line's skipped_samples is the
// uninterrupted run's (sample 1000 once an epoch), as are its bits. On 2 ranks the count is the
// ranks' sum, the same.
TEST_F(LoaderBadData, SkippedSamplesAreCountedAcrossAResume) {
  std::vector<int64_t> labels = train_.labels;
  labels.at(1000) = 12;
  write_labels(bad_ + "/train_y.npy", labels);
  for (int world : {1, 2}) {
    const auto command = [world](std::vector<std::string> argv) {
      return world == 1 ? argv : train::test::local_command(world, std::move(argv));
    };
    const std::vector<std::string> skip = {"--bad-samples", "skip", "--batch-size", std::to_string(kBatch / world)};
    const RunResult whole = run_program(command(npy_train(bad_, skip)), {}, 300);
    ASSERT_EQ(whole.exit_code, 0) << whole.err;
    EXPECT_EQ(event_of(whole).value("skipped_samples", -1), kEpochs) << whole.out;
    const std::string dir = work_->file("skip-" + std::to_string(world));
    const std::vector<std::string> ck = plus(skip, {"--checkpoint-dir", dir, "--checkpoint-every", "35"});
    const RunResult first = run_program(command(npy_train(bad_, plus(ck, {"--max-steps", "40"}))), {}, 300);
    ASSERT_EQ(first.exit_code, 0) << first.err;
    EXPECT_GE(event_of(first).value("skipped_samples", -1), 1) << "epoch 1's\n" << first.out;
    const RunResult rest = run_program(command(npy_train(bad_, ck)), {}, 300);
    ASSERT_EQ(rest.exit_code, 0) << rest.err;
    EXPECT_EQ(resumed_step(rest.err), 35) << rest.err;
    EXPECT_EQ(event_of(rest).value("steps", -1), kSteps) << rest.out;
    EXPECT_EQ(event_of(rest).value("skipped_samples", -1), kEpochs) << "world " << world << "\n" << rest.out;
    EXPECT_EQ(sha_of(rest), sha_of(whole)) << "world " << world << "\n" << rest.err;
  }
}

}  // namespace
}  // namespace train::test
