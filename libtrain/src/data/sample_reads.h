// Samples read as one batch on a few threads: the evaluation's reads of a SampleDataset (training
// goes through the loader, loader.h, whose order and resume this doesn't need). Private.
#pragma once

#include "train/data.h"
#include "train/sample_dataset.h"

#include <cstdint>
#include <vector>

namespace train::detail {

/// Reads `indices` of `data` for `draw` on up to `threads` threads and stacks them: inputs
/// [n, ...] and targets [n, ...] on the CPU, in the order of `indices`. With `skip_bad`
/// (--bad-samples skip), a sample that can't be read is left out of the batch with a warning naming
/// it (the evaluation then counts only the samples read); an empty batch has undefined tensors.
/// @throws train::DataError naming the dataset and the sample for a sample that can't be read
///   (without `skip_bad`) or whose shapes differ from the first's.
Batch read_samples(SampleDataset& data, const std::vector<int64_t>& indices, int threads, const SampleDraw& draw,
                   bool skip_bad = false);

}  // namespace train::detail
