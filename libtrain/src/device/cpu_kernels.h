// TRAIN_CPU_KERNELS: which CPU kernel libraries a run may use (see cpu_kernels.cpp).
#pragma once

namespace train::detail {

/// Reads TRAIN_CPU_KERNELS: unset, empty or `auto` changes nothing; `portable` turns off the CPU
/// kernels that pick their code by the CPU they run on and that torch has no variable for
/// (oneDNN, NNPACK; the built-in models read it for their fused kernels). Anything else is a
/// ConfigError. Also checks TRAIN_FUSED_KERNELS (auto, portable, avx2, avx512; a ConfigError for
/// another value or a version this CPU lacks), which the built-in models read.
void apply_cpu_kernels_env();

}  // namespace train::detail
