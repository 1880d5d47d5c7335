// The Trainer's training controls (train/train_spec.h): early stopping, the moving average of the
// weights, the callbacks' hook before the optimizer's step, and an evaluation-only run. Each
// control's own logic lives in its part (early_stop.h, weight_average.h); this wires them in.
#include "trainer_run.h"

#include <nlohmann/json.hpp>

namespace train {

// After build_model(): the controls from the spec and the flags, and their state in checkpoints.
void Trainer::Run::setup_controls() {
  early_stop = detail::EarlyStop(detail::resolve_early_stopping(*spec, c.run));
  result.early_stopping = early_stop.enabled();
  if (const std::optional<double> decay = detail::resolve_ema_decay(*spec, c.run)) {
    ema = std::make_unique<detail::WeightAverage>(*model.module, *decay);
    run_log->set_evaluated("the weights' moving average, decay " + detail::fmt("%g", *decay));
    result.ema = spec->eval_data != nullptr;
    log::info("--ema-decay " + detail::fmt("%g", *decay) + ": a moving average of the weights, updated after every "
              "optimizer step by one fused kernel (on a GPU after the CUDA graph's replay: the step stays captured), "
              "evaluated and checkpointed");
  }
  if (early_stop.enabled() || ema) {
    state.save_controls = [this](torch::serialize::OutputArchive& a) {
      early_stop.save(a);
      if (ema) ema->save(a);
    };
    state.load_controls = [this](torch::serialize::InputArchive* a) {
      early_stop.load(a);
      if (ema) ema->load(a);
    };
  }
  if (c.run.eval_only) {
    // Only what the checkpoint must match: the epochs, rate or batch it trained with don't change
    // what an evaluation of it gives, so resume() has no "results will differ" to say.
    const auto shape = nlohmann::ordered_json::parse(state.shape_json);
    state.shape_json = nlohmann::ordered_json{{"model", shape["model"]}, {"dataset", shape["dataset"]}}.dump();
  }
  for (const auto& cb : spec->callbacks) {
    if (auto* hook = dynamic_cast<OptimizerStepCallback*>(cb.get())) optimizer_step_hooks.push_back(hook);
  }
}

// What runs between the backward and the optimizer's step (StepParts::before_update): --nonfinite
// skip's check, then the callbacks' on_before_optimizer_step; empty when there is neither.
std::function<bool(const at::Tensor&)> Trainer::Run::update_gate() {
  const bool skip = stops->nonfinite().skip_mode();
  if (!skip && optimizer_step_hooks.empty()) return {};
  return [this, skip](const at::Tensor& loss) {
    if (skip && !stops->nonfinite().before_update(loss, prog().step + 1, pg.get())) return false;
    step_context.phase = "a callback's on_before_optimizer_step";  // what it throws is named so
    for (OptimizerStepCallback* hook : optimizer_step_hooks) hook->on_before_optimizer_step(*owner);
    return true;
  };
}

// The evaluation of the weights, or of their moving average swapped in for it.
EvalResult Trainer::Run::evaluate_model(bool one_batch) {
  if (!ema) return evaluate(one_batch);
  detail::WeightAverage::InModel average(*ema);
  return evaluate(one_batch);
}

// --eval-only, after resume() loaded `path`: evaluate, print the test line, and end without
// writing anything (no checkpoint, model, metrics or snapshot). Every rank.
TrainResult Trainer::Run::evaluate_checkpoint(const std::string& path) {
  if (path.empty()) {
    throw ConfigError("--eval-only: expected a checkpoint to evaluate in --checkpoint-dir " + c.checkpoint.dir +
                          ", found none.",
                      "train first with --checkpoint-dir " + c.checkpoint.dir + ", or pass --resume PATH.");
  }
  const auto t0 = detail::Clock::now();
  const EvalResult ev = evaluate_model(/*one_batch=*/false);
  result.eval_seconds = detail::seconds_since(t0);
  log::info(run_log->test_text(ev) + ", of " + path + " (step " + std::to_string(prog().step) + ")");
  result.eval_only = true;
  result.checkpoint_path = path;
  result.test_loss = ev.loss;
  result.test_accuracy = ev.accuracy();
  result.train_loss = prog().last_train_loss;
  result.params_sha256 = params_sha256(*model.module);
  if (pg) {
    pg->barrier();
    pg->shutdown();
  }
  stops.reset();  // the signal handlers go back to what they were
  return result;
}

}  // namespace train
