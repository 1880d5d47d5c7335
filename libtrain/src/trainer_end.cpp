// The Trainer's resume, stops, checkpoints and the run's end (train/trainer.h): the shape a
// checkpoint records, the checkpoint chosen on resume, a stop every rank agreed on, the
// background checkpoint writes, and the done line's contents.
#include "trainer_run.h"

#include <cerrno>  // program_invocation_short_name (glibc): argv[0]'s last part

namespace train {

using detail::Clock;
using detail::fmt;
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

// What shapes a run, stored in checkpoints and compared on resume: the spec's names, the
// Trainer's own settings, and the program's recipe (TrainSpec::recipe) as it described it.
std::string Trainer::Run::shape_json(double lr0) const {
  nlohmann::ordered_json j = {
      {"model", spec->model_name}, {"dataset", spec->data_name}, {"batch_size", batch}, {"lr", lr0},
      {"lr_schedule", spec->lr_schedule.description}, {"seed", c.run.seed}, {"epochs", epochs}};
  for (const auto& [key, value] : spec->recipe) {
    if (!j.contains(key)) j[key] = value;
  }
  return j.dump();
}

// Resume before DDP is built: its broadcast then spreads rank 0's restored weights. With
// --resume auto, rank 0 picks the newest valid checkpoint and tells the others its step, so
// every rank resumes from the same file.
void Trainer::Run::resume() {
  std::unique_ptr<torch::serialize::InputArchive> archive;
  std::string path;
  if (c.checkpoint.resume == ResumeMode::path) {
    path = c.checkpoint.resume_path;
    archive = CheckpointDir::load_file(path, device);
  } else if (c.checkpoint.resume == ResumeMode::automatic && ckdir) {
    int64_t chosen = -1;
    if (env.rank == 0) {
      auto found = ckdir->load_latest_valid(device);
      if (found) {
        chosen = found->second.step;
        path = found->second.path;
        archive = std::move(found->first);
      }
    }
    if (pg) {
      at::Tensor t = torch::tensor({chosen}, at::kLong).to(device);
      pg->broadcast(t, 0);
      chosen = t.cpu().item<int64_t>();
      if (env.rank != 0 && chosen >= 0) {
        path = ckdir->path_for(chosen);
        archive = CheckpointDir::load_file(path, device);
      }
    }
  }
  if (archive) apply_resumed(*archive, path);
}

void Trainer::Run::apply_resumed(torch::serialize::InputArchive& a, const std::string& path) {
  const auto saved = nlohmann::ordered_json::parse(TrainingState::read_shape(a));
  const auto now = nlohmann::ordered_json::parse(state.shape_json);
  for (const char* key : {"model", "dataset"}) {
    if (saved.value(key, nlohmann::ordered_json()) != now[key]) {
      throw CheckpointError(path + ": written for " + std::string(key) + " " + saved.value(key, nlohmann::ordered_json()).dump() +
                                " (TrainSpec::" + (key == std::string("model") ? "model_name" : "data_name") +
                                "), but this run trains " + now[key].dump() + ".",
                            "resume with the same arguments (--model, --dataset for `train`), or point "
                            "--checkpoint-dir at a fresh folder.");
    }
  }
  // A program's recipe is text (TrainSpec::recipe); older checkpoints hold numbers: compare as text.
  const auto text = [](const nlohmann::ordered_json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  for (auto it = saved.begin(); it != saved.end(); ++it) {
    if (now.contains(it.key()) && now[it.key()] != it.value() && text(now[it.key()]) != text(it.value())) {
      log::warn("resuming " + path + " with a different " + it.key() + " (" + it.value().dump() + " -> " +
                now[it.key()].dump() + "): results will differ from an uninterrupted run");
    }
  }
  const int saved_world = state.load(a, device);
  if (saved_world != env.world_size) {
    log::warn("resuming a world-size " + std::to_string(saved_world) + " checkpoint with world size " +
              std::to_string(env.world_size) + ": the sampler re-shards the epoch, so results will differ "
              "from the uninterrupted run");
  }
  result.checkpoint_path = path;
  log::info("resumed from " + path + ": epoch " + std::to_string(prog().epoch) + ", step " +
            std::to_string(prog().step) + ", " + std::to_string(prog().batches_done) + " batches into the epoch");
}

// A stop every rank agreed on: checkpoint (rank 0), wait until it is durable, then requeue
// (preemption, time limit) or not (cancel).
void Trainer::Run::stop(const StopRequest& request) {
  // After a non-finite value the weights in memory are bad: no checkpoint of them (every rank asks).
  if (request.kind == StopKind::nonfinite || nonfinite->any_rank(pg.get())) {
    stop_nonfinite();
    return;
  }
  result.preempted = request.requeue();
  result.cancelled = request.kind == StopKind::cancel;
  result.stop_signal = request.signal;
  result.preempt_reason = request.reason;
  log::warn("stopping for " + request.reason + " at epoch " + std::to_string(prog().epoch) + ", step " +
            std::to_string(prog().step));
  const at::Tensor loss_sum = ckdir ? shared_loss_sum() : at::Tensor();  // every rank takes part
  if (ckdir && env.rank == 0) {
    write_checkpoint(prog(), loss_sum);
    collect_checkpoint(/*wait=*/true);
  } else if (!ckdir) {
    log::warn("no --checkpoint-dir: the progress of this run is lost");
  }
  if (pg) pg->barrier();  // the checkpoint is durable before anyone leaves
  if (result.cancelled) {
    log::warn(std::string("cancelled: not requeued") +
              (ckdir ? "; to go on, run " + std::string(program_invocation_short_name) + " again with --checkpoint-dir " + ckdir->dir() + " (it resumes from " +
                           result.checkpoint_path + ")"
                     : std::string()));
    return;
  }
  if (ckdir && env.rank == 0 && c.checkpoint.requeue && !env.job_id.empty()) result.requeued = preemption->requeue_job();
}

// A non-finite loss or gradient (--nonfinite): say where, write no checkpoint (the last good one
// stays), exit kExitNonFinite. Every rank calls it.
void Trainer::Run::stop_nonfinite() {
  collect_checkpoint(/*wait=*/true);  // one written before, from good weights
  result.nonfinite = true;
  result.skipped_steps = nonfinite->skipped();
  result.nonfinite_reason = nonfinite->describe(prog().epoch, pg.get());
  if (nonfinite->gave_up()) {
    result.nonfinite_reason += " " + std::to_string(c.run.nonfinite_max_skips) + " steps in a row were skipped (--nonfinite-max-skips).";
  }
  const std::string kept = !ckdir                           ? "no --checkpoint-dir"
                           : env.rank != 0                  ? "rank 0 names the last good checkpoint"
                           : result.checkpoint_path.empty() ? "no checkpoint was written before it"
                                                            : "the last good checkpoint stays: " + result.checkpoint_path;
  log::error(result.nonfinite_reason + " The run stops; no checkpoint of these weights (" + kept + ")." +
             " Hint: lower the learning rate or clip the gradients, look for NaN or infinite values in the data, "
             "or pass --nonfinite skip to drop such steps' updates; a rerun with --checkpoint-dir resumes from "
             "the last good checkpoint.");
  if (pg) pg->barrier();
}

// Mid-epoch, each rank holds the sum of its own step losses, but only rank 0 writes the checkpoint
// that every rank resumes from. Saving the ranks' mean makes the resumed epoch's mean loss equal
// the uninterrupted one: every rank restarts from the mean, and the epoch end averages over ranks.
// Every rank must call it.
at::Tensor Trainer::Run::shared_loss_sum() {
  at::Tensor t = state.loss_sum.detach().clone().reshape({1});
  if (pg) {
    pg->allreduce_sum(t);
    t /= env.world_size;
  }
  return t.reshape({});
}

void Trainer::Run::write_checkpoint(const Progress& p, const at::Tensor& loss_sum) {
  const auto t_start = Clock::now();
  const Progress current_progress = state.progress;
  const at::Tensor current_loss_sum = state.loss_sum;
  state.progress = p;
  state.loss_sum = loss_sum;
  torch::serialize::OutputArchive a;
  state.save(a, device);
  state.progress = current_progress;
  state.loss_sum = current_loss_sum;
  collect_checkpoint(/*wait=*/true);  // one write at a time, in order
  // Serializing copies the state to the host: training waits only for that. Writing the file
  // (checksum, fsync, rename, pruning) runs in the background while the next steps train.
  std::string bytes = CheckpointDir::serialize(a, p.step);
  result.checkpoint_seconds += seconds_since(t_start);
  checkpoint_progress = p;
  checkpoint_write = std::async(std::launch::async, [this, bytes = std::move(bytes), step = p.step] {
    const auto t_write = Clock::now();
    std::string path = ckdir->write(bytes, step);
    return std::make_pair(std::move(path), seconds_since(t_write));
  });
}

// The background write's outcome, on the training thread: its log line, result, callbacks, or its
// error (a CheckpointError: earlier checkpoints are intact). wait=false only looks.
void Trainer::Run::collect_checkpoint(bool wait) {
  if (!checkpoint_write.valid()) return;
  if (!wait && checkpoint_write.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
  const Progress& p = checkpoint_progress;
  const auto [path, seconds] = checkpoint_write.get();
  result.checkpoint_path = path;
  log::info("checkpoint: " + result.checkpoint_path + " (step " + std::to_string(p.step) + "; resumes at epoch " +
            std::to_string(p.epoch) + ", batch " + std::to_string(p.batches_done) + "; written in the background in " +
            fmt("%.3f", seconds) + " s)");
  for_callbacks("on_checkpoint_saved", [&](Callback& cb) { cb.on_checkpoint_saved(result.checkpoint_path, p.step); });
}

TrainResult Trainer::Run::finish() {
  collect_checkpoint(/*wait=*/true);
  const bool stopped = result.preempted || result.cancelled || result.nonfinite;
  if (nonfinite) result.skipped_steps = nonfinite->skipped();
  result.epochs = std::min(prog().epoch, epochs);
  result.steps = prog().step;
  result.train_loss = prog().last_train_loss;
  result.test_loss = prog().last_test_loss;
  result.test_accuracy = prog().last_test_accuracy;
  result.images_per_sec = prog().train_seconds > 0 ? prog().images_total / prog().train_seconds : 0.0;
  if (!epoch_ips.empty()) {
    // Steady state: the epochs after the first, which carries start-up (cuDNN tuning, capture).
    double sum = 0;
    for (size_t i = epoch_ips.size() > 1 ? 1 : 0; i < epoch_ips.size(); ++i) sum += epoch_ips[i];
    result.images_per_sec_steady = sum / static_cast<double>(epoch_ips.size() > 1 ? epoch_ips.size() - 1 : 1);
  }
  result.peak_gpu_mb = dev->peak_memory_mb();
  result.params_sha256 = params_sha256(*model.module);
  if (!stopped && !c.logging.save_model.empty() && env.rank == 0) {
    save_model_atomically(*model.module, c.logging.save_model);
    log::info("saved the model to " + c.logging.save_model);
  }
  // What the step captured goes before the communicator: destroying an NCCL communicator that a
  // live CUDA graph still uses hangs in NCCL.
  if (train_step) train_step->release();
  train_step.reset();
  if (pg) {
    pg->barrier();
    ddp.reset();
    pg->shutdown();
  }
  preemption.reset();
  return result;
}

}  // namespace train
