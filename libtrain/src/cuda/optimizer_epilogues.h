// The optimizer's side of the captured step's bucket epilogue (comm/bucket_epilogue.h): the fused
// Adadelta, Adam and AdamW update each gradient bucket right after its average, on the side
// stream, or inside the GPUs' peer all-reduce kernel for a small bucket. CUDA builds only.
#pragma once

#include "comm/bucket_epilogue.h"

#include <memory>
#include <vector>

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace train::detail {

/// The epilogue that `optimizer` registers for the buckets of a captured step whose averaged
/// parameters are `params`: the update for libtrain's Adadelta, FusedAdam and FusedAdamW; null for
/// any other optimizer (it steps after the averages).
std::shared_ptr<BucketEpilogue> bucket_epilogue_of(torch::optim::Optimizer& optimizer,
                                                   const std::vector<at::Tensor>& params);

}  // namespace train::detail
