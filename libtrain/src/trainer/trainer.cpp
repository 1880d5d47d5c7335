// The Trainer (train/trainer.h): its set-up, in the order fit() calls it, every part built here
// from the run's plan: the plan itself and the data's device, the model, optimizer and schedule,
// the communication plan, process group and checkpoints, resume, DDP, the step and its observers.
// The loop is in trainer_loop.cpp; stops and the run's end in trainer_end.cpp.
#include "trainer/trainer_run.h"

#include "health/health_check.h"
#include "log/profile.h"
#include "device/cpu_kernels.h"
#include "optim/unique_params.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <limits>
#include <thread>

#include <sched.h>

namespace train {

using detail::Clock;
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

}  // namespace

Trainer::Trainer(TrainConfig config, DistEnv env) : run_(std::make_unique<Run>()) {
  Run& t = *run_;
  detail::RunPlan& p = t.plan;
  p.config = std::move(config);
  p.env = std::move(env);
  validate(p.config);
  detail::validate_network(p.config);  // --interface (or TRAIN_INTERFACE), --health-*
  p.threads = pick_threads(p.config, p.env);
  at::set_num_threads(p.threads);
  detail::apply_cpu_kernels_env();
  t.dev = detail::TrainDevice::create(detail::TrainDevice::pick(p.config, p.env), p.config);
  t.run_log = std::make_unique<detail::RunLog>(p.config.logging, p.env, *t.dev);
}

Trainer::~Trainer() = default;
const TrainConfig& Trainer::config() const { return run_->config(); }
const DistEnv& Trainer::env() const { return run_->env(); }
const at::Device& Trainer::device() const { return run_->device(); }
ProcessGroup* Trainer::process_group() const { return run_->comm.pg.get(); }
torch::nn::Module* Trainer::model() const { return run_->learner.model.module.get(); }
torch::optim::Optimizer* Trainer::optimizer() const { return run_->learner.optimizer.get(); }
void Trainer::log_metrics(const std::string& event, std::vector<std::pair<std::string, double>> values) {
  run_->run_log->write_metrics({event, run_->prog().epoch, run_->prog().step, std::move(values)});
}

TrainResult Trainer::fit(const TrainSpec& spec) {
  Run& t = *run_;
  try {
    t.controls.owner = this;
    t.build(spec);
    t.build_model();  // before connect(): the optimizer decides whether the step is captured
    t.connect();
    if (t.config().health.check) {
      detail::run_health_check(detail::health_check_options(t.config()), t.env(), t.comm.pg.get(), *t.dev);
    }
    // The first hook: the model, optimizer and process group exist; a resumed checkpoint comes after.
    t.for_callbacks("on_train_start", [&](Callback& cb) { cb.on_train_start(*this); });
    const std::string resumed = t.resume();
    if (t.config().run.eval_only) {
      TrainResult r = t.evaluate_checkpoint(resumed);
      t.for_callbacks("on_train_end", [&](Callback& cb) { cb.on_train_end(r); });
      t.run_log->record().end(detail::record_state(r));  // under trainctl: the run is no longer running
      return r;
    }
    t.start_ddp();
    t.make_step();
    t.train();
    TrainResult r = t.finish();
    t.for_callbacks("on_train_end", [&](Callback& cb) { cb.on_train_end(r); });
    t.run_log->record().end(detail::record_state(r), r.steps, t.prog().epoch);
    return r;
  } catch (...) {
    t.feed.reset();  // the loader's threads stop reading the spec's data
    t.run_log->record().end("failed");  // the error goes on to the caller
    throw;
  }
}

// The plan of this fit() (the spec and the flags resolved once), the data on its device, the run
// record, a test's faults, the stop agreement's signal handlers.
void Trainer::Run::build(const TrainSpec& s) {
  feed.reset();  // another fit() may train other data
  detail::resolve_plan(plan, s);
  if (s.train_data) s.train_data->to(device());
  if (s.eval_data) s.eval_data->to(device());
  log::configure(env().rank, env().world_size, env().host, config().logging.log_all_ranks);
  run_log->record().start(config(), env());  // the run's folders, for trainctl, from here on
  steps.faults = detail::FaultInjection::from_env(env().rank);
  stops = std::make_unique<detail::StopAgreement>(config().checkpoint, env(), &steps.faults);
  result.world_size = env().world_size;
}

// The model is built right after seeding, so every rank (and every run) starts from the same
// weights; the optimizer's rate is the schedule's from then on.
void Trainer::Run::build_model() {
  const TrainConfig& c = config();
  torch::manual_seed(c.run.seed);  // also every GPU's generator
  ModelHandle& model = learner.model;
  model = user_code("TrainSpec::model (the model builder)", [&] { return plan.spec->model(); });
  if (!model.module || !model.forward) {
    throw ConfigError("TrainSpec::model: expected a module and its forward, found " +
                          std::string(!model.module ? "no module" : "no forward") + ".",
                      "return train::wrap_model(your_module) from the builder.");
  }
  model.module->to(device());
  dev->prepare_model(*model.module);
  model.module->train();
  learner.optimizer = user_code("TrainSpec::optimizer (the optimizer builder)",
                                [&] { return plan.spec->optimizer(detail::unique_parameters(*model.module)); });
  if (!learner.optimizer || learner.optimizer->param_groups().empty()) {
    throw ConfigError("TrainSpec::optimizer: expected an optimizer over the model's parameters, found none.",
                      "return e.g. std::make_unique<torch::optim::SGD>(parameters, torch::optim::SGDOptions(0.1)).");
  }
  if (plan.clip_norm) {
    learner.clip = std::make_unique<detail::GradClip>();
    learner.clip->max_norm = *plan.clip_norm;
    learner.clip->params = detail::unique_parameters(*model.module);
  }
  schedule = std::make_unique<detail::Schedule>(
      plan.spec->lr_schedule,
      detail::schedule_context(plan.steps_per_epoch, plan.epochs, c.run),
      *learner.optimizer, [this] { return place(prog().step); },
      [this] {
        if (steps.step) steps.step->lr_changed();  // a captured step follows the rate, or is captured again
      });
  state.model = model.module.get();
  state.optimizer = learner.optimizer.get();
  state.loss_sum = torch::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device()));
  state.world_size = env().world_size;
  state.batch_size = plan.step_samples();  // progress counts optimizer steps
  state.shape_json = detail::run_shape_json(*plan.spec, plan.batch, schedule->context().base_lr, c.run.seed, plan.epochs,
                                            plan.accumulate, plan.clip_norm);
  state.save_schedule = [this](torch::serialize::OutputArchive& a) { schedule->save(a); };
  state.load_schedule = [this](torch::serialize::InputArchive& a) { schedule->load(a); };
  state.save_user = [this](torch::serialize::OutputArchive& a) {
    for_callbacks("on_save_checkpoint", [&](Callback& cb) { cb.on_save_checkpoint(a); });
  };
  state.load_user = [this](torch::serialize::InputArchive& a) {
    for_callbacks("on_load_checkpoint", [&](Callback& cb) { cb.on_load_checkpoint(a); });
  };
  setup_controls();
  const detail::OptimizerSharding::Run facts{dev->traits().gpu, device().str(), choice_name(c.run.device),
                                             controls.optimizer_step_hooks.size()};
  learner.sharding.check(plan.shard_optimizer ? plan.shard_source() : std::string(), c, facts, *learner.optimizer);
}

// How the gradients will travel (comm/comm_plan.h), then the process group; the parts that agree
// among the ranks join it, and the checkpoints, whose ranks resume together.
void Trainer::Run::connect() {
  const TrainConfig& c = config();
  const DistEnv& e = env();
  detail::CommFacts f;
  f.gpu = dev->traits().gpu;
  f.world_size = e.world_size;
  f.local_world_size = e.local_world_size;
  f.local_rank = e.local_rank;
  f.device_index = device().index();
  f.graph_step = choose_step().graph;
  f.peer_kernels = dev->traits().peer_kernels;
  f.peer_access_to_local = e.local_world_size > 1;
  for (int r = 0; r < e.local_world_size; ++r) {
    if (r != e.local_rank) f.peer_access_to_local = f.peer_access_to_local && dev->peer_access(r);
  }
  for (const at::Tensor& p : detail::unique_parameters(*learner.model.module)) {
    if (p.requires_grad()) f.gradient_bytes += p.numel() * 4;
  }
  f.accumulate_or_clip = plan.accumulate > 1 || learner.clip != nullptr;
  f.sharded = plan.shard_optimizer;
  comm.plan = detail::plan_comm(c, f);
  detail::check_stall_timeout(c.distributed.stall_timeout_sec.value_or(0), c.distributed.timeout_sec);
  run_log->record().connecting();
  if (e.world_size > 1 || c.distributed.ddp_single_rank) {
    if (!comm.plan.why.empty()) log::info(comm.plan.why);
    DistEnv group_env = e;
    if (e.world_size <= 1) {
      group_env.master_addr = "127.0.0.1";
      group_env.master_port = 0;  // a one-rank group's store takes a free port from the OS
      group_env.agent_store = false;  // ours, even under torchrun
    }
    ProcessGroupOptions po;
    po.backend = comm.plan.backend;
    po.timeout = std::chrono::milliseconds(static_cast<int64_t>(c.distributed.timeout_sec * 1000));
    po.device_index = std::max<int>(0, device().index());  // the CPU's is -1
    po.shared_memory_allreduce = c.distributed.shm_allreduce;
    po.interface = c.distributed.interface;
    log::info("rendezvous: " + std::to_string(group_env.world_size) + " ranks at " + group_env.master_addr + ":" +
              std::to_string(group_env.master_port) + ", backend " + to_string(comm.plan.backend));
    comm.pg = ProcessGroup::create(group_env, po);
    comm.where = detail::rollcall_of(comm.pg.get());
  }
  // On a GPU the stop flags are posted and read a check later without host syncs (summed by NCCL
  // on the device, or by Gloo on the host); CPU ranks sum them at once (shared memory on one machine).
  stops->connect(comm.pg.get(), device(), dev->traits().stop_flags_read_later, dev->traits().stop_check_every);
  checkpoints = std::make_unique<detail::CheckpointSession>(
      c.checkpoint, e, device(), comm.pg.get(), /*snapshots=*/!c.run.eval_only,
      [this](const std::string& path, const Progress& p, double) { checkpoint_saved(path, p); });
}

// Resume before DDP is built: its broadcast then spreads rank 0's restored weights.
// Returns the checkpoint's path, or "" for a fresh start. --eval-only takes no snapshots.
std::string Trainer::Run::resume() {
  run_log->record().connected();  // the group is up, --health-check passed
  std::optional<CheckpointDeadlines> deadlines;
  if (!config().run.eval_only) deadlines = checkpoint_deadlines();
  const detail::Resumed r = checkpoints->resume(state, deadlines);
  run_log->record().loaded(r.source, prog().step);
  if (r.path.empty()) return r.path;
  result.checkpoint_path = r.path;
  return r.path;
}

// DDP over the process group (its broadcast spreads rank 0's weights), then ZeRO-1's shards.
void Trainer::Run::start_ddp() {
  if (comm.pg) {
    DdpOptions dopt;
    dopt.bucket_cap_mb = config().distributed.bucket_cap_mb;
    dopt.split_first_module = comm.plan.peer;
    comm.ddp = std::make_unique<DistributedDataParallel>(learner.model.module, comm.pg, dopt);
  }
  learner.sharding.setup(comm.ddp ? &comm.ddp->reducer() : nullptr, comm.pg.get(), config().distributed.shm_allreduce,
                         *learner.optimizer, env().world_size);
}

detail::StepChoice Trainer::Run::choose_step() const {
  const TrainConfig& c = config();
  const bool per_step = plan.spec->lr_schedule.every == LrSchedule::Every::step;
  detail::StepChoice choice = detail::choose_step(dev->traits().gpu, c.gpu.cuda_graph, per_step, *learner.optimizer);
  if (choice.graph && c.run.nonfinite == NonFinite::skip) {
    choice = {false, "--nonfinite skip decides on the host, between the backward and the update, whether to apply "
                     "each step's update (one sync a step)", c.gpu.cuda_graph == Switch::on};
  }
  if (choice.graph && !controls.optimizer_step_hooks.empty()) {
    choice = {false, "a callback's on_before_optimizer_step (OptimizerStepCallback) runs on the host between the "
                     "backward and the optimizer's step, which a replayed graph can't call",
              c.gpu.cuda_graph == Switch::on};
  }
  return choice;
}

// The step: what it works on (the data, the model, the optimizer, the loss, the reducer), its
// observers, and the eager or the captured kind.
void Trainer::Run::make_step() {
  const TrainConfig& c = config();
  const TrainSpec& spec = *plan.spec;
  detail::StepParts parts;
  parts.data = spec.train_data.get();  // null with a loader: every batch comes made
  parts.model = &learner.model;
  parts.optimizer = learner.optimizer.get();
  parts.loss = &spec.loss;
  parts.loss_sum = &state.loss_sum;
  // --precision auto: bf16 autocast only where the spec measured it (TrainSpec::auto_bf16_batch),
  // fp32 otherwise; on the CPU always fp32.
  const detail::PrecisionChoice precision =
      detail::resolve_precision(dev->traits().gpu, dev->traits().bf16, c.run.precision, spec.auto_bf16_batch, plan.batch);
  if (!precision.why.empty()) log::info(precision.why);
  result.precision = choice_name(precision.precision);
  parts.bf16 = precision.precision == Precision::bf16;
  parts.reducer = comm.ddp ? &comm.ddp->reducer() : nullptr;
  parts.process_group = comm.pg.get();
  parts.world_size = env().world_size;
  parts.graph_average = comm.plan.graph_average;
  parts.peer = comm.plan.peer;
  parts.peer_flag = c.gpu.peer_allreduce;
  steps.context.class_indices = expects_class_indices(spec.loss);
  steps.context.data = "the training data '" + plan.train_name + "' (TrainSpec::" +
                       (plan.loader ? "train_samples" : "train_data") + ")";
  parts.context = &steps.context;
  parts.micro_batch = plan.accumulate > 1 ? plan.batch : 0;
  parts.clip = learner.clip.get();
  parts.shard = learner.sharding.optimizer();
  if (steps.faults.injects_nan()) {  // a test's NaN, before the backward, so that the gradients are NaN too
    steps.injected_loss = [this, inner = spec.loss](const at::Tensor& out, const at::Tensor& target, Reduction r) {
      at::Tensor l = inner(out, target, r);
      return steps.faults.nan_at(prog().step + 1) ? l * std::numeric_limits<double>::quiet_NaN() : l;
    };
    parts.loss = &steps.injected_loss;
  }
  build_observers(parts);  // the non-finite watch equips the step (parts.watch, --nonfinite skip's gate)
  gate_updates(parts);     // the callbacks' on_before_optimizer_step after --nonfinite skip's check
  const detail::StepChoice choice = choose_step();
  if (!choice.why_eager.empty()) {
    const std::string line = "--cuda-graph " + choice_name(c.gpu.cuda_graph) + ": the step runs eagerly: " + choice.why_eager;
    choice.warn ? log::warn(line) : log::info(line);
  }
  steps.step = choice.graph ? detail::make_cuda_graph_step(parts, plan.step_samples()) : detail::make_eager_step(parts);
  log::info("training step: " + steps.step->describe());
}

// The side work around every step, in one list. before_step runs in this order, after_step in
// reverse (observers added first see a step's end last), step_done in this order.
void Trainer::Run::build_observers(detail::StepParts& parts) {
  detail::StepObservers& o = steps.observers;
  o.clear();
  auto hooks = [&o](auto fill) {
    auto h = std::make_unique<detail::StepHooks>();
    fill(*h);
    o.add(std::move(h));
  };
  hooks([this](detail::StepHooks& h) { h.after = [this](int64_t step, at::Tensor&) { schedule->after_step(step); }; });
  if (!config().logging.profile.empty()) {
    auto profiler = std::make_shared<detail::StepProfiler>(
        config().logging.profile, detail::parse_profile_steps(config().logging.profile_steps), env().rank, dev->traits().gpu);
    hooks([this, profiler](detail::StepHooks& h) {
      h.before = [profiler](int64_t step) { profiler->before_step(step); };
      h.after = [profiler](int64_t step, at::Tensor&) { profiler->after_step(step); };
      h.end = [this, profiler] { profiler->finish(prog().step); };
    });
  }
  if (controls.ema) {
    hooks([this](detail::StepHooks& h) { h.after = [this](int64_t, at::Tensor&) { controls.ema->update(); }; });
  }
  if (comm.where) {
    hooks([this](detail::StepHooks& h) {
      h.before = [this](int64_t step) { comm.where->begin_step(step); };
      h.after = [this](int64_t, at::Tensor&) { detail::mark_phase(comm.where, detail::Phase::step_end); };
    });
  }
  hooks([this](detail::StepHooks& h) { h.before = [this](int64_t step) { steps.faults.before_step(step); }; });
  stops->equip(config(), *learner.model.module, learner.clip.get(), parts, o);
  // A captured step replays without calling the loss: a test's NaN goes on its result.
  hooks([this](detail::StepHooks& h) {
    h.after = [this](int64_t step, at::Tensor& loss) {
      if (steps.faults.nan_at(step)) loss = loss * std::numeric_limits<double>::quiet_NaN();
    };
  });
  // Once the counters moved: a test's kill, the run record and progress line, the callbacks, and
  // a background checkpoint's outcome.
  hooks([this](detail::StepHooks& h) { h.done = [this](const detail::StepDone& d) { steps.faults.after_step(d.step); }; });
  o.add(run_log.get());
  hooks([this](detail::StepHooks& h) {
    h.done = [this](const detail::StepDone& d) {
      for_callbacks("on_step_end", [&](Callback& cb) {
        StepInfo info;
        info.epoch = d.epoch;
        info.step = d.step;
        info.batch = d.batch;
        info.batches = d.batches;
        info.batch_size = d.samples;
        info.loss = d.loss.detach();
        info.lr = d.lr;
        info.optimizer = learner.optimizer.get();
        cb.on_step_end(info);
      });
      checkpoints->collect(/*wait=*/false);
    };
  });
}

}  // namespace train
