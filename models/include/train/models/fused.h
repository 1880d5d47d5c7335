// Fused CPU kernels for the built-in CNNs' layers, equal bit for bit to the ATen ops they replace.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace train::models {

/// fast_dropout(relu(max_pool2d(x, 2)), p, training) in one pass over `x` (and one pass back in
/// backward), for float32 CPU input [N, C, H, W] (floor mode: an odd last row or column is not
/// pooled). Same values and gradients as the three ops composed, bit for bit (the window's
/// first maximum wins ties, NaN propagates, as in ATen), and the same single draw from the
/// default generator when it drops. It saves a uint8 code per output for backward instead of
/// ATen's int64 indices, a float mask and the ReLU output. Other devices or dtypes run the
/// composed ops.
at::Tensor max_pool2_relu_dropout(const at::Tensor& x, double p, bool training);

/// "avx512" where the AVX-512 kernels are built in and the CPU has AVX-512 F/BW/DQ/VL, else
/// "portable". Both give the same bits.
std::string fused_kernels_isa();
/// true: use the portable kernels even where AVX-512 is available (tests, debugging).
void force_portable_fused_kernels(bool on);

}  // namespace train::models
