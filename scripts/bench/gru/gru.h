// The benchmark's recurrent model: a one-layer GRU (batch first) whose last hidden state a linear
// head maps to class scores. scripts/bench/bench_models.py's GRUClassifier is the same network in
// PyTorch, parameter for parameter, with the same initialisation (torch's defaults on both sides).
#pragma once

#include <train/model_handle.h>

#include <ATen/ops/linear.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/rnn.h>

#include <cstdint>
#include <tuple>

namespace bench {

constexpr int64_t kGruClasses = 4;  // the sign patterns of sequences.h's rule

struct GruOptions {
  int64_t features = 4, hidden = 32, seq_len = 32;
};

/// sequences float [b, seq_len, features] -> class scores [b, kGruClasses].
class GruClassifierImpl : public torch::nn::Module {
 public:
  explicit GruClassifierImpl(const GruOptions& o) {
    gru_ = register_module("gru", torch::nn::GRU(torch::nn::GRUOptions(o.features, o.hidden).batch_first(true)));
    head_ = register_module("head", torch::nn::Linear(o.hidden, kGruClasses));
  }

  at::Tensor forward(const at::Tensor& x) {
    // h_n [1, b, hidden]: the last step's hidden state, selected as Python's h[-1] does. at::linear,
    // as Python's F.linear (addmm on this 2-D input either way; see transformer/encoder.h for why
    // the benchmark's programs call it).
    const at::Tensor h = std::get<1>(gru_->forward(x)).select(0, -1);
    return at::linear(h, head_->weight, head_->bias);
  }

 private:
  torch::nn::GRU gru_{nullptr};
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(GruClassifier);

/// All parameters: the GRU's three gates (input and hidden weights, two biases) and the head.
inline int64_t gru_params(const GruOptions& o) {
  const int64_t h = o.hidden;
  return 3 * h * (o.features + h + 2) + h * kGruClasses + kGruClasses;
}

}  // namespace bench
