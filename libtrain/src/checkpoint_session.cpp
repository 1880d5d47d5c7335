// The checkpoint session (checkpoint_session.h): the shape a checkpoint records, serializing the
// state once, the background write and its outcome, and the checkpoint a run resumes from.
#include "checkpoint_session.h"

#include "train/error.h"
#include "train/log.h"
#include "train/process_group.h"
#include "train/text.h"
#include "train/trainer.h"

#include <ATen/ops/tensor.h>
#include <nlohmann/json.hpp>

#include <chrono>

namespace train::detail {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

std::string run_shape_json(const TrainSpec& spec, int64_t batch, double base_lr, uint64_t seed, int epochs) {
  nlohmann::ordered_json j = {
      {"model", spec.model_name}, {"dataset", spec.data_name}, {"batch_size", batch}, {"lr", base_lr},
      {"lr_schedule", spec.lr_schedule.description}, {"seed", seed}, {"epochs", epochs}};
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

CheckpointSession::CheckpointSession(const CheckpointConfig& config, int rank, const at::Device& device, Saved on_saved)
    : dir_(config.dir.empty() ? nullptr : std::make_unique<CheckpointDir>(config.dir, config.keep)),
      every_(config.every),
      resume_(config.resume),
      resume_path_(config.resume_path),
      rank_(rank),
      device_(device),
      on_saved_(std::move(on_saved)) {}

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
}

// With --resume auto, rank 0 picks the newest valid checkpoint and tells the others its step, so
// every rank resumes from the same file.
std::unique_ptr<torch::serialize::InputArchive> CheckpointSession::find_resume(std::string& path) const {
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
    if (rank_ != 0 && chosen >= 0) {
      path = dir_->path_for(chosen);
      archive = CheckpointDir::load_file(path, device_);
    }
  }
  return archive;
}

std::string CheckpointSession::resume(TrainingState& state) {
  std::string path;
  std::unique_ptr<torch::serialize::InputArchive> archive = find_resume(path);
  if (!archive) return "";
  apply(*archive, path, state);
  return path;
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
