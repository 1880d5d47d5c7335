// What a finished run reports: the parameters' fingerprint (params_sha256) and the done line's
// JSON (to_json(TrainResult)).
#include "train/trainer.h"

#include "train/base/sha256.h"
#include "train/base/version.h"

#include <nlohmann/json.hpp>

namespace train {

std::string params_sha256(const torch::nn::Module& module) {
  Sha256 hash;
  for (const auto& p : module.parameters()) {
    at::Tensor t = p.detach().to(at::kCPU, at::kFloat).contiguous();
    hash.update(t.const_data_ptr(), t.numel() * sizeof(float));
  }
  return hash.hex();
}

std::string to_json(const TrainResult& r) {
  nlohmann::ordered_json j;
  j["event"] = r.nonfinite ? "nonfinite" : r.cancelled ? "cancelled" : r.preempted ? "preempted" : "done";
  j["epochs"] = r.epochs;
  j["steps"] = r.steps;
  j["train_loss"] = r.train_loss;
  j["test_loss"] = r.test_loss;
  j["test_accuracy"] = r.test_accuracy;
  j["images_per_sec"] = r.images_per_sec;
  j["images_per_sec_steady"] = r.images_per_sec_steady;
  if (r.peak_gpu_mb > 0) j["peak_gpu_mb"] = r.peak_gpu_mb;
  if (r.peak_rss_mb > 0) {
    j["peak_rss_mb"] = r.peak_rss_mb;
    j["rss_anon_mb"] = r.rss_anon_mb;
    j["rss_file_mb"] = r.rss_file_mb;
  }
  j["train_seconds"] = r.train_seconds;
  j["eval_seconds"] = r.eval_seconds;
  j["checkpoint_seconds"] = r.checkpoint_seconds;
  if (r.snapshots > 0) {
    j["snapshots"] = r.snapshots;
    j["snapshot_seconds"] = r.snapshot_seconds;
    j["snapshot_write_seconds"] = r.snapshot_write_seconds;
  }
  j["world_size"] = r.world_size;
  if (!r.precision.empty()) j["precision"] = r.precision;
  j["params_sha256"] = r.params_sha256;
  j["version"] = TRAIN_VERSION_STRING;  // the libtrain that trained it (train/base/version.h)
  if (r.skipped_steps > 0 || r.nonfinite) j["skipped_steps"] = r.skipped_steps;
  if (r.skipped_samples >= 0) j["skipped_samples"] = r.skipped_samples;      // a loader's run
  if (r.data_wait_seconds >= 0) j["data_wait_seconds"] = r.data_wait_seconds;
  if (r.early_stopping) j["stopped_early"] = r.stopped_early;
  if (r.eval_only) {
    j["eval_only"] = true;
    j["checkpoint"] = r.checkpoint_path;  // the one evaluated
  }
  if (r.ema) j["ema"] = true;  // the test loss and accuracy are the moving average's
  if (r.nonfinite) {
    j["reason"] = r.nonfinite_reason;
    j["checkpoint"] = r.checkpoint_path;  // the last good one ("" if none)
  }
  if (r.preempted || r.cancelled) {
    j["reason"] = r.preempt_reason;
    j["checkpoint"] = r.checkpoint_path;
    j["requeued"] = r.requeued;
  }
  return j.dump();
}

}  // namespace train
