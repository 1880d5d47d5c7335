// DistributedDataParallel for LibTorch: gradient averaging in buckets whose all-reduces start
// during backward, as torch.nn.parallel.DistributedDataParallel does.
#pragma once

#include "train/process_group.h"

#include <torch/nn/module.h>

#include <memory>
#include <vector>

namespace train {

/// Bucketing and start-up behaviour of DistributedDataParallel.
struct DdpOptions {
  double bucket_cap_mb = 25.0;       ///< later buckets close once they reach this size
  double first_bucket_cap_mb = 1.0;  ///< the first bucket (last layers) is small so it starts early
  bool broadcast_at_start = true;    ///< copy rank 0's parameters and buffers to every rank
  /// CPU float/double gradients, Gloo, all ranks on one machine: sum the buckets through a
  /// shared-memory segment (synchronously at the end of backward, each rank summing its share,
  /// in rank order) instead of Gloo over loopback TCP. Used only if the process group allows it
  /// (ProcessGroupOptions::shared_memory_allreduce). Deterministic; bit-identical to Gloo for
  /// 2 ranks, while for more ranks Gloo's ring adds in another order (last-bit differences).
  bool shared_memory = true;
  /// The first module's parameters get a bucket of their own (BucketOptions::split_first_module).
  bool split_first_module = false;
};

class Reducer;  // libtrain's gradient reducer (a private header: libtrain/src/comm/reducer.h)

/// Wraps any module so that after each backward() every parameter's .grad holds the average of
/// that gradient over all ranks.
///
/// Parameters are grouped in buckets in reverse registration order (the order backward produces
/// them). When a bucket's last gradient is accumulated, an autograd hook copies the gradients
/// (scaled by 1/world) into the bucket's flat buffer and starts its all-reduce, so communication
/// overlaps the rest of backward. Buckets are launched strictly in bucket order on every rank.
/// At the end of backward an engine callback waits for the all-reduces and writes the averaged
/// gradients back. CPU ranks that share one machine instead sum their buckets through shared
/// memory in that callback (DdpOptions::shared_memory; docs/design.md). The step has no host
/// synchronisation of its own and works on fixed buffers.
///
/// Contract: every rank constructs it with the same module structure and calls backward() the
/// same number of times; every parameter that requires grad must receive a gradient in each
/// synchronised backward (there is no find_unused_parameters). Collective failures are thrown
/// from backward() as train::CommError.
class DistributedDataParallel {
 public:
  /// Registers the hooks, builds the buckets, and (by default) broadcasts rank 0's parameters
  /// and buffers. All ranks must call it. Throws train::ConfigError for a module without
  /// trainable parameters or with parameters on several devices.
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                          std::shared_ptr<ProcessGroup> process_group, DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  torch::nn::Module& module() { return *module_; }
  ProcessGroup& process_group() { return *pg_; }

  /// While a NoSync guard lives, backward() only accumulates local gradients (for gradient
  /// accumulation); the next backward() after it averages the accumulated sum.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSync no_sync() { return NoSync(*this); }

  /// Number of parameters in each bucket, in bucket (launch) order.
  std::vector<size_t> bucket_param_counts() const;
  /// Bytes of each bucket, in bucket order.
  std::vector<size_t> bucket_bytes() const;
  /// The reducer behind it, for libtrain's own training steps (its header is private).
  Reducer& reducer() { return *reducer_; }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<ProcessGroup> pg_;
  std::unique_ptr<Reducer> reducer_;
};

/// Broadcasts every parameter and buffer of `module` from `root` to all ranks. All ranks.
void broadcast_module(torch::nn::Module& module, ProcessGroup& process_group, int root = 0);

}  // namespace train
