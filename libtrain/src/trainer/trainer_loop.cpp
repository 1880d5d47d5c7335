// The training loop: epochs of steps, each on the batch the feed hands it (data/batch_feed.h), the
// stop agreement and periodic checkpoints between steps, then each epoch's evaluation and line.
// Read top to bottom; what each concern does lives in its part (optim/schedule.h,
// stops/stop_agreement.h, checkpoint/checkpoint_session.h, log/run_log.h, step/step_observers.h).
#include "trainer/trainer_run.h"
#include "data/eval_batches.h"

#include "train/base/checkpoint_budget.h"
#include "train/base/host_memory.h"
#include "train/base/subprocess.h"

#include <algorithm>
#include <limits>

namespace train {

using detail::Clock;
using detail::seconds_since;

namespace {

// "lr 0.1"; where the schedule starts elsewhere (a warm-up from 0, a resumed run): "lr 0 now
// (warmup_cosine(...), base rate 0.1)", so a warm-up's 0 doesn't read as a bug.
std::string lr_text(const detail::Schedule& schedule, const std::string& description) {
  const double now = schedule.lr(), base = schedule.context().base_lr;
  if (now == base) return "lr " + text::format("%g", now);
  return "lr " + text::format("%g", now) + " now (" + description + ", base rate " + text::format("%g", base) + ")";
}

}  // namespace

void Trainer::Run::train() {
  const TrainSpec& spec = *plan.spec;
  const TrainConfig& c = config();
  run_log->open(spec, plan.train_size, prog().step, evaluated());
  log::info("training " + spec.model_name + " on " + plan.train_name + " (" +
            std::to_string(plan.train_size) + " samples) for " + std::to_string(plan.epochs) + " epochs, batch " +
            std::to_string(plan.batch) + " per rank x " + std::to_string(env().world_size) + " ranks" +
            (plan.accumulate > 1 ? " x " + std::to_string(plan.accumulate) + " accumulated micro-batches per step" : "") +
            (learner.clip ? ", gradients clipped to norm " + text::format("%g", learner.clip->max_norm) : "") + ", " +
            lr_text(*schedule, spec.lr_schedule.description) + ", device " + device().str() + ", " +
            std::to_string(plan.threads) + " threads");
  if (comm.pg && comm.pg->size() >= 2) {  // the watchdog of a stalled run (a stalled NCCL run dumps its flight recorder)
    comm.rollcall = std::make_unique<detail::RollCall>(
        *comm.pg, detail::RollCallOptions{c.distributed.stall_timeout_sec.value_or(0), c.distributed.timeout_sec,
                                          c.checkpoint.dir.empty() ? "." : c.checkpoint.dir});
  }
  make_feed();
  for (; prog().epoch <= plan.epochs && !controls.early_stop.stopped(); ++prog().epoch) {
    if (!train_epoch()) break;
  }
  comm.rollcall.reset();
  steps.observers.steps_end();
}

// The feed of each step's batch: slices of the epoch's order over data in memory, or the loader's
// batches of data read sample by sample.
void Trainer::Run::make_feed() {
  const TrainConfig& c = config();
  const DistEnv& e = env();
  if (!plan.loader) {
    if (c.data.workers) {
      log::info("--data-workers " + std::to_string(*c.data.workers) + ": the training data '" + plan.train_name +
                "' is held in memory and needs no loader; the flag serves data read sample by sample "
                "(TrainSpec::train_samples, train --dataset npy)");
    }
    feed = detail::make_index_feed(plan.train_size, e.world_size, e.rank, c.run.seed, device());
    return;
  }
  detail::LoaderOptions o;
  o.workers = plan.data_workers;
  // Each thread fills whole batches: at most prefetch + 1 of them are being filled at once.
  o.prefetch = c.data.prefetch.value_or(std::max(2, plan.data_workers));
  if (o.prefetch + 1 < o.workers) {
    log::warn("--prefetch " + std::to_string(o.prefetch) + " with --data-workers " + std::to_string(o.workers) +
              ": each thread fills whole batches and only " + std::to_string(o.prefetch + 1) +
              " are in the ring, so " + std::to_string(o.workers - o.prefetch - 1) +
              " threads wait; leave --prefetch out (it follows --data-workers) or raise it");
  }
  o.pin_memory = dev->traits().gpu;
  o.device = device();
  o.bad_samples = c.data.bad_samples == BadSamples::skip ? detail::BadSamples::skip : detail::BadSamples::fail;
  std::unique_ptr<detail::LoaderFeed> l = detail::make_loader_feed(*plan.spec->train_samples, e.world_size, e.rank,
                                                                   c.run.seed, o);
  log::info("loader of " + plan.train_name + ": " + l->summary(plan.step_samples()) +
            (c.data.workers ? "" : " (--data-workers 0: half the rank's " + std::to_string(plan.threads) + " threads)"));
  feed = std::move(l);
  result.data_wait_seconds = 0;  // -1 (no loader) until here
  skipped_before = prog().skipped_samples;  // a resumed run's, from its checkpoint
  result.skipped_samples = skipped_before;
}

// The loader that feeds the steps, or null for data in memory.
detail::LoaderFeed* Trainer::Run::loader() const { return dynamic_cast<detail::LoaderFeed*>(feed.get()); }

// One epoch: its steps, then evaluation and the epoch-end checkpoint. Returns false when the run
// ends here (a stop, --max-steps; --dry-run's single step is not an end).
bool Trainer::Run::train_epoch() {
  schedule->start_epoch();
  const int64_t per_step = plan.step_samples();  // with --accumulate-steps, N micro-batches of `batch`
  // The next epoch's order is drawn while this one trains (not after the drain, rank by rank).
  const int64_t n_local =
      feed->start_epoch(prog().epoch, prog().batches_done * per_step, per_step, /*next_follows=*/prog().epoch < plan.epochs);
  const int64_t batches = plan.steps_per_epoch;  // optimizer steps, as the schedule counts them
  TORCH_CHECK(n_local == plan.samples_per_rank, "the feed's epoch has ", n_local, " samples, the plan ",
              plan.samples_per_rank);
  detail::EpochTimer timer;
  const int64_t images_before = prog().images_total;
  bool max_steps_reached = false;
  run_log->start_epoch(prog().step);
  comm.stragglers.start_epoch(prog().step, comm.where);
  for (int64_t b = prog().batches_done; b < batches; ++b) {
    const int64_t start = b * per_step;
    const int64_t len = std::min(per_step, n_local - start);
    at::Tensor loss = run_step(feed->batch(start, len));
    prog().batches_done = b + 1;
    prog().images_total += len * env().world_size;
    max_steps_reached = config().run.max_steps && prog().step >= *config().run.max_steps;
    const bool last = b + 1 == batches || config().run.dry_run || max_steps_reached;
    detail::StepDone done;
    done.epoch = prog().epoch;
    done.step = prog().step;
    done.batch = b;
    done.batches = batches;
    done.start = start;
    done.samples = len;
    done.world_size = env().world_size;
    done.last = last;
    done.loss = loss;
    done.lr = schedule->last_step_lr();
    steps.observers.step_done(done);
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
  end_epoch(static_cast<double>(prog().images_total - images_before), epoch_seconds);
  if (max_steps_reached) return false;
  if (!checkpoints->dir().empty()) {  // every rank: a sharded optimizer's state is gathered; rank 0 writes
    detail::mark_phase(comm.where, detail::Phase::checkpoint);
    Progress next = prog();
    next.epoch += 1;
    write_checkpoint(next, state.loss_sum);  // zero: the next epoch has no steps yet
  }
  return !controls.early_stop.stopped();  // its checkpoint says so: a resumed run stops at once
}

// One optimizer step: the observers before, the step (what the user's code throws comes out in
// its context), the counters, the observers after.
at::Tensor Trainer::Run::run_step(const detail::StepBatch& batch) {
  const int64_t step = prog().step + 1;
  steps.observers.before_step(step);
  steps.context.phase = "the training step";
  at::Tensor loss;
  try {
    loss = steps.step->run(batch);
  } catch (...) {
    detail::throw_step_error(steps.context, place(step), std::current_exception());
  }
  ++prog().epoch_steps;
  ++prog().step;
  steps.observers.after_step(step, loss);
  return loss;
}

// Between two steps: the stop agreement, then --checkpoint-every's checkpoint and the snapshots.
// Returns false when the run ended here.
bool Trainer::Run::after_step(detail::EpochTimer& timer) {
  if (const StopRequest r = stops->poll(prog().step); r.kind != StopKind::none) {
    end_run(r, timer);
    return false;
  }
  const detail::SavesDue due = checkpoints->due(prog().step);
  if (!due.checkpoint && !due.snapshot) return true;
  // The agreement may not have seen the latest steps: no checkpoint or snapshot of non-finite weights.
  if (const StopRequest r = stops->settle(/*at_epoch_end=*/false); r.kind != StopKind::none) {
    end_run(r, timer);
    return false;
  }
  detail::mark_phase(comm.where, detail::Phase::checkpoint);
  if (due.checkpoint) {
    timer.pause();  // the epoch's training time leaves out the checkpoint's (the done line reports it)
    const at::Tensor loss_sum = checkpoints->shared_loss_sum(state.loss_sum);  // every rank takes part
    write_checkpoint(prog(), loss_sum);  // every rank takes part, rank 0 writes
    timer.resume();
  }
  // A snapshot's time counts as training time: its cost shows in the images/s (every rank takes part).
  if (due.snapshot) take_snapshot();
  return true;
}

// The deadlines a checkpoint must fit in (rank 0): the job script's signal lead, --time-margin
// when the job has a time limit, and SLURM's KillWait.
CheckpointDeadlines Trainer::Run::checkpoint_deadlines() const {
  if (env().rank != 0 || config().checkpoint.dir.empty()) return {};
  std::optional<double> kill_wait;
  if (!env().job_id.empty()) kill_wait = parse_kill_wait(run_command({"scontrol", "show", "config"}, "", 10).out);
  return deadlines_from_env(stops->time_margin(), kill_wait);
}

// The epoch's mean loss over ranks, evaluation, the epoch line, and the schedule's next rate.
void Trainer::Run::end_epoch(double images, double epoch_seconds) {
  detail::mark_phase(comm.where, detail::Phase::epoch_end);
  const std::string stragglers = comm.stragglers.report(comm.pg.get(), comm.where, prog().step, epoch_seconds, device());
  at::Tensor mean_loss = (state.loss_sum / static_cast<double>(std::max<int64_t>(1, prog().epoch_steps))).reshape({1});
  if (comm.pg) {
    comm.pg->allreduce_sum(mean_loss);
    mean_loss /= env().world_size;
  }
  prog().last_train_loss = mean_loss.cpu().item<double>();
  EvalResult ev;
  const auto t_eval = Clock::now();
  if (plan.evaluates) {
    ev = evaluate_model(config().run.dry_run);
    for_callbacks("on_evaluation", [&](Callback& cb) { cb.on_evaluation(ev); });
  }
  const double eval_seconds = seconds_since(t_eval);
  result.eval_seconds += eval_seconds;
  prog().last_test_loss = ev.loss;
  prog().last_test_accuracy = ev.accuracy();
  std::optional<double> data_wait;
  if (detail::LoaderFeed* l = loader()) {
    data_wait = l->take_wait_seconds();
    result.data_wait_seconds += *data_wait;
  }
  run_log->epoch_line(prog(), ev, images, epoch_seconds, eval_seconds, stragglers, stops->skipped_steps(), data_wait);
  (void)controls.early_stop.after_epoch(prog().epoch, ev, comm.pg.get(), env().rank, device());  // rank 0 decides for all
  for_callbacks("on_epoch_end", [&](Callback& cb) {
    EpochInfo info;
    info.epoch = prog().epoch;
    info.step = prog().step;
    info.train_loss = prog().last_train_loss;
    info.eval = ev;
    info.seconds = epoch_seconds;
    info.lr = schedule->last_step_lr();
    info.optimizer = learner.optimizer.get();
    cb.on_epoch_end(info);
  });
  result.epochs = prog().epoch;
  note_memory();
  schedule->after_epoch(prog().epoch);
  prog().batches_done = 0;
  prog().epoch_steps = 0;
  state.loss_sum.zero_();
}

// The rank's resident memory, its largest parts so far (the done line's peak_rss_mb, rss_anon_mb,
// rss_file_mb): data read through the loader must not make them grow with the dataset.
void Trainer::Run::note_memory() {
  const host_memory::Resident r = host_memory::resident();
  result.peak_rss_mb = std::max(result.peak_rss_mb, r.peak_mb);
  result.rss_anon_mb = std::max(result.rss_anon_mb, r.anon_mb);
  result.rss_file_mb = std::max(result.rss_file_mb, r.file_mb);
}

// Each rank evaluates samples rank, rank + world, ...: no padding, so the all-reduced totals
// equal single-process evaluation.
EvalResult Trainer::Run::evaluate(bool one_batch) {
  torch::NoGradGuard no_grad;
  ModelHandle& model = learner.model;
  const TrainSpec& spec = *plan.spec;
  model.module->eval();
  detail::EvalBatches batches(spec, env().rank, env().world_size, device(), plan.data_workers,
                              config().data.bad_samples == BadSamples::skip);
  const int64_t n_metrics = static_cast<int64_t>(spec.metrics.size());
  // [loss sum, count, metric sums...]
  at::Tensor totals = torch::zeros({2 + n_metrics}, at::TensorOptions().dtype(at::kDouble).device(device()));
  const int64_t n = batches.count(), tb = config().run.test_batch_size;
  for (int64_t start = 0; start < n; start += tb) {
    const int64_t len = std::min(tb, n - start);
    const int64_t next_len = one_batch ? 0 : std::max<int64_t>(0, std::min(tb, n - start - tb));
    detail::mark_phase(comm.where, detail::Phase::evaluation);
    Batch b = user_code("the evaluation's Dataset::get_batch", [&] { return batches.get(start, len, start + tb, next_len); });
    if (!b.targets.defined()) continue;  // every sample of it left out (--bad-samples skip)
    at::Tensor out = user_code("the model's forward (evaluation)", [&] { return model.forward(b.inputs); });
    totals[0] += user_code("the loss (evaluation)", [&] { return spec.loss(out, b.targets, Reduction::sum); }).to(at::kDouble);
    totals[1] += static_cast<double>(b.targets.size(0));
    for (int64_t m = 0; m < n_metrics; ++m) {
      const Metric& metric = spec.metrics[static_cast<size_t>(m)];
      totals[2 + m] += user_code("a metric (evaluation)", [&] { return metric.batch_sum(out, b.targets); }).to(at::kDouble);
    }
    if (one_batch) break;
  }
  if (comm.pg) comm.pg->allreduce_sum(totals);
  at::Tensor t = totals.cpu();
  EvalResult r;
  r.count = static_cast<int64_t>(t[1].item<double>());
  r.loss = r.count > 0 ? t[0].item<double>() / static_cast<double>(r.count) : 0.0;
  for (int64_t m = 0; m < n_metrics; ++m) {
    r.metrics[spec.metrics[static_cast<size_t>(m)].name] =
        r.count > 0 ? t[2 + m].item<double>() / static_cast<double>(r.count) : 0.0;
  }
  model.module->train();
  return r;
}

}  // namespace train
