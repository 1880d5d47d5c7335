// The optimizer's side of the captured step's bucket epilogue (comm/bucket_epilogue.h): the fused
// Adadelta updates each gradient bucket right after its average, on the side stream, or inside the
// GPUs' peer all-reduce kernel for a small bucket. CUDA builds only.
#pragma once

#include "comm/bucket_epilogue.h"

#include <memory>

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace train::detail {

/// The epilogue that `optimizer` registers for the buckets of a captured step: the fused update
/// for libtrain's Adadelta; null for any other optimizer (it steps after the averages).
std::shared_ptr<BucketEpilogue> bucket_epilogue_of(torch::optim::Optimizer& optimizer);

}  // namespace train::detail
