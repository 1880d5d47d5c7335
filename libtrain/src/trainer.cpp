// The Trainer (train/trainer.h): its set-up (device, model and optimizer, communication plan and
// process group, DDP, the step) and the training loop: epochs, steps, progress lines, stop
// agreements, evaluation. Resume, stops, checkpoints and the run's end are in trainer_end.cpp.
#include "trainer_run.h"

#include "health_check.h"

namespace train {

using detail::Clock;
using detail::fmt;
using detail::seconds_since;

namespace {

// Intra-op threads: the CPUs this process may run on (SLURM's task affinity, taskset, cgroup
// cpusets), not every core of the machine, shared among the ranks on this node.
int pick_threads(const TrainConfig& c, const DistEnv& env) {
  if (c.run.threads) return *c.run.threads;
  cpu_set_t set;
  int cores = 0;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cores = CPU_COUNT(&set);
  if (cores <= 0) cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const bool shared = cores >= static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, shared ? cores / std::max(1, env.local_world_size) : cores);
}

void set_lr(torch::optim::Optimizer& opt, double lr) {
  for (auto& g : opt.param_groups()) g.options().set_lr(lr);
}

PreemptionOptions preemption_options(const TrainConfig& c) {
  PreemptionOptions o;
  o.requeue_signals = parse_signal_list(c.checkpoint.preempt_signals);
  o.stop_signals = {SIGTERM, SIGINT};
  o.time_margin_sec = c.checkpoint.time_margin_sec;
  return o;
}

}  // namespace

Trainer::Trainer(TrainConfig config, DistEnv env) : run_(std::make_unique<Run>()) {
  Run& t = *run_;
  t.c = std::move(config);
  t.env = std::move(env);
  validate(t.c);
  detail::validate_network(t.c);  // --interface (or TRAIN_INTERFACE), --health-*
  t.threads = pick_threads(t.c, t.env);
  at::set_num_threads(t.threads);
  detail::apply_cpu_kernels_env();
  t.dev = detail::TrainDevice::create(detail::TrainDevice::pick(t.c, t.env), t.c);
  t.device = t.dev->device();
}

Trainer::~Trainer() = default;
const TrainConfig& Trainer::config() const { return run_->c; }
const DistEnv& Trainer::env() const { return run_->env; }
const at::Device& Trainer::device() const { return run_->device; }
ProcessGroup* Trainer::process_group() const { return run_->pg.get(); }
torch::nn::Module* Trainer::model() const { return run_->model.module.get(); }
torch::optim::Optimizer* Trainer::optimizer() const { return run_->optimizer.get(); }
void Trainer::log_metrics(const std::string& event, std::vector<std::pair<std::string, double>> values) {
  run_->write_metrics({event, run_->prog().epoch, run_->prog().step, std::move(values)});
}

TrainResult Trainer::fit(const TrainSpec& spec) {
  Run& t = *run_;
  t.setup(spec);
  t.build_model();  // before connect(): the optimizer decides whether the step is captured
  t.connect();
  if (t.c.health.check) detail::run_health_check(detail::health_check_options(t.c), t.env, t.pg.get(), *t.dev);
  t.resume();
  if (t.pg) {
    DdpOptions dopt;
    dopt.bucket_cap_mb = t.c.distributed.bucket_cap_mb;
    dopt.split_first_module = t.plan.peer;
    t.ddp = std::make_unique<DistributedDataParallel>(t.model.module, t.pg, dopt);
  }
  t.make_step();
  t.for_callbacks("on_train_start", [&](Callback& cb) { cb.on_train_start(*this); });
  t.train();
  TrainResult r = t.finish();
  t.for_callbacks("on_train_end", [&](Callback& cb) { cb.on_train_end(r); });
  return r;
}

// Checks the spec, moves the data to the device, installs the signal handlers.
void Trainer::Run::setup(const TrainSpec& s) {
  spec = &s;
  if (!s.model || !s.train_data || !s.optimizer || !s.loss) {
    throw ConfigError("TrainSpec: expected a model builder, training data, a loss and an optimizer builder, found " +
                          std::string(!s.model ? "no model" : !s.train_data ? "no training data"
                                      : !s.loss ? "no loss" : "no optimizer") + ".",
                      "fill TrainSpec::model, train_data, loss and optimizer (docs/api.md).");
  }
  if (!(s.units_per_sample > 0) || s.unit.empty()) {
    throw ConfigError("TrainSpec::unit/units_per_sample: expected a unit's name and a positive count per sample, found '" +
                          s.unit + "' and " + fmt("%g", s.units_per_sample) + ".",
                      "e.g. unit = \"tokens\", units_per_sample = 256 for sequences of 256 tokens.");
  }
  batch = c.run.batch_size.value_or(s.batch_size);
  epochs = c.run.epochs.value_or(s.epochs);
  if (batch < 1) {
    throw ConfigError("--batch-size: expected a positive per-rank batch size, found " + std::to_string(batch) + ".",
                      "e.g. --batch-size 64");
  }
  if (epochs < 1) {
    throw ConfigError("TrainSpec::epochs: expected at least 1, found " + std::to_string(epochs) + ".", "e.g. --epochs 14");
  }
  s.train_data->to(device);
  if (s.eval_data) s.eval_data->to(device);
  log::configure(env.rank, env.world_size, env.host, c.logging.log_all_ranks);
  preemption = std::make_unique<Preemption>(preemption_options(c), env);
  faults = detail::FaultInjection::from_env(env.rank);
  result.world_size = env.world_size;
}

// How the gradients will travel (comm/comm_plan.h), then the process group.
void Trainer::Run::connect() {
  detail::CommFacts f;
  f.gpu = dev->gpu();
  f.world_size = env.world_size;
  f.local_world_size = env.local_world_size;
  f.local_rank = env.local_rank;
  f.device_index = device.index();
  f.graph_step = choose_step().graph;
  f.peer_kernels = dev->peer_kernels();
  f.peer_access_to_other = env.local_world_size == 2 && dev->peer_access(1 - env.local_rank);
  plan = detail::plan_comm(c, f);
  detail::check_stall_timeout(c.distributed.stall_timeout_sec.value_or(0), c.distributed.timeout_sec);
  if (env.world_size <= 1 && !c.distributed.ddp_single_rank) return;
  if (!plan.why.empty()) log::info(plan.why);
  DistEnv e = env;
  if (env.world_size <= 1) {
    e.master_addr = "127.0.0.1";
    e.master_port = 0;  // a one-rank group's store takes a free port from the OS
    e.agent_store = false;  // ours, even under torchrun
  }
  ProcessGroupOptions po;
  po.backend = plan.backend;
  po.timeout = std::chrono::milliseconds(static_cast<int64_t>(c.distributed.timeout_sec * 1000));
  po.device_index = std::max<int>(0, device.index());  // the CPU's is -1
  po.shared_memory_allreduce = c.distributed.shm_allreduce;
  po.interface = c.distributed.interface;
  log::info("rendezvous: " + std::to_string(e.world_size) + " ranks at " + e.master_addr + ":" +
            std::to_string(e.master_port) + ", backend " + to_string(plan.backend));
  pg = ProcessGroup::create(e, po);
  where = detail::rollcall_of(pg.get());
}

// The model is built right after seeding, so every rank (and every run) starts from the same weights.
void Trainer::Run::build_model() {
  torch::manual_seed(c.run.seed);  // also every GPU's generator
  model = user_code("TrainSpec::model (the model builder)", [&] { return spec->model(); });
  if (!model.module || !model.forward) {
    throw ConfigError("TrainSpec::model: expected a module and its forward, found " +
                          std::string(!model.module ? "no module" : "no forward") + ".",
                      "return train::wrap_model(your_module) from the builder.");
  }
  model.module->to(device);
  dev->prepare_model(*model.module);
  model.module->train();
  optimizer = user_code("TrainSpec::optimizer (the optimizer builder)",
                        [&] { return spec->optimizer(model.module->parameters()); });
  if (!optimizer || optimizer->param_groups().empty()) {
    throw ConfigError("TrainSpec::optimizer: expected an optimizer over the model's parameters, found none.",
                      "return e.g. std::make_unique<torch::optim::SGD>(parameters, torch::optim::SGDOptions(0.1)).");
  }
  const double lr0 = optimizer->param_groups()[0].options().get_lr();
  state.model = model.module.get();
  state.optimizer = optimizer.get();
  schedule_run = schedule_context(lr0);
  state.progress.lr = spec->lr_schedule.rate ? spec->lr_schedule.rate(0, schedule_run) : lr0;
  state.loss_sum = torch::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device));
  state.world_size = env.world_size;
  state.batch_size = batch;
  state.shape_json = shape_json(lr0);
  state.save_user = [this](torch::serialize::OutputArchive& a) {
    for_callbacks("on_save_checkpoint", [&](Callback& cb) { cb.on_save_checkpoint(a); });
  };
  state.load_user = [this](torch::serialize::InputArchive& a) {
    for_callbacks("on_load_checkpoint", [&](Callback& cb) { cb.on_load_checkpoint(a); });
  };
  if (!c.checkpoint.dir.empty()) ckdir = std::make_unique<CheckpointDir>(c.checkpoint.dir, c.checkpoint.keep);
}

// --precision auto: bf16 autocast only where the spec measured it (TrainSpec::auto_bf16_batch),
// fp32 otherwise; on the CPU always fp32.
Precision Trainer::Run::resolve_precision() const {
  const detail::PrecisionChoice p =
      detail::resolve_precision(dev->gpu(), dev->bf16_supported(), c.run.precision, spec->auto_bf16_batch, batch);
  if (!p.why.empty()) log::info(p.why);
  return p.precision;
}

void Trainer::Run::make_step() {
  detail::StepParts parts;
  parts.data = spec->train_data.get();
  parts.model = &model;
  parts.optimizer = optimizer.get();
  parts.loss = &spec->loss;
  parts.loss_sum = &state.loss_sum;
  const Precision precision = resolve_precision();
  result.precision = choice_name(precision);
  parts.bf16 = precision == Precision::bf16;
  parts.reducer = ddp ? &ddp->reducer() : nullptr;
  parts.process_group = pg.get();
  parts.world_size = env.world_size;
  parts.graph_average = plan.graph_average;
  parts.peer = plan.peer;
  parts.peer_flag = c.gpu.peer_allreduce;
  step_context.class_indices = expects_class_indices(spec->loss);
  parts.context = &step_context;
  nonfinite = std::make_unique<detail::NonFiniteWatch>(c, *model.module, device, env.rank, env.world_size);
  if (nonfinite->skip_mode()) {
    parts.before_update = [this](const at::Tensor& loss) { return nonfinite->before_update(loss, prog().step + 1, pg.get()); };
  }
  if (faults.injects_nan()) {  // a test's NaN, before the backward, so that the gradients are NaN too
    injected_loss = [this, inner = spec->loss](const at::Tensor& out, const at::Tensor& target, Reduction r) {
      at::Tensor l = inner(out, target, r);
      return faults.nan_at(prog().step + 1) ? l * std::numeric_limits<double>::quiet_NaN() : l;
    };
    parts.loss = &injected_loss;
  }
  const detail::StepChoice choice = choose_step();
  if (!choice.why_eager.empty()) {
    const std::string line = "--cuda-graph " + choice_name(c.gpu.cuda_graph) + ": the step runs eagerly: " + choice.why_eager;
    choice.warn ? log::warn(line) : log::info(line);
  }
  train_step = choice.graph ? detail::make_cuda_graph_step(parts, batch) : detail::make_eager_step(parts);
  log::info("training step: " + train_step->describe());
}

// Whether every rank agreed to stop at this step; stops the run when so. CPU ranks agree through
// one small all-reduce now. CUDA ranks read the agreement they posted `check_every` steps ago (long
// done on the device, so the host never waits), then post the next.
// A non-finite loss or gradient travels in the same agreement (--nonfinite stop).
bool Trainer::Run::check_stop(Clock::time_point t0, double earlier_segments) {
  detail::mark_phase(where, detail::Phase::stop_check);
  if (faults.skips_collective(prog().step)) return false;
  StopRequest request;
  if (nonfinite->gave_up()) {
    request.kind = StopKind::nonfinite;  // every rank dropped the same steps (--nonfinite skip)
  } else if (device_stop_flags()) {
    request = preemption->collect();
    if (request.kind == StopKind::none) preemption->post(pg.get(), device, nonfinite_flag());
  } else {
    request = preemption->poll(pg.get(), device, nonfinite_flag());
  }
  if (request.kind == StopKind::none) return false;
  return end_run(request, t0, earlier_segments);
}

// Ends the run for a stop every rank agreed on. Returns true.
bool Trainer::Run::end_run(const StopRequest& request, Clock::time_point t0, double earlier_segments) {
  dev->synchronize();
  flush_pending_line();
  const double seconds = earlier_segments + seconds_since(t0);
  prog().train_seconds += seconds;
  result.train_seconds += seconds;
  detail::mark_phase(where, detail::Phase::checkpoint);  // rank 0 writes it now
  stop(request);
  return true;
}

void Trainer::Run::train() {
  if (env.rank == 0) {
    if (!c.logging.metrics.empty()) metrics.push_back(make_jsonl_sink(c.logging.metrics));
    if (!c.logging.tensorboard.empty()) metrics.push_back(make_tensorboard_sink(c.logging.tensorboard));
    metrics.insert(metrics.end(), spec->metrics_sinks.begin(), spec->metrics_sinks.end());
    for (const auto& sink : metrics) sink->open(prog().step);  // a resumed run's records go on from here
  }
  if (!c.logging.profile.empty()) {
    profiler = std::make_unique<detail::StepProfiler>(c.logging.profile, detail::parse_profile_steps(c.logging.profile_steps), env.rank,
                                                      dev->gpu());
  }
  log::info("training " + spec->model_name + " on " + spec->train_data->name() + " (" +
            std::to_string(spec->train_data->size()) + " samples) for " + std::to_string(epochs) + " epochs, batch " +
            std::to_string(batch) + " per rank x " + std::to_string(env.world_size) + " ranks, lr " +
            fmt("%g", prog().lr) + ", device " + device.str() + ", " + std::to_string(threads) + " threads");
  if (preemption->job_end_time() > 0) {
    log::info("SLURM job ends " + describe_end_time(preemption->job_end_time(), std::time(nullptr)) +
              "; checkpointing " + fmt("%.0f", c.checkpoint.time_margin_sec) + " s before it");
  } else if (preemption->job_has_no_time_limit()) {
    log::info("SLURM job has no time limit: no checkpoint before a deadline (signals and --checkpoint-every still apply)");
  }
  if (pg && env.world_size > 1) {
    const std::string dump_dir = c.checkpoint.dir.empty() ? "." : c.checkpoint.dir;
    rollcall = std::make_unique<detail::RollCall>(
        *pg, detail::RollCallOptions{c.distributed.stall_timeout_sec.value_or(0), c.distributed.timeout_sec, dump_dir});
  }
  for (; prog().epoch <= epochs; ++prog().epoch) {
    if (!train_epoch()) break;
  }
  rollcall.reset();
  if (profiler) profiler->finish(prog().step);
}

// The run's length as a schedule sees it: every rank takes ceil(samples / ranks) samples
// (DistributedSampler pads), in batches of `batch`; --dry-run takes one batch an epoch.
ScheduleContext Trainer::Run::schedule_context(double lr0) const {
  ScheduleContext run;
  run.base_lr = lr0;
  const DistributedSampler sampler(spec->train_data->size(), env.world_size, env.rank);
  run.steps_per_epoch = c.run.dry_run ? 1 : (sampler.num_samples() + batch - 1) / batch;
  run.total_steps = static_cast<int64_t>(epochs) * run.steps_per_epoch;
  if (c.run.max_steps) run.total_steps = std::min(run.total_steps, *c.run.max_steps);
  return run;
}

double Trainer::Run::next_lr(int64_t index) const {
  const LrSchedule& s = spec->lr_schedule;
  return s.rate ? s.rate(index, schedule_run) : s.next(index, prog_const().lr);
}

// A per-step schedule's rate for the next step: into the optimizer and, where it changed, into a
// captured step (the rate's device copy is refreshed, no recapture, no host wait).
void Trainer::Run::follow_schedule(int64_t step) {
  prog().lr = user_code("the LR schedule", [&] { return next_lr(step); });
  if (prog().lr == step_lr) return;
  set_lr(*optimizer, prog().lr);
  train_step->lr_changed();
  step_lr = prog().lr;
}

// One epoch: its steps, then evaluation and the epoch-end checkpoint. Returns false when the run
// ends here (a stop request, --max-steps, --dry-run's single step is not an end).
bool Trainer::Run::train_epoch() {
  DistributedSampler sampler(spec->train_data->size(), env.world_size, env.rank, /*shuffle=*/true, c.run.seed);
  set_lr(*optimizer, prog().lr);
  if (prog().lr != step_lr) {
    train_step->lr_changed();  // a captured step follows the new rate, or is captured again
    step_lr = prog().lr;
  }
  sampler.set_epoch(prog().epoch - 1);
  std::vector<int64_t> local = sampler.indices();
  at::Tensor order = at::from_blob(local.data(), {static_cast<int64_t>(local.size())}, at::kLong).to(device);
  const int64_t n_local = order.size(0);
  const int64_t batches = (n_local + batch - 1) / batch;
  // Agreeing on a stop costs an all-reduce; on a GPU it runs every few steps, without host syncs.
  const int64_t check_every = dev->stop_check_every();
  auto t0 = Clock::now();
  auto t_log = t0;
  step_at_log = prog().step;
  double earlier_segments = 0;  // training seconds of this epoch before the last checkpoint
  double images_since_log = 0;
  const int64_t images_before = prog().images_total;
  bool max_steps_reached = false;
  wait_ns_at_epoch = where ? where->wait_ns.load(std::memory_order_relaxed) : 0;
  step_at_epoch = prog().step;
  for (int64_t b = prog().batches_done; b < batches; ++b) {
    const int64_t start = b * batch;
    const int64_t len = std::min(batch, n_local - start);
    if (profiler) profiler->before_step(prog().step + 1);
    if (where) where->begin_step(prog().step + 1);
    faults.before_step(prog().step + 1);
    at::Tensor loss = run_step(order, start, len);
    detail::mark_phase(where, detail::Phase::step_end);
    const double lr_used = prog().lr;
    last_step_lr = lr_used;
    ++prog().epoch_steps;
    ++prog().step;
    if (profiler) profiler->after_step(prog().step);
    if (spec->lr_schedule.every == LrSchedule::Every::step) follow_schedule(prog().step);
    prog().batches_done = b + 1;
    images_since_log += static_cast<double>(len * env.world_size);
    prog().images_total += len * env.world_size;
    faults.after_step(prog().step);
    max_steps_reached = c.run.max_steps && prog().step >= *c.run.max_steps;
    const bool last = b + 1 == batches || c.run.dry_run || max_steps_reached;
    if (b % c.logging.log_interval == 0 || last) log_progress(b, batches, start, loss, images_since_log, t_log);
    for_callbacks("on_step_end", [&](Callback& cb) { cb.on_step_end({prog().epoch, prog().step, b, batches, len, loss.detach(), lr_used, optimizer.get()}); });
    collect_checkpoint(/*wait=*/false);
    if (c.run.dry_run || max_steps_reached) break;
    if (b + 1 == batches) break;
    if ((prog().step % check_every == 0 || nonfinite->gave_up()) && check_stop(t0, earlier_segments)) return false;
    if (ckdir && c.checkpoint.every && prog().step % *c.checkpoint.every == 0) {
      // The agreement may not have seen the latest steps: no checkpoint of non-finite weights.
      if (nonfinite->any_rank(pg.get())) return !end_run({StopKind::nonfinite}, t0, earlier_segments);
      // The epoch's training time leaves out the checkpoint's (the done line reports it).
      earlier_segments += seconds_since(t0);
      const at::Tensor loss_sum = shared_loss_sum();  // every rank takes part
      detail::mark_phase(where, detail::Phase::checkpoint);
      if (env.rank == 0) write_checkpoint(prog(), loss_sum);
      t0 = Clock::now();
    }
  }
  dev->synchronize();
  flush_pending_line();
  if (device_stop_flags()) preemption->collect();  // the last posted agreement: the epoch ended first
  if (nonfinite->gave_up() || nonfinite->any_rank(pg.get())) return !end_run({StopKind::nonfinite}, t0, earlier_segments);
  const double epoch_seconds = earlier_segments + seconds_since(t0);
  prog().train_seconds += epoch_seconds;
  result.train_seconds += epoch_seconds;
  if (epoch_seconds > 0) epoch_ips.push_back(static_cast<double>(prog().images_total - images_before) / epoch_seconds);
  end_epoch(epoch_seconds);
  if (max_steps_reached) return false;
  if (ckdir && env.rank == 0) {
    detail::mark_phase(where, detail::Phase::checkpoint);
    Progress next = prog();
    next.epoch += 1;
    write_checkpoint(next, state.loss_sum);  // zero: the next epoch has no steps yet
  }
  return true;
}

// One step, with what the user's code throws in its context, and the non-finite watch.
at::Tensor Trainer::Run::run_step(const at::Tensor& order, int64_t start, int64_t len) {
  step_context.phase = "the training step";
  at::Tensor loss;
  try {
    loss = train_step->run(order, start, len);
  } catch (...) {
    detail::throw_user_error(step_context.phase, place(prog().step + 1), step_context.batch, std::current_exception());
  }
  // A captured step replays without calling the loss: the injected NaN goes on its result.
  if (faults.nan_at(prog().step + 1)) loss = loss * std::numeric_limits<double>::quiet_NaN();
  if (!nonfinite->skip_mode()) nonfinite->after_step(loss, prog().step + 1);
  return loss;
}

void Trainer::Run::log_progress(int64_t b, int64_t batches, int64_t start, const at::Tensor& loss,
                                 double& images_since_log, Clock::time_point& t_log) {
  const auto now = Clock::now();
  const double dt = std::chrono::duration<double>(now - t_log).count();
  PendingLine line;
  line.epoch = prog().epoch;
  line.step = prog().step;
  line.b = b;
  line.batches = batches;
  line.seen = std::min<int64_t>(start * env.world_size, spec->train_data->size());
  line.ips = dt > 0 ? images_since_log / dt : 0.0;
  line.lr = last_step_lr;  // the rate this step ran with (the schedule may have moved on)
  line.step_seconds = dt / static_cast<double>(std::max<int64_t>(1, prog().step - step_at_log));
  step_at_log = prog().step;
  t_log = now;
  images_since_log = 0;
  // The previous line's loss arrived long ago; this one's travels while the device works on.
  flush_pending_line();
  line.loss = dev->read_later(loss);
  pending_line = std::move(line);
  if (dev->reads_at_once()) flush_pending_line();
}

void Trainer::Run::flush_pending_line() {
  if (!pending_line) return;
  const double l = pending_line->loss->get();
  PendingLine line = std::move(*pending_line);
  pending_line.reset();
  print_line(line, l);
}

void Trainer::Run::print_line(const PendingLine& line, double l) {
  const int64_t total = spec->train_data->size();
  log::info("Train Epoch: " + std::to_string(line.epoch) + " [" + std::to_string(line.seen) + "/" + std::to_string(total) +
            " (" + fmt("%.0f", 100.0 * static_cast<double>(line.b) / static_cast<double>(line.batches)) + "%)]\tLoss: " +
            fmt("%.6f", l) + "\t" + fmt("%.0f", line.ips * spec->units_per_sample) + " " + spec->unit + "/s");
  MetricsRecord r{"train", line.epoch, line.step,
                  {{"loss", l}, {"lr", line.lr}, {"images_per_sec", line.ips}, {"step_seconds", line.step_seconds}}};
  if (dev->gpu()) r.values.emplace_back("peak_gpu_mb", dev->peak_memory_mb());
  write_metrics(std::move(r));
}

// The epoch's mean loss over ranks, evaluation, the epoch line, and the schedule's next rate.
void Trainer::Run::end_epoch(double epoch_seconds) {
  detail::mark_phase(where, detail::Phase::epoch_end);
  const std::string stragglers_line = report_stragglers(epoch_seconds);
  at::Tensor mean_loss =
      (state.loss_sum / static_cast<double>(std::max<int64_t>(1, prog().epoch_steps))).reshape({1});
  if (pg) {
    pg->allreduce_sum(mean_loss);
    mean_loss /= env.world_size;
  }
  prog().last_train_loss = mean_loss.cpu().item<double>();
  EvalResult ev;
  const auto t_eval = Clock::now();
  if (spec->eval_data) {
    ev = evaluate(c.run.dry_run);
    for_callbacks("on_evaluation", [&](Callback& cb) { cb.on_evaluation(ev); });
  }
  const double eval_seconds = seconds_since(t_eval);
  result.eval_seconds += eval_seconds;
  prog().last_test_loss = ev.loss;
  prog().last_test_accuracy = ev.accuracy();
  log::info("Test set: Average loss: " + fmt("%.4f", ev.loss) + ", Accuracy: " +
            std::to_string(static_cast<int64_t>(std::llround(ev.accuracy() * static_cast<double>(ev.count)))) + "/" +
            std::to_string(ev.count) + " (" + fmt("%.2f", 100.0 * ev.accuracy()) + "%), epoch time " +
            fmt("%.1f", epoch_seconds) + " s, evaluation " + fmt("%.2f", eval_seconds) + " s" +
            (stragglers_line.empty() ? "" : "; " + stragglers_line));
  MetricsRecord line{"epoch", prog().epoch, prog().step,
                     {{"train_loss", prog().last_train_loss}, {"test_loss", ev.loss}, {"test_accuracy", ev.accuracy()},
                      {"images_per_sec", prog().train_seconds > 0 ? prog().images_total / prog().train_seconds : 0.0},
                      {"epoch_images_per_sec", epoch_ips.empty() ? 0.0 : epoch_ips.back()},
                      {"epoch_seconds", epoch_seconds}, {"eval_seconds", eval_seconds}}};
  if (dev->gpu()) line.values.emplace_back("peak_gpu_mb", dev->peak_memory_mb());
  if (nonfinite->skip_mode()) line.values.emplace_back("skipped_steps", static_cast<double>(nonfinite->skipped()));
  for (const auto& [name, value] : ev.metrics) {
    if (name != "accuracy") line.values.emplace_back(name, value);  // accuracy is test_accuracy
  }
  write_metrics(std::move(line));
  for_callbacks("on_epoch_end", [&](Callback& cb) { cb.on_epoch_end({prog().epoch, prog().step, prog().last_train_loss, ev, epoch_seconds, last_step_lr, optimizer.get()});
  });
  result.epochs = prog().epoch;
  if (spec->lr_schedule.every == LrSchedule::Every::epoch) {
    prog().lr = user_code("the LR schedule", [&] { return next_lr(prog().epoch); });
  }
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
  const auto opts = at::TensorOptions().dtype(at::kLong).device(device);
  at::Tensor idx = torch::arange(env.rank, data.size(), env.world_size, opts);
  const int64_t n_metrics = static_cast<int64_t>(spec->metrics.size());
  // [loss sum, count, metric sums...]
  at::Tensor totals = torch::zeros({2 + n_metrics}, at::TensorOptions().dtype(at::kDouble).device(device));
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

namespace train {

// Every rank's seconds per step outside collectives this epoch, gathered by one small all-reduce
// (each rank fills its own slot), against the median; rank 0 names a rank slow again and again.
std::string Trainer::Run::report_stragglers(double epoch_seconds) {
  const int64_t steps = prog().step - step_at_epoch;
  if (!pg || env.world_size < 2 || !where) return "";
  const double waited = static_cast<double>(where->wait_ns.load(std::memory_order_relaxed) - wait_ns_at_epoch) / 1e9;
  at::Tensor times = torch::zeros({env.world_size}, at::TensorOptions().dtype(at::kDouble).device(device));
  times[env.rank] = steps > 0 ? std::max(0.0, epoch_seconds - waited) / static_cast<double>(steps) : 0.0;
  pg->allreduce_sum(times);
  if (env.rank != 0) return "";
  const at::Tensor host = times.cpu();
  std::vector<double> per_rank(host.data_ptr<double>(), host.data_ptr<double>() + env.world_size);
  std::string warning;
  const std::string line = stragglers.report(per_rank, &warning);
  if (!warning.empty()) log::warn(warning);
  return line;
}

}  // namespace train
