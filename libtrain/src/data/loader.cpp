// The loader of sample datasets (loader.h): worker threads fill a ring of host buffers with the
// batches the step will ask for next, in an order that depends on nothing but the seed, the epoch
// and the batch number, so that a resumed run and any worker count read the same batches.
#include "data/loader.h"

#include "data/loader_copy.h"
#include "train/base/error.h"
#include "train/base/log.h"
#include "train/sampler.h"

#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace train::detail {

EpochSampleOrder::EpochSampleOrder(int64_t dataset_size, int world_size, int rank, uint64_t seed,
                                   int64_t order_threshold)
    : dataset_size_(dataset_size), world_size_(world_size), rank_(rank), seed_(seed),
      exact_(dataset_size <= order_threshold),
      // The sampler checks the sizes (its ConfigErrors) and counts a rank's share for both orders.
      num_samples_(DistributedSampler(dataset_size, world_size, rank, /*shuffle=*/true, seed).num_samples()) {
  if (exact_) orders_ = std::make_unique<EpochOrders>(dataset_size_, world_size_, rank_, seed_);
}

void EpochSampleOrder::select(int64_t epoch, bool next_follows) {
  if (exact_) {
    local_ = orders_->take(epoch, next_follows);
  } else {
    scalable_.emplace(dataset_size_, world_size_, rank_, seed_, epoch);
  }
}

namespace {

using Clock = std::chrono::steady_clock;

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: return c10::toString(t);
  }
}

// "float32 [3, 32, 32]", as an error message shows a tensor.
std::string describe(const at::Tensor& t) {
  if (!t.defined()) return "an undefined tensor";
  std::ostringstream s;
  s << dtype_name(t.scalar_type()) << " " << t.sizes();
  if (!t.device().is_cpu()) s << " on " << t.device();
  return s.str();
}

// What an exception from a user's get() said, without LibTorch's backtrace; and its hint.
struct Failure {
  std::string message;
  std::string hint;
};

Failure failure_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const train::Error& x) {
    return {x.message(), x.hint()};
  } catch (const c10::Error& x) {
    return {x.what_without_backtrace(), ""};
  } catch (const std::exception& x) {
    return {x.what(), ""};
  } catch (...) {
    return {"an exception that is not a std::exception", ""};
  }
}

const char* const kSkipHint = "--bad-samples skip replaces unreadable samples (and counts them) instead.";

// The hint of a failed read: the dataset's own, then kSkipHint unless skipping already or the
// dataset's hint names --bad-samples itself (the image decoders' do).
std::string read_hint(const std::string& own, const std::string& fallback, bool skipping) {
  const std::string hint = own.empty() ? fallback : own;
  if (skipping || hint.find("--bad-samples") != std::string::npos) return hint;
  return hint + " " + kSkipHint;
}

class Loader : public LoaderFeed {
 public:
  Loader(SampleDataset& data, int world_size, int rank, uint64_t seed, const LoaderOptions& o)
      : data_(data), options_(o), rank_(rank), seed_(seed),
        order_(data.size(), world_size, rank, seed, o.order_threshold),
        pin_(o.pin_memory && o.device.is_cuda()) {
    if (o.workers < 1) {
      throw ConfigError("--data-workers: expected >= 1 loader thread, found " + std::to_string(o.workers) + ".",
                        "use 1 for a single background reader; each further thread reads samples in parallel.");
    }
    if (o.prefetch < 1) {
      throw ConfigError("--prefetch: expected >= 1 batch read ahead, found " + std::to_string(o.prefetch) + ".",
                        "use 2 (the default) or more when reading samples takes as long as a step.");
    }
    if (!o.device.is_cpu() && !o.device.is_cuda()) {
      throw ConfigError("the loader's device: expected cpu or cuda, found " + o.device.str() + ".",
                        "use --device cpu or --device cuda.");
    }
    // The dataset's last stage on the device (e.g. --decode gpu's nvJPEG), asked for a CPU device
    // too: a dataset that can only be finished on a GPU says so (a ConfigError) rather than handing
    // the step its intermediate samples.
    std::shared_ptr<DeviceStage> stage = data.device_stage(o.device);
    if (o.device.is_cuda()) {
      copy_ = make_cuda_batch_copy(o.device, std::move(stage));
    } else if (stage) {
      throw ConfigError(data.name() + ": expected batches the CPU trains on as they are, found a dataset whose "
                            "batches are finished on a GPU (SampleDataset::device_stage).",
                        "train on --device cuda, or return null from device_stage() for a CPU device.");
    }
    probe_reference();
    slots_.resize(static_cast<size_t>(o.prefetch) + 1);
  }

  ~Loader() override {
    stop_workers();
    // A copy still reading a host buffer finishes before the buffer goes.
    for (Slot& s : slots_) {
      if (s.device.host_free) s.device.host_free();
    }
  }

  int64_t start_epoch(int epoch, int64_t first, int64_t step_samples, bool next_follows) override {
    stop_workers();
    if (step_samples < 1 || first < 0 || first % step_samples != 0) {
      throw std::logic_error("loader start_epoch: expected step_samples >= 1 and first a multiple of it, found first " +
                             std::to_string(first) + ", step_samples " + std::to_string(step_samples) + ".");
    }
    order_.select(static_cast<int64_t>(epoch) - 1, next_follows);
    epoch_ = epoch;
    step_ = step_samples;
    num_ = order_.num_samples();
    b0_ = first / step_;
    b_end_ = (num_ + step_ - 1) / step_;
    consumed_ = 0;
    for (Slot& s : slots_) {
      s.batch = -1;
      s.ready = false;
      s.error = nullptr;
      s.skipped = 0;
    }
    stop_ = false;
    if (b0_ < b_end_) {
      for (int w = 0; w < options_.workers; ++w) threads_.emplace_back([this, w] { work(w); });
    }
    return num_;
  }

  StepBatch batch(int64_t start, int64_t len) override {
    const int64_t b = b0_ + consumed_;  // consumed_ changes only here, on the consumer's thread
    const int64_t want_start = b * step_;
    if (step_ == 0 || b >= b_end_ || start != want_start || len != std::min(step_, num_ - want_start)) {
      throw std::logic_error("loader batch(" + std::to_string(start) + ", " + std::to_string(len) +
                             "): expected the epoch's next span, batch " + std::to_string(b) + " of " +
                             std::to_string(b_end_) + " of " + std::to_string(step_) + " samples.");
    }
    Slot& slot = slots_[static_cast<size_t>(b % nslots())];
    std::unique_lock<std::mutex> lock(mu_);
    ++consumed_;  // hands the previous batch's slot back to the workers
    room_.notify_all();
    const Clock::time_point t0 = Clock::now();
    filled_.wait(lock, [&] { return slot.batch == b && slot.ready; });
    wait_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
    if (slot.error) std::rethrow_exception(slot.error);
    skipped_ += slot.skipped;
    StepBatch out;
    if (copy_) {
      out.batch = std::move(slot.device.batch);
      out.ready = std::move(slot.device.ready);
      slot.device.batch = Batch{};
      slot.device.ready = nullptr;
    } else {
      out.batch = {slot.host.inputs.narrow(0, 0, len), slot.host.targets.narrow(0, 0, len)};
    }
    return out;
  }

  int64_t skipped() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return skipped_;
  }
  double wait_seconds() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return wait_seconds_;
  }
  double take_wait_seconds() override {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(wait_seconds_, 0.0);
  }

  std::string summary(int64_t step_samples) const override {
    const double bytes = static_cast<double>(nslots() * step_samples) *
                         static_cast<double>(reference_.input.nbytes() + reference_.target.nbytes());
    constexpr double kMiB = 1024.0 * 1024.0, kGiB = 1024.0 * kMiB;
    std::ostringstream s;
    s.setf(std::ios::fixed);
    s.precision(1);
    s << options_.workers << " loader thread" << (options_.workers == 1 ? "" : "s") << ", " << options_.prefetch
      << " batch" << (options_.prefetch == 1 ? "" : "es") << " ahead; " << nslots() << " buffers of " << step_samples
      << " x (" << describe(reference_.input) << " + " << describe(reference_.target) << ") = "
      << (bytes >= kGiB ? bytes / kGiB : bytes >= kMiB ? bytes / kMiB : bytes / 1024.0)
      << (bytes >= kGiB ? " GiB" : bytes >= kMiB ? " MiB" : " KiB") << (pin_ ? ", pinned" : "") << "; "
      << (order_.exact() ? "DistributedSampler's order" : "the scalable order (above " +
                                                              std::to_string(options_.order_threshold) + " samples)");
    return s.str();
  }

 private:
  // One batch's place in the ring. `batch` and `ready` change under mu_; the rest is written by
  // the worker that claimed the slot, before it sets `ready`, and read by the consumer after.
  struct Slot {
    int64_t batch = -1;  // the batch it holds or is being filled with; -1: none yet
    bool ready = false;
    Batch host;          // [step_samples, ...] buffers, pinned for a GPU
    DeviceBatch device;  // a GPU: the batch's copy
    int64_t skipped = 0;
    std::exception_ptr error;
  };

  int64_t nslots() const { return static_cast<int64_t>(slots_.size()); }

  // Reads the reference sample whose shapes every batch buffer takes: the first readable of 0, 1, ...
  void probe_reference() {
    const int64_t n = data_.size();
    const int64_t tries = options_.bad_samples == BadSamples::skip ? std::min<int64_t>(n, kMaxSkippedInARow) : 1;
    for (int64_t i = 0; i < tries; ++i) {
      try {
        Sample s = data_.draw(i, {seed_, 0});
        if (!s.input.defined() || !s.target.defined()) {
          throw DataError("get() returned " + describe(s.input) + " and " + describe(s.target) + " as input and target.",
                          "get() must set both Sample::input and Sample::target.");
        }
        reference_ = std::move(s);
        reference_index_ = i;
        return;
      } catch (...) {
        if (i + 1 < tries) continue;
        const Failure f = failure_of(std::current_exception());
        throw DataError(data_.name() + ": sample " + std::to_string(i) +
                            " (the loader's first read, for the batches' shapes): expected a readable sample, "
                            "found an error: " + f.message,
                        read_hint(f.hint, "check the dataset's files.", options_.bad_samples == BadSamples::skip));
      }
    }
  }

  // Where `s` differs from the reference sample's dtypes and shapes; nothing when it doesn't.
  std::optional<DataError> shape_error(const Sample& s, int64_t index) const {
    const auto same = [](const at::Tensor& a, const at::Tensor& ref) {
      return a.defined() && a.device().is_cpu() && a.scalar_type() == ref.scalar_type() && a.sizes() == ref.sizes();
    };
    if (same(s.input, reference_.input) && same(s.target, reference_.target)) return std::nullopt;
    const bool input_bad = !same(s.input, reference_.input);
    const at::Tensor& found = input_bad ? s.input : s.target;
    const at::Tensor& expected = input_bad ? reference_.input : reference_.target;
    return DataError(data_.name() + ": sample " + std::to_string(index) + ": expected " +
                         (input_bad ? "an input" : "a target") + " of " + describe(expected) + " on the CPU (as sample " +
                         std::to_string(reference_index_) + "), found " + describe(found) + ".",
                     "the loader stacks samples into batches of one shape and dtype: pad or crop in get(), or check "
                     "the file behind this sample.");
  }

  // The sample at position k of the rank's epoch order, or under BadSamples::skip its replacement
  // (loader.h), counted in `skipped`. Throws the DataError batch() is to throw.
  Sample read(int64_t k, int64_t& skipped) {
    const bool skip = options_.bad_samples == BadSamples::skip;
    const int64_t tries = skip ? std::min<int64_t>(num_, kMaxSkippedInARow) : 1;
    for (int64_t t = 0;; ++t) {
      const int64_t position = (k + t) % num_;
      const int64_t index = order_.sample_at(position);
      std::optional<DataError> bad;
      Sample s;
      try {
        s = data_.draw(index, {seed_, epoch_ - 1});
      } catch (...) {
        const Failure f = failure_of(std::current_exception());
        bad = DataError(data_.name() + ": sample " + std::to_string(index) + " (position " + std::to_string(position) +
                            " of rank " + std::to_string(rank_) + "'s order in epoch " + std::to_string(epoch_) +
                            "): expected a readable sample, found an error: " + f.message,
                        read_hint(f.hint, "check the dataset's files, or the get() of your dataset.", skip));
      }
      if (!bad) bad = shape_error(s, index);
      if (!bad) {
        if (t > 0) ++skipped;
        return s;
      }
      if (!skip) throw *bad;
      // Said as it happens, on the worker's thread: the done line only counts them.
      log::warn("--bad-samples skip: " + std::string(bad->message()) + "; the next position of the order takes its place");
      if (t + 1 >= tries) {
        throw DataError(data_.name() + ": expected --bad-samples skip to find a readable sample among positions " +
                            std::to_string(k) + " to " + std::to_string(k + t) + " of rank " + std::to_string(rank_) +
                            "'s order in epoch " + std::to_string(epoch_) + ", found " + std::to_string(t + 1) +
                            " unreadable in a row; the last: " + bad->message(),
                        "the data looks unreadable as a whole (a file removed, a mount lost?), not a few bad records: "
                        "check the dataset's files.");
      }
    }
  }

  // Buffers of [step_samples, ...] for a slot, new where a batch handed out still holds the old ones.
  void prepare_buffers(Slot& slot) {
    const auto fresh = [&](const at::Tensor& buffer, const at::Tensor& like) {
      if (buffer.defined() && buffer.size(0) == step_ && buffer.storage().use_count() == 1) return buffer;
      std::vector<int64_t> sizes{step_};
      sizes.insert(sizes.end(), like.sizes().begin(), like.sizes().end());
      return at::empty(sizes, at::TensorOptions().dtype(like.scalar_type()).pinned_memory(pin_));
    };
    slot.host.inputs = fresh(slot.host.inputs, reference_.input);
    slot.host.targets = fresh(slot.host.targets, reference_.target);
  }

  // Fills `slot` with batch b. Returns false when stopped midway.
  bool fill(Slot& slot, int64_t b) {
    if (slot.device.host_free) slot.device.host_free();  // the previous batch's copy has read the buffers
    slot.device = DeviceBatch{};
    prepare_buffers(slot);
    const int64_t start = b * step_;
    const int64_t len = std::min(step_, num_ - start);
    auto* inputs = static_cast<char*>(slot.host.inputs.data_ptr());
    auto* targets = static_cast<char*>(slot.host.targets.data_ptr());
    const size_t input_bytes = reference_.input.nbytes(), target_bytes = reference_.target.nbytes();
    for (int64_t j = 0; j < len; ++j) {
      if (stop_.load(std::memory_order_relaxed)) return false;
      const Sample s = read(start + j, slot.skipped);
      // memcpy, not copy_(): no ATen dispatch nor intra-op threads per sample.
      std::memcpy(inputs + j * input_bytes, s.input.contiguous().const_data_ptr(), input_bytes);
      std::memcpy(targets + j * target_bytes, s.target.contiguous().const_data_ptr(), target_bytes);
    }
    if (copy_) slot.device = copy_->copy({slot.host.inputs.narrow(0, 0, len), slot.host.targets.narrow(0, 0, len)});
    return true;
  }

  // Worker w: batches b0_ <= b < b_end_ with b % workers == w, in order, each as soon as the ring has
  // room for it (b < the consumer's batch + 1 + prefetch).
  void work(int w) {
    c10::OptionalDeviceGuard on_device;  // a GPU: pinned memory and copies for the run's GPU, not GPU 0
    if (options_.device.is_cuda()) on_device.reset_device(options_.device);
    const int64_t workers = options_.workers;
    for (int64_t b = b0_ + ((w - b0_ % workers) % workers + workers) % workers; b < b_end_; b += workers) {
      Slot* slot = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        room_.wait(lock, [&] { return stop_ || b < b0_ + consumed_ + options_.prefetch; });
        if (stop_) return;
        slot = &slots_[static_cast<size_t>(b % nslots())];
        slot->batch = b;
        slot->ready = false;
        slot->skipped = 0;
        slot->error = nullptr;
      }
      bool filled = false;
      try {
        filled = fill(*slot, b);
      } catch (...) {
        slot->error = std::current_exception();
        filled = true;
      }
      if (!filled) return;
      {
        std::lock_guard<std::mutex> lock(mu_);
        slot->ready = true;
      }
      filled_.notify_all();
    }
  }

  // Stops this epoch's workers: those waiting for room leave at once, those reading when their
  // sample returns.
  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    room_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  SampleDataset& data_;
  const LoaderOptions options_;
  const int rank_;
  const uint64_t seed_;
  EpochSampleOrder order_;
  const bool pin_;
  std::unique_ptr<BatchCopy> copy_;  // a GPU: the copies to it
  Sample reference_;                 // the sample whose shapes and dtypes every sample has
  int64_t reference_index_ = 0;

  // The epoch: set by start_epoch() while no worker runs, read by the workers.
  int epoch_ = 0;
  int64_t step_ = 0, num_ = 0, b0_ = 0, b_end_ = 0;
  std::vector<Slot> slots_;
  std::vector<std::thread> threads_;

  mutable std::mutex mu_;
  std::condition_variable room_;    // a slot was handed back, or stop
  std::condition_variable filled_;  // a slot was filled
  int64_t consumed_ = 0;            // batch() calls this epoch
  std::atomic<bool> stop_{false};
  int64_t skipped_ = 0;
  double wait_seconds_ = 0;
};

}  // namespace

std::unique_ptr<LoaderFeed> make_loader_feed(SampleDataset& data, int world_size, int rank, uint64_t seed,
                                             const LoaderOptions& options) {
  return std::make_unique<Loader>(data, world_size, rank, seed, options);
}

}  // namespace train::detail
