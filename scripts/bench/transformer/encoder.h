// The benchmark's transformer: a pre-norm encoder stack with causal self-attention and an LM head
// over the vocabulary (a decoder-only LM in today's words). scripts/bench/bench_models.py's
// Encoder is the same network in PyTorch, parameter for parameter.
#pragma once

#include <train/model_handle.h>

#include <ATen/ops/gelu.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cstdint>
#include <vector>

namespace bench {

struct EncoderOptions {
  int64_t layers = 6, d_model = 512, heads = 8, ffn = 2048, seq_len = 256, vocab = 8192;
};

/// x W^T + b as Python's F.linear runs it: at::linear folds a [b, s, d] input into one GEMM with the
/// bias in its epilogue. torch::nn::Linear::forward (the C++ frontend's F::linear) runs a matmul
/// and then a separate in-place bias add on inputs of more than 2 dimensions: one more pass over
/// the output forward, a reduction for the bias's gradient backward (measured on the LM head's
/// [b * s, vocab] output: the largest tensor of the step).
inline at::Tensor linear(const torch::nn::Linear& l, const at::Tensor& x) { return at::linear(x, l->weight, l->bias); }

/// x + proj(attention(ln1(x))), then x + fc2(gelu(fc1(ln2(x)))).
class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(int64_t d, int64_t heads, int64_t ffn) : heads_(heads) {
    ln1_ = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    qkv_ = register_module("qkv", torch::nn::Linear(d, 3 * d));
    proj_ = register_module("proj", torch::nn::Linear(d, d));
    ln2_ = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    fc1_ = register_module("fc1", torch::nn::Linear(d, ffn));
    fc2_ = register_module("fc2", torch::nn::Linear(ffn, d));
  }

  at::Tensor forward(const at::Tensor& x) {
    const int64_t b = x.size(0), s = x.size(1), d = x.size(2);
    // [b, s, 3d] -> [3, b, heads, s, d / heads] -> q, k, v. unbind, as Python's tuple unpacking
    // does: indexing qkv[i] three times would give three select backwards, each writing a
    // zero-filled tensor of qkv's size.
    const std::vector<at::Tensor> qkv =
        linear(qkv_, ln1_->forward(x)).view({b, s, 3, heads_, d / heads_}).permute({2, 0, 3, 1, 4}).unbind(0);
    const at::Tensor a = at::scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                                          /*is_causal=*/true);
    const at::Tensor h = x + linear(proj_, a.transpose(1, 2).reshape({b, s, d}));
    return h + linear(fc2_, at::gelu(linear(fc1_, ln2_->forward(h))));
  }

 private:
  int64_t heads_;
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr}, fc1_{nullptr}, fc2_{nullptr};
};
TORCH_MODULE(Block);

/// tokens int64 [b, s] -> logits [b, s, vocab].
class EncoderImpl : public torch::nn::Module {
 public:
  explicit EncoderImpl(const EncoderOptions& o) {
    tok_ = register_module("tok", torch::nn::Embedding(o.vocab, o.d_model));
    pos_ = register_module("pos", torch::nn::Embedding(o.seq_len, o.d_model));
    blocks_ = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < o.layers; ++i) blocks_->push_back(Block(o.d_model, o.heads, o.ffn));
    ln_f_ = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.d_model})));
    head_ = register_module("head", torch::nn::Linear(o.d_model, o.vocab));
  }

  at::Tensor forward(const at::Tensor& tokens) {
    at::Tensor x = tok_->forward(tokens) + pos_->weight.narrow(0, 0, tokens.size(1));
    for (const auto& block : *blocks_) x = block->as<BlockImpl>()->forward(x);
    return linear(head_, ln_f_->forward(x));
  }

 private:
  torch::nn::Embedding tok_{nullptr}, pos_{nullptr};
  torch::nn::ModuleList blocks_{nullptr};
  torch::nn::LayerNorm ln_f_{nullptr};
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(Encoder);

/// Parameters that do matmuls: all but the two embedding tables.
inline int64_t matmul_params(const EncoderOptions& o) {
  const int64_t d = o.d_model, f = o.ffn;
  const int64_t per_layer = 4 * d + (3 * d * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d);
  return o.layers * per_layer + 2 * d + d * o.vocab + o.vocab;
}

/// Training FLOPs of one sequence: 6 * N * S + 12 * L * d * S^2 (N = matmul_params; forward and
/// backward; attention counted whole, as PaLM's model-FLOPs utilisation does).
inline double flops_per_sequence(const EncoderOptions& o) {
  const double s = static_cast<double>(o.seq_len);
  return 6.0 * static_cast<double>(matmul_params(o)) * s +
         12.0 * static_cast<double>(o.layers * o.d_model) * s * s;
}

}  // namespace bench
