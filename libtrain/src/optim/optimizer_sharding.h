// The run's part of ZeRO-1 (--shard-optimizer, TrainSpec::shard_optimizer): whether it was asked
// for, the combinations refused before any peer is waited for, the sharded optimizer and its
// reducer hooks once DDP exists, and the whole optimizer state gathered around each checkpoint and
// snapshot (sharded_optimizer.h). Private; one per run, owned by the Trainer's run.
#pragma once

#include "optim/sharded_optimizer.h"

#include <functional>
#include <memory>
#include <string>

namespace train {
class ProcessGroup;
class Reducer;
struct TrainConfig;
struct TrainSpec;
}  // namespace train

namespace train::detail {

class OptimizerSharding {
 public:
  /// What the run is, for check().
  struct Run {
    bool gpu = false;
    std::string device;                 ///< e.g. "cuda:0"
    std::string device_flag;            ///< --device's value, e.g. "auto"
    size_t optimizer_step_hooks = 0;    ///< callbacks with on_before_optimizer_step
  };
  /// Before the rendezvous, where sharding was asked for by `source` ("--shard-optimizer" or
  /// "TrainSpec::shard_optimizer"; "" not asked for): throws train::ConfigError (a usage error
  /// naming the input) where this run can't be sharded.
  void check(const std::string& source, const TrainConfig& config, const Run& run,
             const torch::optim::Optimizer& optimizer);
  /// After DDP (and after resume: the whole state a checkpoint restored is sliced here): the
  /// reducer reduce-scatters instead of all-reducing, and the step updates this rank's shard. A
  /// null `reducer` (one rank) logs that nothing is sharded.
  void setup(Reducer* reducer, ProcessGroup* pg, bool shared_memory, torch::optim::Optimizer& optimizer,
             int world_size);
  /// The sharded optimizer the step uses, null when the optimizer steps whole.
  ShardedOptimizer* optimizer() const { return shard_.get(); }
  /// Every rank: runs `fn` with a sharded optimizer's whole state gathered into the run's
  /// optimizer (a checkpoint then reads as an unsharded run's), dropped again after; unsharded
  /// just `fn`.
  void with_whole_state(const std::function<void()>& fn);

 private:
  bool requested_ = false;
  std::unique_ptr<ShardedOptimizer> shard_;
};

}  // namespace train::detail
