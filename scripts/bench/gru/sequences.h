// The recurrent benchmark's data: generated sequences of standard-normal features whose class is
// the sign pattern of two partial sums of feature 0: 2 * [sum over the first half > 0] + [sum over
// the second half > 0]. The four classes are equally likely, and a model must carry the first
// half's sign through the second half to get them right. The same rule as
// scripts/bench/bench_models.py's sign_sequences (not the same draws: each side seeds its own).
#pragma once

#include "gru.h"

#include <train/data.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/randn.h>

#include <memory>
#include <string>

namespace bench {

/// n sequences and their classes as an InMemoryDataset (inputs float [n, seq_len, features],
/// targets int64 [n] in 0..kGruClasses - 1). seq_len must be at least 2.
inline std::shared_ptr<train::InMemoryDataset> sign_sequences(int64_t n, const GruOptions& o, uint64_t seed,
                                                              const std::string& name) {
  at::Generator g = at::detail::createCPUGenerator(seed);
  const at::Tensor x = at::randn({n, o.seq_len, o.features}, g, at::kFloat);
  const int64_t half = o.seq_len / 2;
  const at::Tensor first = x.select(2, 0).narrow(1, 0, half).sum(1).gt(0);
  const at::Tensor second = x.select(2, 0).narrow(1, half, o.seq_len - half).sum(1).gt(0);
  const at::Tensor y = first.to(at::kLong) * 2 + second.to(at::kLong);
  return std::make_shared<train::InMemoryDataset>(x, y, name);
}

}  // namespace bench
