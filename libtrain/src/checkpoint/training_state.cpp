// TrainingState: the checkpoint schema, written and read in one place.
#include "train/training_state.h"

#include "train/base/error.h"
#include "train/base/log.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/ops/tensor.h>
#include <c10/util/Exception.h>
#include <torch/serialize/input-archive.h>

#include <mutex>
#include <sstream>

namespace train {
namespace {

at::Tensor i64(int64_t v) { return at::tensor({v}, at::TensorOptions().dtype(at::kLong)); }
at::Tensor f64(double v) { return at::tensor({v}, at::TensorOptions().dtype(at::kDouble)); }

at::Tensor read_tensor(torch::serialize::InputArchive& a, const std::string& key) {
  at::Tensor t;
  if (!a.try_read(key, t)) {
    throw CheckpointError("checkpoint: expected the key '" + key + "', found it missing.",
                          "the file was written by another program or version; resume with --resume never "
                          "or point --checkpoint-dir at a fresh folder.");
  }
  return t;
}

int64_t read_i64(torch::serialize::InputArchive& a, const std::string& key) {
  return read_tensor(a, key).cpu().item<int64_t>();
}
double read_f64(torch::serialize::InputArchive& a, const std::string& key) {
  return read_tensor(a, key).cpu().item<double>();
}

}  // namespace

void TrainingState::save(torch::serialize::OutputArchive& a, const at::Device& device) const {
  at::NoGradGuard no_grad;
  for (const auto& kv : model->named_parameters()) a.write("model/" + kv.key(), kv.value().detach().cpu());
  for (const auto& kv : model->named_buffers()) a.write("model/" + kv.key(), kv.value().detach().cpu(), true);
  torch::serialize::OutputArchive oa;
  optimizer->save(oa);
  a.write("optimizer", oa);
  const Progress& p = progress;
  a.write("progress/epoch", i64(p.epoch));
  a.write("progress/batches_done", i64(p.batches_done));
  a.write("progress/samples_done", i64(p.batches_done * batch_size * world_size));
  a.write("progress/step", i64(p.step));
  a.write("progress/loss_sum", loss_sum.detach().to(at::kCPU).reshape({1}));
  a.write("progress/epoch_steps", i64(p.epoch_steps));
  a.write("progress/images_total", i64(p.images_total));
  a.write("progress/skipped_samples", i64(p.skipped_samples));
  a.write("progress/train_seconds", f64(p.train_seconds));
  a.write("progress/last_eval",
          at::tensor({p.last_test_loss, p.last_test_accuracy, p.last_train_loss}, at::TensorOptions().dtype(at::kDouble)));
  if (save_schedule) {
    torch::serialize::OutputArchive sa;
    save_schedule(sa);
    a.write("schedule", sa);
  }
  a.write("world_size", i64(world_size));
  a.write("shape", c10::IValue(shape_json));
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    a.write("rng/cpu", gen.get_state());
  }
  if (device.is_cuda()) {
    auto gen = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    a.write("rng/cuda", gen.get_state());
  }
  if (save_user) {
    torch::serialize::OutputArchive ua;
    save_user(ua);
    a.write("user", ua);
  }
  if (save_controls) {
    torch::serialize::OutputArchive ca;
    save_controls(ca);
    a.write("controls", ca);
  }
}

std::string TrainingState::read_shape(torch::serialize::InputArchive& a) {
  c10::IValue shape;
  if (!a.try_read("shape", shape) || !shape.isString()) {
    throw CheckpointError("checkpoint: expected the key 'shape' (the run's flags), found it missing.",
                          "the file was not written by libtrain's Trainer; point --checkpoint-dir at a fresh folder.");
  }
  return shape.toStringRef();
}

namespace {

// The optimizer's state from the checkpoint. The archive was loaded onto the run's device, so
// whatever state tensors the optimizer keeps are created where its parameters live.
void load_optimizer(torch::serialize::InputArchive& a, torch::optim::Optimizer& optimizer) {
  torch::serialize::InputArchive oa;
  if (!a.try_read("optimizer", oa)) {
    throw CheckpointError("checkpoint: expected the optimizer's state, found it missing.",
                          "point --checkpoint-dir at a fresh folder.");
  }
  try {
    optimizer.load(oa);
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    throw CheckpointError("checkpoint: expected the optimizer's state to fit this run's optimizer (" +
                              std::to_string(optimizer.param_groups().size()) + " parameter group(s)), found: " +
                              what.substr(0, what.find('\n')) + ".",
                          "resume with the same model and optimizer (a checkpoint of a model with tied weights "
                          "written before libtrain 0.2.0 holds the tied weight twice), or point --checkpoint-dir "
                          "at a fresh folder.");
  }
}

// A checkpoint written before the schedule kept its own record holds its rate as progress/lr: the
// record the Trainer's schedule writes now ("lr"), made of it. (An archive is read only from bytes.)
torch::serialize::InputArchive older_schedule_record(torch::serialize::InputArchive& a) {
  at::Tensor lr;
  if (!a.try_read("progress/lr", lr)) {
    throw CheckpointError("checkpoint: expected the LR schedule's record (the key 'schedule'), found none.",
                          "the file was written without the Trainer's schedule (a hand-written loop's, or another "
                          "program's); resume with --resume never or point --checkpoint-dir at a fresh folder.");
  }
  torch::serialize::OutputArchive record;
  record.write("lr", lr.cpu());
  std::stringstream bytes;
  record.save_to(bytes);
  torch::serialize::InputArchive older;
  older.load_from(bytes);
  return older;
}

}  // namespace

int TrainingState::load(torch::serialize::InputArchive& a, const at::Device& device) {
  at::NoGradGuard no_grad;
  for (auto& kv : model->named_parameters()) {
    at::Tensor t = read_tensor(a, "model/" + kv.key());
    if (t.sizes() != kv.value().sizes()) {
      throw CheckpointError("checkpoint: model/" + kv.key() + " has shape " + c10::str(t.sizes()) +
                                ", expected " + c10::str(kv.value().sizes()) + " for this model.",
                            "resume with the same model, or point --checkpoint-dir at a fresh folder.");
    }
    kv.value().copy_(t);
  }
  for (auto& kv : model->named_buffers()) {
    at::Tensor t;
    if (!a.try_read("model/" + kv.key(), t, true)) {
      throw CheckpointError("checkpoint: expected the buffer model/" + kv.key() + ", found it missing.",
                            "resume with the same model, or point --checkpoint-dir at a fresh folder.");
    }
    kv.value().copy_(t);
  }
  load_optimizer(a, *optimizer);
  Progress& p = progress;
  p.epoch = static_cast<int>(read_i64(a, "progress/epoch"));
  p.batches_done = read_i64(a, "progress/batches_done");
  p.step = read_i64(a, "progress/step");
  p.epoch_steps = read_i64(a, "progress/epoch_steps");
  p.images_total = read_i64(a, "progress/images_total");
  at::Tensor skipped;
  p.skipped_samples = a.try_read("progress/skipped_samples", skipped) ? skipped.cpu().item<int64_t>() : 0;
  p.train_seconds = read_f64(a, "progress/train_seconds");
  at::Tensor ev = read_tensor(a, "progress/last_eval").cpu();
  p.last_test_loss = ev[0].item<double>();
  p.last_test_accuracy = ev[1].item<double>();
  p.last_train_loss = ev[2].item<double>();
  if (load_schedule) {
    torch::serialize::InputArchive sa;
    if (a.try_read("schedule", sa)) {
      load_schedule(sa);
    } else {
      sa = older_schedule_record(a);
      load_schedule(sa);
    }
  }
  loss_sum = read_tensor(a, "progress/loss_sum").reshape({}).to(device, at::kDouble);
  const int saved_world = static_cast<int>(read_i64(a, "world_size"));
  if (saved_world != world_size) {
    // Re-shard: the samples every rank consumed so far, in units of the new global batch.
    const int64_t samples_done = read_i64(a, "progress/samples_done");
    p.batches_done = samples_done / (batch_size * world_size);
  }
  {
    at::Tensor rng = read_tensor(a, "rng/cpu").cpu();
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(rng);
  }
  if (device.is_cuda()) {
    at::Tensor crng;
    if (a.try_read("rng/cuda", crng)) {
      crng = crng.cpu();
      auto gen = at::globalContext().defaultGenerator(device);
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(crng);
    }
  }
  if (load_user) {
    torch::serialize::InputArchive ua;
    if (a.try_read("user", ua)) load_user(ua);
  }
  if (load_controls) {
    torch::serialize::InputArchive ca;
    load_controls(a.try_read("controls", ca) ? &ca : nullptr);
  }
  return saved_world;
}

}  // namespace train
