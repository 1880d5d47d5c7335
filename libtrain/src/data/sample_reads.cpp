// read_samples: a batch of samples read on a few threads, then stacked.
#include "data/sample_reads.h"

#include "train/base/error.h"
#include "train/base/log.h"
#include "train/base/parallel.h"

#include <ATen/ops/stack.h>

#include <exception>
#include <string>

namespace train::detail {
namespace {

// The sample's read, with a failure said as the loader says it (the dataset, the sample, what it found).
Sample read_one(SampleDataset& data, int64_t index, const SampleDraw& draw) {
  try {
    return data.draw(index, draw);
  } catch (const Error& e) {
    throw DataError(data.name() + ": sample " + std::to_string(index) + " (evaluation): expected a readable sample, "
                        "found an error: " + e.message(),
                    e.hint().empty() ? "check the dataset's files." : e.hint());
  } catch (const std::exception& e) {
    throw DataError(data.name() + ": sample " + std::to_string(index) + " (evaluation): expected a readable sample, "
                        "found an error: " + e.what(),
                    "check the dataset's files, or the get() of your dataset.");
  }
}

}  // namespace

Batch read_samples(SampleDataset& data, const std::vector<int64_t>& indices, int threads, const SampleDraw& draw,
                   bool skip_bad) {
  const int64_t n = static_cast<int64_t>(indices.size());
  std::vector<Sample> samples(indices.size());
  // A sample that can't be read: the first in the batch's order is rethrown, or (skip_bad) it is
  // said and left out.
  train::parallel_for(n, threads, [&](int64_t i) {
    try {
      samples[static_cast<size_t>(i)] = read_one(data, indices[static_cast<size_t>(i)], draw);
    } catch (const DataError& e) {
      if (!skip_bad) throw;
      log::warn("--bad-samples skip: " + std::string(e.message()) + "; left out of the evaluation");
    }
  });
  std::vector<at::Tensor> inputs, targets;
  const Sample* first_read = nullptr;
  for (const Sample& s : samples) {
    if (s.input.defined() && first_read == nullptr) first_read = &s;
  }
  for (int64_t i = 0; i < n; ++i) {
    const Sample& s = samples[static_cast<size_t>(i)];
    if (skip_bad && !s.input.defined() && !s.target.defined()) continue;  // left out above
    const Sample& first = first_read != nullptr ? *first_read : s;
    if (!s.input.defined() || !s.target.defined() || s.input.sizes() != first.input.sizes() ||
        s.target.sizes() != first.target.sizes() || s.input.scalar_type() != first.input.scalar_type()) {
      throw DataError(data.name() + ": sample " + std::to_string(indices[static_cast<size_t>(i)]) +
                          " (evaluation): expected the shapes and dtypes of sample " + std::to_string(indices.front()) +
                          ", found others (or an unset input or target).",
                      "every sample of a dataset must have the same shapes: pad or crop in get().");
    }
    inputs.push_back(s.input);
    targets.push_back(s.target);
  }
  if (inputs.empty()) return {};
  return {at::stack(inputs), at::stack(targets)};
}

}  // namespace train::detail
