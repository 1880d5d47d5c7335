// Tests for launcher/src/preflight.cpp and `trainctl preflight` as a program: the checks on fake
// data folders (IDX, CIFAR-10, torchvision roots, damaged files) and fake GPU folders.
#include "train/launcher/preflight.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "cifar_files.h"
#include "sbatch_test.h"
#include "test_process.h"
#include "test_util.h"
#include "train/base/error.h"

namespace train {
namespace {

using test::Env;

// ---- preflight ------------------------------------------------------------------------------------

/// A folder with the four IDX files (raw or .gz) as train reads them: 2 images of 2x2 and their labels.
void make_idx(const std::string& dir, bool gz) {
  mkdir(dir.c_str(), 0755);
  const std::string images("\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x02" "abcdefgh", 24);
  const std::string labels("\x00\x00\x08\x01\x00\x00\x00\x02\x03\x07", 10);
  for (const char* split : {"train", "t10k"}) {
    for (const auto& [name, bytes] : {std::pair{std::string(split) + "-images-idx3-ubyte", images},
                                      std::pair{std::string(split) + "-labels-idx1-ubyte", labels}}) {
      if (!gz) {
        write_text(dir + "/" + name, bytes);
        continue;
      }
      gzFile f = gzopen((dir + "/" + name + ".gz").c_str(), "wb");
      gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
      gzclose(f);
    }
  }
}

void make_cifar(const std::string& dir, std::size_t records) {
  mkdir(dir.c_str(), 0755);
  const std::string batch(records * 3073, '\x01');
  for (int i = 1; i <= 5; ++i) write_text(dir + "/data_batch_" + std::to_string(i) + ".bin", batch);
  write_text(dir + "/test_batch.bin", batch);
}

/// A fake /proc/driver/nvidia/gpus with n entries.
std::string make_proc_gpus(const test::TempDir& tmp, int n) {
  const std::string dir = tmp.file("gpus" + std::to_string(n));
  mkdir(dir.c_str(), 0755);
  for (int i = 0; i < n; ++i) mkdir((dir + "/0000:0" + std::to_string(i) + ":00.0").c_str(), 0755);
  return dir;
}

TEST(SbatchPreflight, DatasetFolders) {
  test::TempDir tmp("preflight-data");
  make_idx(tmp.file("raw"), false);
  make_idx(tmp.file("gz"), true);
  make_cifar(tmp.file("cifar"), 2);
  EXPECT_EQ(check_dataset_folder(tmp.file("raw"), "fashion-mnist"), "4 IDX files (fashion-mnist)");
  EXPECT_EQ(check_dataset_folder(tmp.file("gz"), "mnist"), "4 IDX files (mnist)");
  EXPECT_EQ(check_dataset_folder(tmp.file("cifar"), "cifar10"), "6 CIFAR-10 binary files (cifar10)");
  EXPECT_EQ(check_dataset_folder(tmp.file("cifar"), ""), "6 CIFAR-10 binary files (cifar10)");

  expect_error<DataError>([&] { check_dataset_folder(tmp.file("none"), "fashion-mnist"); },
                          {"--data '" + tmp.file("none") + "'", "nothing at that path", "--stage-data"}, "missing");
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("raw/t10k-images-idx3-ubyte"), "mnist"); },
                          {"expected a folder, found a file"}, "file");
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("cifar"), "fashion-mnist"); },
                          {"train-images-idx3-ubyte", "(each raw or .gz) -- none there", "FashionMNIST/raw"},
                          "wrong dataset");
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("raw"), "cifar10"); },
                          {"data_batch_1.bin", "cifar-10-batches-py", "cifar-10-binary.tar.gz"}, "idx as cifar");
  write_text(tmp.file("raw/t10k-labels-idx1-ubyte"), std::string("\x00\x00\x08\x03\x00", 5));
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("raw"), "fashion-mnist"); },
                          {"t10k-labels-idx1-ubyte: expected the IDX magic 2049"}, "bad magic");
  write_text(tmp.file("gz/train-labels-idx1-ubyte.gz"), "PK\x03\x04");
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("gz"), "fashion-mnist"); },
                          {"train-labels-idx1-ubyte.gz: expected a gzip file"}, "bad gzip");
  write_text(tmp.file("cifar/test_batch.bin"), std::string(3000, '\x01'));
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("cifar"), "cifar10"); },
                          {"test_batch.bin: expected whole records of 3073 bytes", "found 3000 bytes"}, "truncated");
  make_idx(tmp.file("empty"), false);
  for (const char* f : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                        "t10k-labels-idx1-ubyte"}) {
    unlink(tmp.file(std::string("empty/") + f).c_str());
  }
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("empty"), ""); },
                          {"one of mnist, fashion-mnist, cifar10, found none"}, "empty");
}

// torchvision's roots: preflight finds the dataset's subfolder as train does.
TEST(SbatchPreflight, TorchvisionRoots) {
  test::TempDir tmp("preflight-tv");
  mkdir(tmp.file("data").c_str(), 0755);
  mkdir(tmp.file("data/FashionMNIST").c_str(), 0755);
  make_idx(tmp.file("data/FashionMNIST/raw"), true);
  mkdir(tmp.file("data/cifar-10-batches-py").c_str(), 0755);
  test::write_cifar_layout(tmp.file("data/cifar-10-batches-py"), /*binary=*/false, 2, 2);
  EXPECT_EQ(check_dataset_folder(tmp.file("data"), "fashion-mnist"), "4 IDX files (fashion-mnist, in FashionMNIST/raw/)");
  EXPECT_EQ(check_dataset_folder(tmp.file("data"), "cifar10"),
            "6 CIFAR-10 Python pickle files (cifar10, in cifar-10-batches-py/)");
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("data"), "mnist"); },
                          {tmp.file("data/MNIST/raw"), "download=True", "pass --dataset fashion-mnist"}, "mnist missing");
  write_text(tmp.file("data/cifar-10-batches-py/test_batch"), "PK\x03\x04");
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("data"), "cifar10"); },
                          {tmp.file("data/cifar-10-batches-py/test_batch"), "expected a Python pickle"}, "not a pickle");
}

// Preflight checks each file's whole structure, as train would read it, without training: a
// truncated or mis-shaped pickle, a corrupt label, an IDX file of the wrong size or a cut gzip
// stream fail with the file named; a batch of fewer than 10000 records is a warning.
TEST(SbatchPreflight, ChecksEachFilesWholeStructure) {
  test::TempDir tmp("preflight-whole");
  const std::string py = tmp.file("data/cifar-10-batches-py");
  test::write_cifar_layout(py, /*binary=*/false, 3, 2);
  std::vector<std::string> warnings;
  EXPECT_EQ(check_dataset_folder(tmp.file("data"), "cifar10", &warnings),
            "6 CIFAR-10 Python pickle files (cifar10, in cifar-10-batches-py/)");
  ASSERT_EQ(warnings.size(), 6u);
  EXPECT_TRUE(contains(warnings[0], py + "/data_batch_1: holds 3 records, where each official CIFAR-10 batch holds 10000"))
      << warnings[0];
  PreflightOptions o;
  o.proc_gpus_dir = tmp.file("no-driver");
  o.train_args = {"--model", "cifar10", "--data", tmp.file("data")};
  PreflightReport r = run_preflight(o, {});
  EXPECT_TRUE(r.ok()) << r.errors.front();
  EXPECT_TRUE(contains(r.passed.front(), "checked whole in " + tmp.file("data"))) << r.passed.front();
  const auto short_batch = [](const std::string& w) { return contains(w, "where each official CIFAR-10 batch holds 10000"); };
  EXPECT_EQ(std::count_if(r.warnings.begin(), r.warnings.end(), short_batch), 6);

  // A pickle cut short (it starts right, so a look at its head passed it).
  auto bytes = test::cifar_pickle_bytes(test::learnable_cifar(3, 5));
  test::write_file(py + "/data_batch_5", std::vector<uint8_t>(bytes.begin(), bytes.begin() + bytes.size() / 2));
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("data"), "cifar10"); },
                          {py + "/data_batch_5: expected", "truncated?"}, "truncated pickle");
  r = run_preflight(o, {});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_TRUE(contains(r.errors[0], py + "/data_batch_5")) << r.errors[0];
  // A pickle of another shape: 3 rows of 3000 bytes.
  test::PickleShape wide;
  wide.columns = 3000;
  auto samples = test::learnable_cifar(3, 5);
  samples.pixels.resize(3 * 3000);
  test::write_file(py + "/data_batch_5", test::cifar_pickle_bytes(samples, wide));
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("data"), "cifar10"); },
                          {py + "/data_batch_5: expected 'data' of shape N x 3072", "found shape 3 x 3000"}, "shape");
  // The binary version: a label byte outside 0..9 in the last record of the last file.
  test::write_cifar_layout(tmp.file("bin"), /*binary=*/true, 2, 2);
  auto records = test::cifar_binary_bytes(test::learnable_cifar(2, 4));
  records[3073] = 12;
  test::write_file(tmp.file("bin/data_batch_5.bin"), records);
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("bin"), "cifar10"); },
                          {tmp.file("bin/data_batch_5.bin") + ": expected labels in 0..9, found 12 in record 1"}, "label");
  // IDX: the images file one byte short, a gzip stream cut short, a label of 10.
  make_idx(tmp.file("raw"), false);
  write_text(tmp.file("raw/t10k-images-idx3-ubyte"),
             std::string("\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x02" "abcdefg", 23));
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("raw"), "mnist"); },
                          {"t10k-images-idx3-ubyte: expected 24 bytes for 2 images of 2x2", "found 23 (truncated?)"}, "idx size");
  make_idx(tmp.file("raw"), false);
  write_text(tmp.file("raw/train-labels-idx1-ubyte"), std::string("\x00\x00\x08\x01\x00\x00\x00\x02\x03\x0a", 10));
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("raw"), "mnist"); },
                          {"train-labels-idx1-ubyte: expected labels in 0..9, found 10 at index 1"}, "idx label");
  make_idx(tmp.file("gz"), true);
  const std::string whole = test::read_text(tmp.file("gz/train-images-idx3-ubyte.gz"));
  write_text(tmp.file("gz/train-images-idx3-ubyte.gz"), whole.substr(0, whole.size() - 6));
  expect_error<DataError>([&] { check_dataset_folder(tmp.file("gz"), "mnist"); },
                          {"train-images-idx3-ubyte.gz: expected a whole gzip stream"}, "cut gzip");
}

TEST(SbatchPreflight, FindsTheDataTrainWillRead) {
  test::TempDir tmp("preflight-args");
  make_idx(tmp.file("fm"), true);
  make_cifar(tmp.file("cifar"), 1);
  PreflightOptions o;
  o.proc_gpus_dir = tmp.file("no-driver");
  o.train_args = {"--data", tmp.file("cifar"), "--epochs", "1", "--data=" + tmp.file("fm")};  // the last wins
  PreflightReport r = run_preflight(o, {});
  EXPECT_TRUE(r.ok()) << r.errors.front();
  EXPECT_EQ(r.passed.front(), "data: 4 IDX files (fashion-mnist) checked whole in " + tmp.file("fm"));

  o.train_args = {"--model", "cifar10", "--data", tmp.file("cifar")};
  r = run_preflight(o, {});
  EXPECT_TRUE(r.ok()) << r.errors.front();
  EXPECT_TRUE(contains(r.passed.front(), "CIFAR-10")) << r.passed.front();

  o.train_args = {"--model", "cifar10"};
  r = run_preflight(o, {});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_TRUE(contains(r.errors[0], "--data: expected the folder holding the cifar10 files, found none given.")) << r.errors[0];

  // Without --data, Fashion-MNIST comes from TRAIN_FASHION_MNIST_DIR (as in train), else Debian's folder.
  o.train_args = {};
  r = run_preflight(o, {{"TRAIN_FASHION_MNIST_DIR", tmp.file("fm")}});
  EXPECT_TRUE(r.ok()) << r.errors.front();
  o.data_dir = tmp.file("fm");  // --data of preflight itself wins
  o.train_args = {"--data", tmp.file("cifar")};
  r = run_preflight(o, {});
  EXPECT_TRUE(r.ok()) << r.errors.front();
  EXPECT_TRUE(contains(r.passed.front(), "IDX")) << r.passed.front();
}

TEST(SbatchPreflight, ShardsTrainWillReadArePresentAndReadable) {
  test::TempDir tmp("preflight-shards");
  write_text(tmp.file("train-000000.tar"), std::string(1000, 'a'));
  write_text(tmp.file("train-000001.tar"), std::string(1500, 'b'));
  write_text(tmp.file("notes.txt"), "not a shard");
  PreflightOptions o;
  // A pattern (what trainctl sbatch --stage-data gives train): the shards are there and readable.
  o.train_args = {"--data", tmp.path() + "/train-{000000..000001}.tar"};
  PreflightReport r = run_preflight(o, {});
  ASSERT_TRUE(r.errors.empty()) << r.errors[0];
  ASSERT_FALSE(r.passed.empty());
  EXPECT_EQ(r.passed[0], "data: 2 WebDataset shard files (2500 bytes) present and readable: " + tmp.path() +
                             "/train-{000000..000001}.tar");
  // A folder with --dataset webdataset: there and readable, and then read as train reads them: these
  // are no tar files, and the first is named.
  o.train_args = {"--dataset", "webdataset", "--data", tmp.path()};
  r = run_preflight(o, {});
  ASSERT_FALSE(r.passed.empty());
  EXPECT_EQ(r.passed[0], "data: 2 WebDataset shard files (2500 bytes) present and readable: " + tmp.path());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_TRUE(contains(r.errors[0], tmp.file("train-000000.tar"))) << r.errors[0];
  EXPECT_TRUE(contains(r.errors[0], "Hint: ")) << r.errors[0];
  // A pattern is shards whatever the dataset: the first missing one is named.
  o.train_args = {"--data", tmp.path() + "/train-{000000..000003}.tar"};
  r = run_preflight(o, {});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_TRUE(contains(r.errors[0], "expected the 4 WebDataset shard file(s) it names on this node, found no file " +
                                        tmp.file("train-000002.tar") + " (the first one missing). Hint: ")) << r.errors[0];
  o.train_args = {"--data", tmp.path() + "/train-{000000..000001.tar"};
  r = run_preflight(o, {});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_TRUE(contains(r.errors[0], "expected balanced braces")) << r.errors[0];
}

TEST(SbatchPreflight, GpusMustBeVisibleWhereTheJobAskedForThem) {
  test::TempDir tmp("preflight-gpus");
  make_idx(tmp.file("fm"), true);
  PreflightOptions o;
  o.train_args = {"--data", tmp.file("fm")};
  o.tasks_per_node = "2(x2)";
  o.expect_gpus = 2;

  // Seed 000: GPUs allocated, but no driver on the node.
  o.proc_gpus_dir = tmp.file("no-driver");
  PreflightReport r = run_preflight(o, {{"SLURM_NODEID", "1"}});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_TRUE(contains(r.errors[0], "CUDA GPUs on " + r.host + ": expected the 2 GPU(s) per node the job asked for, "
                                    "found none visible (CUDA_VISIBLE_DEVICES unset, no NVIDIA driver")) << r.errors[0];
  EXPECT_TRUE(contains(r.errors[0], "Hint: this node can't run CUDA: ")) << r.errors[0];
  r = run_preflight(o, {{"CUDA_VISIBLE_DEVICES", "0,1"}});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_TRUE(contains(r.errors[0], "NVIDIA driver on " + r.host)) << r.errors[0];
  r = run_preflight(o, {{"CUDA_VISIBLE_DEVICES", "NoDevFiles"}});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_TRUE(contains(r.errors[0], "found none visible (CUDA_VISIBLE_DEVICES='NoDevFiles'")) << r.errors[0];

  // Two GPUs, two tasks: fine.
  o.proc_gpus_dir = make_proc_gpus(tmp, 2);
  r = run_preflight(o, {});
  EXPECT_TRUE(r.ok()) << r.errors.front();
  EXPECT_TRUE(r.warnings.empty());
  EXPECT_EQ(r.passed.size(), 3u);
  // One visible of two asked for.
  r = run_preflight(o, {{"CUDA_VISIBLE_DEVICES", "1"}});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_TRUE(contains(r.errors[0], "found 1 visible")) << r.errors[0];
  // More tasks than GPUs.
  o.tasks_per_node = "4,2";
  r = run_preflight(o, {{"SLURM_NODEID", "0"}});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_TRUE(contains(r.errors[0], "tasks on " + r.host + ": expected one task per GPU (2 visible), found 4 tasks "
                                    "(--tasks-per-node=4,2)")) << r.errors[0];
  r = run_preflight(o, {{"SLURM_NODEID", "1"}});  // node 1 runs 2
  EXPECT_TRUE(r.ok()) << r.errors.front();
  r = run_preflight(o, {{"SLURM_NODEID", "0"}, {"SLURM_GPUS_PER_TASK", "1"}});  // SLURM binds a GPU per task
  EXPECT_TRUE(r.ok()) << r.errors.front();
  // Fewer tasks than GPUs: a warning.
  o.tasks_per_node = "1";
  r = run_preflight(o, {});
  EXPECT_TRUE(r.ok());
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_TRUE(contains(r.warnings[0], "1 stay idle")) << r.warnings[0];
  // The job's SLURM_GPUS_ON_NODE when --expect-gpus is not given.
  o.expect_gpus = -1;
  o.proc_gpus_dir = tmp.file("no-driver");
  r = run_preflight(o, {{"SLURM_GPUS_ON_NODE", "4"}});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_TRUE(contains(r.errors[0], "expected the 4 GPU(s)")) << r.errors[0];
  // Training on the CPU on purpose: GPUs asked for stay idle, with a warning.
  o.train_args.push_back("--device=cpu");
  r = run_preflight(o, {{"SLURM_GPUS_ON_NODE", "4"}});
  EXPECT_TRUE(r.ok()) << r.errors.front();
  ASSERT_EQ(r.warnings.size(), 1u);
}

TEST(SbatchPreflight, GpusNobodyAskedForAreNoticed) {
  test::TempDir tmp("preflight-cpu");
  make_idx(tmp.file("fm"), true);
  PreflightOptions o;
  o.train_args = {"--data", tmp.file("fm")};
  o.proc_gpus_dir = tmp.file("no-driver");
  PreflightReport r = run_preflight(o, {{"SLURM_TASKS_PER_NODE", "2(x2)"}, {"SLURM_NODEID", "1"}});
  EXPECT_TRUE(r.ok()) << r.errors.front();
  EXPECT_EQ(r.passed.back(), "GPUs: none asked for, none visible: train uses Gloo on the CPU");
  EXPECT_EQ(r.passed[1], "tasks: 2 on this node (SLURM_TASKS_PER_NODE=2(x2))");

  o.proc_gpus_dir = make_proc_gpus(tmp, 1);
  o.tasks_per_node = "2";
  r = run_preflight(o, {});
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_TRUE(contains(r.warnings[0], "though the job asked for none")) << r.warnings[0];
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_TRUE(contains(r.errors[0], "expected at most one per visible GPU (1)")) << r.errors[0];

  o.tasks_per_node = "2(x2)";
  r = run_preflight(o, {{"SLURM_NODEID", "2"}});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.errors[0], "--tasks-per-node='2(x2)': expected an entry for node 2")) << r.errors[0];
}

// ---- trainctl preflight as a program ---------------------------------------------------------------

TEST(TrainctlPreflight, OneLinePerNodeAndExitOneOnFailure) {
  test::TempDir tmp("trainctl-preflight");
  make_idx(tmp.file("fm"), true);
  Env env = test::hermetic_env();
  auto p = run_trainctl({"preflight", "--tasks-per-node", "1(x2)", "--", "--data", tmp.file("fm"), "--device", "cpu"},
                        env);
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_EQ(test::lines_of(p->out()).size(), 1u) << p->out();
  EXPECT_TRUE(contains(p->out(), ": ok (data: 4 IDX files (fashion-mnist) checked whole in " + tmp.file("fm") +
                                     "; tasks: 1 on this node (--tasks-per-node=1(x2)); device: CPU")) << p->out();

  p = run_trainctl({"preflight", "--data", tmp.file("nope"), "--expect-gpus", "2", "--", "--epochs", "1"},
                   [&] { Env e = env; e["CUDA_VISIBLE_DEVICES"] = ""; return e; }());
  EXPECT_EQ(p->exit_code(), 1);
  EXPECT_EQ(p->out(), "");
  EXPECT_TRUE(contains(p->err(), ": FAILED: --data '" + tmp.file("nope") + "': expected a folder")) << p->err();
  EXPECT_TRUE(contains(p->err(), ": FAILED: CUDA GPUs on ")) << p->err();

  p = run_trainctl({"preflight", "--expect-gpus", "-1"}, env);
  EXPECT_EQ(p->exit_code(), 2) << p->err();
  p = run_trainctl({"preflight", "--help"}, env);
  EXPECT_EQ(p->exit_code(), 0);
  EXPECT_TRUE(contains(p->out(), "Usage: trainctl preflight")) << p->out();
}

}  // namespace
}  // namespace train
