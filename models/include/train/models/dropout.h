// A faster dropout for CPU training: the keep-mask comes from a counter-based hash seeded by one
// draw from LibTorch's default generator, instead of one generator call per element.
#pragma once

#include <ATen/core/Tensor.h>

namespace train::models {

/// Dropout with drop probability `p` (quantized to a multiple of 2^-16; 0.25 and 0.5 are exact):
/// in training mode each element is zeroed with probability p and the rest are scaled by
/// 1/(1-p), like torch::dropout; otherwise `x` is returned unchanged. Gradients flow through the
/// mask. The mask is a function of one 64-bit draw from the default CPU generator and the
/// element index, so runs are reproducible from torch::manual_seed and a checkpointed generator
/// state, for any thread count. CUDA tensors use torch::dropout.
at::Tensor fast_dropout(const at::Tensor& x, double p, bool training);

}  // namespace train::models
