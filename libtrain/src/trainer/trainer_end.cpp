// The Trainer's checkpoints, stops and the run's end (train/trainer.h): a checkpoint with the
// schedule's rate, what a durable one updates, a stop every rank agreed on, and the done line's
// contents.
#include "trainer/trainer_run.h"

#include "train/base/files.h"
#include "train/base/sha256.h"

#include <ATen/ops/full.h>

#include <cerrno>  // program_invocation_short_name (glibc): argv[0]'s last part

#include <unistd.h>

namespace train {

using detail::Clock;
using detail::seconds_since;

namespace {

void save_model_atomically(torch::nn::Module& model, const std::string& path) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    torch::serialize::OutputArchive archive;
    for (const auto& p : model.named_parameters()) archive.write(p.key(), p.value().detach().cpu());
    for (const auto& b : model.named_buffers()) archive.write(b.key(), b.value().detach().cpu(), true);
    archive.save_to(tmp);
    const std::string err = files::rename(tmp, path);
    if (!err.empty()) throw std::runtime_error("rename: " + err);
  } catch (const std::exception& e) {
    files::remove_file(tmp);
    throw CheckpointError("--save-model " + path + ": write failed (" + std::string(e.what()).substr(0, 200) + ").",
                          "check that the folder exists, is writable and has free space.");
  }
}

}  // namespace

// The samples the loader replaced (--bad-samples skip) over the whole run, all ranks: the count the
// run resumed with, plus this run's, summed over the ranks. Every rank calls it (an all-reduce under
// skip; under fail nothing is replaced), so that a checkpoint, a snapshot and the done line carry the
// uninterrupted run's count after a resume.
int64_t Trainer::Run::skipped_samples() {
  detail::LoaderFeed* l = loader();
  if (l == nullptr || config().data.bad_samples != BadSamples::skip) return skipped_before;
  at::Tensor t = at::full({1}, l->skipped(), at::TensorOptions().dtype(at::kLong).device(device()));
  if (comm.pg) comm.pg->allreduce_sum(t);
  return skipped_before + t.cpu().item<int64_t>();
}

// Every rank (a sharded optimizer's state is gathered); rank 0 writes a checkpoint at `p` (the
// schedule's state with it).
void Trainer::Run::write_checkpoint(Progress p, const at::Tensor& loss_sum) {
  p.skipped_samples = skipped_samples();
  learner.sharding.with_whole_state([&] {
    if (env().rank != 0) return;
    checkpoints->write(state, p, loss_sum);
  });
}

// Every rank: a snapshot in the node's memory at the current step.
void Trainer::Run::take_snapshot() {
  Progress p = prog();
  p.skipped_samples = skipped_samples();
  learner.sharding.with_whole_state([&] { checkpoints->snapshot(state, p, state.loss_sum); });
  run_log->record().progress(p.step, /*force=*/true);  // a restart resumes from here: its step is known
}

// Rank 0, on the training thread, once a checkpoint is durable.
void Trainer::Run::checkpoint_saved(const std::string& path, const Progress& p) {
  result.checkpoint_path = path;
  run_log->record().checkpoint(path, p.step, p.epoch);
  for_callbacks("on_checkpoint_saved", [&](Callback& cb) { cb.on_checkpoint_saved(path, p.step); });
}

// Ends the run for a stop every rank agreed on.
void Trainer::Run::end_run(const StopRequest& request, detail::EpochTimer& timer) {
  dev->synchronize();
  run_log->flush();
  const double seconds = timer.seconds();
  prog().train_seconds += seconds;
  result.train_seconds += seconds;
  detail::mark_phase(comm.where, detail::Phase::checkpoint);  // rank 0 writes it now
  stop(request);
}

// A stop every rank agreed on: checkpoint (rank 0), wait until it is durable, then requeue
// (preemption, time limit) or not (cancel).
void Trainer::Run::stop(const StopRequest& agreed) {
  // After a non-finite value the weights in memory are bad: no checkpoint of them (every rank asks).
  const StopRequest request = stops->final_request(agreed, prog().epoch);
  if (request.kind == StopKind::nonfinite) {
    stop_nonfinite(request);
    return;
  }
  result.preempted = request.requeue();
  result.cancelled = request.kind == StopKind::cancel;
  result.stop_signal = request.signal;
  result.preempt_reason = request.reason;
  log::warn("stopping for " + request.reason + " at epoch " + std::to_string(prog().epoch) + ", step " +
            std::to_string(prog().step));
  const bool keep = !checkpoints->dir().empty();
  const at::Tensor loss_sum = keep ? checkpoints->shared_loss_sum(state.loss_sum) : at::Tensor();  // every rank takes part
  if (keep) {
    write_checkpoint(prog(), loss_sum);  // every rank: a sharded optimizer's state is gathered
    if (env().rank == 0) checkpoints->collect(/*wait=*/true);
  } else {
    log::warn("no --checkpoint-dir: the progress of this run is lost");
  }
  if (comm.pg) comm.pg->barrier();  // the checkpoint is durable before anyone leaves
  if (result.cancelled) {
    log::warn(std::string("cancelled: not requeued") +
              (keep ? "; to go on, run " + std::string(program_invocation_short_name) + " again with --checkpoint-dir " +
                          checkpoints->dir() + " (it resumes from " + result.checkpoint_path + ")"
                    : std::string()));
    return;
  }
  if (keep && env().rank == 0) result.requeued = stops->requeue_job();
}

// A non-finite loss or gradient (--nonfinite): say where, write no checkpoint (the last good one
// stays), exit kExitNonFinite. Every rank calls it.
void Trainer::Run::stop_nonfinite(const StopRequest& request) {
  checkpoints->collect(/*wait=*/true);  // one written before, from good weights
  result.nonfinite = true;
  result.skipped_steps = stops->skipped_steps().value_or(0);
  result.nonfinite_reason = request.reason;
  const std::string kept = checkpoints->dir().empty()       ? "no --checkpoint-dir"
                           : env().rank != 0                ? "rank 0 names the last good checkpoint"
                           : result.checkpoint_path.empty() ? "no checkpoint was written before it"
                                                            : "the last good checkpoint stays: " + result.checkpoint_path;
  log::error(result.nonfinite_reason + " The run stops; no checkpoint of these weights (" + kept + ")." +
             " Hint: lower the learning rate or clip the gradients, look for NaN or infinite values in the data, "
             "or pass --nonfinite skip to drop such steps' updates; a rerun with --checkpoint-dir resumes from "
             "the last good checkpoint.");
  if (comm.pg) comm.pg->barrier();
}

TrainResult Trainer::Run::finish() {
  const detail::SaveTotals saves = checkpoints->finish();  // the run ended (done or stopped): no snapshot is needed
  const bool stopped = result.preempted || result.cancelled || result.nonfinite;
  result.skipped_steps = stops->skipped_steps().value_or(0);
  result.stopped_early = controls.early_stop.stopped();
  result.checkpoint_seconds = saves.waited_seconds;
  result.snapshots = saves.snapshots.taken;
  result.snapshot_seconds = saves.snapshots.seconds;
  result.snapshot_write_seconds = saves.snapshots.write_seconds;
  result.epochs = std::min(prog().epoch, plan.epochs);
  result.steps = prog().step;
  result.train_loss = prog().last_train_loss;
  result.test_loss = prog().last_test_loss;
  result.test_accuracy = prog().last_test_accuracy;
  result.images_per_sec = prog().train_seconds > 0 ? prog().images_total / prog().train_seconds : 0.0;
  result.images_per_sec_steady = run_log->steady_images_per_sec();
  result.peak_gpu_mb = dev->peak_memory_mb();
  note_memory();
  result.params_sha256 = params_sha256(*learner.model.module);
  if (detail::LoaderFeed* l = loader()) {
    result.skipped_samples = skipped_samples();
    // A run stopped mid-epoch: the wait since the last epoch's line.
    result.data_wait_seconds += l->take_wait_seconds();
  }
  const std::string& save_model = config().logging.save_model;
  if (!stopped && !save_model.empty() && env().rank == 0) {
    save_model_atomically(*learner.model.module, save_model);
    log::info("saved the model to " + save_model);
  }
  shut_down();
  return result;
}

// What the step captured goes before the communicator: destroying an NCCL communicator that a
// live CUDA graph still uses hangs in NCCL. The signal handlers go back to what they were.
void Trainer::Run::shut_down() {
  feed.reset();  // the loader's threads read the spec's data: they stop before fit() returns
  if (steps.step) steps.step->release();
  steps.observers.clear();
  steps.step.reset();
  if (comm.pg) {
    comm.pg->barrier();
    comm.ddp.reset();
    comm.pg->shutdown();
  }
  stops.reset();
}

}  // namespace train
