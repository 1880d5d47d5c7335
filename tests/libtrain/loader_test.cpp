// The loader of sample datasets (libtrain/src/data/loader.h): its batches against the in-memory
// feed's gather of the same order for any worker count and prefetch depth, on one and two ranks and
// resumed mid-epoch; the scalable order above the threshold; the ring's bound on reads ahead; bad
// samples failed or skipped; shutdown with workers waiting. Events are awaited, never slept on.
#include "data/batch_feed.h"
#include "data/loader.h"
#include "data/scalable_order.h"
#include "train/base/error.h"
#include "train/data.h"
#include "train/sample_dataset.h"
#include "train/sampler.h"

#include <ATen/Context.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/scalar_tensor.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using train::Batch;
using train::Sample;
using train::detail::BadSamples;
using train::detail::LoaderFeed;
using train::detail::LoaderOptions;
using train::detail::make_loader_feed;

namespace {

// Sample i: an input [2, 3] filled with i, the target i.
Sample toy_sample(int64_t i) {
  return {at::full({2, 3}, static_cast<float>(i), at::kFloat), at::scalar_tensor(i, at::kLong)};
}

class ToyData : public train::SampleDataset {
 public:
  explicit ToyData(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Sample get(int64_t index) override { return toy_sample(index); }
  std::string name() const override { return "toy"; }

 private:
  int64_t n_;
};

// The same samples held in memory, for the in-memory feed's gather.
train::InMemoryDataset toy_in_memory(int64_t n) {
  at::Tensor inputs = at::arange(n, at::kFloat).view({n, 1, 1}).expand({n, 2, 3}).contiguous();
  return train::InMemoryDataset(inputs, at::arange(n, at::kLong), "toy");
}

Batch clone(const Batch& b) { return {b.inputs.clone(), b.targets.clone()}; }

// The batches [first / step, end) of an epoch, as the training loop asks for them (cloned: the
// loader's CPU buffers are reused after the next call).
std::vector<Batch> take(train::detail::BatchFeed& feed, int epoch, int64_t first, int64_t step, bool next_follows,
                        train::InMemoryDataset* gather = nullptr, int64_t stop_after = -1) {
  const int64_t n = feed.start_epoch(epoch, first, step, next_follows);
  std::vector<Batch> out;
  for (int64_t start = first; start < n; start += step) {
    if (stop_after >= 0 && static_cast<int64_t>(out.size()) == stop_after) break;
    train::detail::StepBatch sb = feed.batch(start, std::min(step, n - start));
    if (sb.ready) sb.ready();
    out.push_back(gather ? gather->get_batch(sb.indices) : clone(sb.batch));
  }
  return out;
}

void expect_same(const std::vector<Batch>& a, const std::vector<Batch>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(at::equal(a[i].inputs.cpu(), b[i].inputs.cpu())) << what << ", batch " << i;
    EXPECT_TRUE(at::equal(a[i].targets.cpu(), b[i].targets.cpu())) << what << ", batch " << i;
  }
}

LoaderOptions options(int workers, int prefetch) {
  LoaderOptions o;
  o.workers = workers;
  o.prefetch = prefetch;
  return o;
}

constexpr int64_t kSamples = 37;  // odd: two ranks pad their shares, the last batch is short
constexpr int64_t kStep = 5;
constexpr uint64_t kSeed = 11;

}  // namespace

TEST(EpochSampleOrder, IsTheSamplersOrderOrTheScalableOne) {
  for (int world : {1, 3}) {
    for (int rank = 0; rank < world; ++rank) {
      train::detail::EpochSampleOrder exact(kSamples, world, rank, kSeed, /*order_threshold=*/kSamples);
      train::detail::EpochSampleOrder scalable(kSamples, world, rank, kSeed, /*order_threshold=*/kSamples - 1);
      EXPECT_TRUE(exact.exact());
      EXPECT_FALSE(scalable.exact());
      for (int64_t epoch : {0, 1, 2}) {
        exact.select(epoch, /*next_follows=*/true);
        scalable.select(epoch, /*next_follows=*/false);
        train::DistributedSampler sampler(kSamples, world, rank, /*shuffle=*/true, kSeed);
        sampler.set_epoch(epoch);
        const std::vector<int64_t> want = sampler.indices();
        const train::detail::ScalableRankOrder want_scalable(kSamples, world, rank, kSeed, epoch);
        ASSERT_EQ(exact.num_samples(), static_cast<int64_t>(want.size()));
        ASSERT_EQ(scalable.num_samples(), want_scalable.num_samples());
        for (int64_t k = 0; k < exact.num_samples(); ++k) {
          EXPECT_EQ(exact.sample_at(k), want[static_cast<size_t>(k)]);
          EXPECT_EQ(scalable.sample_at(k), want_scalable.rank_index(k));
        }
      }
    }
  }
}

// Bit for bit the in-memory feed's batches, whatever the workers and the prefetch depth; an epoch
// started while the previous one's prefetch runs; a resumed epoch's tail.
TEST(Loader, EqualsTheInMemoryFeedForAnyWorkersAndPrefetch) {
  ToyData data(kSamples);
  train::InMemoryDataset memory = toy_in_memory(kSamples);
  for (int world : {1, 2}) {
    for (int rank = 0; rank < world; ++rank) {
      auto index_feed = train::detail::make_index_feed(kSamples, world, rank, kSeed, at::kCPU);
      const std::vector<Batch> want1 = take(*index_feed, 1, 0, kStep, true, &memory);
      const std::vector<Batch> want2 = take(*index_feed, 2, 0, kStep, false, &memory);
      for (int workers : {1, 2, 4}) {
        for (int prefetch : {1, 3, 8}) {
          const std::string what = "world " + std::to_string(world) + " rank " + std::to_string(rank) + " workers " +
                                   std::to_string(workers) + " prefetch " + std::to_string(prefetch);
          auto loader = make_loader_feed(data, world, rank, kSeed, options(workers, prefetch));
          expect_same(take(*loader, 1, 0, kStep, true), want1, what + ", epoch 1");
          expect_same(take(*loader, 2, 0, kStep, false), want2, what + ", epoch 2");
          // Epoch 1 again, left after 1 batch while its prefetch runs; then epoch 2 whole.
          take(*loader, 1, 0, kStep, true, nullptr, /*stop_after=*/1);
          expect_same(take(*loader, 2, 0, kStep, false), want2, what + ", epoch 2 after a cancelled epoch 1");
          // A run resumed at batch k of epoch 2 (a new loader, as in a new process).
          for (int64_t k : {1, 3}) {
            auto resumed = make_loader_feed(data, world, rank, kSeed, options(workers, prefetch));
            const std::vector<Batch> tail(want2.begin() + k, want2.end());
            expect_same(take(*resumed, 2, k * kStep, kStep, false), tail, what + ", resumed at batch " + std::to_string(k));
          }
          EXPECT_EQ(loader->skipped(), 0);
        }
      }
    }
  }
}

// Above the threshold the order is ScalableRankOrder's, never DistributedSampler's.
TEST(Loader, AboveTheThresholdTakesTheScalableOrder) {
  ToyData data(kSamples);
  for (int world : {1, 2}) {
    for (int rank = 0; rank < world; ++rank) {
      for (int workers : {1, 4}) {
        LoaderOptions o = options(workers, 2);
        o.order_threshold = kSamples - 1;
        auto loader = make_loader_feed(data, world, rank, kSeed, o);
        for (int epoch : {1, 2}) {
          const std::vector<Batch> got = take(*loader, epoch, 0, kStep, epoch == 1);
          const train::detail::ScalableRankOrder want(kSamples, world, rank, kSeed, epoch - 1);
          std::vector<int64_t> seen;
          for (const Batch& b : got) {
            for (int64_t j = 0; j < b.targets.size(0); ++j) {
              seen.push_back(b.targets[j].item<int64_t>());
              EXPECT_TRUE(at::equal(b.inputs[j], toy_sample(seen.back()).input));
            }
          }
          ASSERT_EQ(static_cast<int64_t>(seen.size()), want.num_samples());
          for (int64_t k = 0; k < want.num_samples(); ++k) EXPECT_EQ(seen[static_cast<size_t>(k)], want.rank_index(k));
        }
      }
    }
  }
}

namespace {

// Counts get() calls and checks each against the ring's bound: a get() may start only while the
// samples read so far stay within (batch() calls made + prefetch) batches, the one being trained
// on included. `calls` is raised by the test before each batch() call, so the loader's own count
// never exceeds it.
class CountingData : public train::SampleDataset {
 public:
  CountingData(int64_t n, int64_t step, int prefetch) : n_(n), step_(step), prefetch_(prefetch) {}
  int64_t size() const override { return n_; }
  std::string name() const override { return "counting"; }

  Sample get(int64_t index) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++started_;
      ++in_flight_;
      max_in_flight_ = std::max(max_in_flight_, in_flight_);
      if (counting_ && started_ > (calls_ + prefetch_) * step_) ++violations_;
    }
    Sample s = toy_sample(index);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --in_flight_;
    }
    changed_.notify_all();
    return s;
  }

  // From here on, get() calls count (the loader's first read, for the shapes, does not).
  void start_counting() {
    std::lock_guard<std::mutex> lock(mu_);
    counting_ = true;
    started_ = 0;
  }
  void before_batch_call() {
    std::lock_guard<std::mutex> lock(mu_);
    ++calls_;
  }
  // Waits until `count` get() calls have started and returned.
  void wait_for(int64_t count) {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return started_ >= count && in_flight_ == 0; });
  }
  int64_t started() const {
    std::lock_guard<std::mutex> lock(mu_);
    return started_;
  }
  int64_t violations() const {
    std::lock_guard<std::mutex> lock(mu_);
    return violations_;
  }
  int64_t max_in_flight() const {
    std::lock_guard<std::mutex> lock(mu_);
    return max_in_flight_;
  }

 private:
  int64_t n_, step_;
  int prefetch_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  bool counting_ = false;
  int64_t started_ = 0, in_flight_ = 0, max_in_flight_ = 0, calls_ = 0, violations_ = 0;
};

}  // namespace

// No more than prefetch batches are read ahead of the one the step trains on, and the workers
// read up to that bound while the step runs.
TEST(Loader, ReadsAtMostPrefetchBatchesAhead) {
  const int64_t n = 40, step = 4;
  for (int workers : {1, 3}) {
    for (int prefetch : {1, 2, 5}) {
      const std::string what = "workers " + std::to_string(workers) + " prefetch " + std::to_string(prefetch);
      CountingData data(n, step, prefetch);
      auto loader = make_loader_feed(data, 1, 0, kSeed, options(workers, prefetch));
      data.start_counting();
      const int64_t num = loader->start_epoch(1, 0, step, false);
      ASSERT_EQ(num, n);
      data.wait_for(prefetch * step);  // the ring full before the first batch() call
      for (int64_t calls = 1; calls * step <= n; ++calls) {
        data.before_batch_call();
        const train::detail::StepBatch b = loader->batch((calls - 1) * step, step);
        EXPECT_EQ(b.size(), step);
        data.wait_for(std::min(n, (calls + prefetch) * step));  // refilled up to the bound
      }
      EXPECT_EQ(data.started(), n) << what;
      EXPECT_EQ(data.violations(), 0) << what << ": a sample was read beyond prefetch batches ahead";
      EXPECT_LE(data.max_in_flight(), workers) << what;
    }
  }
}

namespace {

// Samples whose get() throws (and, optionally, one of another shape).
class BadData : public train::SampleDataset {
 public:
  BadData(int64_t n, std::set<int64_t> bad, bool std_error = false, int64_t odd_shape = -1)
      : n_(n), bad_(std::move(bad)), std_error_(std_error), odd_shape_(odd_shape) {}
  int64_t size() const override { return n_; }
  std::string name() const override { return "bad-data"; }
  Sample get(int64_t index) override {
    if (bad_.count(index)) {
      if (std_error_) throw std::runtime_error("record " + std::to_string(index) + " is garbled");
      throw train::DataError("bad-data.bin: record " + std::to_string(index) + " has a bad checksum.",
                             "copy the file again.");
    }
    if (index == odd_shape_) return {at::full({2, 2}, 1.0f, at::kFloat), at::scalar_tensor(index, at::kLong)};
    return toy_sample(index);
  }

 private:
  int64_t n_;
  std::set<int64_t> bad_;
  bool std_error_;
  int64_t odd_shape_;
};

std::vector<int64_t> order_of(int64_t n, int world, int rank, int epoch) {
  train::DistributedSampler sampler(n, world, rank, /*shuffle=*/true, kSeed);
  sampler.set_epoch(epoch - 1);
  return sampler.indices();
}

// Every batch of epoch 1 until one throws; returns the number that came and the error's text.
std::pair<int64_t, std::string> batches_until_error(LoaderFeed& loader, int64_t step) {
  const int64_t n = loader.start_epoch(1, 0, step, false);
  int64_t got = 0;
  for (int64_t start = 0; start < n; start += step, ++got) {
    try {
      loader.batch(start, std::min(step, n - start));
    } catch (const train::DataError& e) {
      return {got, e.what()};
    }
  }
  return {got, ""};
}

}  // namespace

// A get() that throws stops the run at its batch, as a DataError naming the dataset and the sample.
TEST(Loader, ThrowsTheFailingSamplesErrorAtItsBatch) {
  const std::vector<int64_t> order = order_of(kSamples, 1, 0, 1);
  const int64_t bad_position = 12;
  const int64_t bad = order[bad_position];
  ASSERT_NE(bad, 0) << "sample 0 gives the batches' shapes: pick another position";
  for (bool std_error : {false, true}) {
    for (int workers : {1, 4}) {
      BadData data(kSamples, {bad}, std_error);
      auto loader = make_loader_feed(data, 1, 0, kSeed, options(workers, 3));
      const auto [got, what] = batches_until_error(*loader, kStep);
      EXPECT_EQ(got, bad_position / kStep) << "the batches before the bad one train";
      EXPECT_NE(what.find("bad-data: sample " + std::to_string(bad) + " "), std::string::npos) << what;
      EXPECT_NE(what.find(std_error ? "is garbled" : "has a bad checksum"), std::string::npos) << what;
      EXPECT_NE(what.find("Hint: "), std::string::npos) << what;
      EXPECT_NE(what.find("--bad-samples skip"), std::string::npos) << what;
      if (!std_error) {
        EXPECT_NE(what.find("copy the file again."), std::string::npos) << what;
      }
    }
  }
}

TEST(Loader, ThrowsForASampleOfAnotherShape) {
  const std::vector<int64_t> order = order_of(kSamples, 1, 0, 1);
  const int64_t odd = order[7];
  ASSERT_NE(odd, 0) << "sample 0 gives the batches' shapes: pick another position";
  BadData data(kSamples, {}, false, odd);
  auto loader = make_loader_feed(data, 1, 0, kSeed, options(2, 2));
  const auto [got, what] = batches_until_error(*loader, kStep);
  EXPECT_EQ(got, 7 / kStep);
  EXPECT_NE(what.find("bad-data: sample " + std::to_string(odd) + ": expected an input of float32 [2, 3] on the CPU "
                      "(as sample 0), found float32 [2, 2]."),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("Hint: "), std::string::npos) << what;
}

TEST(Loader, ThrowsWhenTheFirstSampleCantBeRead) {
  BadData data(kSamples, {0});
  try {
    make_loader_feed(data, 1, 0, kSeed, options(1, 1));
    FAIL() << "expected a DataError";
  } catch (const train::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("bad-data: sample 0 "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("has a bad checksum"), std::string::npos) << e.what();
  }
}

// Skipped samples are replaced by the next readable one of the rank's order, counted, the same for
// 1 and 4 workers; runs of bad ones too, and a sample of another shape.
TEST(Loader, SkipsBadSamplesDeterministically) {
  for (int world : {1, 2}) {
    for (int rank = 0; rank < world; ++rank) {
      const std::vector<int64_t> order = order_of(kSamples, world, rank, 1);
      const int64_t num = static_cast<int64_t>(order.size());
      // Positions 3 and 4 (a run: both take position 5's sample), 10 (another shape), the last
      // (wraps to position 0's).
      const std::set<int64_t> bad = {order[3], order[4], order[static_cast<size_t>(num - 1)]};
      const int64_t odd = order[10];
      ASSERT_NE(odd, 0) << "sample 0 gives the batches' shapes: pick another position";
      std::vector<int64_t> want;
      int64_t want_skipped = 0;
      for (int64_t k = 0; k < num; ++k) {
        int64_t t = 0;
        while (bad.count(order[static_cast<size_t>((k + t) % num)]) || order[static_cast<size_t>((k + t) % num)] == odd) ++t;
        want.push_back(order[static_cast<size_t>((k + t) % num)]);
        want_skipped += t > 0;
      }
      ASSERT_EQ(want_skipped, 4);
      for (int workers : {1, 4}) {
        BadData data(kSamples, bad, /*std_error=*/false, odd);
        LoaderOptions o = options(workers, 2);
        o.bad_samples = BadSamples::skip;
        auto loader = make_loader_feed(data, world, rank, kSeed, o);
        const std::vector<Batch> got = take(*loader, 1, 0, kStep, false);
        std::vector<int64_t> seen;
        for (const Batch& b : got) {
          for (int64_t j = 0; j < b.targets.size(0); ++j) seen.push_back(b.targets[j].item<int64_t>());
        }
        EXPECT_EQ(seen, want) << "world " << world << " rank " << rank << " workers " << workers;
        EXPECT_EQ(loader->skipped(), want_skipped);
      }
    }
  }
}

TEST(Loader, SkipGivesUpOnDataUnreadableAsAWhole) {
  const int64_t n = 400;
  std::set<int64_t> bad;
  for (int64_t i = 1; i < n; ++i) bad.insert(i);  // only sample 0 reads
  BadData data(n, bad);
  LoaderOptions o = options(2, 2);
  o.bad_samples = BadSamples::skip;
  auto loader = make_loader_feed(data, 1, 0, kSeed, o);
  const auto [got, what] = batches_until_error(*loader, kStep);
  EXPECT_LT(got, n / kStep);
  EXPECT_NE(what.find("100 unreadable in a row"), std::string::npos) << what;
  EXPECT_NE(what.find("Hint: the data looks unreadable as a whole"), std::string::npos) << what;
}

namespace {

// get() blocks until open() is called; counts the calls inside it.
class GateData : public train::SampleDataset {
 public:
  explicit GateData(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Sample get(int64_t index) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++inside_;
    changed_.notify_all();
    changed_.wait(lock, [&] { return open_; });
    --inside_;
    changed_.notify_all();
    return toy_sample(index);
  }
  void open(bool on) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = on;
    }
    changed_.notify_all();
  }
  void wait_inside(int count) {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return inside_ >= count; });
  }
  int inside() const {
    std::lock_guard<std::mutex> lock(mu_);
    return inside_;
  }

 private:
  int64_t n_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  bool open_ = true;
  int inside_ = 0;
};

}  // namespace

// The destructor returns with the consumer never draining (workers wait for room), and with
// workers inside a blocked get() once it returns; start_epoch() cancels such an epoch too.
TEST(Loader, StopsWithWorkersWaitingOrBlocked) {
  {
    CountingData data(kSamples, kStep, 2);
    auto loader = make_loader_feed(data, 1, 0, kSeed, options(4, 2));
    data.start_counting();
    loader->start_epoch(1, 0, kStep, true);
    data.wait_for(2 * kStep);  // the ring is full: every worker waits for room
    loader.reset();
  }
  for (bool restart : {false, true}) {
    GateData data(kSamples);
    auto loader = make_loader_feed(data, 1, 0, kSeed, options(3, 3));  // reads sample 0 while open
    data.open(false);
    loader->start_epoch(1, 0, kStep, true);
    data.wait_inside(3);  // every worker is inside get(), one for each of batches 0, 1, 2
    std::thread stopper([&] {
      if (restart) {
        loader->start_epoch(2, 0, kStep, false);
      } else {
        loader.reset();
      }
    });
    data.open(true);
    stopper.join();
    if (restart) {
      ToyData toy(kSamples);
      auto fresh = make_loader_feed(toy, 1, 0, kSeed, options(1, 1));
      std::vector<Batch> got;
      for (int64_t start = 0; start < kSamples; start += kStep) got.push_back(clone(loader->batch(start, std::min(kStep, kSamples - start)).batch));
      expect_same(got, take(*fresh, 2, 0, kStep, false), "epoch 2 after epoch 1 was cancelled mid-get");
      loader.reset();
    }
    EXPECT_EQ(data.inside(), 0);
  }
}

TEST(Loader, CountsTheTimeSpentWaiting) {
  ToyData data(kSamples);
  auto loader = make_loader_feed(data, 1, 0, kSeed, options(2, 2));
  take(*loader, 1, 0, kStep, false);
  EXPECT_GE(loader->wait_seconds(), 0.0);
  const double waited = loader->take_wait_seconds();
  EXPECT_GE(waited, 0.0);
  EXPECT_EQ(loader->wait_seconds(), 0.0);
}

// The threshold docs/api.md and docs/reference.md name (2^24 = 16,777,216 samples) is the loader's
// default: a dataset of that size keeps DistributedSampler's order, one more sample takes the
// scalable one (EpochSampleOrder never draws either here: select() is not called).
TEST(EpochSampleOrder, TheDefaultThresholdIsTheDocumented2To24) {
  EXPECT_EQ(train::detail::kExactOrderMaxSamples, 16777216);
  EXPECT_EQ(LoaderOptions{}.order_threshold, train::detail::kExactOrderMaxSamples);
  const int64_t n = train::detail::kExactOrderMaxSamples;
  EXPECT_TRUE(train::detail::EpochSampleOrder(n, 2, 1, kSeed, LoaderOptions{}.order_threshold).exact());
  EXPECT_FALSE(train::detail::EpochSampleOrder(n + 1, 2, 1, kSeed, LoaderOptions{}.order_threshold).exact());
}

TEST(Loader, SaysWhatItHolds) {
  ToyData data(kSamples);
  EXPECT_EQ(make_loader_feed(data, 1, 0, kSeed, options(1, 2))->summary(8),
            "1 loader thread, 2 batches ahead; 3 buffers of 8 x (float32 [2, 3] + int64 []) = 0.8 KiB; "
            "DistributedSampler's order");
  LoaderOptions o = options(4, 1);
  o.order_threshold = 10;
  EXPECT_EQ(make_loader_feed(data, 1, 0, kSeed, o)->summary(8),
            "4 loader threads, 1 batch ahead; 2 buffers of 8 x (float32 [2, 3] + int64 []) = 0.5 KiB; "
            "the scalable order (above 10 samples)");
}

TEST(Loader, RefusesBadOptionsAndOutOfOrderCalls) {
  ToyData data(kSamples);
  EXPECT_THROW(make_loader_feed(data, 1, 0, kSeed, options(0, 2)), train::ConfigError);
  EXPECT_THROW(make_loader_feed(data, 1, 0, kSeed, options(2, 0)), train::ConfigError);
  EXPECT_THROW(make_loader_feed(data, 2, 2, kSeed, options(2, 2)), train::ConfigError);
  auto loader = make_loader_feed(data, 1, 0, kSeed, options(2, 2));
  loader->start_epoch(1, 0, kStep, false);
  EXPECT_THROW(loader->batch(kStep, kStep), std::logic_error);  // batch 1 before batch 0
  EXPECT_THROW(loader->start_epoch(1, 3, kStep, false), std::logic_error);  // not a batch's start
}

// A batch handed out on the CPU stays valid while the caller holds it, even after the next calls
// (its buffer is replaced, not overwritten).
TEST(Loader, ABatchStillHeldIsNotOverwritten) {
  ToyData data(kSamples);
  auto loader = make_loader_feed(data, 1, 0, kSeed, options(2, 1));
  const int64_t n = loader->start_epoch(1, 0, kStep, false);
  std::vector<train::detail::StepBatch> held;
  std::vector<Batch> copies;
  for (int64_t start = 0; start < n; start += kStep) {
    held.push_back(loader->batch(start, std::min(kStep, n - start)));
    copies.push_back(clone(held.back().batch));
  }
  for (size_t i = 0; i < held.size(); ++i) {
    EXPECT_TRUE(at::equal(held[i].batch.inputs, copies[i].inputs)) << "batch " << i;
    EXPECT_TRUE(at::equal(held[i].batch.targets, copies[i].targets)) << "batch " << i;
  }
}

// On a GPU: the batches arrive on the device, the same as on the CPU.
TEST(Loader, CopiesToTheGpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA GPU visible";
  ToyData data(kSamples);
  auto cpu = make_loader_feed(data, 1, 0, kSeed, options(2, 2));
  LoaderOptions o = options(2, 2);
  o.device = at::Device(at::kCUDA, 0);
  auto gpu = make_loader_feed(data, 1, 0, kSeed, o);
  const std::vector<Batch> on_gpu = take(*gpu, 1, 0, kStep, false);
  for (const Batch& b : on_gpu) EXPECT_TRUE(b.inputs.is_cuda());
  expect_same(on_gpu, take(*cpu, 1, 0, kStep, false), "GPU against CPU");
}
