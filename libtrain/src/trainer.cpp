// The Trainer: set-up (threads, device, data, process group, model, optimizer, resume, DDP), then
// the loop (steps, logs, preemption checks, evaluation, checkpoints), then the done line.
#include "train/trainer.h"

#include "train/adadelta.h"
#include "train/checkpoint.h"
#include "train/ddp.h"
#include "train/error.h"
#include "train/files.h"
#include "train/launcher/device.h"
#include "train/launcher/slurm_time.h"
#include "train/log.h"
#include "train/process_group.h"
#include "train/sampler.h"
#include "train/sha256.h"
#include "train/training_state.h"
#include "profile.h"
#include "train_step.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>
#include <torch/serialize.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <future>
#include <optional>
#include <thread>

#include <sched.h>
#include <unistd.h>

namespace train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

// Appends JSON lines to --metrics on rank 0; every line is flushed so a killed job keeps them.
class MetricsWriter {
 public:
  MetricsWriter(const std::string& path, bool enabled) {
    if (path.empty() || !enabled) return;
    out_.open(path, std::ios::app);
    if (!out_) {
      throw ConfigError("--metrics " + path + ": cannot open for appending.",
                        "check that the folder exists and is writable.");
    }
  }
  void write(const nlohmann::json& j) {
    if (!out_.is_open()) return;
    out_ << j.dump() << '\n';
    out_.flush();
  }

 private:
  std::ofstream out_;
};

// Intra-op threads: the CPUs this process may run on (SLURM's task affinity, taskset, cgroup
// cpusets), not every core of the machine, shared among the ranks on this node.
int pick_threads(const TrainConfig& c, const DistEnv& env) {
  if (c.threads > 0) return c.threads;
  cpu_set_t set;
  int cores = 0;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cores = CPU_COUNT(&set);
  if (cores <= 0) cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const bool shared = cores >= static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, shared ? cores / std::max(1, env.local_world_size) : cores);
}

at::Device pick_device(const TrainConfig& c, const DistEnv& env) {
  const bool want_cuda = c.device == "cuda" || (c.device == "auto" && c.backend != "gloo");
  if (c.device == "cpu" || !want_cuda) return at::Device(at::kCPU);
  const int count = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  if (count == 0) {
    // SLURM gave this job GPUs but CUDA sees none: stop rather than train on the CPU unasked.
    check_allocated_gpus_usable(current_environment(), c.device, 0,
                                "torch reports " + std::to_string(count) + " CUDA devices");
    if (c.device == "auto") return at::Device(at::kCPU);
    const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
    throw ConfigError("--device cuda: expected a visible CUDA device, found none (CUDA_VISIBLE_DEVICES=" +
                          std::string(vis ? vis : "<unset>") + ").",
                      "ask SLURM for GPUs (--gres=gpu:N or --gpus-per-node=N) and run on a GPU "
                      "partition, or use --device cpu.");
  }
  // The launcher's rule: cuda:<local rank>, or cuda:0 when SLURM binds GPUs per task; too few
  // GPUs for the node's ranks is an error naming both counts.
  return at::Device(train::choose_device(env, count, "nccl", current_environment()).device);
}

Backend choose_backend(const TrainConfig& c, const at::Device& device) {
  if (c.backend == "gloo") return Backend::gloo;
  if (c.backend == "nccl") {
    if (!device.is_cuda()) {
      throw ConfigError("--backend nccl: expected a CUDA device, found the run on cpu.",
                        "use --backend gloo for CPU runs, or --device cuda on a GPU node.");
    }
    return Backend::nccl;
  }
  return device.is_cuda() ? Backend::nccl : Backend::gloo;
}

void set_lr(torch::optim::Optimizer& opt, double lr) {
  for (auto& g : opt.param_groups()) g.options().set_lr(lr);
}

void save_model_atomically(torch::nn::Module& model, const std::string& path) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    torch::serialize::OutputArchive archive;
    for (const auto& p : model.named_parameters()) archive.write(p.key(), p.value().detach().cpu());
    for (const auto& b : model.named_buffers()) archive.write(b.key(), b.value().detach().cpu(), true);
    archive.save_to(tmp);
    const std::string err = files::rename(tmp, path);
    if (!err.empty()) throw std::runtime_error("rename: " + err);
  } catch (const std::exception& e) {
    files::remove_file(tmp);
    throw CheckpointError("--save-model " + path + ": write failed (" + std::string(e.what()).substr(0, 200) + ").",
                          "check that the folder exists, is writable and has free space.");
  }
}

PreemptionOptions preemption_options(const TrainConfig& c) {
  PreemptionOptions o;
  o.requeue_signals = parse_signal_list(c.preempt_signals);
  o.stop_signals = {SIGTERM, SIGINT};
  o.time_margin_sec = c.time_margin_sec;
  return o;
}

}  // namespace

// ----------------------------------------------------------------------------- the parts

LossFn nll_loss() {
  return [](const at::Tensor& out, const at::Tensor& target, Reduction r) {
    namespace F = torch::nn::functional;
    auto options = F::NLLLossFuncOptions();
    if (r == Reduction::sum) {
      options.reduction(torch::kSum);
    } else {
      options.reduction(torch::kMean);
    }
    return F::nll_loss(out, target, options);
  };
}

LossFn cross_entropy_loss() {
  // nll_loss(log_softmax(x)): what cross_entropy computes, spelled out so the numbers match it.
  return [](const at::Tensor& out, const at::Tensor& target, Reduction r) {
    return nll_loss()(torch::log_softmax(out, 1), target, r);
  };
}

LrSchedule constant_lr() {
  return {LrSchedule::Every::epoch, [](int64_t, double lr) { return lr; }, "constant"};
}

LrSchedule step_lr(double gamma, int64_t step_size) {
  if (!(gamma > 0) || step_size < 1) {
    throw ConfigError("step_lr: expected gamma > 0 and step_size >= 1, found gamma " + fmt("%g", gamma) +
                          " and step_size " + std::to_string(step_size) + ".",
                      "StepLR multiplies the rate by gamma every step_size epochs, e.g. step_lr(0.7).");
  }
  return {LrSchedule::Every::epoch,
          [gamma, step_size](int64_t epoch, double lr) { return epoch % step_size == 0 ? lr * gamma : lr; },
          "step_lr(gamma=" + fmt("%g", gamma) + ", step_size=" + std::to_string(step_size) + ")"};
}

Metric accuracy() {
  return {"accuracy", [](const at::Tensor& out, const at::Tensor& target) { return out.argmax(1).eq(target).sum(); }};
}

double EvalResult::accuracy() const {
  const auto it = metrics.find("accuracy");
  return it == metrics.end() ? 0.0 : it->second;
}

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
  j["event"] = r.cancelled ? "cancelled" : r.preempted ? "preempted" : "done";
  j["epochs"] = r.epochs;
  j["steps"] = r.steps;
  j["train_loss"] = r.train_loss;
  j["test_loss"] = r.test_loss;
  j["test_accuracy"] = r.test_accuracy;
  j["images_per_sec"] = r.images_per_sec;
  j["images_per_sec_steady"] = r.images_per_sec_steady;
  if (r.peak_gpu_mb > 0) j["peak_gpu_mb"] = r.peak_gpu_mb;
  j["train_seconds"] = r.train_seconds;
  j["eval_seconds"] = r.eval_seconds;
  j["checkpoint_seconds"] = r.checkpoint_seconds;
  j["world_size"] = r.world_size;
  if (!r.precision.empty()) j["precision"] = r.precision;
  j["params_sha256"] = r.params_sha256;
  if (r.preempted || r.cancelled) {
    j["reason"] = r.preempt_reason;
    j["checkpoint"] = r.checkpoint_path;
    j["requeued"] = r.requeued;
  }
  return j.dump();
}

// ----------------------------------------------------------------------------- the Trainer

struct Trainer::Impl {
  TrainConfig c;
  DistEnv env;
  int threads = 1;
  at::Device device{at::kCPU};
  Backend backend = Backend::gloo;

  // While fit() runs.
  const TrainSpec* spec = nullptr;
  int64_t batch = 0;
  std::shared_ptr<ProcessGroup> pg;
  ModelHandle model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<CheckpointDir> ckdir;
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<Preemption> preemption;
  std::unique_ptr<MetricsWriter> metrics;
  std::unique_ptr<detail::StepProfiler> profiler;  // --profile
  TrainingState state;
  TrainResult result;
  std::unique_ptr<detail::TrainStep> train_step;
  double step_lr = -1;                 // the rate the step was last run (or captured) with
  std::vector<double> epoch_ips;       // images/s of each epoch this process trained
  // CUDA: a progress line waits for its loss to arrive in pinned memory instead of syncing.
  struct PendingLine {
    at::Tensor loss;  // pinned host copy
    std::shared_ptr<c10::Event> ready;
    int epoch = 0;
    int64_t step = 0, b = 0, batches = 0, seen = 0;
    double ips = 0, lr = 0;
  };
  std::optional<PendingLine> pending_line;
  // Rank 0's checkpoint being written in the background (one at a time), and what it holds.
  std::future<std::pair<std::string, double>> checkpoint_write;  // path, seconds writing
  Progress checkpoint_progress;

  Progress& prog() { return state.progress; }

  void setup(const TrainSpec& s);
  void connect();
  // --backend auto with 2 GPUs of one machine whose CUDA-graph step averages through the GPUs'
  // peer memory: the step makes no NCCL call, and a process that merely has an NCCL process
  // group runs it ~4% slower (docs/benchmarks.md), so the group is Gloo.
  bool peer_step_alone() const;
  void build_model();
  std::string shape_json(double lr0) const;
  void resume();
  void apply_resumed(torch::serialize::InputArchive& archive, const std::string& path);
  void train();
  bool train_epoch();
  void make_step();
  std::string resolve_precision() const;
  bool check_stop(Clock::time_point t0, double earlier_segments);
  // CUDA with NCCL (or one rank): the stop flags travel in device memory, posted and read later
  // without host syncs; Gloo sums them on the host (shared memory on one machine).
  bool device_stop_flags() const { return device.is_cuda() && (!pg || pg->backend() == Backend::nccl); }
  void log_progress(int64_t b, int64_t batches, int64_t start, const at::Tensor& loss, double& t_log_images,
                    Clock::time_point& t_log);
  void print_line(const PendingLine& line, double loss);
  void flush_pending_line();
  void end_epoch(double epoch_seconds);
  EvalResult evaluate(bool one_batch);
  void stop(const StopRequest& request);
  at::Tensor shared_loss_sum();
  void write_checkpoint(const Progress& p, const at::Tensor& loss_sum);
  void collect_checkpoint(bool wait);
  TrainResult finish();
  void for_callbacks(const std::function<void(Callback&)>& fn) {
    for (const auto& cb : spec->callbacks) fn(*cb);
  }
};

Trainer::Trainer(TrainConfig config, DistEnv env) : impl_(std::make_unique<Impl>()) {
  Impl& t = *impl_;
  t.c = std::move(config);
  t.env = std::move(env);
  validate(t.c);
  t.threads = pick_threads(t.c, t.env);
  at::set_num_threads(t.threads);
  t.device = pick_device(t.c, t.env);
  t.backend = choose_backend(t.c, t.device);
  if (t.device.is_cuda()) {
    detail::use_cuda_device(t.device);
    if (t.c.tf32 != "auto" || t.c.precision == "tf32") {
      const bool on = t.c.precision == "tf32" || t.c.tf32 == "on";
      at::globalContext().setAllowTF32CuDNN(on);
      at::globalContext().setAllowTF32CuBLAS(on);
    }
    // cuDNN's autotuning times every algorithm for each new shape: seconds at start that a short
    // run never earns back, so it is opt-in (--cudnn-benchmark).
    at::globalContext().setDeterministicCuDNN(t.c.deterministic);
    at::globalContext().setBenchmarkCuDNN(t.c.cudnn_benchmark && !t.c.deterministic);
  } else if (const bool precision_set = t.c.precision != "fp32" && t.c.precision != "auto";
             t.c.cuda_graph == "on" || precision_set || t.c.channels_last == "on" || t.c.peer_allreduce == "on") {
    const std::string flag = t.c.cuda_graph == "on"      ? "--cuda-graph on"
                             : precision_set              ? "--precision " + t.c.precision
                             : t.c.channels_last == "on" ? "--channels-last on"
                                                          : "--peer-allreduce on";
    throw ConfigError(flag +
                          ": expected a CUDA device, found the run on " + t.device.str() + ".",
                      "these settings need a GPU; on the CPU leave them at their defaults.");
  }
}

Trainer::~Trainer() = default;
const TrainConfig& Trainer::config() const { return impl_->c; }
const DistEnv& Trainer::env() const { return impl_->env; }
const at::Device& Trainer::device() const { return impl_->device; }
ProcessGroup* Trainer::process_group() const { return impl_->pg.get(); }
torch::nn::Module* Trainer::model() const { return impl_->model.module.get(); }

TrainResult Trainer::fit(const TrainSpec& spec) {
  Impl& t = *impl_;
  t.setup(spec);
  t.connect();
  t.build_model();
  t.resume();
  if (t.pg) {
    DdpOptions dopt;
    dopt.bucket_cap_mb = t.c.bucket_cap_mb;
    t.ddp = std::make_unique<DistributedDataParallel>(t.model.module, t.pg, dopt);
  }
  t.make_step();
  t.for_callbacks([&](Callback& cb) { cb.on_train_start(*this); });
  t.train();
  TrainResult r = t.finish();
  t.for_callbacks([&](Callback& cb) { cb.on_train_end(r); });
  return r;
}

// Checks the spec, moves the data to the device, installs the signal handlers.
void Trainer::Impl::setup(const TrainSpec& s) {
  spec = &s;
  if (!s.model || !s.train_data || !s.optimizer || !s.loss) {
    throw ConfigError("TrainSpec: expected a model builder, training data, a loss and an optimizer builder, found " +
                          std::string(!s.model ? "no model" : !s.train_data ? "no training data"
                                      : !s.loss ? "no loss" : "no optimizer") + ".",
                      "fill TrainSpec::model, train_data, loss and optimizer (docs/api.md).");
  }
  batch = c.batch_size > 0 ? c.batch_size : s.batch_size;
  if (batch < 1) {
    throw ConfigError("--batch-size: expected a positive per-rank batch size, found " + std::to_string(batch) + ".",
                      "e.g. --batch-size 64");
  }
  s.train_data->to(device);
  if (s.eval_data) s.eval_data->to(device);
  log::configure(env.rank, env.world_size, env.host, c.log_all_ranks);
  preemption = std::make_unique<Preemption>(preemption_options(c), env);
  result.world_size = env.world_size;
}

bool Trainer::Impl::peer_step_alone() const {
  if (c.backend != "auto" || !device.is_cuda() || env.world_size != 2 || env.local_world_size != 2) return false;
  if (c.cuda_graph == "off" || c.graph_allreduce != "in-graph" || c.peer_allreduce == "off") return false;
  if (spec->lr_schedule.every == LrSchedule::Every::step) return false;  // eager steps: NCCL's all-reduce
  // The other rank's GPU is the other local rank's index where both are visible (not under
  // SLURM's per-task binding, where this can't be checked here).
  if (device.index() != env.local_rank) return false;
  return detail::cuda_peer_access(device.index(), 1 - env.local_rank);
}

void Trainer::Impl::connect() {
  if (env.world_size <= 1 && !c.ddp_single_rank) return;
  if (peer_step_alone()) {
    backend = Backend::gloo;
    log::info("backend gloo (--backend auto): the 2 GPUs average gradients inside the CUDA graph through each "
              "other's memory, and an NCCL process group would only slow the step; --backend nccl keeps NCCL");
  }
  DistEnv e = env;
  if (env.world_size <= 1) {
    e.master_addr = "127.0.0.1";
    e.master_port = 0;  // a one-rank group's store takes a free port from the OS
    e.agent_store = false;  // ours, even under torchrun
  }
  ProcessGroupOptions po;
  po.backend = backend;
  po.timeout = std::chrono::milliseconds(static_cast<int64_t>(c.dist_timeout_sec * 1000));
  po.device_index = device.is_cuda() ? device.index() : 0;
  po.shared_memory_allreduce = c.shm_allreduce == "auto";
  log::info("rendezvous: " + std::to_string(e.world_size) + " ranks at " + e.master_addr + ":" +
            std::to_string(e.master_port) + ", backend " + to_string(backend));
  pg = ProcessGroup::create(e, po);
}

// The model is built right after seeding, so every rank (and every run) starts from the same weights.
void Trainer::Impl::build_model() {
  torch::manual_seed(c.seed);
  if (device.is_cuda()) torch::cuda::manual_seed_all(c.seed);
  model = spec->model();
  if (!model.module || !model.forward) {
    throw ConfigError("TrainSpec::model: expected a module and its forward, found " +
                          std::string(!model.module ? "no module" : "no forward") + ".",
                      "return train::wrap_model(your_module) from the builder.");
  }
  model.module->to(device);
  if (device.is_cuda() && c.channels_last == "on") {
    // Same values, NHWC strides: cuDNN then convolves without converting layouts, and the
    // activations, gradients and optimizer state follow the weights' layout.
    torch::NoGradGuard no_grad;
    for (auto& p : model.module->parameters()) {
      if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
    }
  }
  model.module->train();
  optimizer = spec->optimizer(model.module->parameters());
  if (!optimizer || optimizer->param_groups().empty()) {
    throw ConfigError("TrainSpec::optimizer: expected an optimizer over the model's parameters, found none.",
                      "return e.g. std::make_unique<torch::optim::SGD>(parameters, torch::optim::SGDOptions(0.1)).");
  }
  const double lr0 = optimizer->param_groups()[0].options().get_lr();
  state.model = model.module.get();
  state.optimizer = optimizer.get();
  state.progress.lr = lr0;
  state.loss_sum = torch::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device));
  state.world_size = env.world_size;
  state.batch_size = batch;
  state.shape_json = shape_json(lr0);
  state.save_user = [this](torch::serialize::OutputArchive& a) {
    for_callbacks([&](Callback& cb) { cb.on_save_checkpoint(a); });
  };
  state.load_user = [this](torch::serialize::InputArchive& a) {
    for_callbacks([&](Callback& cb) { cb.on_load_checkpoint(a); });
  };
  if (!c.checkpoint_dir.empty()) ckdir = std::make_unique<CheckpointDir>(c.checkpoint_dir, c.keep_checkpoints);
}

// The flags that shape a run: stored in checkpoints and compared on resume.
std::string Trainer::Impl::shape_json(double lr0) const {
  nlohmann::ordered_json j = {
      {"model", spec->model_name}, {"dataset", spec->data_name}, {"batch_size", batch}, {"lr", lr0},
      {"lr_schedule", spec->lr_schedule.description}, {"optimizer", c.optimizer}, {"momentum", c.momentum},
      {"weight_decay", c.weight_decay}, {"seed", c.seed}, {"epochs", c.epochs},
      {"limit_train_samples", c.limit_train_samples}, {"limit_test_samples", c.limit_test_samples},
      {"no_dropout", c.no_dropout}};
  return j.dump();
}

// Resume before DDP is built: its broadcast then spreads rank 0's restored weights. With
// --resume auto, rank 0 picks the newest valid checkpoint and tells the others its step, so
// every rank resumes from the same file.
void Trainer::Impl::resume() {
  std::unique_ptr<torch::serialize::InputArchive> archive;
  std::string path;
  if (c.resume != "never" && c.resume != "auto") {
    path = c.resume;
    archive = CheckpointDir::load_file(c.resume, device);
  } else if (c.resume == "auto" && ckdir) {
    int64_t chosen = -1;
    if (env.rank == 0) {
      auto found = ckdir->load_latest_valid(device);
      if (found) {
        chosen = found->second.step;
        path = found->second.path;
        archive = std::move(found->first);
      }
    }
    if (pg) {
      at::Tensor t = torch::tensor({chosen}, at::kLong);
      if (device.is_cuda()) t = t.to(device);
      pg->broadcast(t, 0);
      chosen = t.cpu().item<int64_t>();
      if (env.rank != 0 && chosen >= 0) {
        path = ckdir->path_for(chosen);
        archive = CheckpointDir::load_file(path, device);
      }
    }
  }
  if (archive) apply_resumed(*archive, path);
}

void Trainer::Impl::apply_resumed(torch::serialize::InputArchive& a, const std::string& path) {
  const auto saved = nlohmann::ordered_json::parse(TrainingState::read_shape(a));
  const auto now = nlohmann::ordered_json::parse(state.shape_json);
  for (const char* key : {"model", "dataset"}) {
    if (saved.value(key, nlohmann::ordered_json()) != now[key]) {
      throw CheckpointError(path + ": written for --" + std::string(key) + " " + saved.value(key, nlohmann::ordered_json()).dump() +
                                ", but this run has " + now[key].dump() + ".",
                            "resume with the same arguments, or point --checkpoint-dir at a fresh folder.");
    }
  }
  for (auto it = saved.begin(); it != saved.end(); ++it) {
    if (now.contains(it.key()) && now[it.key()] != it.value()) {
      log::warn("resuming " + path + " with a different " + it.key() + " (" + it.value().dump() + " -> " +
                now[it.key()].dump() + "): results will differ from an uninterrupted run");
    }
  }
  const int saved_world = state.load(a, device);
  if (saved_world != env.world_size) {
    log::warn("resuming a world-size " + std::to_string(saved_world) + " checkpoint with world size " +
              std::to_string(env.world_size) + ": the sampler re-shards the epoch, so results will differ "
              "from the uninterrupted run");
  }
  result.checkpoint_path = path;
  log::info("resumed from " + path + ": epoch " + std::to_string(prog().epoch) + ", step " +
            std::to_string(prog().step) + ", " + std::to_string(prog().batches_done) + " batches into the epoch");
}

// --precision auto: bf16 autocast for large per-rank batches on a GPU that has bf16 (measured
// within half a point of fp32's accuracy there), fp32 otherwise; on the CPU always fp32.
std::string Trainer::Impl::resolve_precision() const {
  if (!device.is_cuda()) return "fp32";
  if (c.precision != "auto") return c.precision;
  const bool bf16 = batch >= kAutoBf16Batch && detail::cuda_bf16_supported(device);
  log::info(std::string("--precision auto: ") +
            (bf16 ? "bf16 autocast (batch " + std::to_string(batch) + " per rank >= " + std::to_string(kAutoBf16Batch) +
                        "); --precision fp32 keeps float32"
                  : "fp32 (bf16 is picked for batches of " + std::to_string(kAutoBf16Batch) +
                        " or more per rank on GPUs that have it)"));
  return bf16 ? "bf16" : "fp32";
}

void Trainer::Impl::make_step() {
  detail::StepParts parts;
  parts.data = spec->train_data.get();
  parts.model = &model;
  parts.optimizer = optimizer.get();
  parts.loss = &spec->loss;
  parts.loss_sum = &state.loss_sum;
  result.precision = resolve_precision();
  parts.bf16 = result.precision == "bf16";
  parts.ddp = ddp.get();
  parts.process_group = pg.get();
  parts.world_size = env.world_size;
  parts.graph_allreduce = c.graph_allreduce;
  parts.peer_allreduce = c.peer_allreduce;
  bool graph = device.is_cuda() && c.cuda_graph != "off";
  if (graph && spec->lr_schedule.every == LrSchedule::Every::step) {
    // The rate is baked into a captured step; one that changes every step can't be replayed.
    if (c.cuda_graph == "on") log::warn("--cuda-graph on: the LR schedule changes every step, so the step runs eagerly");
    graph = false;
  }
  train_step = graph ? detail::make_cuda_graph_step(parts, batch) : detail::make_eager_step(parts);
  log::info("training step: " + train_step->describe());
}

// Whether every rank agreed to stop at this step; stops the run when so. CPU ranks agree through
// one small all-reduce now. CUDA ranks read the agreement they posted `check_every` steps ago (long
// done on the device, so the host never waits), then post the next.
bool Trainer::Impl::check_stop(Clock::time_point t0, double earlier_segments) {
  StopRequest request;
  if (device_stop_flags()) {
    request = preemption->collect();
    if (request.kind == StopKind::none) preemption->post(pg.get(), device);
  } else {
    request = preemption->poll(pg.get(), device);
  }
  if (request.kind == StopKind::none) return false;
  if (device.is_cuda()) torch::cuda::synchronize();
  flush_pending_line();
  const double seconds = earlier_segments + seconds_since(t0);
  prog().train_seconds += seconds;
  result.train_seconds += seconds;
  stop(request);
  return true;
}

void Trainer::Impl::train() {
  metrics = std::make_unique<MetricsWriter>(c.metrics, env.rank == 0);
  if (!c.profile.empty()) {
    profiler = std::make_unique<detail::StepProfiler>(c.profile, detail::parse_profile_steps(c.profile_steps), env.rank,
                                                      device.is_cuda());
  }
  log::info("training " + spec->model_name + " on " + spec->train_data->name() + " (" +
            std::to_string(spec->train_data->size()) + " samples) for " + std::to_string(c.epochs) + " epochs, batch " +
            std::to_string(batch) + " per rank x " + std::to_string(env.world_size) + " ranks, lr " +
            fmt("%g", prog().lr) + ", device " + device.str() + ", " + std::to_string(threads) + " threads");
  if (preemption->job_end_time() > 0) {
    log::info("SLURM job ends " + describe_end_time(preemption->job_end_time(), std::time(nullptr)) +
              "; checkpointing " + fmt("%.0f", c.time_margin_sec) + " s before it");
  } else if (preemption->job_has_no_time_limit()) {
    log::info("SLURM job has no time limit: no checkpoint before a deadline (signals and --checkpoint-every still apply)");
  }
  for (; prog().epoch <= c.epochs; ++prog().epoch) {
    if (!train_epoch()) break;
  }
  if (profiler) profiler->finish(prog().step);
}

// One epoch: its steps, then evaluation and the epoch-end checkpoint. Returns false when the run
// ends here (a stop request, --max-steps, --dry-run's single step is not an end).
bool Trainer::Impl::train_epoch() {
  DistributedSampler sampler(spec->train_data->size(), env.world_size, env.rank, /*shuffle=*/true, c.seed);
  set_lr(*optimizer, prog().lr);
  if (prog().lr != step_lr) {
    // A captured step holds the old rate, unless the optimizer reads it from the device.
    auto* adadelta = dynamic_cast<optim::Adadelta*>(optimizer.get());
    if (adadelta != nullptr && adadelta->lr_on_device()) {
      adadelta->sync_lr_to_device();
    } else {
      train_step->invalidate();
    }
    step_lr = prog().lr;
  }
  sampler.set_epoch(prog().epoch - 1);
  std::vector<int64_t> local = sampler.indices();
  at::Tensor order = at::from_blob(local.data(), {static_cast<int64_t>(local.size())}, at::kLong).to(device);
  const int64_t n_local = order.size(0);
  const int64_t batches = (n_local + batch - 1) / batch;
  // Agreeing on a stop costs an all-reduce; on CUDA it runs every few steps, without host syncs.
  const int64_t check_every = device.is_cuda() ? 20 : 1;
  auto t0 = Clock::now();
  auto t_log = t0;
  double earlier_segments = 0;  // training seconds of this epoch before the last checkpoint
  double images_since_log = 0;
  const int64_t images_before = prog().images_total;
  bool max_steps_reached = false;
  for (int64_t b = prog().batches_done; b < batches; ++b) {
    const int64_t start = b * batch;
    const int64_t len = std::min(batch, n_local - start);
    if (profiler) profiler->before_step(prog().step + 1);
    at::Tensor loss = train_step->run(order, start, len);
    ++prog().epoch_steps;
    ++prog().step;
    if (profiler) profiler->after_step(prog().step);
    if (spec->lr_schedule.every == LrSchedule::Every::step) {
      prog().lr = spec->lr_schedule.next(prog().step, prog().lr);
      set_lr(*optimizer, prog().lr);
      step_lr = prog().lr;
    }
    prog().batches_done = b + 1;
    images_since_log += static_cast<double>(len * env.world_size);
    prog().images_total += len * env.world_size;
    preemption->maybe_raise_at_step(prog().step);
    max_steps_reached = c.max_steps > 0 && prog().step >= c.max_steps;
    const bool last = b + 1 == batches || c.dry_run || max_steps_reached;
    if (b % c.log_interval == 0 || last) log_progress(b, batches, start, loss, images_since_log, t_log);
    for_callbacks([&](Callback& cb) { cb.on_step_end({prog().epoch, prog().step, b, batches, len, loss.detach()}); });
    collect_checkpoint(/*wait=*/false);
    if (c.dry_run || max_steps_reached) break;
    if (b + 1 == batches) break;
    if (prog().step % check_every == 0 && check_stop(t0, earlier_segments)) return false;
    if (ckdir && c.checkpoint_every > 0 && prog().step % c.checkpoint_every == 0) {
      // The epoch's training time leaves out the checkpoint's (the done line reports it).
      earlier_segments += seconds_since(t0);
      const at::Tensor loss_sum = shared_loss_sum();  // every rank takes part
      if (env.rank == 0) write_checkpoint(prog(), loss_sum);
      t0 = Clock::now();
    }
  }
  if (device.is_cuda()) torch::cuda::synchronize();
  flush_pending_line();
  if (device_stop_flags()) preemption->collect();  // the last posted agreement: the epoch ended first
  const double epoch_seconds = earlier_segments + seconds_since(t0);
  prog().train_seconds += epoch_seconds;
  result.train_seconds += epoch_seconds;
  if (epoch_seconds > 0) epoch_ips.push_back(static_cast<double>(prog().images_total - images_before) / epoch_seconds);
  end_epoch(epoch_seconds);
  if (max_steps_reached) return false;
  if (ckdir && env.rank == 0) {
    Progress next = prog();
    next.epoch += 1;
    write_checkpoint(next, state.loss_sum);  // zero: the next epoch has no steps yet
  }
  return true;
}

void Trainer::Impl::log_progress(int64_t b, int64_t batches, int64_t start, const at::Tensor& loss,
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
  line.lr = prog().lr;
  t_log = now;
  images_since_log = 0;
  if (!device.is_cuda()) {
    print_line(line, loss.item<double>());
    return;
  }
  // The previous line's loss arrived long ago; this one's is copied while the device works on.
  flush_pending_line();
  line.loss = at::empty({1}, at::TensorOptions().dtype(at::kFloat).pinned_memory(true));
  line.loss.copy_(loss.detach().reshape({1}).to(at::kFloat), /*non_blocking=*/true);
  line.ready = std::make_shared<c10::Event>(device.type());
  c10::impl::VirtualGuardImpl guard(device.type());
  line.ready->record(guard.getStream(device));
  pending_line = std::move(line);
}

void Trainer::Impl::flush_pending_line() {
  if (!pending_line) return;
  pending_line->ready->synchronize();
  const double l = pending_line->loss.data_ptr<float>()[0];
  PendingLine line = std::move(*pending_line);
  pending_line.reset();
  print_line(line, l);
}

void Trainer::Impl::print_line(const PendingLine& line, double l) {
  const int64_t total = spec->train_data->size();
  log::info("Train Epoch: " + std::to_string(line.epoch) + " [" + std::to_string(line.seen) + "/" + std::to_string(total) +
            " (" + fmt("%.0f", 100.0 * static_cast<double>(line.b) / static_cast<double>(line.batches)) + "%)]\tLoss: " +
            fmt("%.6f", l) + "\t" + fmt("%.0f", line.ips) + " img/s");
  metrics->write({{"event", "train"}, {"epoch", line.epoch}, {"step", line.step},
                  {"loss", l}, {"lr", line.lr}, {"images_per_sec", line.ips}});
}

// The epoch's mean loss over ranks, evaluation, the epoch line, and the schedule's next rate.
void Trainer::Impl::end_epoch(double epoch_seconds) {
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
    ev = evaluate(c.dry_run);
    for_callbacks([&](Callback& cb) { cb.on_evaluation(ev); });
  }
  const double eval_seconds = seconds_since(t_eval);
  result.eval_seconds += eval_seconds;
  prog().last_test_loss = ev.loss;
  prog().last_test_accuracy = ev.accuracy();
  log::info("Test set: Average loss: " + fmt("%.4f", ev.loss) + ", Accuracy: " +
            std::to_string(static_cast<int64_t>(std::llround(ev.accuracy() * static_cast<double>(ev.count)))) + "/" +
            std::to_string(ev.count) + " (" + fmt("%.2f", 100.0 * ev.accuracy()) + "%), epoch time " +
            fmt("%.1f", epoch_seconds) + " s, evaluation " + fmt("%.2f", eval_seconds) + " s");
  nlohmann::json line = {{"event", "epoch"}, {"epoch", prog().epoch}, {"step", prog().step},
                         {"train_loss", prog().last_train_loss}, {"test_loss", ev.loss},
                         {"test_accuracy", ev.accuracy()},
                         {"images_per_sec", prog().train_seconds > 0 ? prog().images_total / prog().train_seconds : 0.0},
                         {"epoch_images_per_sec", epoch_ips.empty() ? 0.0 : epoch_ips.back()},
                         {"epoch_seconds", epoch_seconds}, {"eval_seconds", eval_seconds},
                         {"time", std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()}};
  for (const auto& [name, value] : ev.metrics) {
    if (name != "accuracy") line[name] = value;  // accuracy is test_accuracy
  }
  metrics->write(line);
  for_callbacks([&](Callback& cb) { cb.on_epoch_end({prog().epoch, prog().step, prog().last_train_loss, ev, epoch_seconds}); });
  result.epochs = prog().epoch;
  if (spec->lr_schedule.every == LrSchedule::Every::epoch) prog().lr = spec->lr_schedule.next(prog().epoch, prog().lr);
  prog().batches_done = 0;
  prog().epoch_steps = 0;
  state.loss_sum.zero_();
}

// Each rank evaluates samples rank, rank + world, ...: no padding, so the all-reduced totals
// equal single-process evaluation.
EvalResult Trainer::Impl::evaluate(bool one_batch) {
  torch::NoGradGuard no_grad;
  model.module->eval();
  Dataset& data = *spec->eval_data;
  const auto opts = at::TensorOptions().dtype(at::kLong).device(device);
  at::Tensor idx = torch::arange(env.rank, data.size(), env.world_size, opts);
  const int64_t n_metrics = static_cast<int64_t>(spec->metrics.size());
  // [loss sum, count, metric sums...]
  at::Tensor totals = torch::zeros({2 + n_metrics}, at::TensorOptions().dtype(at::kDouble).device(device));
  const int64_t n = idx.size(0);
  for (int64_t start = 0; start < n; start += c.test_batch_size) {
    const int64_t len = std::min(c.test_batch_size, n - start);
    Batch b = data.get_batch(idx.narrow(0, start, len));
    at::Tensor out = model.forward(b.inputs);
    totals[0] += spec->loss(out, b.targets, Reduction::sum).to(at::kDouble);
    totals[1] += static_cast<double>(len);
    for (int64_t m = 0; m < n_metrics; ++m) {
      totals[2 + m] += spec->metrics[static_cast<size_t>(m)].batch_sum(out, b.targets).to(at::kDouble);
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

// A stop every rank agreed on: checkpoint (rank 0), wait until it is durable, then requeue
// (preemption, time limit) or not (cancel).
void Trainer::Impl::stop(const StopRequest& request) {
  result.preempted = request.requeue();
  result.cancelled = request.kind == StopKind::cancel;
  result.stop_signal = request.signal;
  result.preempt_reason = request.reason;
  log::warn("stopping for " + request.reason + " at epoch " + std::to_string(prog().epoch) + ", step " +
            std::to_string(prog().step));
  const at::Tensor loss_sum = ckdir ? shared_loss_sum() : at::Tensor();  // every rank takes part
  if (ckdir && env.rank == 0) {
    write_checkpoint(prog(), loss_sum);
    collect_checkpoint(/*wait=*/true);
  } else if (!ckdir) {
    log::warn("no --checkpoint-dir: the progress of this run is lost");
  }
  if (pg) pg->barrier();  // the checkpoint is durable before anyone leaves
  if (result.cancelled) {
    log::warn(std::string("cancelled: not requeued") +
              (ckdir ? "; to go on, run train again with --checkpoint-dir " + ckdir->dir() + " (it resumes from " +
                           result.checkpoint_path + ")"
                     : std::string()));
    return;
  }
  if (ckdir && env.rank == 0 && c.requeue && !env.job_id.empty()) result.requeued = preemption->requeue_job();
}

// Mid-epoch, each rank holds the sum of its own step losses, but only rank 0 writes the checkpoint
// that every rank resumes from. Saving the ranks' mean makes the resumed epoch's mean loss equal
// the uninterrupted one: every rank restarts from the mean, and the epoch end averages over ranks.
// Every rank must call it.
at::Tensor Trainer::Impl::shared_loss_sum() {
  at::Tensor t = state.loss_sum.detach().clone().reshape({1});
  if (pg) {
    pg->allreduce_sum(t);
    t /= env.world_size;
  }
  return t.reshape({});
}

void Trainer::Impl::write_checkpoint(const Progress& p, const at::Tensor& loss_sum) {
  const auto t_start = Clock::now();
  const Progress current_progress = state.progress;
  const at::Tensor current_loss_sum = state.loss_sum;
  state.progress = p;
  state.loss_sum = loss_sum;
  torch::serialize::OutputArchive a;
  state.save(a, device);
  state.progress = current_progress;
  state.loss_sum = current_loss_sum;
  collect_checkpoint(/*wait=*/true);  // one write at a time, in order
  // Serializing copies the state to the host: training waits only for that. Writing the file
  // (checksum, fsync, rename, pruning) runs in the background while the next steps train.
  std::string bytes = CheckpointDir::serialize(a, p.step);
  result.checkpoint_seconds += seconds_since(t_start);
  checkpoint_progress = p;
  checkpoint_write = std::async(std::launch::async, [this, bytes = std::move(bytes), step = p.step] {
    const auto t_write = Clock::now();
    std::string path = ckdir->write(bytes, step);
    return std::make_pair(std::move(path), seconds_since(t_write));
  });
}

// The background write's outcome, on the training thread: its log line, result, callbacks, or its
// error (a CheckpointError: earlier checkpoints are intact). wait=false only looks.
void Trainer::Impl::collect_checkpoint(bool wait) {
  if (!checkpoint_write.valid()) return;
  if (!wait && checkpoint_write.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
  const Progress& p = checkpoint_progress;
  const auto [path, seconds] = checkpoint_write.get();
  result.checkpoint_path = path;
  log::info("checkpoint: " + result.checkpoint_path + " (step " + std::to_string(p.step) + "; resumes at epoch " +
            std::to_string(p.epoch) + ", batch " + std::to_string(p.batches_done) + "; written in the background in " +
            fmt("%.3f", seconds) + " s)");
  for_callbacks([&](Callback& cb) { cb.on_checkpoint_saved(result.checkpoint_path, p.step); });
}

TrainResult Trainer::Impl::finish() {
  collect_checkpoint(/*wait=*/true);
  const bool stopped = result.preempted || result.cancelled;
  result.epochs = std::min(prog().epoch, c.epochs);
  result.steps = prog().step;
  result.train_loss = prog().last_train_loss;
  result.test_loss = prog().last_test_loss;
  result.test_accuracy = prog().last_test_accuracy;
  result.images_per_sec = prog().train_seconds > 0 ? prog().images_total / prog().train_seconds : 0.0;
  if (!epoch_ips.empty()) {
    // Steady state: the epochs after the first, which carries start-up (cuDNN tuning, capture).
    double sum = 0;
    for (size_t i = epoch_ips.size() > 1 ? 1 : 0; i < epoch_ips.size(); ++i) sum += epoch_ips[i];
    result.images_per_sec_steady = sum / static_cast<double>(epoch_ips.size() > 1 ? epoch_ips.size() - 1 : 1);
  }
  result.peak_gpu_mb = detail::peak_gpu_memory_mb(device);
  result.params_sha256 = params_sha256(*model.module);
  if (!stopped && !c.save_model.empty() && env.rank == 0) {
    save_model_atomically(*model.module, c.save_model);
    log::info("saved the model to " + c.save_model);
  }
  if (pg) {
    // A CUDA graph holding NCCL calls must go before the communicator: destroying a
    // communicator that a live graph still uses hangs in NCCL.
    if (train_step) train_step->invalidate();
    train_step.reset();
    pg->barrier();
    ddp.reset();
    pg->shutdown();
  }
  preemption.reset();
  return result;
}

}  // namespace train
