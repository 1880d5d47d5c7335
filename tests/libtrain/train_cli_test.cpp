// End-to-end tests of the `train` program: real Fashion-MNIST, determinism, and bad input.
#include "test_util.h"
#include "train/files.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

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
  EXPECT_GE(ja["test_accuracy"].get<double>(), 0.72) << a.err;
  EXPECT_GT(ja["images_per_sec"].get<double>(), 0.0);
  EXPECT_EQ(ja["params_sha256"].get<std::string>().size(), 64u);
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
  EXPECT_NE(unknown.err.find("--epochz"), std::string::npos) << unknown.err;

  auto not_a_number = run_program({bin("train"), "--epochs", "many"});
  EXPECT_EQ(not_a_number.exit_code, 2);
  EXPECT_NE(not_a_number.err.find("many"), std::string::npos) << not_a_number.err;

  auto zero = run_program({bin("train"), "--epochs", "0", "--device", "cpu"});
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_NE(zero.err.find("--epochs: expected at least 1, found 0"), std::string::npos) << zero.err;

  auto device = run_program({bin("train"), "--device", "tpu"});
  EXPECT_EQ(device.exit_code, 2);
  EXPECT_NE(device.err.find("--device: expected auto, cpu or cuda, found 'tpu'"), std::string::npos) << device.err;

  auto model = run_program({bin("train"), "--model", "gpt"});
  EXPECT_EQ(model.exit_code, 2);
  EXPECT_NE(model.err.find("unknown model 'gpt'"), std::string::npos) << model.err;

  auto heap = run_program({bin("train"), "--heap", "bogus"});
  EXPECT_EQ(heap.exit_code, 2);
  EXPECT_NE(heap.err.find("--heap: expected reuse or default, found 'bogus'. Hint:"), std::string::npos) << heap.err;

  auto shm = run_program({bin("train"), "--shm-allreduce", "sometimes", "--device", "cpu"});
  EXPECT_EQ(shm.exit_code, 2);
  EXPECT_NE(shm.err.find("--shm-allreduce: expected auto or off, found 'sometimes'. Hint:"), std::string::npos) << shm.err;

  auto help = run_program({bin("train"), "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--limit-train-samples"), std::string::npos);
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
