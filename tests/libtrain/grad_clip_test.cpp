// Gradient clipping (libtrain/src/step/grad_clip.cpp) against Python's
// torch.nn.utils.clip_grad_norm_ on the same gradients, bit for bit on the CPU.
#include "step/grad_clip.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>

namespace {

const std::vector<std::vector<int64_t>> kShapes = {{32, 1, 3, 3}, {7}, {300, 700}, {10, 128}, {10}};

torch::Tensor read_floats(const std::string& path, at::IntArrayRef shape) {
  std::ifstream f(path, std::ios::binary);
  auto t = torch::empty(shape, torch::kFloat);
  f.read(reinterpret_cast<char*>(t.data_ptr<float>()), t.numel() * sizeof(float));
  EXPECT_TRUE(bool(f)) << "short read of " << path;
  return t;
}

}  // namespace

// Bounds below the gradients' total norm (clipped) and above it (the coefficient clamps to 1, the
// gradients stay as they were); parameter 1 has no gradient and is left out, as in Python.
TEST(GradClip, MatchesTorchClipGradNormBitForBit) {
  const std::string py = train::test::venv_python();
  ASSERT_FALSE(py.empty()) << "the venv's python with torch is needed for this test; run scripts/setup.sh";
  const std::vector<std::string> max_norms = {"0.05", "0.3", "1000"};
  train::test::TempDir d("clip");
  std::vector<std::string> argv = {py, std::string(TRAIN_SOURCE_DIR) + "/tests/libtrain/py/clip_reference.py", d.path()};
  argv.insert(argv.end(), max_norms.begin(), max_norms.end());
  auto r = train::test::run_program(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const int threads = at::get_num_threads();
  at::set_num_threads(1);  // as the reference: one order of the reductions' sums
  for (size_t k = 0; k < max_norms.size(); ++k) {
    std::vector<torch::Tensor> params;
    for (size_t i = 0; i < kShapes.size(); ++i) {
      params.push_back(torch::zeros(kShapes[i], torch::requires_grad()));
      if (i != 1) params.back().mutable_grad() = read_floats(d.file("grad" + std::to_string(i) + ".bin"), kShapes[i]);
    }
    const torch::Tensor norms = train::detail::clip_grad_norm(params, std::stod(max_norms[k]));
    ASSERT_EQ(norms.size(0), static_cast<int64_t>(kShapes.size()) - 1);
    const torch::Tensor total = torch::linalg_vector_norm(norms, 2.0).reshape({1});
    const torch::Tensor want_total = read_floats(d.file("total_" + std::to_string(k) + ".bin"), {1});
    EXPECT_TRUE(torch::equal(total, want_total)) << "max_norm " << max_norms[k] << ": total " << total.item<float>()
                                                 << " vs Python's " << want_total.item<float>();
    for (size_t i = 0; i < kShapes.size(); ++i) {
      if (i == 1) {
        EXPECT_FALSE(params[i].grad().defined());
        continue;
      }
      const torch::Tensor want = read_floats(d.file("clipped" + std::to_string(i) + "_" + std::to_string(k) + ".bin"), kShapes[i]);
      EXPECT_TRUE(torch::equal(params[i].grad(), want))
          << "max_norm " << max_norms[k] << ", gradient " << i << ": largest difference "
          << (params[i].grad() - want).abs().max().item<float>();
    }
    if (k + 1 == max_norms.size()) {  // above the total norm: the gradients are unchanged
      const torch::Tensor g0 = read_floats(d.file("grad0.bin"), kShapes[0]);
      EXPECT_TRUE(torch::equal(params[0].grad(), g0));
    } else {  // clipped: the total norm of what is left is the bound, to float rounding
      std::vector<torch::Tensor> gs;
      for (size_t i = 0; i < kShapes.size(); ++i) {
        if (i != 1) gs.push_back(params[i].grad().flatten());
      }
      EXPECT_NEAR(torch::cat(gs).norm().item<double>(), std::stod(max_norms[k]), 1e-5);
    }
  }
  at::set_num_threads(threads);
}

// No parameter with a gradient: nothing to clip, no norms.
TEST(GradClip, NoGradientsGiveNoNorms) {
  std::vector<torch::Tensor> params = {torch::zeros({3}, torch::requires_grad())};
  EXPECT_FALSE(train::detail::clip_grad_norm(params, 1.0).defined());
}
