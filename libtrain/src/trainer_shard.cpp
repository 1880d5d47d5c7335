// The Trainer's part of ZeRO-1 (--shard-optimizer, TrainSpec::shard_optimizer): the checks before
// any peer is waited for, the sharded optimizer and its hooks once DDP exists, and the whole state
// gathered around each checkpoint and snapshot (sharded_optimizer.h).
#include "trainer_run.h"

#include "comm/shard_comm.h"
#include "sharded_optimizer.h"

#include <c10/util/Type.h>

#include <typeinfo>

namespace train {

namespace {

std::string megabytes(int64_t bytes) { return detail::fmt("%.2f", static_cast<double>(bytes) / (1024.0 * 1024.0)); }

}  // namespace

// Before connect(): what --device auto picked and the spec's optimizer, each refused with a
// usage error naming it.
void Trainer::Run::check_sharding() {
  shard_requested = c.distributed.shard_optimizer || spec->shard_optimizer;
  if (!shard_requested) return;
  const std::string source = c.distributed.shard_optimizer ? "--shard-optimizer" : "TrainSpec::shard_optimizer";
  if (dev->gpu()) {
    throw ConfigError(source + ": expected a CPU run, found " + device().str() + " (--device " +
                          choice_name(c.run.device) + ").",
                      "add --device cpu, or leave " + source + " out on GPUs (the sharded step is not yet on CUDA).");
  }
  if (clip) {
    throw ConfigError(source + ": expected a run without gradient clipping, found TrainSpec::clip_grad_norm " +
                          detail::fmt("%g", clip->max_norm) + ".",
                      "leave one of them out (clipping a sharded gradient's total norm is not built yet).");
  }
  if (!optimizer_step_hooks.empty()) {
    throw ConfigError(source + ": expected no callback with on_before_optimizer_step, found " +
                          std::to_string(optimizer_step_hooks.size()) + " (OptimizerStepCallback).",
                      "leave one of them out: sharded, a parameter's .grad holds this rank's own gradient and "
                      "the averaged one exists only in shards, so the hook would not see what the update uses.");
  }
  const std::string refusal = detail::shard_refusal(*optimizer);
  if (!refusal.empty()) {
    throw ConfigError(source + ": " + refusal + ".",
                      "build the optimizer as train::optim::FusedAdamW (or FusedSGD, FusedAdam, Adadelta; "
                      "train/fused_optim.h); the built-in recipes do with " + source + ". Or leave " + source + " out.");
  }
}

// After DDP (and after resume: the whole state a checkpoint restored is sliced here): the reducer
// reduce-scatters instead of all-reducing, and the step updates this rank's shard.
void Trainer::Run::setup_sharding() {
  if (!shard_requested) return;
  if (!ddp) {
    log::info("optimizer state: not sharded (--shard-optimizer with one rank: nothing to share it with)");
    return;
  }
  std::string why;
  Reducer& reducer = ddp->reducer();
  auto comm = detail::ShardComm::create(reducer, *pg, c.distributed.shm_allreduce, &why);
  reducer.set_hooks(reducer.all_buckets(comm));
  shard = std::make_unique<detail::ShardedOptimizer>(*optimizer, comm, reducer);
  log::info("optimizer state: " + megabytes(shard->state_bytes()) + " MB on this rank of " +
            megabytes(shard->unsharded_state_bytes()) + " MB unsharded (sharded 1/" + std::to_string(env.world_size) +
            ", " + shard->type_name() + "); " + why);
}

void Trainer::Run::with_whole_optimizer_state(const std::function<void()>& fn) {
  if (!shard) {
    fn();
    return;
  }
  shard->gather_state();
  try {
    fn();
  } catch (...) {
    shard->release_state();
    throw;
  }
  shard->release_state();
}

}  // namespace train
