// The run's part of ZeRO-1 (optimizer_sharding.h).
#include "optim/optimizer_sharding.h"

#include "comm/reducer.h"
#include "comm/shard_comm.h"
#include "train/config.h"
#include "train/base/error.h"
#include "train/base/log.h"
#include "train/base/text.h"
#include "train/train_spec.h"

namespace train::detail {
namespace {

std::string megabytes(int64_t bytes) { return text::format("%.2f", static_cast<double>(bytes) / (1024.0 * 1024.0)); }

}  // namespace

void OptimizerSharding::check(const std::string& source, const TrainConfig& c, const Run& run,
                              const torch::optim::Optimizer& optimizer) {
  requested_ = !source.empty();
  if (!requested_) return;
  if (run.gpu && c.distributed.backend == BackendKind::gloo) {
    throw ConfigError(source + ": expected the NCCL backend on " + run.device + ", found --backend gloo.",
                      "leave --backend out (auto picks NCCL for GPUs), or leave " + source + " out.");
  }
  if (run.optimizer_step_hooks > 0) {
    throw ConfigError(source + ": expected no callback with on_before_optimizer_step, found " +
                          std::to_string(run.optimizer_step_hooks) + " (OptimizerStepCallback).",
                      "leave one of them out: sharded, a parameter's .grad holds this rank's own gradient and "
                      "the averaged one exists only in shards, so the hook would not see what the update uses.");
  }
  const std::string refusal = shard_refusal(optimizer);
  if (!refusal.empty()) {
    throw ConfigError(source + ": " + refusal + ".",
                      "build the optimizer as train::optim::FusedAdamW (or FusedSGD, FusedAdam, Adadelta; "
                      "train/fused_optim.h); the built-in recipes do with " + source + ". Or leave " + source + " out.");
  }
}

void OptimizerSharding::setup(Reducer* reducer, ProcessGroup* pg, bool shared_memory,
                              torch::optim::Optimizer& optimizer, int world_size) {
  if (!requested_) return;
  if (reducer == nullptr || pg == nullptr) {
    log::info("optimizer state: not sharded (--shard-optimizer with one rank: nothing to share it with)");
    return;
  }
  std::string why;
  auto comm = ShardComm::create(*reducer, *pg, shared_memory, &why);
  reducer->set_hooks(reducer->all_buckets(comm));
  shard_ = std::make_unique<ShardedOptimizer>(optimizer, comm, *reducer);
  log::info("optimizer state: " + megabytes(shard_->state_bytes()) + " MB on this rank of " +
            megabytes(shard_->unsharded_state_bytes()) + " MB unsharded (sharded 1/" + std::to_string(world_size) +
            ", " + shard_->type_name() + "); " + why);
}

void OptimizerSharding::with_whole_state(const std::function<void()>& fn) {
  if (!shard_) {
    fn();
    return;
  }
  shard_->gather_state();
  try {
    fn();
  } catch (...) {
    shard_->release_state();
    throw;
  }
  shard_->release_state();
}

}  // namespace train::detail
