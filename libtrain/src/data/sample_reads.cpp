// read_samples: a batch of samples read on a few threads, then stacked.
#include "data/sample_reads.h"

#include "train/base/error.h"

#include <ATen/ops/stack.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <string>
#include <thread>

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

Batch read_samples(SampleDataset& data, const std::vector<int64_t>& indices, int threads, const SampleDraw& draw) {
  const int64_t n = static_cast<int64_t>(indices.size());
  std::vector<Sample> samples(indices.size());
  std::vector<std::exception_ptr> errors(indices.size());
  std::atomic<int64_t> next{0};
  const auto work = [&] {
    for (int64_t i = next++; i < n; i = next++) {
      try {
        samples[static_cast<size_t>(i)] = read_one(data, indices[static_cast<size_t>(i)], draw);
      } catch (...) {
        errors[static_cast<size_t>(i)] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  const int64_t extra = std::min<int64_t>(std::max(threads, 1), n) - 1;
  for (int64_t t = 0; t < extra; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);  // the first in the batch's order
  }
  std::vector<at::Tensor> inputs, targets;
  for (int64_t i = 0; i < n; ++i) {
    const Sample& s = samples[static_cast<size_t>(i)];
    const Sample& first = samples.front();
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
  return {at::stack(inputs), at::stack(targets)};
}

}  // namespace train::detail
