// `train --dataset imagefolder` and `--dataset webdataset` end to end (CPU), on files written here:
// Fashion-MNIST as PNG folders trains to the IDX run's accuracy (3 seeds), and the same images as
// WebDataset shards (written by the webdataset package, in the folder's order) give the folder run's
// params_sha256; CIFAR-10 written as PNG folders gives the binary files' bits (records in class order); colour JPEGs under ResNet-18's ImageNet augmentation resume bit for bit after
// --max-steps, SIGUSR2 and SIGKILL at any --data-workers; bad images are named, with exit 1 and
// no checkpoint lost, or skipped and counted.
#include "cifar_files.h"
#include "gunzip.h"
#include "image_files.h"
#include "run_helpers.h"
#include "test_util.h"
#include "train/base/files.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <regex>

namespace train::test {
namespace {

// The Fashion-MNIST subset written as PNGs: the first 2048 training and 500 test images.
constexpr int kTrain = 2048;
constexpr int kTest = 500;
// The colour JPEGs: 4 classes of 16 (64 images: 8 steps of 8 an epoch), 8 for evaluation.
constexpr int kClasses = 4;
constexpr int kPerClass = 16;
constexpr int kJpegSteps = 2 * kClasses * kPerClass / 8;

// DIR/SPLIT/LABEL/NNNNN.png for the first `n` images of Fashion-MNIST's PREFIX files.
void write_png_split(const std::string& dir, const std::string& prefix, int n) {
  const std::vector<uint8_t> images = gunzip(train::test::fashion_mnist_dir() + "/" + prefix + "-images-idx3-ubyte.gz");
  const std::vector<uint8_t> labels = gunzip(train::test::fashion_mnist_dir() + "/" + prefix + "-labels-idx1-ubyte.gz");
  for (int i = 0; i < n; ++i) {
    train::datasets::Image im{28, 28, 1, std::vector<uint8_t>(images.begin() + 16 + i * 784, images.begin() + 16 + (i + 1) * 784)};
    const std::string folder = dir + "/" + std::to_string(labels.at(8 + i));
    train::files::make_dirs(folder);
    char name[32];
    std::snprintf(name, sizeof(name), "/%05d.png", i);
    train::test::write_file(folder + name, train::test::encode_png(im));
  }
}

// DIR/SPLIT/classK/imgNN.jpg: colour JPEGs of 80x64 and 64x96 (landscape and portrait), quality 90.
void write_jpeg_split(const std::string& dir, int per_class, uint32_t seed) {
  for (int c = 0; c < kClasses; ++c) {
    const std::string folder = dir + "/class" + std::to_string(c);
    train::files::make_dirs(folder);
    for (int i = 0; i < per_class; ++i) {
      const bool wide = (i + c) % 2 == 0;
      const auto im = train::test::make_image(wide ? 64 : 96, wide ? 80 : 64, 3, seed + 100 * c + i);
      train::test::write_file(folder + "/img" + std::to_string(10 + i) + ".jpg", train::test::encode_jpeg(im, 90));
    }
  }
}

class ImageRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<train::test::TempDir>("imagerun");
    write_jpeg_split(dir_->file("jpeg/train"), kPerClass, 1);
    write_jpeg_split(dir_->file("jpeg/val"), 2, 7);
    if (train::test::fashion_mnist_dir().empty()) return;
    write_png_split(dir_->file("png/train"), "train", kTrain);
    write_png_split(dir_->file("png/val"), "t10k", kTest);
  }
  static void TearDownTestSuite() { dir_.reset(); }

  void need_fashion_mnist() {
    if (train::test::fashion_mnist_dir().empty()) {
      GTEST_SKIP() << "Fashion-MNIST's IDX files are not installed: neither $TRAIN_FASHION_MNIST_DIR nor "
                      "/usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist) holds them";
    }
  }

  static std::string file(const std::string& name) { return dir_->file(name); }

  // ResNet-18 at 64 px (the ImageNet stem, random-resized crop and flip) on the colour JPEGs,
  // batch 8, 2 epochs of 8 steps, a progress line a step.
  static std::vector<std::string> jpeg_train(const std::vector<std::string>& extra) {
    return plus({bin("train"), "--model", "resnet18", "--dataset", "imagefolder", "--data", file("jpeg"), "--image-size",
                 "64", "--batch-size", "8", "--epochs", "2", "--device", "cpu", "--threads", "1", "--log-interval", "1",
                 "--seed", "3"},
                extra);
  }

  // The uninterrupted augmented run's params_sha256 (2 loader threads).
  static std::string reference() {
    if (reference_.empty()) {
      train::test::TempDir d("imageref");
      const RunResult r = run_program(jpeg_train({"--checkpoint-dir", d.file("ck"), "--data-workers", "2"}), {}, 600);
      EXPECT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(event_of(r).value("steps", -1), kJpegSteps) << r.out;
      reference_ = sha_of(r);
    }
    return reference_;
  }

  static std::unique_ptr<train::test::TempDir> dir_;
  static std::string reference_;
};

std::unique_ptr<train::test::TempDir> ImageRun::dir_;
std::string ImageRun::reference_;

// ---- 1. PNG folders train as the IDX files do; shards as the folder does -----------------------------

// The folder holds the IDX run's images (the same floats: the PNG reader normalizes as the IDX
// reader does) in another order (class by class), so the runs differ as two seeds do: the mean test
// accuracy over 3 seeds is within 3 points, and within 3 standard deviations of the seeds' spread.
TEST_F(ImageRun, PngFoldersTrainToTheIdxRunsAccuracy) {
  need_fashion_mnist();
  if (IsSkipped()) return;
  const std::vector<std::string> common = {"--epochs", "2", "--batch-size", "64", "--device", "cpu", "--threads", "1",
                                           "--limit-test-samples", std::to_string(kTest)};
  double sum[2] = {0, 0}, sq[2] = {0, 0};
  for (int seed = 1; seed <= 3; ++seed) {
    const std::vector<std::string> s = {"--seed", std::to_string(seed)};
    const RunResult idx = run_program(plus(plus({bin("train"), "--data", train::test::fashion_mnist_dir(),
                                                 "--limit-train-samples", std::to_string(kTrain)}, common), s), {}, 600);
    ASSERT_EQ(idx.exit_code, 0) << idx.err;
    const RunResult png = run_program(plus(plus({bin("train"), "--dataset", "imagefolder", "--data", file("png")}, common), s), {}, 600);
    ASSERT_EQ(png.exit_code, 0) << png.err;
    EXPECT_TRUE(contains(png.err, "2048 images in 10 classes")) << png.err;
    EXPECT_TRUE(contains(png.err, "1x28x28 (grey")) << "the channel count is said\n" << png.err;
    const double a[2] = {event_of(idx).value("test_accuracy", -1.0), event_of(png).value("test_accuracy", -1.0)};
    for (int k = 0; k < 2; ++k) {
      ASSERT_GT(a[k], 0.5) << "it trained\n" << (k ? png.out : idx.out);
      sum[k] += a[k];
      sq[k] += a[k] * a[k];
    }
  }
  const double mean[2] = {sum[0] / 3, sum[1] / 3};
  const double sd = std::sqrt(std::max(0.0, (sq[0] + sq[1]) / 6 - (mean[0] * mean[0] + mean[1] * mean[1]) / 2));
  EXPECT_LE(std::abs(mean[0] - mean[1]), std::max(0.03, 3 * sd)) << "IDX " << mean[0] << ", PNG folder " << mean[1];
}

// Shards written by the webdataset package from the folder, in its order (classes sorted, then file
// names): the same samples in the same order, so the folder run's bits.
TEST_F(ImageRun, ShardsGiveTheFolderRunsBits) {
  need_fashion_mnist();
  if (IsSkipped()) return;
  const std::string python = train::test::venv_python();
  if (python.empty()) GTEST_SKIP() << "no .venv python with torch: the shards are written by the webdataset package";
  const RunResult have = run_program({python, "-c", "import webdataset"}, {}, 120);
  if (have.exit_code != 0) GTEST_SKIP() << "the venv has no webdataset package (scripts/setup.sh installs it)";
  const std::string script =
      "import os, sys, webdataset as wds\n"
      "src, pattern = sys.argv[1], sys.argv[2]\n"
      "with wds.ShardWriter(pattern, maxcount=700, verbose=0) as w:\n"
      "    for c in sorted(os.listdir(src)):\n"
      "        for f in sorted(os.listdir(os.path.join(src, c))):\n"
      "            w.write({'__key__': c + '_' + f[:-4], 'png': open(os.path.join(src, c, f), 'rb').read(), 'cls': int(c)})\n";
  train::files::make_dirs(file("shards"));
  for (const std::string split : {"train", "val"}) {
    const RunResult w = run_program({python, "-c", script, file("png/" + split), file("shards/" + split + "-%06d.tar")}, {}, 300);
    ASSERT_EQ(w.exit_code, 0) << w.err;
  }
  const std::vector<std::string> common = {"--epochs", "1", "--batch-size", "64", "--device", "cpu", "--threads", "1",
                                           "--max-steps", "20"};
  const RunResult folder = run_program(plus({bin("train"), "--dataset", "imagefolder", "--data", file("png")}, common), {}, 600);
  ASSERT_EQ(folder.exit_code, 0) << folder.err;
  const RunResult shards = run_program(
      plus({bin("train"), "--dataset", "webdataset", "--data", file("shards/train-{000000..000002}.tar"), "--eval-data",
            file("shards/val-000000.tar")}, common), {}, 600);
  ASSERT_EQ(shards.exit_code, 0) << shards.err;
  EXPECT_TRUE(contains(shards.err, "2048 images in 3 shards")) << shards.err;
  EXPECT_EQ(sha_of(shards), sha_of(folder)) << shards.err;
  EXPECT_EQ(event_of(shards).value("test_accuracy", -1.0), event_of(folder).value("test_accuracy", -2.0));
}

// CIFAR-10's binary batches with their records in class order, and the same images as PNG folders
// (class folders, files named in that order): the same samples in the same order, so the seeds'
// LeNet trains to the same bits and the same test accuracy from either.
TEST_F(ImageRun, CifarPngFoldersGiveTheBinaryFilesBits) {
  constexpr int kPerFile = 100, kTestImages = 100;
  const auto sorted = [](const train::test::CifarSamples& s) {
    std::vector<int> order(s.labels.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return s.labels[a] < s.labels[b]; });
    train::test::CifarSamples out;
    for (int i : order) {
      out.labels.push_back(s.labels[i]);
      out.pixels.insert(out.pixels.end(), s.pixels.begin() + i * 3072, s.pixels.begin() + (i + 1) * 3072);
    }
    return out;
  };
  train::test::CifarSamples all;
  for (uint32_t f = 1; f <= 5; ++f) {
    const auto s = train::test::learnable_cifar(kPerFile, f);
    all.labels.insert(all.labels.end(), s.labels.begin(), s.labels.end());
    all.pixels.insert(all.pixels.end(), s.pixels.begin(), s.pixels.end());
  }
  const train::test::CifarSamples train_set = sorted(all), test_set = sorted(train::test::learnable_cifar(kTestImages, 6));
  const auto write_split = [&](const train::test::CifarSamples& s, const std::string& dir) {
    for (size_t i = 0; i < s.labels.size(); ++i) {
      train::datasets::Image im{32, 32, 3, std::vector<uint8_t>(3072)};
      for (int p = 0; p < 1024; ++p) {
        for (int c = 0; c < 3; ++c) im.pixels[p * 3 + c] = s.pixels[i * 3072 + c * 1024 + p];
      }
      const std::string folder = dir + "/" + std::to_string(s.labels[i]);
      train::files::make_dirs(folder);
      char name[32];
      std::snprintf(name, sizeof(name), "/%05zu.png", i);
      train::test::write_file(folder + name, train::test::encode_png(im));
    }
  };
  train::files::make_dirs(file("cifar-bin"));
  for (int f = 0; f < 5; ++f) {
    train::test::CifarSamples part;
    part.labels.assign(train_set.labels.begin() + f * kPerFile, train_set.labels.begin() + (f + 1) * kPerFile);
    part.pixels.assign(train_set.pixels.begin() + f * kPerFile * 3072, train_set.pixels.begin() + (f + 1) * kPerFile * 3072);
    train::test::write_file(file("cifar-bin/data_batch_" + std::to_string(f + 1) + ".bin"), train::test::cifar_binary_bytes(part));
  }
  train::test::write_file(file("cifar-bin/test_batch.bin"), train::test::cifar_binary_bytes(test_set));
  write_split(train_set, file("cifar-png/train"));
  write_split(test_set, file("cifar-png/test"));
  const std::vector<std::string> common = {"--model", "cifar10", "--epochs", "2", "--batch-size", "50", "--device", "cpu",
                                           "--threads", "1"};
  const RunResult binary = run_program(plus({bin("train"), "--dataset", "cifar10", "--data", file("cifar-bin")}, common), {}, 600);
  ASSERT_EQ(binary.exit_code, 0) << binary.err;
  const RunResult png = run_program(plus({bin("train"), "--dataset", "imagefolder", "--data", file("cifar-png")}, common), {}, 600);
  ASSERT_EQ(png.exit_code, 0) << png.err;
  EXPECT_TRUE(contains(png.err, "500 images in 10 classes")) << png.err;
  EXPECT_EQ(sha_of(png), sha_of(binary)) << png.err;
  EXPECT_EQ(event_of(png).value("test_accuracy", -1.0), event_of(binary).value("test_accuracy", -2.0));
}

// ---- 2. Augmented runs resume bit for bit -------------------------------------------------------------

TEST_F(ImageRun, AugmentedRunResumesExactlyAtAnyWorkerCount) {
  const std::string want = reference();
  train::test::TempDir d("imageresume");
  const std::vector<std::string> ck = {"--checkpoint-dir", d.file("ck"), "--checkpoint-every", "3"};
  const RunResult first = run_program(jpeg_train(plus(ck, {"--max-steps", "5", "--data-workers", "1"})), {}, 600);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_TRUE(contains(first.err, "mode train, 3x64x64")) << first.err;
  const RunResult rest = run_program(jpeg_train(plus(ck, {"--data-workers", "4", "--prefetch", "3"})), {}, 600);
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  EXPECT_TRUE(contains(rest.err, "resumed from")) << rest.err;
  EXPECT_EQ(event_of(rest).value("steps", -1), kJpegSteps) << rest.out;
  EXPECT_EQ(sha_of(rest), want) << rest.err;
}

TEST_F(ImageRun, AugmentedRunResumesExactlyAfterAPreemptionSignal) {
  const std::string want = reference();
  train::test::TempDir d("imageusr2");
  const std::vector<std::string> ck = {"--checkpoint-dir", d.file("ck"), "--preempt-signals", "USR2"};
  int lines = 0;
  const RunResult stopped = run_program(jpeg_train(plus(ck, {"--data-workers", "4"})), {}, 600,
                                        [&](pid_t pid, const std::string& line) {
                                          if (contains(line, "Train Epoch: 1 [") && ++lines == 3) kill(pid, SIGUSR2);
                                        });
  ASSERT_EQ(stopped.exit_code, 75) << stopped.err;
  const int at = event_of(stopped).value("steps", -1);
  EXPECT_GE(at, 3) << stopped.out;
  EXPECT_LT(at, kJpegSteps) << stopped.out;
  const RunResult rest = run_program(jpeg_train(plus(ck, {"--data-workers", "1"})), {}, 600);
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  EXPECT_EQ(event_of(rest).value("steps", -1), kJpegSteps) << rest.out;
  EXPECT_EQ(sha_of(rest), want) << rest.err;
}

// `trainctl local --max-restarts 1`: SIGKILL after step 6; the relaunch resumes from the snapshot in
// memory of step 4 with another thread count and ends on the uninterrupted run's bits.
TEST_F(ImageRun, AKilledAugmentedRunIsRelaunchedBitExact) {
  const std::string want = reference();
  train::test::TempDir d("imagekill");
  std::vector<std::string> cmd = {bin("trainctl"), "local", "--nproc", "1", "--max-restarts", "1", "--no-prefix", "--"};
  cmd = plus(cmd, jpeg_train({"--resume", "auto", "--checkpoint-dir", d.file("ck"), "--snapshot-every", "2",
                              "--data-workers", "4"}));
  const RunResult r = run_program(cmd, {"TRAIN_FAULT_SIGNAL_AT_STEP=6:KILL", "TRAIN_FAULT_LAUNCH=0"}, 600);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "restart 1/1: lost rank (exit 137)")) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(resumed from the snapshot of step [246])"))) << r.err;
  EXPECT_EQ(event_of(r).value("steps", -1), kJpegSteps) << r.out;
  EXPECT_EQ(sha_of(r), want) << r.err;
}

// ---- 3. Bad images -------------------------------------------------------------------------------------

// A copy of the JPEG folder with one bad file; the run from a checkpoint of epoch 1 fails naming it.
class BadImages : public ImageRun {
 protected:
  void SetUp() override {
    work_ = std::make_unique<train::test::TempDir>("imagebad");
    write_jpeg_split(work_->file("data/train"), kPerClass, 1);
    write_jpeg_split(work_->file("data/val"), 2, 7);
  }
  std::string data(const std::string& rel) const { return work_->file("data/" + rel); }

  // The run on the bad copy: exit 1, the message naming `named` with `says`, a hint; and a
  // checkpoint folder written by a good epoch before is left as it was.
  RunResult fails(const std::string& named, const std::string& says) {
    const std::string ck = work_->file("ck");
    const RunResult r = run_program(
        plus({bin("train"), "--model", "resnet18", "--dataset", "imagefolder", "--data", work_->file("data"),
              "--image-size", "64", "--batch-size", "8", "--epochs", "1", "--device", "cpu", "--threads", "1",
              "--checkpoint-dir", ck}, {}), {}, 600);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_TRUE(contains(r.err, named)) << "names " << named << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, says)) << r.err;
    EXPECT_TRUE(contains(r.err, "Hint: ")) << r.err;
    EXPECT_FALSE(contains(train::test::event_line(r.out), "\"done\"")) << r.out;
    return r;
  }
  std::unique_ptr<train::test::TempDir> work_;
};

TEST_F(BadImages, ATruncatedJpegIsNamed) {
  const std::string f = data("train/class2/img13.jpg");
  std::vector<uint8_t> bytes = train::test::read_bytes(f);
  bytes.resize(bytes.size() / 2);
  train::test::write_file(f, bytes);
  fails("class2/img13.jpg", "JPEG");
}

TEST_F(BadImages, ATextFileNamedJpgIsNamed) {
  const std::string f = data("train/class1/img20.jpg");
  const std::string text = "not an image at all\n";
  train::test::write_file(f, std::vector<uint8_t>(text.begin(), text.end()));
  fails("class1/img20.jpg", "expected a JPEG or PNG");
}

TEST_F(BadImages, AnEmptyClassFolderIsNamed) {
  train::files::make_dirs(data("train/class9"));
  fails("class9", "class9");
}

// val/ without one of train/'s class folders would number the classes after it differently.
TEST_F(BadImages, AnEvaluationFolderWithoutAClassIsNamed) {
  for (const std::string& name : train::files::list_dir(data("val/class3"))) std::remove(data("val/class3/" + name).c_str());
  ::rmdir(data("val/class3").c_str());
  fails("val: expected the 4 classes of", "(the same class folders), found 3 classes");
}

TEST_F(BadImages, SkipCountsTheBadImageAndTrains) {
  const std::string f = data("train/class0/img11.jpg");
  std::vector<uint8_t> bytes = train::test::read_bytes(f);
  bytes.resize(bytes.size() / 3);
  train::test::write_file(f, bytes);
  const RunResult r = run_program(
      {bin("train"), "--model", "resnet18", "--dataset", "imagefolder", "--data", work_->file("data"), "--image-size",
       "64", "--batch-size", "8", "--epochs", "1", "--device", "cpu", "--threads", "1", "--bad-samples", "skip"},
      {}, 600);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "class0/img11.jpg")) << "the warning names it\n" << r.err;
  EXPECT_EQ(event_of(r).value("skipped_samples", -1), 1) << r.out;
}

// A bad evaluation image: named (exit 1) at the first evaluation; under --bad-samples skip left out
// of the evaluation with a warning naming it, and the run ends.
TEST_F(BadImages, ABadEvaluationImageIsNamedOrLeftOut) {
  const std::string f = data("val/class1/img11.jpg");
  std::vector<uint8_t> bytes = read_bytes(f);
  bytes.resize(bytes.size() / 2);
  write_file(f, bytes);
  fails("val/class1/img11.jpg", "(evaluation)");
  const RunResult r = run_program(
      {bin("train"), "--model", "resnet18", "--dataset", "imagefolder", "--data", work_->file("data"), "--image-size",
       "64", "--batch-size", "8", "--epochs", "1", "--device", "cpu", "--threads", "1", "--bad-samples", "skip"},
      {}, 600);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "val/class1/img11.jpg")) << r.err;
  EXPECT_TRUE(contains(r.err, "left out of the evaluation")) << r.err;
  EXPECT_TRUE(event_of(r).contains("test_accuracy")) << r.out;
}

// A checkpoint written by a good epoch survives a resume that meets a bad image.
TEST_F(BadImages, NoCheckpointIsLostToABadImage) {
  const std::string ck = work_->file("ck");
  const std::vector<std::string> run = {bin("train"), "--model", "resnet18", "--dataset", "imagefolder", "--data",
                                        work_->file("data"), "--image-size", "64", "--batch-size", "8", "--device",
                                        "cpu", "--threads", "1", "--checkpoint-dir", ck};
  const RunResult good = run_program(plus(run, {"--epochs", "1"}), {}, 600);
  ASSERT_EQ(good.exit_code, 0) << good.err;
  const auto before = folder_bytes(ck);
  ASSERT_FALSE(before.empty()) << good.err;
  const std::string f = data("train/class3/img15.jpg");
  std::vector<uint8_t> bytes = train::test::read_bytes(f);
  bytes.resize(bytes.size() / 2);
  train::test::write_file(f, bytes);
  const RunResult bad = run_program(plus(run, {"--epochs", "2"}), {}, 600);
  EXPECT_EQ(bad.exit_code, 1) << bad.err;
  EXPECT_TRUE(contains(bad.err, "class3/img15.jpg")) << bad.err;
  const auto after = folder_bytes(ck);
  for (const auto& [name, content] : before) {
    EXPECT_TRUE(after.count(name) == 1 && after.at(name) == content) << name << " was changed or removed\n" << bad.err;
  }
}

}  // namespace
}  // namespace train::test
