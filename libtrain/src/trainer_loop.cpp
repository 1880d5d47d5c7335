// The training loop: epochs of steps over the sampler's shard, the stop agreement and periodic
// checkpoints between steps, then each epoch's evaluation and line. Read top to bottom; what each
// concern does lives in its part (schedule.h, stop_agreement.h, checkpoint_session.h, run_log.h).
#include "trainer_run.h"

#include "train/checkpoint_budget.h"
#include "train/subprocess.h"

#include <ATen/ops/from_blob.h>

#include <limits>

namespace train {

using detail::Clock;
using detail::seconds_since;

namespace {

// "lr 0.1"; where the schedule starts elsewhere (a warm-up from 0, a resumed run): "lr 0 now
// (warmup_cosine(...), base rate 0.1)", so a warm-up's 0 doesn't read as a bug.
std::string lr_text(const detail::Schedule& schedule, const std::string& description) {
  const double now = schedule.lr(), base = schedule.context().base_lr;
  if (now == base) return "lr " + detail::fmt("%g", now);
  return "lr " + detail::fmt("%g", now) + " now (" + description + ", base rate " + detail::fmt("%g", base) + ")";
}

}  // namespace

void Trainer::Run::train() {
  run_log->open(*spec, prog().step);
  if (!c.logging.profile.empty()) {
    profiler = std::make_unique<detail::StepProfiler>(c.logging.profile, detail::parse_profile_steps(c.logging.profile_steps),
                                                      env.rank, dev->gpu());
  }
  log::info("training " + spec->model_name + " on " + spec->train_data->name() + " (" +
            std::to_string(spec->train_data->size()) + " samples) for " + std::to_string(epochs) + " epochs, batch " +
            std::to_string(batch) + " per rank x " + std::to_string(env.world_size) + " ranks" +
            (accumulate > 1 ? " x " + std::to_string(accumulate) + " accumulated micro-batches per step" : "") +
            (clip ? ", gradients clipped to norm " + detail::fmt("%g", clip->max_norm) : "") + ", " +
            lr_text(*schedule, spec->lr_schedule.description) + ", device " + device().str() + ", " +
            std::to_string(threads) + " threads");
  if (const std::string deadline = stops->deadline_line(); !deadline.empty()) log::info(deadline);
  checkpoints->check_budget(state, checkpoint_deadlines());
  stops->start_rollcall(c.distributed, c.checkpoint.dir.empty() ? "." : c.checkpoint.dir);
  for (; prog().epoch <= epochs && !early_stop.stopped(); ++prog().epoch) {
    if (!train_epoch()) break;
  }
  stops->stop_rollcall();
  if (profiler) profiler->finish(prog().step);
}

// One epoch: its steps, then evaluation and the epoch-end checkpoint. Returns false when the run
// ends here (a stop, --max-steps; --dry-run's single step is not an end).
bool Trainer::Run::train_epoch() {
  schedule->start_epoch();
  if (!orders) {
    orders = std::make_unique<detail::EpochOrders>(spec->train_data->size(), env.world_size, env.rank, c.run.seed);
  }
  // The next epoch's order is drawn while this one trains (not after the drain, rank by rank).
  std::vector<int64_t> local = orders->take(prog().epoch - 1, /*next=*/prog().epoch < epochs);
  at::Tensor order = at::from_blob(local.data(), {static_cast<int64_t>(local.size())}, at::kLong).to(device());
  const int64_t n_local = order.size(0);
  const int64_t per_step = step_samples();  // with --accumulate-steps, N micro-batches of `batch`
  const int64_t batches = (n_local + per_step - 1) / per_step;  // optimizer steps
  detail::EpochTimer timer;
  const int64_t images_before = prog().images_total;
  bool max_steps_reached = false;
  run_log->start_epoch(prog().step, where);
  for (int64_t b = prog().batches_done; b < batches; ++b) {
    const int64_t start = b * per_step;
    const int64_t len = std::min(per_step, n_local - start);
    at::Tensor loss = run_step(order, start, len);
    prog().batches_done = b + 1;
    prog().images_total += len * env.world_size;
    faults.after_step(prog().step);
    run_log->record().progress(prog().step);  // at most once a second (trainctl run, the goodput benchmark)
    max_steps_reached = c.run.max_steps && prog().step >= *c.run.max_steps;
    const bool last = b + 1 == batches || c.run.dry_run || max_steps_reached;
    if (run_log->step_done(b, len * env.world_size, last)) {
      run_log->progress(prog().epoch, prog().step, b, batches, start, loss, schedule->last_step_lr());
    }
    for_callbacks("on_step_end", [&](Callback& cb) {
      cb.on_step_end({prog().epoch, prog().step, b, batches, len, loss.detach(), schedule->last_step_lr(), optimizer.get()});
    });
    checkpoints->collect(/*wait=*/false);
    if (last) break;
    if (!after_step(timer)) return false;
  }
  // The epoch's last agreement is queued behind its steps on a GPU (its launches overlap the
  // steps still running there) and waits for them; then the last progress line, and every stream
  // is done.
  const StopRequest settled = stops->settle(/*at_epoch_end=*/true);
  run_log->flush();
  dev->synchronize();
  if (settled.kind != StopKind::none) {
    end_run(settled, timer);
    return false;
  }
  const double epoch_seconds = timer.seconds();
  prog().train_seconds += epoch_seconds;
  result.train_seconds += epoch_seconds;
  run_log->epoch_speed(static_cast<double>(prog().images_total - images_before), epoch_seconds);
  end_epoch(epoch_seconds);
  if (max_steps_reached) return false;
  if (checkpoints->enabled()) {  // every rank: a sharded optimizer's state is gathered; rank 0 writes
    detail::mark_phase(where, detail::Phase::checkpoint);
    Progress next = prog();
    next.epoch += 1;
    write_checkpoint(next, state.loss_sum);  // zero: the next epoch has no steps yet
  }
  return !early_stop.stopped();  // its checkpoint says so: a resumed run stops at once
}

// One optimizer step, with what the user's code throws in its context, the non-finite watch, and
// the schedule's next rate.
at::Tensor Trainer::Run::run_step(const at::Tensor& order, int64_t start, int64_t len) {
  const int64_t step = prog().step + 1;
  if (profiler) profiler->before_step(step);
  if (where) where->begin_step(step);
  faults.before_step(step);
  stops->nonfinite().step_begins(step);
  step_context.phase = "the training step";
  at::Tensor loss;
  try {
    loss = train_step->run(order, start, len);
  } catch (...) {
    detail::throw_step_error(step_context, place(step), std::current_exception());
  }
  // A captured step replays without calling the loss: the injected NaN goes on its result.
  if (faults.nan_at(step)) loss = loss * std::numeric_limits<double>::quiet_NaN();
  // A graph's replay noted the step itself, except an injected NaN put on its result here.
  detail::NonFiniteWatch& watch = stops->nonfinite();
  if (!watch.skip_mode() && (!watch.noted_in_graph() || faults.nan_at(step))) watch.after_step(loss, step);
  detail::mark_phase(where, detail::Phase::step_end);
  ++prog().epoch_steps;
  ++prog().step;
  if (ema) ema->update();
  if (profiler) profiler->after_step(step);
  schedule->after_step(step);
  return loss;
}

// Between two steps: the stop agreement, then --checkpoint-every's checkpoint. Returns false when
// the run ended here.
bool Trainer::Run::after_step(detail::EpochTimer& timer) {
  if (stops->due(prog().step)) {
    if (const StopRequest r = stops->check(prog().step); r.kind != StopKind::none) {
      end_run(r, timer);
      return false;
    }
  }
  const bool checkpoint = checkpoints->due(prog().step), snapshot = checkpoints->snapshot_due(prog().step);
  if (!checkpoint && !snapshot) return true;
  // The agreement may not have seen the latest steps: no checkpoint or snapshot of non-finite weights.
  if (const StopRequest r = stops->settle(/*at_epoch_end=*/false); r.kind != StopKind::none) {
    end_run(r, timer);
    return false;
  }
  detail::mark_phase(where, detail::Phase::checkpoint);
  if (checkpoint) {
    timer.pause();  // the epoch's training time leaves out the checkpoint's (the done line reports it)
    const at::Tensor loss_sum = checkpoints->shared_loss_sum(state.loss_sum);  // every rank takes part
    write_checkpoint(prog(), loss_sum);  // every rank takes part, rank 0 writes
    timer.resume();
  }
  // A snapshot's time counts as training time: its cost shows in the images/s (every rank takes part).
  if (snapshot) take_snapshot();
  return true;
}

// The deadlines a checkpoint must fit in (rank 0): the job script's signal lead, --time-margin
// when the job has a time limit, and SLURM's KillWait.
CheckpointDeadlines Trainer::Run::checkpoint_deadlines() const {
  if (env.rank != 0 || !checkpoints->enabled()) return {};
  std::optional<double> kill_wait;
  if (!env.job_id.empty()) kill_wait = parse_kill_wait(run_command({"scontrol", "show", "config"}, "", 10).out);
  return deadlines_from_env(stops->has_deadline() ? std::optional<double>(c.checkpoint.time_margin_sec) : std::nullopt,
                            kill_wait);
}

// The epoch's mean loss over ranks, evaluation, the epoch line, and the schedule's next rate.
void Trainer::Run::end_epoch(double epoch_seconds) {
  detail::mark_phase(where, detail::Phase::epoch_end);
  const std::string stragglers = run_log->stragglers(pg.get(), where, prog().step, epoch_seconds, device());
  at::Tensor mean_loss = (state.loss_sum / static_cast<double>(std::max<int64_t>(1, prog().epoch_steps))).reshape({1});
  if (pg) {
    pg->allreduce_sum(mean_loss);
    mean_loss /= env.world_size;
  }
  prog().last_train_loss = mean_loss.cpu().item<double>();
  EvalResult ev;
  const auto t_eval = Clock::now();
  if (spec->eval_data) {
    ev = evaluate_model(c.run.dry_run);
    for_callbacks("on_evaluation", [&](Callback& cb) { cb.on_evaluation(ev); });
  }
  const double eval_seconds = seconds_since(t_eval);
  result.eval_seconds += eval_seconds;
  prog().last_test_loss = ev.loss;
  prog().last_test_accuracy = ev.accuracy();
  const detail::NonFiniteWatch& nonfinite = stops->nonfinite();
  run_log->epoch_line(prog(), ev, epoch_seconds, eval_seconds, stragglers,
                  nonfinite.skip_mode() ? std::optional<int64_t>(nonfinite.skipped()) : std::nullopt);
  (void)early_stop.after_epoch(prog().epoch, ev, pg.get(), env.rank, device());  // rank 0 decides for all
  for_callbacks("on_epoch_end", [&](Callback& cb) {
    cb.on_epoch_end({prog().epoch, prog().step, prog().last_train_loss, ev, epoch_seconds, schedule->last_step_lr(),
                     optimizer.get()});
  });
  result.epochs = prog().epoch;
  schedule->after_epoch(prog().epoch);
  prog().batches_done = 0;
  prog().epoch_steps = 0;
  state.loss_sum.zero_();
}

// Each rank evaluates samples rank, rank + world, ...: no padding, so the all-reduced totals
// equal single-process evaluation.
EvalResult Trainer::Run::evaluate(bool one_batch) {
  torch::NoGradGuard no_grad;
  model.module->eval();
  Dataset& data = *spec->eval_data;
  const auto opts = at::TensorOptions().dtype(at::kLong).device(device());
  at::Tensor idx = torch::arange(env.rank, data.size(), env.world_size, opts);
  const int64_t n_metrics = static_cast<int64_t>(spec->metrics.size());
  // [loss sum, count, metric sums...]
  at::Tensor totals = torch::zeros({2 + n_metrics}, at::TensorOptions().dtype(at::kDouble).device(device()));
  const int64_t n = idx.size(0);
  for (int64_t start = 0; start < n; start += c.run.test_batch_size) {
    const int64_t len = std::min(c.run.test_batch_size, n - start);
    detail::mark_phase(where, detail::Phase::evaluation);
    Batch b = user_code("the evaluation's Dataset::get_batch", [&] { return data.get_batch(idx.narrow(0, start, len)); });
    at::Tensor out = user_code("the model's forward (evaluation)", [&] { return model.forward(b.inputs); });
    totals[0] += user_code("the loss (evaluation)", [&] { return spec->loss(out, b.targets, Reduction::sum); }).to(at::kDouble);
    totals[1] += static_cast<double>(len);
    for (int64_t m = 0; m < n_metrics; ++m) {
      const Metric& metric = spec->metrics[static_cast<size_t>(m)];
      totals[2 + m] += user_code("a metric (evaluation)", [&] { return metric.batch_sum(out, b.targets); }).to(at::kDouble);
    }
    if (one_batch) break;
  }
  if (pg) pg->allreduce_sum(totals);
  at::Tensor t = totals.cpu();
  EvalResult r;
  r.count = static_cast<int64_t>(t[1].item<double>());
  r.loss = r.count > 0 ? t[0].item<double>() / static_cast<double>(r.count) : 0.0;
  for (int64_t m = 0; m < n_metrics; ++m) {
    r.metrics[spec->metrics[static_cast<size_t>(m)].name] =
        r.count > 0 ? t[2 + m].item<double>() / static_cast<double>(r.count) : 0.0;
  }
  model.module->train();
  return r;
}

}  // namespace train
