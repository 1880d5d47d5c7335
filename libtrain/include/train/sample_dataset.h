// A dataset read one sample at a time, on the loader's threads: the API for data that is not held
// in memory (files read or memory-mapped per sample). Dataset (train/data.h) stays the API for data
// held whole on the device, whose gather a CUDA graph may capture.
#pragma once

#include "train/data.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace train {

/// One sample: the model's input and the loss's target, as CPU tensors. Every sample of a dataset
/// has the same shapes and dtypes (the loader collates them into fixed batch buffers).
struct Sample {
  at::Tensor input;   ///< e.g. float32 [C, H, W], or int64 [seq_len] tokens
  at::Tensor target;  ///< e.g. int64 [] (a class index), or int64 [seq_len] (the next tokens)
};

/// Which draw of a sample the loader asks for: the run's seed and the sampler's epoch (0 for the
/// first). A dataset whose samples are random (augmentation) draws from (seed, epoch, index) alone,
/// so that a sample is the same whatever the thread count, the prefetch, the world size or a resume.
struct SampleDraw {
  uint64_t seed = 0;
  int64_t epoch = 0;
};

/// A batch's last stage on its GPU, for a dataset whose samples are an intermediate form that the
/// device finishes (encoded JPEGs that nvJPEG decodes, then crops and flips): the loader runs it
/// instead of copying the collated batch as it is.
class DeviceStage {
 public:
  virtual ~DeviceStage() = default;
  /// The model's batch on `device`, made from the collated host batch `host` (CPU tensors, pinned
  /// when the loader pins), its device work queued on the current CUDA stream (the loader's side
  /// stream: the step waits for it on the device, never the host). `host` stays untouched until
  /// that stream's work queued so far is done. Called from several loader threads at once.
  /// @throws train::DataError naming the sample (and file) that can't be finished.
  virtual Batch finish(const Batch& host, const at::Device& device) = 0;
};

/// What the loader needs of a dataset read sample by sample. Implement it for your own format.
///
/// get() is called from several loader threads at once, for different indices: it must be safe
/// to call concurrently (read with pread or from a memory map, not through one shared stream
/// position). It may block on the file system: that is what the loader's threads are for.
class SampleDataset {
 public:
  virtual ~SampleDataset() = default;

  /// Number of samples.
  virtual int64_t size() const = 0;

  /// The sample at `index` (0 <= index < size()), as CPU tensors of the dataset's fixed shapes.
  /// @throws train::DataError for a sample that can't be read, naming the file and the index.
  virtual Sample get(int64_t index) = 0;

  /// The sample at `index` for `draw`: what the loader calls. By default get(index), the same in
  /// every epoch; a dataset with random augmentation overrides it and draws from (draw, index).
  virtual Sample draw(int64_t index, const SampleDraw& draw) {
    (void)draw;
    return get(index);
  }

  /// A name for logs and errors, e.g. "tokens:/data/train.bin".
  virtual std::string name() const { return "data"; }

  /// The batches' last stage on device `device` (DeviceStage), or null, as by default: the
  /// collated batch is copied to the device as it is (on the CPU, used as it is). The loader asks
  /// once, when it is made, for its device, the CPU included; only a CUDA device takes a stage.
  /// @throws train::ConfigError when the stage can't run there (not a GPU, its library missing).
  virtual std::shared_ptr<DeviceStage> device_stage(const at::Device& device) {
    (void)device;
    return nullptr;
  }
};

}  // namespace train
