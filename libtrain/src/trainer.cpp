// The Trainer (train/trainer.h): its set-up, in the order fit() calls it: the device, the spec's
// model and optimizer (and the schedule of its rate), the communication plan and process group,
// resume, DDP, the step. The loop is in trainer_loop.cpp; stops and the run's end in trainer_end.cpp.
#include "trainer_run.h"

#include "health_check.h"
#include "cpu_kernels.h"
#include "unique_params.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <limits>
#include <thread>

#include <sched.h>

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
  t.run_log = std::make_unique<detail::RunLog>(t.c.logging, t.env, *t.dev);
}

Trainer::~Trainer() = default;
const TrainConfig& Trainer::config() const { return run_->c; }
const DistEnv& Trainer::env() const { return run_->env; }
const at::Device& Trainer::device() const { return run_->device(); }
ProcessGroup* Trainer::process_group() const { return run_->pg.get(); }
torch::nn::Module* Trainer::model() const { return run_->model.module.get(); }
torch::optim::Optimizer* Trainer::optimizer() const { return run_->optimizer.get(); }
void Trainer::log_metrics(const std::string& event, std::vector<std::pair<std::string, double>> values) {
  run_->run_log->write_metrics({event, run_->prog().epoch, run_->prog().step, std::move(values)});
}

TrainResult Trainer::fit(const TrainSpec& spec) {
  Run& t = *run_;
  try {
    t.owner = this;
    t.setup(spec);
    t.build_model();  // before connect(): the optimizer decides whether the step is captured
    t.sharding.check(t.c, spec, {t.dev->gpu(), t.device().str(), choice_name(t.c.run.device),
                                 t.optimizer_step_hooks.size()},
                     *t.optimizer);
    t.connect();
    if (t.c.health.check) detail::run_health_check(detail::health_check_options(t.c), t.env, t.pg.get(), *t.dev);
    // The first hook: the model, optimizer and process group exist; a resumed checkpoint comes after.
    t.for_callbacks("on_train_start", [&](Callback& cb) { cb.on_train_start(*this); });
    const std::string resumed = t.resume();
    if (t.c.run.eval_only) {
      TrainResult r = t.evaluate_checkpoint(resumed);
      t.for_callbacks("on_train_end", [&](Callback& cb) { cb.on_train_end(r); });
      t.run_log->record().end(detail::record_state(r));  // under trainctl: the run is no longer running
      return r;
    }
    if (t.pg) {
      DdpOptions dopt;
      dopt.bucket_cap_mb = t.c.distributed.bucket_cap_mb;
      dopt.split_first_module = t.plan.peer;
      t.ddp = std::make_unique<DistributedDataParallel>(t.model.module, t.pg, dopt);
    }
    t.sharding.setup(t.ddp ? &t.ddp->reducer() : nullptr, t.pg.get(), t.c.distributed.shm_allreduce, *t.optimizer,
                     t.env.world_size);
    t.make_step();
    t.train();
    TrainResult r = t.finish();
    t.for_callbacks("on_train_end", [&](Callback& cb) { cb.on_train_end(r); });
    t.run_log->record().end(detail::record_state(r), r.steps, t.prog().epoch);
    return r;
  } catch (...) {
    t.run_log->record().end("failed");  // the error goes on to the caller
    throw;
  }
}

// Checks the spec, moves the data to the device, starts the run record, installs the signal handlers.
void Trainer::Run::setup(const TrainSpec& s) {
  spec = &s;
  orders.reset();  // another fit() may train other data
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
  if (c.run.eval_only && !s.eval_data) {
    throw ConfigError("--eval-only: expected evaluation data (TrainSpec::eval_data), found none.",
                      "set TrainSpec::eval_data in your program, or leave --eval-only out.");
  }
  if (epochs < 1) {
    throw ConfigError("TrainSpec::epochs: expected at least 1, found " + std::to_string(epochs) + ".", "e.g. --epochs 14");
  }
  setup_accumulation_and_clipping(s);
  s.train_data->to(device());
  if (s.eval_data) s.eval_data->to(device());
  log::configure(env.rank, env.world_size, env.host, c.logging.log_all_ranks);
  run_log->record().start(c, env);  // the run's folders, for trainctl, from here on
  faults = detail::FaultInjection::from_env(env.rank);
  stops = std::make_unique<detail::StopAgreement>(c.checkpoint, env, &faults);
  result.world_size = env.world_size;
}

// --accumulate-steps and --clip-grad-norm, or the spec's (the flags win).
void Trainer::Run::setup_accumulation_and_clipping(const TrainSpec& s) {
  accumulate = c.run.accumulate_steps.value_or(s.accumulate_steps);
  if (accumulate < 1) {
    throw ConfigError("TrainSpec::accumulate_steps: expected at least 1 micro-batch per optimizer step, found " +
                          std::to_string(accumulate) + ".", "1 means no accumulation; e.g. 4 with --batch-size 16 steps on 64 samples per rank.");
  }
  const std::optional<double> max_norm = c.run.clip_grad_norm ? c.run.clip_grad_norm : s.clip_grad_norm;
  if (max_norm && !(*max_norm > 0 && std::isfinite(*max_norm))) {
    throw ConfigError("TrainSpec::clip_grad_norm: expected a positive, finite total gradient norm, found " +
                          fmt("%g", *max_norm) + ".", "e.g. 1.0; leave it unset for no clipping.");
  }
  if (max_norm) {
    clip = std::make_unique<detail::GradClip>();
    clip->max_norm = *max_norm;
  }
}

// The model is built right after seeding, so every rank (and every run) starts from the same
// weights; the optimizer's rate is the schedule's from then on.
void Trainer::Run::build_model() {
  torch::manual_seed(c.run.seed);  // also every GPU's generator
  model = user_code("TrainSpec::model (the model builder)", [&] { return spec->model(); });
  if (!model.module || !model.forward) {
    throw ConfigError("TrainSpec::model: expected a module and its forward, found " +
                          std::string(!model.module ? "no module" : "no forward") + ".",
                      "return train::wrap_model(your_module) from the builder.");
  }
  model.module->to(device());
  dev->prepare_model(*model.module);
  model.module->train();
  optimizer = user_code("TrainSpec::optimizer (the optimizer builder)",
                        [&] { return spec->optimizer(detail::unique_parameters(*model.module)); });
  if (!optimizer || optimizer->param_groups().empty()) {
    throw ConfigError("TrainSpec::optimizer: expected an optimizer over the model's parameters, found none.",
                      "return e.g. std::make_unique<torch::optim::SGD>(parameters, torch::optim::SGDOptions(0.1)).");
  }
  schedule = std::make_unique<detail::Schedule>(
      spec->lr_schedule,
      detail::schedule_context(spec->train_data->size(), env.world_size, env.rank, step_samples(), epochs, c.run), *optimizer,
      [this] { return place(prog().step); });
  state.model = model.module.get();
  state.optimizer = optimizer.get();
  state.loss_sum = torch::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device()));
  state.world_size = env.world_size;
  state.batch_size = step_samples();  // progress counts optimizer steps
  state.shape_json = detail::run_shape_json(*spec, batch, schedule->context().base_lr, c.run.seed, epochs, accumulate,
                                            clip ? std::optional<double>(clip->max_norm) : std::nullopt);
  if (clip) clip->params = detail::unique_parameters(*model.module);
  state.save_user = [this](torch::serialize::OutputArchive& a) {
    for_callbacks("on_save_checkpoint", [&](Callback& cb) { cb.on_save_checkpoint(a); });
  };
  state.load_user = [this](torch::serialize::InputArchive& a) {
    for_callbacks("on_load_checkpoint", [&](Callback& cb) { cb.on_load_checkpoint(a); });
  };
  checkpoints = std::make_unique<detail::CheckpointSession>(
      c.checkpoint, env.rank, device(),
      [this](const std::string& path, const Progress& p, double) { checkpoint_saved(path, p); });
  setup_controls();
}

// How the gradients will travel (comm/comm_plan.h), then the process group; the parts that agree
// among the ranks join it.
void Trainer::Run::connect() {
  detail::CommFacts f;
  f.gpu = dev->gpu();
  f.world_size = env.world_size;
  f.local_world_size = env.local_world_size;
  f.local_rank = env.local_rank;
  f.device_index = device().index();
  f.graph_step = choose_step().graph;
  f.peer_kernels = dev->peer_kernels();
  f.peer_access_to_local = env.local_world_size > 1;
  for (int r = 0; r < env.local_world_size; ++r) {
    if (r != env.local_rank) f.peer_access_to_local = f.peer_access_to_local && dev->peer_access(r);
  }
  for (const at::Tensor& p : detail::unique_parameters(*model.module)) {
    if (p.requires_grad()) f.gradient_bytes += p.numel() * 4;
  }
  f.accumulate_or_clip = accumulate > 1 || clip != nullptr;
  f.sharded = sharding.requested();
  plan = detail::plan_comm(c, f);
  detail::check_stall_timeout(c.distributed.stall_timeout_sec.value_or(0), c.distributed.timeout_sec);
  run_log->record().connecting();
  if (env.world_size > 1 || c.distributed.ddp_single_rank) {
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
    po.device_index = std::max<int>(0, device().index());  // the CPU's is -1
    po.shared_memory_allreduce = c.distributed.shm_allreduce;
    po.interface = c.distributed.interface;
    log::info("rendezvous: " + std::to_string(e.world_size) + " ranks at " + e.master_addr + ":" +
              std::to_string(e.master_port) + ", backend " + to_string(plan.backend));
    pg = ProcessGroup::create(e, po);
    where = detail::rollcall_of(pg.get());
  }
  // On a GPU the stop flags are posted and read a check later without host syncs (summed by NCCL
  // on the device, or by Gloo on the host); CPU ranks sum them at once (shared memory on one machine).
  stops->connect(pg.get(), device(), dev->stop_flags_read_later(), dev->stop_check_every());
  checkpoints->connect(pg.get());
}

// Resume before DDP is built: its broadcast then spreads rank 0's restored weights.
// Returns the checkpoint's path, or "" for a fresh start. --eval-only takes no snapshots.
std::string Trainer::Run::resume() {
  run_log->record().connected();  // the group is up, --health-check passed
  if (!c.run.eval_only) checkpoints->enable_snapshots(env, c.checkpoint.snapshot_every);
  const std::string path = checkpoints->resume(state);
  run_log->record().loaded(checkpoints->resumed_source(), prog().step);
  if (!c.run.eval_only) checkpoints->start_snapshots(prog().step);
  if (path.empty()) return path;
  schedule->resume(prog().lr);
  result.checkpoint_path = path;
  return path;
}

detail::StepChoice Trainer::Run::choose_step() const {
  detail::StepChoice choice = detail::choose_step(dev->gpu(), c.gpu.cuda_graph, schedule->per_step(), *optimizer);
  if (choice.graph && c.run.nonfinite == NonFinite::skip) {
    choice = {false, "--nonfinite skip decides on the host, between the backward and the update, whether to apply "
                     "each step's update (one sync a step)", c.gpu.cuda_graph == Switch::on};
  }
  if (choice.graph && !optimizer_step_hooks.empty()) {
    choice = {false, "a callback's on_before_optimizer_step (OptimizerStepCallback) runs on the host between the "
                     "backward and the optimizer's step, which a replayed graph can't call",
              c.gpu.cuda_graph == Switch::on};
  }
  return choice;
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
  step_context.data = "the training data '" + spec->train_data->name() + "' (TrainSpec::train_data)";
  parts.context = &step_context;
  stops->watch(c, *model.module);
  parts.micro_batch = accumulate > 1 ? batch : 0;
  parts.clip = clip.get();
  parts.shard = sharding.optimizer();
  stops->nonfinite().share_norms(clip.get());
  if (!stops->nonfinite().skip_mode()) parts.watch = &stops->nonfinite();
  parts.before_update = update_gate();  // --nonfinite skip, the callbacks' on_before_optimizer_step
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
  train_step = choice.graph ? detail::make_cuda_graph_step(parts, step_samples()) : detail::make_eager_step(parts);
  schedule->drive(train_step.get());
  log::info("training step: " + train_step->describe());
}

}  // namespace train
