// How far two models' parameters are apart (tests that compare float trajectories). Header-only;
// needs LibTorch.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <string>

namespace train::test {

/// The largest difference between two models' parameters (by name), relative to the largest
/// parameter; a name missing from `b` is a test failure.
inline double max_rel_diff(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b) {
  double diff = 0, scale = 0;
  EXPECT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    const auto it = b.find(name);
    if (it == b.end()) {
      ADD_FAILURE() << name << " missing";
      continue;
    }
    diff = std::max(diff, (t - it->second).abs().max().item<double>());
    scale = std::max(scale, t.abs().max().item<double>());
  }
  return diff / scale;
}

}  // namespace train::test
