// loader_bench: libtrain's loader (libtrain/src/data/loader.h) alone, with no model: it reads an
// .npy pair or a token file for some epochs on W threads and prints one JSON line (samples/s, the
// resident memory, a checksum of the batches), for scripts/bench/loader_peers.py to set against
// PyTorch's DataLoader, torchdata's StatefulDataLoader and SPDL reading the same files.
#include "data/loader.h"

#include <train/base/error.h>
#include <train/base/host_memory.h>
#include <train/datasets/npy.h>
#include <train/datasets/token_file.h>
#include <train/sample_dataset.h>

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
  int64_t seq_len = 0;
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

// The dataset the flags name; exactly one of --npy and --tokens.
std::unique_ptr<train::SampleDataset> open_dataset(const Flags& f) {
  if (f.npy.empty() == f.tokens.empty()) {
    throw train::ConfigError("loader_bench: expected exactly one of --npy DIR and --tokens FILE, found " +
                                 std::string(f.npy.empty() ? "neither." : "both."),
                             "--npy DIR reads DIR/train_x.npy and DIR/train_y.npy; --tokens FILE --seq-len N a token file.");
  }
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
// added in batch order) and the sum of each batch's targets times its number in the run (counted
// from 1), so that the peers' checksums match only for the same samples in the same batches.
// Accumulated on the batches' device: no host sync per batch.
struct Checksum {
  at::Tensor inputs, targets;

  explicit Checksum(const at::Device& device)
      : inputs(at::scalar_tensor(0.0, at::TensorOptions().dtype(at::kDouble).device(device))),
        targets(at::scalar_tensor(int64_t{0}, at::TensorOptions().dtype(at::kLong).device(device))) {}

  void add(const train::Batch& b, int64_t number) {
    inputs.add_(at::sum(b.inputs, at::kDouble));
    targets.add_(at::sum(b.targets.to(at::kLong)).mul_(number));
  }
};

struct RunTimes {
  Clock::time_point start, first_epoch_end, end;
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
      t.samples_first_epoch = t.samples;
    }
  }
  (void)sum.inputs.item<double>();  // a GPU's queued work is done before the clock stops
  t.end = Clock::now();
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
  out["data"] = f.npy.empty() ? "tokens" : "npy";
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
  out["peak_rss_mb"] = mem.peak_mb;
  out["rss_anon_mb"] = mem.anon_mb;
  out["rss_file_mb"] = mem.file_mb;
  out["checksum_inputs"] = sum.inputs.item<double>();
  out["checksum_targets"] = sum.targets.item<int64_t>();
  std::cout << out.dump() << std::endl;
  return 0;
}

void add_flags(CLI::App& app, Flags& f) {
  app.add_option("--npy", f.npy, "a folder with train_x.npy and train_y.npy (uint8 inputs are normalized as MNIST's)");
  app.add_option("--tokens", f.tokens, "a token file (raw uint16, uint32 or llm.c's .bin), read as windows of --seq-len");
  app.add_option("--seq-len", f.seq_len, "tokens per window (with --tokens)");
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
  CLI::App app{"loader_bench: libtrain's loader reading an .npy pair or a token file, one JSON line (benchmark)"};
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
