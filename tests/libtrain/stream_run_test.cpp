// `train --stream` end to end (CPU): the built-in readers' training split, read by the loader from
// its files, gives the in-memory run's params_sha256 on Debian's Fashion-MNIST (.gz files: unpacked
// once into the checkpoint folder, then reused), on 1 and 2 ranks, and on CIFAR-10 files written
// here in both layouts (binary batches mapped in place, pickles unpacked); a run checkpointed in
// memory resumes with --stream on the same bits; --augment is refused and missing data is named.
#include "cifar_files.h"
#include "run_helpers.h"
#include "test_util.h"
#include "train/base/files.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <regex>

namespace train::test {
namespace {

// Fashion-MNIST's first 2048 training images, batch 64: one epoch of 32 steps.
constexpr int kTrain = 2048;
constexpr int kSteps = kTrain / 64;

// `train` on Fashion-MNIST's subset: one epoch, 1 thread.
std::vector<std::string> fashion(const std::vector<std::string>& extra) {
  return plus({bin("train"), "--data", train::test::fashion_mnist_dir(), "--limit-train-samples", std::to_string(kTrain),
               "--limit-test-samples", "500", "--epochs", "1", "--batch-size", "64", "--device", "cpu", "--threads",
               "1"},
              extra);
}

// A run that must end with its done line after `steps` steps.
RunResult finished(const std::vector<std::string>& argv, int steps) {
  const RunResult r = run_program(argv, {}, 300);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = event_of(r);
  EXPECT_EQ(j.value("event", ""), "done") << r.out;
  EXPECT_EQ(j.value("steps", -1), steps) << r.out;
  return r;
}

class StreamRun : public ::testing::Test {
 protected:
  void SetUp() override {
    if (train::test::fashion_mnist_dir().empty()) {
      GTEST_SKIP() << "Fashion-MNIST's IDX files are not installed: neither $TRAIN_FASHION_MNIST_DIR nor "
                      "/usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist) holds them";
    }
  }
};

}  // namespace

// One rank, then two: --stream (the .gz files unpacked into the checkpoint folder by the first
// run, reused by the second) ends on the in-memory run's bits and test accuracy.
TEST_F(StreamRun, FashionMnistGivesTheInMemoryRunsBits) {
  train::test::TempDir d("streamrun");
  const std::vector<std::string> ck = {"--checkpoint-dir", d.file("ck")};
  for (int world : {1, 2}) {
    const auto command = [world](std::vector<std::string> argv) {
      return world == 1 ? argv : train::test::local_command(world, std::move(argv));
    };
    const std::vector<std::string> batch = {"--batch-size", std::to_string(64 / world)};
    const RunResult memory = finished(command(fashion(batch)), kSteps);
    const RunResult stream = finished(command(fashion(plus(plus(batch, ck), {"--stream", "--data-workers", "2"}))), kSteps);
    EXPECT_EQ(sha_of(stream), sha_of(memory)) << "world " << world << "\n" << stream.err;
    EXPECT_EQ(event_of(stream).value("test_accuracy", -1.0), event_of(memory).value("test_accuracy", -2.0));
    EXPECT_TRUE(contains(stream.err, "loader of fashion-mnist/train: 2 loader threads")) << stream.err;
    EXPECT_FALSE(contains(memory.err, "loader of")) << memory.err;
    EXPECT_EQ(event_of(stream).value("skipped_samples", -1), 0) << "a loader's run";
    const std::string copy = d.file("ck") + "/unpacked/train-images-idx3-ubyte.";
    if (world == 1) {
      EXPECT_TRUE(contains(stream.err, "--stream: unpacked " + train::test::fashion_mnist_dir() +
                                           "/train-images-idx3-ubyte.gz (gzip, "))
          << stream.err;
      EXPECT_TRUE(contains(stream.err, "into 47040016 bytes at " + copy)) << stream.err;
    } else {
      EXPECT_TRUE(contains(stream.err, "--stream: reusing " + copy)) << stream.err;
    }
    // The copies, and no checkpoint to resume from (the run of world 2 starts afresh too).
    train::files::remove_tree(d.file("ck/ckpt-" + std::to_string(kSteps) + ".pt"));
    for (const std::string& name : train::files::list_dir(d.file("ck"))) {
      EXPECT_TRUE(name == "unpacked" || name.rfind("ckpt-", 0) != 0) << name;
    }
  }
}

// Stopped at step 13 of a run in memory (its checkpoint of step 7), resumed with --stream: the
// uninterrupted run's bits (--stream changes how samples are read, not which).
TEST_F(StreamRun, ARunInMemoryResumesWithStream) {
  const std::string want = sha_of(finished(fashion({}), kSteps));
  train::test::TempDir d("streamresume");
  const std::vector<std::string> ck = {"--checkpoint-dir", d.file("ck"), "--checkpoint-every", "7"};
  finished(fashion(plus(ck, {"--max-steps", "13"})), 13);
  const RunResult rest = finished(fashion(plus(ck, {"--stream"})), kSteps);
  EXPECT_TRUE(std::regex_search(rest.err, std::regex(R"(resumed from \S+ckpt-7\.pt)"))) << rest.err;
  EXPECT_EQ(sha_of(rest), want) << rest.err;
}

// CIFAR-10 written in both layouts (the same samples): --stream on the binary batches (mapped
// where they lie) and on the pickles (unpacked into the checkpoint folder) ends on the bits of
// the run in memory.
TEST(StreamRunCifar, BothLayoutsGiveTheInMemoryRunsBits) {
  train::test::TempDir d("streamcifar");
  train::test::write_cifar_layout(d.file("bin/cifar-10-batches-bin"), /*binary=*/true, 40, 50);
  train::test::write_cifar_layout(d.file("py/cifar-10-batches-py"), /*binary=*/false, 40, 50);
  const auto cifar = [](const std::string& data, const std::vector<std::string>& extra) {
    return plus({bin("train"), "--model", "cifar10", "--data", data, "--epochs", "1", "--batch-size", "20",
                 "--device", "cpu", "--threads", "1"},
                extra);
  };
  const std::string want = sha_of(finished(cifar(d.file("bin"), {}), 10));
  const RunResult binary = finished(cifar(d.file("bin"), {"--stream", "--checkpoint-dir", d.file("ck-bin")}), 10);
  EXPECT_EQ(sha_of(binary), want) << binary.err;
  EXPECT_FALSE(train::files::exists(d.file("ck-bin/unpacked"))) << "binary batches are mapped where they lie";
  const RunResult pickles = finished(cifar(d.file("py"), {"--stream", "--checkpoint-dir", d.file("ck-py")}), 10);
  EXPECT_EQ(sha_of(pickles), want) << pickles.err;
  EXPECT_TRUE(contains(pickles.err, "--stream: unpacked " + d.file("py/cifar-10-batches-py/data_batch_5") +
                                        " (CIFAR-10 pickle, "))
      << pickles.err;
  EXPECT_EQ(train::files::list_dir(d.file("ck-py/unpacked")).size(), 5u) << "the 5 training batches";
}

// --stream --augment: refused before anything is read (the augmentation works on data in
// memory); missing data: the folder and every place looked, exit 1.
TEST_F(StreamRun, AugmentIsRefusedAndMissingDataIsNamed) {
  const RunResult augment = run_program(fashion({"--stream", "--augment", "crop"}), {}, 120);
  EXPECT_EQ(augment.exit_code, 2) << augment.err;
  EXPECT_TRUE(contains(augment.err, "--augment with --stream: expected the training images held in memory")) << augment.err;
  EXPECT_TRUE(contains(augment.err, "Hint: leave out --stream")) << augment.err;
  train::test::TempDir d("streammissing");
  const RunResult missing = run_program(
      {bin("train"), "--stream", "--data", d.path(), "--epochs", "1", "--device", "cpu", "--threads", "1"}, {}, 120);
  EXPECT_EQ(missing.exit_code, 1) << missing.err;
  EXPECT_TRUE(contains(missing.err, "--data '" + d.path() + "': expected the fashion-mnist train files, found them in "
                                    "none of the places looked"))
      << missing.err;
  EXPECT_TRUE(contains(missing.err, d.path() + ": IDX train-images-idx3-ubyte")) << missing.err;
  EXPECT_TRUE(contains(missing.err, "Hint:")) << missing.err;
}

}  // namespace train::test
