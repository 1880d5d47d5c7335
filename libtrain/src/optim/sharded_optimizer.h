// ZeRO-1 (--shard-optimizer): each rank keeps the optimizer state of its shard of every parameter
// and updates only that shard with the averaged gradients' chunk (comm/shard_comm.h), then the
// ranks all-gather the parameters. The run's own optimizer keeps its groups and rates (the LR
// schedule sets them) and holds the full state only while a checkpoint is written. Private.
#pragma once

#include "comm/shard_comm.h"

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace train::detail {

/// "" when `optimizer` can be sharded, else why not, in words that name its type. Sharded are
/// the element-wise optimizers whose state has the parameters' shapes: train::optim::FusedSGD,
/// FusedAdam and FusedAdamW (without amsgrad) and Adadelta, exact types.
std::string shard_refusal(const torch::optim::Optimizer& optimizer);

/// This rank's shard of the run's optimizer.
///
/// Contract: every rank builds it after the run's optimizer has its state (a resumed checkpoint's,
/// full, or none), with the same reducer buckets, and calls step(), gather_state() and
/// release_state() alike: they are collective.
class ShardedOptimizer {
 public:
  /// Takes this rank's slices of `full`'s state (then drops `full`'s), and builds an optimizer of
  /// `full`'s type over views of this rank's slices of the parameters, their gradients the
  /// averaged chunks of `comm`. Throws train::ConfigError where shard_refusal() says why, or for a
  /// parameter that is not contiguous.
  ShardedOptimizer(torch::optim::Optimizer& full, std::shared_ptr<ShardComm> comm, const Reducer& reducer);
  ~ShardedOptimizer();

  /// Every rank, after a synchronised backward: the update of this rank's shard with `full`'s
  /// current options (rates), then every parameter all-gathered from its owners.
  void step();
  /// Every rank, after a synchronised backward and before step(): --clip-grad-norm on the
  /// averaged gradients' chunks. The total norm is the square root of the ranks' summed squares of
  /// their chunks' norms (one all-reduce of one number, on the device: no host sync), so it
  /// agrees with clip_grad_norm_ over the whole gradients to rounding, not bit for bit; the
  /// coefficient is clip_grad_norm_'s. Returns the total norm (a scalar on the device).
  at::Tensor clip_grad_norm(double max_norm);
  /// The LR schedule changed `full`'s rates outside a step (a captured step replays without
  /// calling step()): the shard takes them. True where a replay then follows them (the shard's
  /// optimizer reads its rates from the device); false: capture again.
  bool follow_rates();
  const std::shared_ptr<ShardComm>& comm() const { return comm_; }
  /// Every rank: `full` gets the whole state, as an unsharded run would hold it (a checkpoint of
  /// it reads like one of an unsharded run).
  void gather_state();
  /// Drops the whole state gather_state() put into `full`.
  void release_state();

  /// Bytes of optimizer state this rank holds once every parameter has been updated, and what
  /// one unsharded rank would hold.
  int64_t state_bytes() const { return shard_bytes_; }
  int64_t unsharded_state_bytes() const { return full_bytes_; }
  const std::string& type_name() const { return type_name_; }

  struct Codec;  // the optimizer type's state: its tensors, its scalar, how to build one

 private:
  void take_state();
  void take_options();
  std::vector<int64_t> gather_scalars() const;

  torch::optim::Optimizer& full_;
  std::shared_ptr<ShardComm> comm_;
  const Reducer& reducer_;
  std::unique_ptr<Codec> codec_;
  std::unique_ptr<torch::optim::Optimizer> shard_;
  std::vector<int> group_of_;                  // per reducer parameter: its group in full_, -1: none
  std::vector<std::vector<at::Tensor>> views_;  // per bucket: this rank's parameter slices (owned order)
  std::vector<at::Tensor> send_;                // per bucket: this rank's chunk
  int64_t shard_bytes_ = 0, full_bytes_ = 0;
  std::string type_name_;
};

}  // namespace train::detail
