// Adadelta in a build without CUDA (train/adadelta.h): the fused CUDA update never applies, so the
// foreach and per-parameter paths run. CMake compiles this file instead of
// libtrain/src/cuda/adadelta_fused_step.cpp.
#include "train/adadelta.h"

namespace train::optim {

bool Adadelta::kernel_update(size_t, const std::vector<torch::Tensor>&, const AdadeltaOptions&, bool,
                             const KernelLaunch*) {
  return false;
}

}  // namespace train::optim
