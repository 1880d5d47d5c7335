// DistributedSampler: randperm from a CPU generator seeded with seed + epoch, like PyTorch's.
#include "train/sampler.h"

#include "train/base/error.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/randperm.h>

namespace train {

DistributedSampler::DistributedSampler(int64_t dataset_size, int world_size, int rank,
                                       bool shuffle, uint64_t seed, bool drop_last)
    : dataset_size_(dataset_size), world_size_(world_size), rank_(rank), shuffle_(shuffle),
      seed_(seed), drop_last_(drop_last) {
  if (world_size < 1) {
    throw ConfigError("DistributedSampler world_size: expected >= 1, found " +
                          std::to_string(world_size) + ".",
                      "the world size comes from WORLD_SIZE or SLURM_NTASKS.");
  }
  if (rank < 0 || rank >= world_size) {
    throw ConfigError("DistributedSampler rank: expected 0.." + std::to_string(world_size - 1) +
                          ", found " + std::to_string(rank) + ".",
                      "the rank comes from RANK or SLURM_PROCID.");
  }
  if (dataset_size < 1) {
    throw ConfigError("DistributedSampler dataset size: expected >= 1 sample, found " +
                          std::to_string(dataset_size) + ".",
                      "check --data and the --limit-*-samples flags.");
  }
  num_samples_ = samples_per_rank(dataset_size, world_size, drop_last);
  if (num_samples_ < 1) {
    throw ConfigError("DistributedSampler: " + std::to_string(dataset_size) +
                          " samples with drop_last leave nothing for " +
                          std::to_string(world_size) + " ranks.",
                      "use more samples or fewer ranks.");
  }
}

int64_t DistributedSampler::samples_per_rank(int64_t dataset_size, int world_size, bool drop_last) {
  if (drop_last && dataset_size % world_size != 0) return (dataset_size - world_size + world_size - 1) / world_size;
  return (dataset_size + world_size - 1) / world_size;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> perm(dataset_size_);
  if (shuffle_) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed_ + static_cast<uint64_t>(epoch_));
    at::Tensor p = at::randperm(dataset_size_, gen, at::kLong);
    const int64_t* d = p.const_data_ptr<int64_t>();
    perm.assign(d, d + dataset_size_);
  } else {
    for (int64_t i = 0; i < dataset_size_; ++i) perm[i] = i;
  }
  const int64_t total = total_size();
  if (!drop_last_) {
    // Pad by repeating the permutation from its start, as many times as needed.
    const int64_t pad = total - dataset_size_;
    for (int64_t i = 0; i < pad; ++i) perm.push_back(perm[i % dataset_size_]);
  } else {
    perm.resize(total);
  }
  std::vector<int64_t> out;
  out.reserve(num_samples_);
  for (int64_t i = rank_; i < total; i += world_size_) out.push_back(perm[i]);
  return out;
}

}  // namespace train
