// The non-finite watch in a build without CUDA (nonfinite.h): its CUDA kernel never applies, so the
// ATen ops note every step. CMake compiles this file instead of libtrain/src/cuda/nonfinite_note.cpp.
#include "stops/nonfinite.h"

namespace train::detail {

void NonFiniteWatch::init_kernel() {}

bool NonFiniteWatch::note_kernel(const at::Tensor&, const int64_t*) { return false; }

}  // namespace train::detail
