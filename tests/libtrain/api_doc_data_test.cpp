// Compiles docs/api.md's SampleDataset example ("Data that doesn't fit in memory") and trains it
// through the Trainer's loader against the same samples held in memory. Keep the code between the
// "docs/api.md" markers identical to the document's.
#include "test_util.h"

#include <train/base/error.h>
#include <train/sample_dataset.h>
#include <train/trainer.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace {

// ---- docs/api.md: "Data that doesn't fit in memory: a SampleDataset" ----
// Records of fixed size in one binary file (e.g. 3 x 32 x 32 uint8 pixels, then a label byte),
// read where they lie with pread: get() runs on several loader threads at once, so it keeps no
// shared file position.
class RecordFile : public train::SampleDataset {
 public:
  static constexpr int64_t kPixels = 3 * 32 * 32;
  static constexpr int64_t kRecord = kPixels + 1;

  explicit RecordFile(std::string path) : path_(std::move(path)), fd_(::open(path_.c_str(), O_RDONLY)) {
    struct stat st {};
    if (fd_ < 0 || ::fstat(fd_, &st) != 0 || st.st_size % kRecord != 0) {
      throw train::DataError(path_ + ": expected a file of " + std::to_string(kRecord) + "-byte records, found " +
                                 (fd_ < 0 ? "none (" + std::string(std::strerror(errno)) + ")"
                                          : std::to_string(st.st_size) + " bytes") + ".",
                             "check the path and that the file was written completely.");
    }
    n_ = st.st_size / kRecord;
  }
  ~RecordFile() override {
    if (fd_ >= 0) ::close(fd_);
  }
  int64_t size() const override { return n_; }
  train::Sample get(int64_t index) override {
    std::vector<uint8_t> record(kRecord);
    if (::pread(fd_, record.data(), kRecord, index * kRecord) != kRecord) {
      throw train::DataError(path_ + ": expected record " + std::to_string(index) + " (" + std::to_string(kRecord) +
                                 " bytes), found a short read.", "is the file being rewritten?");
    }
    at::Tensor pixels = torch::from_blob(record.data(), {3, 32, 32}, torch::kUInt8).to(torch::kFloat).div_(255);
    return {pixels, torch::tensor(static_cast<int64_t>(record[kPixels]))};
  }
  std::string name() const override { return "records:" + path_; }

 private:
  std::string path_;
  int fd_;
  int64_t n_ = 0;
};

// In the TrainSpec, instead of train_data:
//   spec.train_samples = std::make_shared<RecordFile>("/scratch/train.bin");
// ---- end of docs/api.md ----

// The SampleDataset of the docs, read by the loader, trains to the same bits as the same samples
// held in memory, at 1 and 4 loader threads; a run stopped mid-epoch and resumed with other threads
// and prefetch ends there too.
TEST(ApiDoc, SampleDatasetTrainsAsTheSameDataInMemory) {
  train::test::TempDir dir("api-doc-samples");
  const std::string path = dir.file("train.bin");
  constexpr int64_t kRecords = 320;
  std::vector<uint8_t> bytes(static_cast<size_t>(kRecords * RecordFile::kRecord));
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>((i * 2654435761u) >> 7);
  for (int64_t r = 0; r < kRecords; ++r) bytes[static_cast<size_t>(r * RecordFile::kRecord + RecordFile::kPixels)] %= 10;
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
  }
  auto records = std::make_shared<RecordFile>(path);
  ASSERT_EQ(records->size(), kRecords);
  std::vector<at::Tensor> inputs, targets;
  for (int64_t i = 0; i < kRecords; ++i) {
    train::Sample s = records->get(i);
    inputs.push_back(s.input);
    targets.push_back(s.target);
  }
  auto in_memory = std::make_shared<train::InMemoryDataset>(torch::stack(inputs), torch::stack(targets), "records");
  auto run = [&](bool loader, int workers, int prefetch, std::optional<int64_t> max_steps, const std::string& ckpt) {
    train::TrainConfig config;
    config.run.epochs = 2;
    config.run.device = train::DeviceKind::cpu;
    config.run.threads = 1;
    config.run.max_steps = max_steps;
    config.data.workers = workers;
    config.data.prefetch = prefetch;
    config.checkpoint.dir = ckpt;
    config.checkpoint.every = ckpt.empty() ? std::nullopt : std::optional<int64_t>(3);
    train::Trainer trainer(config, train::DistEnv{});
    train::TrainSpec spec;
    spec.model = [] {
      torch::nn::Sequential net(torch::nn::Flatten(), torch::nn::Linear(3 * 32 * 32, 10));
      return train::wrap_model(net);
    };
    if (loader) {
      spec.train_samples = records;
    } else {
      spec.train_data = in_memory;
    }
    spec.optimizer = [](const std::vector<at::Tensor>& params) {
      return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.05).momentum(0.9));
    };
    spec.batch_size = 32;
    return trainer.fit(spec);
  };
  const train::TrainResult memory = run(false, 1, 2, std::nullopt, "");
  EXPECT_EQ(memory.steps, 20);
  EXPECT_EQ(memory.skipped_samples, -1);  // no loader
  for (int workers : {1, 4}) {
    const train::TrainResult read = run(true, workers, 3, std::nullopt, "");
    EXPECT_EQ(read.params_sha256, memory.params_sha256) << workers << " loader threads";
    EXPECT_EQ(read.skipped_samples, 0);
    EXPECT_GE(read.data_wait_seconds, 0.0);
  }
  // Stopped at step 13 (the checkpoint of step 12, mid-epoch), resumed with other threads.
  const std::string ckpt = dir.file("ckpt");
  EXPECT_EQ(run(true, 1, 1, 13, ckpt).steps, 13);
  EXPECT_EQ(run(true, 4, 5, std::nullopt, ckpt).params_sha256, memory.params_sha256);
}

}  // namespace
