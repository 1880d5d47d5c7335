// loader_bench: libtrain's loader (libtrain/src/data/loader.h) alone, with no model: it reads an
// .npy pair, a token file, an image folder or WebDataset shards for some epochs on W threads and
// prints one JSON line (samples/s, the resident memory, a checksum of the batches), for
// scripts/bench/loader_peers.py and image_peers.py to set against Python's loaders on the same files.
#include "data/loader.h"

#include <train/base/error.h>
#include <train/base/host_memory.h>
#include <train/datasets/image_dataset.h>
#include <train/datasets/image_folder.h>
#include <train/datasets/npy.h>
#include <train/datasets/tar_shards.h>
#include <train/datasets/token_file.h>
#include <train/sample_dataset.h>

#include <sys/resource.h>

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/sum.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string npy;          // --npy DIR: DIR/train_x.npy and DIR/train_y.npy
  std::string tokens;       // --tokens FILE: a token file, windows of --seq-len
  std::string images;       // --images DIR: a split folder of class folders (DIR/train)
  std::string shards;       // --shards SPEC: WebDataset shards (a brace pattern or a folder)
  int64_t seq_len = 0;
  int image_size = 224;
  bool full_decode = false;  // --full-decode: no reduced-DCT JPEG decode
  int workers = 0;          // 0: one thread per core
  int prefetch = 2;
  int64_t batch_size = 256;
  int epochs = 2;
  int64_t max_batches = 0;  // per epoch; 0: the whole epoch
  uint64_t seed = 1;
  std::string device = "cpu";
  bool no_pin = false;
};

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// User + system CPU seconds of this process so far, every thread's: with the wall-clock rate, the
// rate per CPU-second, which other programs on the same cores disturb much less.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

const char* data_kind(const Flags& f) {
  return !f.npy.empty() ? "npy" : !f.tokens.empty() ? "tokens" : !f.images.empty() ? "images" : "shards";
}

// Images in train mode (RandomResizedCrop(size) + flip + ImageNet's normalization, drawn per
// sample from the seed, the epoch and the index), from a folder or from shards.
std::unique_ptr<train::SampleDataset> open_images(const Flags& f) {
  std::shared_ptr<const train::datasets::ImageSource> source;
  if (!f.images.empty()) {
    source = train::datasets::open_image_folder(f.images);
  } else {
    source = train::datasets::open_tar_shards(f.shards);
  }
  train::datasets::ImageOptions o;
  o.mode = train::datasets::ImageMode::train;
  o.size = f.image_size;
  o.reduced_dct = !f.full_decode;
  return std::make_unique<train::datasets::ImageDataset>(std::move(source), o);
}

// The dataset the flags name; exactly one of --npy, --tokens, --images and --shards.
std::unique_ptr<train::SampleDataset> open_dataset(const Flags& f) {
  const int given = !f.npy.empty() + !f.tokens.empty() + !f.images.empty() + !f.shards.empty();
  if (given != 1) {
    throw train::ConfigError("loader_bench: expected exactly one of --npy DIR, --tokens FILE, --images DIR and "
                                 "--shards SPEC, found " + std::to_string(given) + ".",
                             "--npy DIR reads DIR/train_x.npy and DIR/train_y.npy; --tokens FILE --seq-len N a token "
                             "file; --images DIR/train a folder of class folders; --shards 'DIR/train-{000000..000031}.tar'.");
  }
  if (!f.images.empty() || !f.shards.empty()) return open_images(f);
  if (!f.npy.empty()) {
    return std::make_unique<train::datasets::NpyDataset>(f.npy + "/train_x.npy", f.npy + "/train_y.npy");
  }
  if (f.seq_len < 1) {
    throw train::ConfigError("loader_bench --tokens " + f.tokens + ": expected --seq-len >= 1, found " +
                                 std::to_string(f.seq_len) + ".",
                             "give the window's length, e.g. --seq-len 1024.");
  }
  train::datasets::TokenFileOptions o;
  o.seq_len = f.seq_len;
  return std::make_unique<train::datasets::TokenFileDataset>(f.tokens, o);
}

at::Device parse_device(const Flags& f) {
  if (f.device == "cpu") return at::kCPU;
  if (f.device == "cuda") {
    if (!at::hasCUDA()) {
      throw train::ConfigError("loader_bench --device cuda: expected a CUDA build of LibTorch with a GPU, found none.",
                               "use --device cpu, or build against a CUDA torch on a GPU machine.");
    }
    return at::Device(at::kCUDA, 0);
  }
  throw train::ConfigError("loader_bench --device: expected cpu or cuda, found '" + f.device + "'.",
                           "use --device cpu, or --device cuda on a GPU machine.");
}

// What the batches held, in the run's order: the sum of every input (float64, one sum per batch,
// added in batch order), the sum of each batch's targets times its number in the run (counted
// from 1), so that the peers' checksums match only for the same samples in the same batches, and
// the targets' plain sum (the same in any order). Accumulated on the batches' device: no host sync
// per batch.
struct Checksum {
  at::Tensor inputs, targets, target_sum;

  explicit Checksum(const at::Device& device)
      : inputs(at::scalar_tensor(0.0, at::TensorOptions().dtype(at::kDouble).device(device))),
        targets(at::scalar_tensor(int64_t{0}, at::TensorOptions().dtype(at::kLong).device(device))),
        target_sum(at::scalar_tensor(int64_t{0}, at::TensorOptions().dtype(at::kLong).device(device))) {}

  void add(const train::Batch& b, int64_t number) {
    inputs.add_(at::sum(b.inputs, at::kDouble));
    const at::Tensor t = at::sum(b.targets.to(at::kLong));
    target_sum.add_(t);
    targets.add_(t.mul(number));
  }
};

struct RunTimes {
  Clock::time_point start, first_epoch_end, end;
  double cpu_first_epoch_end = 0, cpu_end = 0;
  int64_t samples = 0, samples_first_epoch = 0, batches = 0;
};

// Reads the epochs through the loader; returns the times and counts.
RunTimes read_epochs(const Flags& f, train::SampleDataset& data, train::detail::LoaderOptions o, Checksum& sum,
                     nlohmann::json& out) {
  RunTimes t;
  t.start = Clock::now();
  auto feed = train::detail::make_loader_feed(data, /*world_size=*/1, /*rank=*/0, f.seed, o);
  for (int epoch = 1; epoch <= f.epochs; ++epoch) {
    const int64_t n = feed->start_epoch(epoch, /*first=*/0, f.batch_size, /*next_follows=*/epoch < f.epochs);
    int64_t batches = (n + f.batch_size - 1) / f.batch_size;
    if (f.max_batches > 0) batches = std::min(batches, f.max_batches);
    for (int64_t i = 0; i < batches; ++i) {
      const int64_t start = i * f.batch_size;
      train::detail::StepBatch b = feed->batch(start, std::min(f.batch_size, n - start));
      if (b.ready) b.ready();
      sum.add(b.batch, ++t.batches);
      t.samples += b.size();
    }
    if (epoch == 1) {
      t.first_epoch_end = Clock::now();
      t.cpu_first_epoch_end = cpu_seconds();
      t.samples_first_epoch = t.samples;
    }
  }
  (void)sum.inputs.item<double>();  // a GPU's queued work is done before the clock stops
  t.end = Clock::now();
  t.cpu_end = cpu_seconds();
  out["wait_seconds"] = feed->wait_seconds();
  out["loader"] = feed->summary(f.batch_size);
  return t;
}

int run(const Flags& f) {
  at::set_num_threads(1);  // the consumer's checksum is the main thread's only op, as in the peers
  std::unique_ptr<train::SampleDataset> data = open_dataset(f);
  train::detail::LoaderOptions o;
  o.workers = f.workers > 0 ? f.workers : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  o.prefetch = f.prefetch;
  o.device = parse_device(f);
  o.pin_memory = o.device.is_cuda() && !f.no_pin;
  Checksum sum(o.device);
  nlohmann::json out;
  const RunTimes t = read_epochs(f, *data, o, sum, out);
  const double whole = seconds_between(t.start, t.end);
  const double steady = seconds_between(t.first_epoch_end, t.end);
  const bool has_steady = f.epochs > 1 && steady > 0;
  const train::host_memory::Resident mem = train::host_memory::resident();
  out["impl"] = "libtrain";
  out["data"] = data_kind(f);
  out["dataset"] = data->name();
  out["dataset_samples"] = data->size();
  out["device"] = o.device.str();
  out["pinned"] = o.pin_memory;
  out["workers"] = o.workers;
  out["prefetch"] = o.prefetch;
  out["batch_size"] = f.batch_size;
  out["epochs"] = f.epochs;
  out["seed"] = f.seed;
  out["batches"] = t.batches;
  out["samples"] = t.samples;
  out["seconds"] = whole;
  out["seconds_first_epoch"] = seconds_between(t.start, t.first_epoch_end);
  out["samples_per_sec"] = has_steady ? static_cast<double>(t.samples - t.samples_first_epoch) / steady
                                      : static_cast<double>(t.samples) / whole;
  out["samples_per_sec_whole"] = static_cast<double>(t.samples) / whole;
  if (has_steady) {  // the epochs after the first, as samples_per_sec
    out["cpu_seconds_steady"] = t.cpu_end - t.cpu_first_epoch_end;
    out["samples_per_cpu_second"] = static_cast<double>(t.samples - t.samples_first_epoch) /
                                    std::max(1e-9, t.cpu_end - t.cpu_first_epoch_end);
  }
  out["peak_rss_mb"] = mem.peak_mb;
  out["rss_anon_mb"] = mem.anon_mb;
  out["rss_file_mb"] = mem.file_mb;
  out["checksum_inputs"] = sum.inputs.item<double>();
  out["checksum_targets"] = sum.targets.item<int64_t>();
  out["label_sum"] = sum.target_sum.item<int64_t>();
  if (const auto* images = dynamic_cast<const train::datasets::ImageDataset*>(data.get())) {
    out["image_size"] = f.image_size;
    out["reduced_dct"] = !f.full_decode;
    out["reduced_decodes"] = images->reduced_decodes();  // JPEGs decoded at 1/2, 1/4 or 1/8 scale
    out["converted_images"] = images->converted_images();
  }
  std::cout << out.dump() << std::endl;
  return 0;
}

void add_flags(CLI::App& app, Flags& f) {
  app.add_option("--npy", f.npy, "a folder with train_x.npy and train_y.npy (uint8 inputs are normalized as MNIST's)");
  app.add_option("--tokens", f.tokens, "a token file (raw uint16, uint32 or llm.c's .bin), read as windows of --seq-len");
  app.add_option("--seq-len", f.seq_len, "tokens per window (with --tokens)");
  app.add_option("--images", f.images, "an image folder's split (DIR/train: one folder per class), JPEG/PNG");
  app.add_option("--shards", f.shards, "WebDataset shards: 'DIR/train-{000000..000031}.tar' or a folder of .tar");
  app.add_option("--image-size", f.image_size, "with --images/--shards: RandomResizedCrop's size")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_flag("--full-decode", f.full_decode, "with --images/--shards: decode JPEGs whole (no reduced-DCT decode)");
  app.add_option("--workers", f.workers, "loader threads; 0: one per core")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--prefetch", f.prefetch, "batches read ahead")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--batch-size", f.batch_size, "samples per batch")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--epochs", f.epochs, "epochs; samples/s counts those after the first")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--max-batches", f.max_batches, "at most this many batches per epoch; 0: all")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--seed", f.seed, "the sampler's seed (DistributedSampler's order)")->capture_default_str();
  app.add_option("--device", f.device, "cpu, or cuda (pinned buffers, copies on a side stream)")->capture_default_str();
  app.add_flag("--no-pin", f.no_pin, "with --device cuda: pageable host buffers");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"loader_bench: libtrain's loader reading an .npy pair, a token file, an image folder or shards, "
               "one JSON line (benchmark)"};
  Flags f;
  add_flags(app, f);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(f);
  } catch (const std::exception& e) {
    std::cerr << "loader_bench: " << e.what() << std::endl;
    return 1;
  }
}
