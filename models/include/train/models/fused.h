// Fused CPU kernels for the built-in CNNs' layers, equal bit for bit to the ATen ops they replace.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace train::models {

/// fast_dropout(relu(max_pool2d(x, 2)), p, training) in one pass over `x` (and one pass back in
/// backward), for float32 CPU input [N, C, H, W] (floor mode: an odd last row or column is not
/// pooled). Same values and gradients as the three ops composed, bit for bit (the window's
/// first maximum wins ties, NaN propagates, as in ATen), and the same single draw from the
/// default generator when it drops. It saves a uint8 code per output for backward instead of
/// ATen's int64 indices, a float mask and the ReLU output. Other devices or dtypes run the
/// composed ops.
at::Tensor max_pool2_relu_dropout(const at::Tensor& x, double p, bool training);

/// The version of the fused kernels that runs now: "avx512" (AVX-512 F/BW/DQ/VL), "avx2" or
/// "portable". All give the same bits. By default the best one this build and CPU have; the
/// environment (TRAIN_FUSED_KERNELS, TRAIN_CPU_KERNELS=portable) or force_fused_kernels() pick
/// another. Throws ConfigError when TRAIN_FUSED_KERNELS names a version that can't run here.
std::string fused_kernels_isa();
/// The versions this build and CPU can run, "portable" first, then "avx2" and "avx512" where
/// compiled in and the CPU has the instructions.
std::vector<std::string> fused_kernels_available();
/// Runs the version `isa` from now on ("portable", "avx2", "avx512"), or goes back to the
/// environment's choice ("auto"): for tests and benchmarks. Throws ConfigError for another name
/// or a version not in fused_kernels_available().
void force_fused_kernels(const std::string& isa);
/// true: force_fused_kernels("portable"); false: force_fused_kernels("auto").
void force_portable_fused_kernels(bool on);

}  // namespace train::models
