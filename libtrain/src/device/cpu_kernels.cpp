// TRAIN_CPU_KERNELS=portable: CPU runs whose bits don't depend on the x86-64 CPU they run on.
//
// float32 results depend on the order of additions, and these libraries pick their kernels (and
// with them the order) by the CPU's instruction sets, cache sizes or vendor:
// - ATen's vectorized kernels (AVX2, AVX-512): torch's ATEN_CPU_CAPABILITY=default picks the
//   non-vectorized ones;
// - MKL's sgemm (linear layers and, with oneDNN off, convolutions): MKL_CBWR=COMPATIBLE picks the
//   branch MKL documents as the same on Intel and non-Intel CPUs (MKL_CBWR=AVX2 falls back to
//   AUTO on AMD);
// - oneDNN (mkldnn) convolutions, NNPACK (convolutions without gradients at batch >= 16 once
//   oneDNN is off) and the built-in models' AVX-512 fused pool kernels: torch has no variable for
//   the first two, so `portable` turns them off here (ATen's im2col + gemm convolutions instead);
//   the models read the variable themselves and pick their portable fused kernels (the same bits
//   as the AVX-512 ones; models/src/fused.cpp).
// Together with a fixed --threads, a CPU run then gives the same params_sha256 on any x86-64
// (tests/libtrain/invariant_test.cpp; docs/design.md, Determinism). It is slower: a test and
// debugging setting, not a training one.
//
// TRAIN_FUSED_KERNELS=auto|portable|avx2|avx512 picks the fused kernels' version alone (every one
// gives the same bits), for tests and benchmarks; the models read it, and it is checked here
// first so that a version this CPU lacks stops the run before the rendezvous.
#include "device/cpu_kernels.h"

#include "train/base/error.h"

#include <ATen/Context.h>

#include <cstdlib>
#include <string>

namespace train::detail {

namespace {

void check_fused_kernels_env() {
  const char* env = std::getenv("TRAIN_FUSED_KERNELS");
  const std::string value = env != nullptr ? env : "";
  if (value.empty() || value == "auto" || value == "portable") return;
  if (value != "avx2" && value != "avx512") {
    throw ConfigError("TRAIN_FUSED_KERNELS=" + value + ": expected auto, portable, avx2 or avx512.",
                      "unset it: the best version this CPU has runs, and every version gives the same bits.");
  }
  bool has = false;
#if defined(__x86_64__) && defined(__GNUC__)
  has = value == "avx2" ? __builtin_cpu_supports("avx2")
                        : __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                              __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#endif
  if (!has) {
    throw ConfigError("TRAIN_FUSED_KERNELS=" + value + ": expected a version this CPU has, found a CPU without " +
                          (value == "avx2" ? "AVX2" : "AVX-512 F/BW/DQ/VL") + ".",
                      "unset it, or set portable.");
  }
}

}  // namespace

void apply_cpu_kernels_env() {
  check_fused_kernels_env();
  const char* env = std::getenv("TRAIN_CPU_KERNELS");
  const std::string value = env != nullptr ? env : "";
  if (value.empty() || value == "auto") return;
  if (value != "portable") {
    throw ConfigError("TRAIN_CPU_KERNELS=" + value + ": expected auto or portable.",
                      "unset it, or set portable for the same bits on any x86-64 CPU (with "
                      "ATEN_CPU_CAPABILITY=default, MKL_CBWR=COMPATIBLE and a fixed --threads).");
  }
  at::globalContext().setUserEnabledMkldnn(false);
  at::globalContext().setUserEnabledNNPACK(false);
}

}  // namespace train::detail
