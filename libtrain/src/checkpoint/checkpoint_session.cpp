// The checkpoint session (checkpoint_session.h): the shape a checkpoint records, serializing the
// state once, the background write and its outcome, and the checkpoint a run resumes from.
#include "checkpoint/checkpoint_session.h"

#include "train/base/error.h"
#include "train/base/log.h"
#include "train/process_group.h"
#include "train/base/text.h"
#include "train/train_spec.h"

#include <ATen/Parallel.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <thread>

namespace train::detail {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

std::string run_shape_json(const TrainSpec& spec, int64_t batch, double base_lr, uint64_t seed, int epochs,
                           int64_t accumulate, std::optional<double> clip_grad_norm) {
  nlohmann::ordered_json j = {
      {"model", spec.model_name}, {"dataset", spec.data_name}, {"batch_size", batch}, {"lr", base_lr},
      {"lr_schedule", spec.lr_schedule.description}, {"seed", seed}, {"epochs", epochs}};
  if (accumulate != 1) j["accumulate_steps"] = accumulate;
  if (clip_grad_norm) j["clip_grad_norm"] = *clip_grad_norm;
  for (const auto& [key, value] : spec.recipe) {
    if (!j.contains(key)) j[key] = value;
  }
  return j.dump();
}

CheckpointBytes serialize_checkpoint(TrainingState& state, const Progress& progress, const at::Tensor& loss_sum,
                                     const at::Device& device) {
  const Progress current_progress = state.progress;
  const at::Tensor current_loss_sum = state.loss_sum;
  state.progress = progress;
  state.loss_sum = loss_sum;
  torch::serialize::OutputArchive a;
  try {
    state.save(a, device);
  } catch (...) {
    state.progress = current_progress;
    state.loss_sum = current_loss_sum;
    throw;
  }
  state.progress = current_progress;
  state.loss_sum = current_loss_sum;
  return {std::make_shared<const std::string>(CheckpointDir::serialize(a, progress.step)), progress};
}

CheckpointSession::CheckpointSession(const CheckpointConfig& config, const DistEnv& env, const at::Device& device,
                                     ProcessGroup* pg, bool snapshots, Saved on_saved)
    : dir_(config.dir.empty() ? nullptr : std::make_unique<CheckpointDir>(config.dir, config.keep)),
      every_(config.every),
      resume_(config.resume),
      resume_path_(config.resume_path),
      rank_(env.rank),
      device_(device),
      pg_(pg),
      on_saved_(std::move(on_saved)) {
  if (snapshots) enable_snapshots(env, config.snapshot_every);
}

SavesDue CheckpointSession::due(int64_t step) const {
  return {dir_ && every_ && step % *every_ == 0, snapshots_.active && snapshots_.clock.due(step)};
}

CheckpointSession::~CheckpointSession() {
  if (writing_.valid()) writing_.wait();  // the write holds the folder; its outcome is lost with the run
}

at::Tensor CheckpointSession::shared_loss_sum(const at::Tensor& loss_sum) const {
  at::Tensor t = loss_sum.detach().clone().reshape({1});
  if (pg_) {
    pg_->allreduce_sum(t);
    t /= pg_->size();
  }
  return t.reshape({});
}

void CheckpointSession::write(TrainingState& state, const Progress& progress, const at::Tensor& loss_sum) {
  const auto t_start = Clock::now();
  CheckpointBytes bytes = serialize_checkpoint(state, progress, loss_sum, device_);
  collect(/*wait=*/true);  // one write at a time, in order
  waited_seconds_ += seconds_since(t_start);
  // The folder is the one destination today; another (e.g. a snapshot in memory) takes the same bytes.
  writing_progress_ = bytes.progress;
  writing_ = std::async(std::launch::async, [this, data = bytes.data, step = progress.step] {
    const auto t_write = Clock::now();
    std::string path = dir_->write(*data, step);
    return std::make_pair(std::move(path), seconds_since(t_write));
  });
}

void CheckpointSession::collect(bool wait) {
  if (!writing_.valid()) return;
  if (!wait && writing_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
  const Progress p = writing_progress_;
  const auto [path, seconds] = writing_.get();
  log::info("checkpoint: " + path + " (step " + std::to_string(p.step) + "; resumes at epoch " +
            std::to_string(p.epoch) + ", batch " + std::to_string(p.batches_done) + "; written in the background in " +
            text::format("%.3f", seconds) + " s)");
  if (on_saved_) on_saved_(path, p, seconds);
  check_measured_budget(p.step, seconds);
}

// With --resume auto, rank 0 picks the newest valid checkpoint and tells the others its step, so
// every rank resumes from the same file.
std::unique_ptr<torch::serialize::InputArchive> CheckpointSession::find_resume(std::string& path, bool& snapshot) const {
  if (resume_ == ResumeMode::path) {
    path = resume_path_;
    return CheckpointDir::load_file(path, device_);
  }
  if (resume_ != ResumeMode::automatic || !dir_) return nullptr;
  std::unique_ptr<torch::serialize::InputArchive> archive;
  int64_t chosen = -1;
  if (rank_ == 0) {
    auto found = dir_->load_latest_valid(device_);
    if (found) {
      chosen = found->second.step;
      path = found->second.path;
      archive = std::move(found->first);
    }
  }
  if (pg_) {
    at::Tensor t = at::tensor({chosen}, at::kLong).to(device_);
    pg_->broadcast(t, 0);
    chosen = t.cpu().item<int64_t>();
  }
  // A snapshot in a node's memory newer than the checkpoint wins (every rank takes part).
  if (auto newer = newer_snapshot(chosen, path)) {
    snapshot = true;
    return newer;
  }
  if (pg_ && rank_ != 0 && chosen >= 0) {
    path = dir_->path_for(chosen);
    archive = CheckpointDir::load_file(path, device_);
  }
  return archive;
}

std::unique_ptr<torch::serialize::InputArchive> CheckpointSession::newer_snapshot(int64_t checkpoint_step,
                                                                                  std::string& path) const {
  if (!snapshots_.active) return nullptr;
  const auto t0 = Clock::now();
  SharedSnapshot snap = share_newest_snapshot(pg_, device_, snapshots_.store.get(), checkpoint_step);
  if (snap.step < 0) return nullptr;
  auto archive = std::make_unique<torch::serialize::InputArchive>();
  try {
    archive->load_from(snap.bytes.data(), snap.bytes.size(), device_);
  } catch (const std::exception& e) {
    throw CheckpointError("the snapshot of step " + std::to_string(snap.step) + " (rank " + std::to_string(snap.holder) +
                              "'s node): checksum verified but the archive does not parse (" +
                              std::string(e.what()).substr(0, 200) + ").",
                          "this is a bug; remove the run's folder under /dev/shm (or TRAIN_SNAPSHOT_DIR) to resume "
                          "from the checkpoint instead.");
  }
  path = "the snapshot of step " + std::to_string(snap.step) + " in rank " + std::to_string(snap.holder) +
         "'s node's memory (the newest checkpoint: " + (checkpoint_step >= 0 ? "step " + std::to_string(checkpoint_step) : "none") +
         "; shared in " + text::format("%.3f", seconds_since(t0)) + " s)";
  return archive;
}

void CheckpointSession::enable_snapshots(const DistEnv& env, std::optional<int64_t> every) {
  if (!dir_ || resume_ != ResumeMode::automatic || (every && *every == 0)) return;
  const std::string where = snapshot_dir(env.job_id, env.host, dir_->dir());
  if (where.empty()) return;
  snapshots_.active = true;  // on every rank alike: the snapshot's collectives need them all
  snapshots_.every = every;
  try {
    snapshots_.store = std::make_unique<SnapshotStore>(where, /*keep=*/2);
  } catch (const Error& e) {
    log::warn(std::string("no snapshots in this node's memory: ") + e.what());
    return;
  }
  snapshots_.writer = env.local_rank == 0;
  // CPU ranks whose threads take every core: the background write runs on a core that trains.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  snapshots_.shares_cores =
      device_.is_cpu() && static_cast<int64_t>(env.local_world_size) * at::get_num_threads() >= static_cast<int64_t>(cores);
  log::info("snapshots in memory: " + snapshots_.store->dir() + " on each node, " +
            (every ? "every " + std::to_string(*every) + " steps"
                   : std::string("auto (at most ") +
                         (snapshots_.shares_cores
                              ? "0.7% of the training time, the background write counted: the ranks' threads take every core"
                              : "0.5% of the training time") +
                         ")"));
}

void CheckpointSession::start_snapshots(int64_t step) {
  snapshots_.clock = SnapshotClock(snapshots_.every, step);
  snapshots_.last_end = Clock::now();
  snapshots_.last_step = step;
}

void CheckpointSession::snapshot(TrainingState& state, const Progress& progress, const at::Tensor& loss_sum) {
  const auto t0 = Clock::now();
  const int64_t step = progress.step;
  Snapshots& s = snapshots_;
  // On cores the ranks all train on, the writer's time is taken from training as well.
  const double cost = s.last_cost + (s.shares_cores && s.store ? s.store->last_write_seconds() : 0.0);
  const double proposal =
      rank_ == 0 ? static_cast<double>(s.clock.propose(cost, std::chrono::duration<double>(t0 - s.last_end).count(),
                                                       step - s.last_step,
                                                       s.shares_cores ? SnapshotClock::kSharedCoresBudget
                                                                      : SnapshotClock::kBudget))
                 : 0.0;
  at::Tensor t = at::zeros({2}, at::TensorOptions().dtype(at::kDouble).device(device_));
  t.narrow(0, 0, 1).copy_(loss_sum.detach().reshape({1}));
  t.narrow(0, 1, 1).fill_(proposal);
  if (pg_) pg_->allreduce_sum(t);
  const at::Tensor mean = t.narrow(0, 0, 1).reshape({}) / static_cast<double>(pg_ ? pg_->size() : 1);
  s.clock.advance(step, static_cast<int64_t>(t[1].item<double>()));
  if (s.writer && s.store) {
    CheckpointBytes bytes = serialize_checkpoint(state, progress, mean, device_);
    s.store->write_async(bytes.data, step);
  }
  s.last_end = Clock::now();
  s.last_cost = std::chrono::duration<double>(s.last_end - t0).count();
  s.last_step = step;
  ++s.totals.taken;
  s.totals.seconds += s.last_cost;
}

void CheckpointSession::drop_snapshots() {
  snapshots_.active = false;
  if (!snapshots_.store) return;
  snapshots_.store->wait();
  snapshots_.totals.write_seconds = snapshots_.store->write_seconds();
  if (snapshots_.writer) {
    log::info("snapshots: " + std::to_string(snapshots_.store->written()) + " written, " +
              std::to_string(snapshots_.store->dropped()) + " dropped (a write was running); removed " +
              snapshots_.store->dir());
    snapshots_.store->remove_all();
  }
  snapshots_.store.reset();
}

namespace {

// Bytes of the tensors a checkpoint holds, before the optimizer has state: the model's, and twice
// its parameters for the optimizer (Adam's and Adadelta's two buffers; SGD's one, or none, is less).
int64_t state_bytes(const TrainingState& state) {
  int64_t params = 0, buffers = 0;
  for (const auto& p : state.model->parameters()) params += static_cast<int64_t>(p.nbytes());
  for (const auto& b : state.model->buffers()) buffers += static_cast<int64_t>(b.nbytes());
  return params * 3 + buffers;
}

}  // namespace

void CheckpointSession::check_budget(const TrainingState& state, const CheckpointDeadlines& deadlines) {
  budget_.deadlines = deadlines;
  if (rank_ != 0 || !dir_) return;
  if (!deadlines.signal_lead_sec && !deadlines.time_margin_sec && !deadlines.kill_wait_sec) return;
  const int64_t bytes = state_bytes(state);
  const double speed = measure_write_speed(dir_->dir(), std::min<int64_t>(bytes, int64_t{64} << 20));
  if (!(speed > 0)) return;
  const double seconds = estimate_checkpoint_seconds(bytes, speed);
  const std::string how = "estimated: " + text::format("%.0f", static_cast<double>(bytes) / 1e6) + " MB at " +
                          text::format("%.0f", speed / 1e6) + " MB/s measured on " + dir_->dir();
  for (const std::string& w : check_checkpoint_budget(seconds, deadlines, how)) log::warn(w);
}

void CheckpointSession::check_measured_budget(int64_t step, double seconds) {
  if (budget_.warned) return;
  const auto warnings = check_checkpoint_budget(seconds, budget_.deadlines,
                                                "measured: the checkpoint of step " + std::to_string(step));
  for (const std::string& w : warnings) log::warn(w);
  budget_.warned = !warnings.empty();
}

Resumed CheckpointSession::resume(TrainingState& state, const std::optional<CheckpointDeadlines>& deadlines) {
  Resumed r;
  bool snapshot = false;
  std::unique_ptr<torch::serialize::InputArchive> archive = find_resume(r.path, snapshot);
  if (archive) {
    apply(*archive, r.path, state);
    r.source = snapshot ? "snapshot" : "checkpoint";
  } else {
    r.path.clear();
  }
  if (snapshots_.active) start_snapshots(state.progress.step);
  if (deadlines) check_budget(state, *deadlines);
  return r;
}

SaveTotals CheckpointSession::finish() {
  collect(/*wait=*/true);
  drop_snapshots();
  SaveTotals t;
  t.waited_seconds = waited_seconds_;
  t.snapshots = snapshots_.totals;
  return t;
}

void CheckpointSession::apply(torch::serialize::InputArchive& a, const std::string& path, TrainingState& state) const {
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
  const int saved_world = state.load(a, device_);
  if (saved_world != state.world_size) {
    log::warn("resuming a world-size " + std::to_string(saved_world) + " checkpoint with world size " +
              std::to_string(state.world_size) + ": the sampler re-shards the epoch, so results will differ "
              "from the uninterrupted run");
  }
  const Progress& p = state.progress;
  log::info("resumed from " + path + ": epoch " + std::to_string(p.epoch) + ", step " + std::to_string(p.step) + ", " +
            std::to_string(p.batches_done) + " batches into the epoch");
}

}  // namespace train::detail
