// The Trainer's training controls (train/train_spec.h): early stopping, the moving average of the
// weights, the callbacks' hook before the optimizer's step, and an evaluation-only run. Each
// control's own logic lives in its part (early_stop.h, weight_average.h); this wires them in.
#include "trainer/trainer_run.h"

#include <nlohmann/json.hpp>

namespace train {

// After build_model(): the controls as the plan resolved them, and their state in checkpoints.
void Trainer::Run::setup_controls() {
  const TrainConfig& c = config();
  controls.early_stop = detail::EarlyStop(plan.early_stopping);
  result.early_stopping = controls.early_stop.enabled();
  if (plan.ema_decay) {
    controls.ema = std::make_unique<detail::WeightAverage>(*learner.model.module, *plan.ema_decay);
    result.ema = plan.evaluates;
    log::info("--ema-decay " + text::format("%g", *plan.ema_decay) + ": a moving average of the weights, updated after "
              "every optimizer step by one fused kernel (on a GPU after the CUDA graph's replay: the step stays "
              "captured), evaluated and checkpointed");
  }
  if (controls.early_stop.enabled() || controls.ema) {
    state.save_controls = [this](torch::serialize::OutputArchive& a) {
      controls.early_stop.save(a);
      if (controls.ema) controls.ema->save(a);
    };
    state.load_controls = [this](torch::serialize::InputArchive* a) {
      controls.early_stop.load(a);
      if (controls.ema) controls.ema->load(a);
    };
  }
  if (c.run.eval_only) {
    // Only what the checkpoint must match: the epochs, rate or batch it trained with don't change
    // what an evaluation of it gives, so resume() has no "results will differ" to say.
    const auto shape = nlohmann::ordered_json::parse(state.shape_json);
    state.shape_json = nlohmann::ordered_json{{"model", shape["model"]}, {"dataset", shape["dataset"]}}.dump();
  }
  for (const auto& cb : plan.spec->callbacks) {
    if (auto* hook = dynamic_cast<OptimizerStepCallback*>(cb.get())) controls.optimizer_step_hooks.push_back(hook);
  }
}

// What runs between the backward and the optimizer's step (StepParts::before_update): --nonfinite
// skip's check (the stop agreement's, already in `parts`), then the callbacks'
// on_before_optimizer_step.
void Trainer::Run::gate_updates(detail::StepParts& parts) {
  if (controls.optimizer_step_hooks.empty()) return;
  parts.before_update = [this, skip = std::move(parts.before_update)](const at::Tensor& loss) {
    if (skip && !skip(loss)) return false;
    steps.context.phase = "a callback's on_before_optimizer_step";  // what it throws is named so
    for (OptimizerStepCallback* hook : controls.optimizer_step_hooks) hook->on_before_optimizer_step(*controls.owner);
    return true;
  };
}

// What the test lines evaluate: "" the weights, or their moving average.
std::string Trainer::Run::evaluated() const {
  return controls.ema ? "the weights' moving average, decay " + text::format("%g", *plan.ema_decay) : "";
}

// The evaluation of the weights, or of their moving average swapped in for it.
EvalResult Trainer::Run::evaluate_model(bool one_batch) {
  if (!controls.ema) return evaluate(one_batch);
  detail::WeightAverage::InModel average(*controls.ema);
  return evaluate(one_batch);
}

// --eval-only, after resume() loaded `path`: evaluate, print the test line, and end without
// writing anything (no checkpoint, model, metrics or snapshot). Every rank.
TrainResult Trainer::Run::evaluate_checkpoint(const std::string& path) {
  if (path.empty()) {
    const std::string& dir = config().checkpoint.dir;
    throw ConfigError("--eval-only: expected a checkpoint to evaluate in --checkpoint-dir " + dir + ", found none.",
                      "train first with --checkpoint-dir " + dir + ", or pass --resume PATH.");
  }
  const auto t0 = detail::Clock::now();
  const EvalResult ev = evaluate_model(/*one_batch=*/false);
  result.eval_seconds = detail::seconds_since(t0);
  log::info(detail::test_text(ev, evaluated()) + ", of " + path + " (step " + std::to_string(prog().step) + ")");
  result.eval_only = true;
  result.checkpoint_path = path;
  result.test_loss = ev.loss;
  result.test_accuracy = ev.accuracy();
  result.train_loss = prog().last_train_loss;
  result.params_sha256 = params_sha256(*learner.model.module);
  if (comm.pg) {
    comm.pg->barrier();
    comm.pg->shutdown();
  }
  stops.reset();  // the signal handlers go back to what they were
  return result;
}

}  // namespace train
