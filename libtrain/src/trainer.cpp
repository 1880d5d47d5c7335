// The training loop: whole dataset resident on the device, DistributedSampler batches, DDP when
// the world has more than one rank, evaluation sharded over ranks with exact totals.
#include "train/trainer.h"

#include "train/adadelta.h"
#include "train/checkpoint.h"
#include "train/datasets/dataset.h"
#include "train/ddp.h"
#include "train/error.h"
#include "train/files.h"
#include "train/launcher/device.h"
#include "train/log.h"
#include "train/models/model.h"
#include "train/process_group.h"
#include "train/sampler.h"

#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>
#include <openssl/evp.h>
#include <torch/cuda.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>
#include <torch/serialize.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/ops/tensor.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <ctime>
#include <sstream>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <thread>

#include <sched.h>
#include <unistd.h>

namespace train {
namespace {

using Clock = std::chrono::steady_clock;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

struct Recipe {
  std::string optimizer;
  int64_t batch_size;
  double lr, gamma, weight_decay;
  std::string dataset;
};

Recipe recipe_for(const std::string& model) {
  if (model == "cifar10") return {"sgd", 256, 0.1, 1.0, 1e-4, "cifar10"};
  return {"adadelta", 64, 1.0, 0.7, 0.0, "fashion-mnist"};
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

at::Device pick_device(const TrainConfig& c, const DistEnv& env) {
  const bool want_cuda = c.device == "cuda" || (c.device == "auto" && c.backend != "gloo");
  if (c.device == "cpu" || !want_cuda) return at::Device(at::kCPU);
  const int count = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  if (count == 0) {
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

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainConfig& c, const Recipe& r,
                                                        torch::nn::Module& model, double lr) {
  const std::string name = c.optimizer == "auto" ? r.optimizer : c.optimizer;
  const double wd = c.weight_decay >= 0 ? c.weight_decay : r.weight_decay;
  if (name == "adadelta") {
    return std::make_unique<optim::Adadelta>(model.parameters(),
                                             optim::AdadeltaOptions(lr).weight_decay(wd));
  }
  return std::make_unique<torch::optim::SGD>(
      model.parameters(), torch::optim::SGDOptions(lr).momentum(c.momentum).weight_decay(wd));
}

void set_lr(torch::optim::Optimizer& opt, double lr) {
  for (auto& g : opt.param_groups()) g.options().set_lr(lr);
}

at::Tensor loss_of(const models::Model& model, const at::Tensor& out, const at::Tensor& target,
                   torch::nn::functional::NLLLossFuncOptions::reduction_t reduction) {
  namespace F = torch::nn::functional;
  if (model.output_kind() == models::OutputKind::log_probs) {
    return F::nll_loss(out, target, F::NLLLossFuncOptions().reduction(reduction));
  }
  return F::nll_loss(torch::log_softmax(out, 1), target, F::NLLLossFuncOptions().reduction(reduction));
}

struct EvalResult {
  double loss = 0, accuracy = 0;
  int64_t correct = 0, count = 0;
};

// Each rank evaluates samples rank, rank + world, ...: no padding, so the all-reduced totals
// equal single-process evaluation.
EvalResult evaluate(models::Model& model, const datasets::TensorDataset& test, int64_t batch,
                    ProcessGroup* pg, int rank, int world, bool one_batch) {
  torch::NoGradGuard no_grad;
  model.eval();
  const auto device = test.images.device();
  at::Tensor idx = torch::arange(rank, test.size(), world, at::TensorOptions().dtype(at::kLong).device(device));
  at::Tensor totals = torch::zeros({3}, at::TensorOptions().dtype(at::kDouble).device(device));
  const int64_t n = idx.size(0);
  for (int64_t start = 0; start < n; start += batch) {
    const int64_t len = std::min(batch, n - start);
    at::Tensor i = idx.narrow(0, start, len);
    at::Tensor x = test.images.index_select(0, i);
    at::Tensor y = test.labels.index_select(0, i);
    at::Tensor out = model.forward(x);
    totals[0] += loss_of(model, out, y, torch::kSum).to(at::kDouble);
    totals[1] += out.argmax(1).eq(y).sum().to(at::kDouble);
    totals[2] += static_cast<double>(len);
    if (one_batch) break;
  }
  if (pg != nullptr) pg->allreduce_sum(totals);
  at::Tensor t = totals.cpu();
  EvalResult r;
  r.count = static_cast<int64_t>(t[2].item<double>());
  r.correct = static_cast<int64_t>(t[1].item<double>());
  r.loss = r.count > 0 ? t[0].item<double>() / r.count : 0.0;
  r.accuracy = r.count > 0 ? static_cast<double>(r.correct) / r.count : 0.0;
  model.train();
  return r;
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

}  // namespace

void validate(const TrainConfig& c) {
  auto bad = [](const std::string& flag, const std::string& expected, const std::string& found,
                const std::string& hint) {
    throw ConfigError(flag + ": expected " + expected + ", found " + found + ".", hint);
  };
  models::model_info(c.model);  // throws with the known names
  if (c.epochs < 1) bad("--epochs", "at least 1", std::to_string(c.epochs), "e.g. --epochs 1");
  if (c.batch_size < 0) bad("--batch-size", "a positive per-rank batch size", std::to_string(c.batch_size), "e.g. --batch-size 64");
  if (c.test_batch_size < 1) bad("--test-batch-size", "a positive batch size", std::to_string(c.test_batch_size), "e.g. --test-batch-size 1000");
  if (c.max_steps < 0) bad("--max-steps", "0 (no limit) or a positive count", std::to_string(c.max_steps), "");
  if (c.limit_train_samples < 0) bad("--limit-train-samples", "0 (all) or a positive count", std::to_string(c.limit_train_samples), "");
  if (c.limit_test_samples < 0) bad("--limit-test-samples", "0 (all) or a positive count", std::to_string(c.limit_test_samples), "");
  if (c.threads < 0) bad("--threads", "0 (auto) or a positive count", std::to_string(c.threads), "");
  if (c.log_interval < 1) bad("--log-interval", "a positive number of steps", std::to_string(c.log_interval), "");
  if (c.dist_timeout_sec <= 0) bad("--dist-timeout", "a positive number of seconds", fmt("%g", c.dist_timeout_sec), "the default is 300");
  if (c.shm_allreduce != "auto" && c.shm_allreduce != "off") bad("--shm-allreduce", "auto or off", "'" + c.shm_allreduce + "'", "auto sums CPU gradients of ranks on one machine in shared memory; off always uses Gloo");
  if (c.bucket_cap_mb <= 0) bad("--bucket-cap-mb", "a positive size in MB", fmt("%g", c.bucket_cap_mb), "the default is 25");
  if (c.device != "auto" && c.device != "cpu" && c.device != "cuda") bad("--device", "auto, cpu or cuda", "'" + c.device + "'", "");
  if (c.backend != "auto" && c.backend != "gloo" && c.backend != "nccl") bad("--backend", "auto, gloo or nccl", "'" + c.backend + "'", "");
  if (c.checkpoint_every < 0) bad("--checkpoint-every", "0 (epoch ends only) or a positive number of steps", std::to_string(c.checkpoint_every), "");
  if (c.keep_checkpoints < 1) bad("--keep-checkpoints", "at least 1", std::to_string(c.keep_checkpoints), "keep 2 or more so a corrupt newest file can fall back");
  if (c.time_margin_sec < 0) bad("--time-margin", "0 or more seconds", fmt("%g", c.time_margin_sec), "the default is 60");
  if (c.resume != "auto" && c.resume != "never" && !files::is_regular_file(c.resume)) {
    bad("--resume", "auto, never or the path of a checkpoint file", "'" + c.resume + "', which is not a file", "list the checkpoints with ls CHECKPOINT_DIR");
  }
  if (c.tf32 != "auto" && c.tf32 != "on" && c.tf32 != "off") bad("--tf32", "auto, on or off", "'" + c.tf32 + "'", "");
  if (c.optimizer != "auto" && c.optimizer != "adadelta" && c.optimizer != "sgd") bad("--optimizer", "auto, adadelta or sgd", "'" + c.optimizer + "'", "");
  if (c.lr != -1 && !(c.lr > 0)) bad("--lr", "a positive learning rate", fmt("%g", c.lr), "the recipe's default is 1.0 (Adadelta) or 0.1 (SGD)");
  if (c.gamma != -1 && !(c.gamma > 0 && c.gamma <= 1)) bad("--gamma", "a factor in (0, 1]", fmt("%g", c.gamma), "the MNIST recipe uses 0.7");
  if (c.device == "cpu" && c.backend == "nccl") bad("--backend nccl", "a CUDA device", "--device cpu", "use --backend gloo on CPU");
}

std::string params_sha256(const torch::nn::Module& module) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  for (const auto& p : module.parameters()) {
    at::Tensor t = p.detach().to(at::kCPU, at::kFloat).contiguous();
    EVP_DigestUpdate(ctx, t.const_data_ptr(), t.numel() * sizeof(float));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned i = 0; i < len; ++i) {
    hex += kHex[md[i] >> 4];
    hex += kHex[md[i] & 15];
  }
  return hex;
}

std::string to_json(const TrainResult& r) {
  nlohmann::ordered_json j;
  j["event"] = "done";
  j["epochs"] = r.epochs;
  j["steps"] = r.steps;
  j["train_loss"] = r.train_loss;
  j["test_loss"] = r.test_loss;
  j["test_accuracy"] = r.test_accuracy;
  j["images_per_sec"] = r.images_per_sec;
  j["world_size"] = r.world_size;
  j["params_sha256"] = r.params_sha256;
  if (r.preempted) {
    j["event"] = "preempted";
    j["reason"] = r.preempt_reason;
    j["checkpoint"] = r.checkpoint_path;
    j["requeued"] = r.requeued;
  }
  return j.dump();
}

namespace {

// Set by the preemption signal handler; read at step boundaries.
std::atomic<int> g_preempt_signal{0};

extern "C" void on_preempt_signal(int sig) { g_preempt_signal.store(sig); }

void install_preempt_handlers(const std::vector<int>& signals) {
  for (int sig : signals) {
    struct sigaction sa {};
    sa.sa_handler = on_preempt_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(sig, &sa, nullptr);
  }
}

// The SLURM job's end time (epoch seconds) from squeue, or 0 when unknown or not under SLURM.
int64_t slurm_job_end_time(const DistEnv& env) {
  if (env.job_id.empty()) return 0;
  const std::string cmd = "squeue -h -j '" + env.job_id + "' -o %e 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return 0;
  char buf[128] = {0};
  std::string out;
  while (std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  ::pclose(p);
  std::tm tm{};
  if (::strptime(out.c_str(), "%Y-%m-%dT%H:%M:%S", &tm) == nullptr) return 0;  // N/A, UNLIMITED
  tm.tm_isdst = -1;
  return static_cast<int64_t>(std::mktime(&tm));
}

// `scontrol requeue` for this job (the array task when in an array). Returns success.
bool slurm_requeue(const DistEnv& env) {
  const char* array_job = std::getenv("SLURM_ARRAY_JOB_ID");
  const char* array_task = std::getenv("SLURM_ARRAY_TASK_ID");
  std::string id = env.job_id;
  if (array_job != nullptr && array_task != nullptr) id = std::string(array_job) + "_" + array_task;
  const std::string cmd = "scontrol requeue '" + id + "' 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return false;
  char buf[256];
  std::string out;
  while (std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  const int rc = ::pclose(p);
  if (rc != 0) {
    log::error("scontrol requeue " + id + " failed: " + out +
               " Hint: the job needs --requeue (scripts/ddp.sh sets it) and JobRequeue allowed by the cluster.");
    return false;
  }
  log::warn("requeued job " + id + "; it resumes from the checkpoint when it starts again");
  return true;
}

// The flags that shape a run: stored in checkpoints and compared on resume.
nlohmann::ordered_json shape_of(const TrainConfig& c, const std::string& dataset, int64_t batch,
                                double lr0, double gamma) {
  return {{"model", c.model}, {"dataset", dataset}, {"batch_size", batch}, {"lr", lr0}, {"gamma", gamma},
          {"optimizer", c.optimizer}, {"momentum", c.momentum}, {"weight_decay", c.weight_decay},
          {"seed", c.seed}, {"epochs", c.epochs}, {"limit_train_samples", c.limit_train_samples},
          {"limit_test_samples", c.limit_test_samples}, {"no_dropout", c.no_dropout}};
}

// Where the loop is and what it has accumulated: all of it goes into a checkpoint.
struct Progress {
  int epoch = 1;                 // epoch in progress (1-based)
  int64_t batches_done = 0;      // batches of `epoch` already trained by every rank
  int64_t step = 0;              // optimizer steps so far
  double lr = 0;
  int64_t epoch_steps = 0;
  int64_t images_total = 0;
  double train_seconds = 0;
  double last_test_loss = 0, last_test_accuracy = 0, last_train_loss = 0;
};

at::Tensor i64(int64_t v) { return torch::tensor({v}, at::kLong); }
at::Tensor f64(double v) { return torch::tensor({v}, at::kDouble); }

void write_checkpoint(CheckpointDir& dir, models::Model& model, torch::optim::Optimizer& opt,
                      const Progress& p, const at::Tensor& loss_sum, const nlohmann::ordered_json& shape,
                      const DistEnv& env, const at::Device& device, TrainResult& result) {
  torch::NoGradGuard no_grad;
  torch::serialize::OutputArchive a;
  for (const auto& kv : model.named_parameters()) a.write("model/" + kv.key(), kv.value().detach().cpu());
  for (const auto& kv : model.named_buffers()) a.write("model/" + kv.key(), kv.value().detach().cpu(), true);
  torch::serialize::OutputArchive oa;
  opt.save(oa);
  a.write("optimizer", oa);
  a.write("progress/epoch", i64(p.epoch));
  a.write("progress/batches_done", i64(p.batches_done));
  a.write("progress/samples_done", i64(p.batches_done * shape["batch_size"].get<int64_t>() * env.world_size));
  a.write("progress/step", i64(p.step));
  a.write("progress/lr", f64(p.lr));
  a.write("progress/loss_sum", loss_sum.detach().to(at::kCPU).reshape({1}));
  a.write("progress/epoch_steps", i64(p.epoch_steps));
  a.write("progress/images_total", i64(p.images_total));
  a.write("progress/train_seconds", f64(p.train_seconds));
  a.write("progress/last_eval", torch::tensor({p.last_test_loss, p.last_test_accuracy, p.last_train_loss}, at::kDouble));
  a.write("world_size", i64(env.world_size));
  a.write("shape", c10::IValue(shape.dump()));
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
  result.checkpoint_path = dir.save(a, p.step);
  log::info("checkpoint: " + result.checkpoint_path + " (step " + std::to_string(p.step) + "; resumes at epoch " +
            std::to_string(p.epoch) + ", batch " + std::to_string(p.batches_done) + ")");
}

}  // namespace

std::vector<int> parse_signal_list(const std::string& list) {
  std::vector<int> out;
  if (list.empty() || list == "none") return out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::string n = item;
    for (auto& ch : n) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (n.rfind("SIG", 0) == 0) n = n.substr(3);
    int sig = n == "USR1" ? SIGUSR1 : n == "USR2" ? SIGUSR2 : n == "TERM" ? SIGTERM : n == "INT" ? SIGINT
            : n == "HUP" ? SIGHUP : n == "XCPU" ? SIGXCPU : 0;
    if (sig == 0) {
      throw ConfigError("--preempt-signals: expected a comma list of USR1, USR2, TERM, INT, HUP, XCPU (or none), found '" +
                            item + "'.",
                        "match the signal your sbatch --signal option sends, e.g. --preempt-signals USR2,TERM.");
    }
    out.push_back(sig);
  }
  return out;
}

TrainResult run_training(const TrainConfig& c, const DistEnv& env) {
  validate(c);
  const Recipe recipe = recipe_for(c.model);
  const models::ModelInfo& info = models::model_info(c.model);
  const std::string dataset_name = c.dataset.empty() ? recipe.dataset : c.dataset;
  std::string data_dir = c.data_dir;
  if (data_dir.empty()) {
    data_dir = datasets::default_fashion_mnist_dir();
    if (data_dir.empty() || dataset_name != "fashion-mnist") {
      throw ConfigError("--data: expected the folder holding the " + dataset_name + " files, found none given.",
                        "pass --data DIR (for Fashion-MNIST: apt-get install dataset-fashion-mnist, "
                        "then --data /usr/share/datasets/fashion-mnist).");
    }
  }
  const int64_t batch = c.batch_size > 0 ? c.batch_size : recipe.batch_size;
  const double lr0 = c.lr > 0 ? c.lr : recipe.lr;
  const double gamma = c.gamma > 0 ? c.gamma : recipe.gamma;
  const std::vector<int> preempt_signals = parse_signal_list(c.preempt_signals);
  install_preempt_handlers(preempt_signals);

  int threads = c.threads;
  if (threads == 0) {
    // The CPUs this process may run on (SLURM's task affinity, taskset, cgroup cpusets), not
    // every core of the machine; shared among the ranks on this node.
    cpu_set_t set;
    int cores = 0;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) cores = CPU_COUNT(&set);
    if (cores <= 0) cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const bool shared = cores >= static_cast<int>(std::thread::hardware_concurrency());
    threads = std::max(1, shared ? cores / std::max(1, env.local_world_size) : cores);
  }
  at::set_num_threads(threads);

  const at::Device device = pick_device(c, env);
  const Backend backend = choose_backend(c, device);
  if (device.is_cuda()) {
    if (c.tf32 != "auto") {
      at::globalContext().setAllowTF32CuDNN(c.tf32 == "on");
      at::globalContext().setAllowTF32CuBLAS(c.tf32 == "on");
    }
    if (c.deterministic) {
      at::globalContext().setDeterministicCuDNN(true);
      at::globalContext().setBenchmarkCuDNN(false);
    }
  }

  // Data first: a bad file should fail before we wait for peers.
  datasets::TensorDataset train_set = datasets::load_dataset(
      dataset_name, data_dir, datasets::Split::train, {c.limit_train_samples});
  datasets::TensorDataset test_set = datasets::load_dataset(
      dataset_name, data_dir, datasets::Split::test, {c.limit_test_samples});
  const auto& shape = train_set.images.sizes();
  if (shape[1] != info.channels || shape[2] != info.height || shape[3] != info.width) {
    throw ConfigError("--model " + c.model + " with --dataset " + dataset_name + ": expected images of " +
                          std::to_string(info.channels) + "x" + std::to_string(info.height) + "x" +
                          std::to_string(info.width) + ", found " + std::to_string(shape[1]) + "x" +
                          std::to_string(shape[2]) + "x" + std::to_string(shape[3]) + ".",
                      "use --model mnist with mnist/fashion-mnist and --model cifar10 with cifar10.");
  }
  train_set.images = train_set.images.to(device);
  train_set.labels = train_set.labels.to(device);
  test_set.images = test_set.images.to(device);
  test_set.labels = test_set.labels.to(device);

  std::shared_ptr<ProcessGroup> pg;
  if (env.world_size > 1) {
    ProcessGroupOptions po;
    po.backend = backend;
    po.timeout = std::chrono::milliseconds(static_cast<int64_t>(c.dist_timeout_sec * 1000));
    po.device_index = device.is_cuda() ? device.index() : 0;
    po.shared_memory_allreduce = c.shm_allreduce == "auto";
    log::info("rendezvous: " + std::to_string(env.world_size) + " ranks at " + env.master_addr + ":" +
              std::to_string(env.master_port) + ", backend " + to_string(backend));
    pg = ProcessGroup::create(env, po);
  }

  torch::manual_seed(c.seed);
  if (device.is_cuda()) torch::cuda::manual_seed_all(c.seed);
  models::ModelOptions mo;
  mo.dropout = !c.no_dropout;
  std::shared_ptr<models::Model> model = models::make_model(c.model, mo);
  model->to(device);
  model->train();
  auto optimizer = make_optimizer(c, recipe, *model, lr0);
  const nlohmann::ordered_json run_shape = shape_of(c, dataset_name, batch, lr0, gamma);

  Progress prog;
  prog.lr = lr0;
  at::Tensor loss_sum = torch::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device));
  TrainResult result;
  result.world_size = env.world_size;

  // Resume before DDP is built: its broadcast then spreads rank 0's restored weights.
  std::unique_ptr<CheckpointDir> ckdir;
  if (!c.checkpoint_dir.empty()) ckdir = std::make_unique<CheckpointDir>(c.checkpoint_dir, c.keep_checkpoints);
  std::unique_ptr<torch::serialize::InputArchive> resume_archive;
  std::string resume_path;
  if (c.resume != "never" && c.resume != "auto") {
    resume_path = c.resume;
    resume_archive = CheckpointDir::load_file(c.resume);
  } else if (c.resume == "auto" && ckdir) {
    // Rank 0 picks the newest valid checkpoint and tells the others which step it is, so that
    // every rank resumes from the same file.
    int64_t chosen = -1;
    if (env.rank == 0) {
      auto found = ckdir->load_latest_valid();
      if (found) {
        chosen = found->second.step;
        resume_path = found->second.path;
        resume_archive = std::move(found->first);
      }
    }
    if (pg) {
      at::Tensor t = i64(chosen);
      if (device.is_cuda()) t = t.to(device);
      pg->broadcast(t, 0);
      chosen = t.cpu().item<int64_t>();
      if (env.rank != 0 && chosen >= 0) {
        resume_path = ckdir->path_for(chosen);
        resume_archive = CheckpointDir::load_file(resume_path);
      }
    }
  }
  if (resume_archive) {
    torch::NoGradGuard no_grad;
    auto& a = *resume_archive;
    c10::IValue shape_iv;
    a.read("shape", shape_iv);
    auto saved = nlohmann::ordered_json::parse(shape_iv.toStringRef());
    for (const char* key : {"model", "dataset"}) {
      if (saved[key] != run_shape[key]) {
        throw CheckpointError(resume_path + ": written for --" + std::string(key) + " " + saved[key].dump() +
                                  ", but this run has " + run_shape[key].dump() + ".",
                              "resume with the same arguments, or point --checkpoint-dir at a fresh folder.");
      }
    }
    for (auto it = saved.begin(); it != saved.end(); ++it) {
      if (run_shape.contains(it.key()) && run_shape[it.key()] != it.value()) {
        log::warn("resuming " + resume_path + " with a different " + it.key() + " (" + it.value().dump() + " -> " +
                  run_shape[it.key()].dump() + "): results will differ from an uninterrupted run");
      }
    }
    for (auto& kv : model->named_parameters()) {
      at::Tensor t;
      a.read("model/" + kv.key(), t);
      kv.value().copy_(t);
    }
    for (auto& kv : model->named_buffers()) {
      at::Tensor t;
      a.read("model/" + kv.key(), t, true);
      kv.value().copy_(t);
    }
    torch::serialize::InputArchive oa;
    a.read("optimizer", oa);
    optimizer->load(oa);
    // Optimizer state was loaded on the CPU; move it next to the parameters.
    if (device.is_cuda()) {
      for (auto& kv : optimizer->state()) {
        if (auto* s = dynamic_cast<optim::AdadeltaParamState*>(kv.second.get())) {
          s->square_avg(s->square_avg().to(device));
          s->acc_delta(s->acc_delta().to(device));
        } else if (auto* m = dynamic_cast<torch::optim::SGDParamState*>(kv.second.get())) {
          if (m->momentum_buffer().defined()) m->momentum_buffer(m->momentum_buffer().to(device));
        }
      }
    }
    auto read_i64 = [&](const std::string& k) { at::Tensor t; a.read(k, t); return t.item<int64_t>(); };
    auto read_f64 = [&](const std::string& k) { at::Tensor t; a.read(k, t); return t.item<double>(); };
    prog.epoch = static_cast<int>(read_i64("progress/epoch"));
    prog.batches_done = read_i64("progress/batches_done");
    prog.step = read_i64("progress/step");
    prog.lr = read_f64("progress/lr");
    prog.epoch_steps = read_i64("progress/epoch_steps");
    prog.images_total = read_i64("progress/images_total");
    prog.train_seconds = read_f64("progress/train_seconds");
    at::Tensor ev;
    a.read("progress/last_eval", ev);
    prog.last_test_loss = ev[0].item<double>();
    prog.last_test_accuracy = ev[1].item<double>();
    prog.last_train_loss = ev[2].item<double>();
    at::Tensor ls;
    a.read("progress/loss_sum", ls);
    loss_sum = ls.reshape({}).to(device);
    const int64_t saved_world = read_i64("world_size");
    if (saved_world != env.world_size) {
      // Re-shard: the samples every rank consumed so far, in units of the new global batch.
      const int64_t samples_done = read_i64("progress/samples_done");
      prog.batches_done = samples_done / (batch * env.world_size);
      log::warn("resuming a world-size " + std::to_string(saved_world) + " checkpoint with world size " +
                std::to_string(env.world_size) + ": the sampler re-shards the epoch, so results will differ "
                "from the uninterrupted run");
    }
    at::Tensor rng;
    a.read("rng/cpu", rng);
    {
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(rng);
    }
    if (device.is_cuda()) {
      at::Tensor crng;
      if (a.try_read("rng/cuda", crng)) {
        auto gen = at::globalContext().defaultGenerator(device);
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_state(crng);
      }
    }
    result.checkpoint_path = resume_path;
    log::info("resumed from " + resume_path + ": epoch " + std::to_string(prog.epoch) + ", step " +
              std::to_string(prog.step) + ", " + std::to_string(prog.batches_done) + " batches into the epoch");
  }

  std::unique_ptr<DistributedDataParallel> ddp;
  if (pg) {
    DdpOptions dopt;
    dopt.bucket_cap_mb = c.bucket_cap_mb;
    ddp = std::make_unique<DistributedDataParallel>(model, pg, dopt);
  }

  DistributedSampler sampler(train_set.size(), env.world_size, env.rank, /*shuffle=*/true, c.seed);
  MetricsWriter metrics(c.metrics, env.rank == 0);
  log::info("training " + c.model + " on " + train_set.name + " (" + std::to_string(train_set.size()) +
            " samples) for " + std::to_string(c.epochs) + " epochs, batch " + std::to_string(batch) +
            " per rank x " + std::to_string(env.world_size) + " ranks, lr " + fmt("%g", lr0) + ", device " +
            device.str() + ", " + std::to_string(threads) + " threads");

  // Preemption: rank 0 knows the job's end time; every rank may get a signal. One all-reduce at
  // a step boundary makes them agree. On CUDA it costs a host sync, so it runs every few steps.
  const int64_t end_time = env.rank == 0 ? slurm_job_end_time(env) : 0;
  if (end_time > 0) {
    log::info("SLURM job ends at epoch time " + std::to_string(end_time) + "; checkpointing " +
              fmt("%.0f", c.time_margin_sec) + " s before it");
  }
  const int64_t check_every = device.is_cuda() ? 20 : 1;
  auto stop_requested = [&](std::string& reason) {
    int local = g_preempt_signal.load();
    bool deadline = end_time > 0 && static_cast<double>(std::time(nullptr)) >= end_time - c.time_margin_sec;
    int64_t code = local != 0 ? local : (deadline ? 1000 : 0);
    if (pg) {
      at::Tensor t = i64(code);
      if (device.is_cuda()) t = t.to(device);
      pg->allreduce_sum(t);
      code = t.cpu().item<int64_t>();
    }
    if (code == 0) return false;
    reason = local != 0 ? std::string("signal ") + ::strsignal(local) : code >= 1000 ? "the job's time limit" : "a signal on another rank";
    return true;
  };
  auto preempt = [&](const std::string& reason) {
    result.preempted = true;
    result.preempt_reason = reason;
    log::warn("stopping for " + reason + " at epoch " + std::to_string(prog.epoch) + ", step " + std::to_string(prog.step));
    if (ckdir && env.rank == 0) {
      write_checkpoint(*ckdir, *model, *optimizer, prog, loss_sum, run_shape, env, device, result);
    } else if (!ckdir) {
      log::warn("no --checkpoint-dir: the progress of this run is lost");
    }
    if (pg) pg->barrier();  // the checkpoint is durable before anyone leaves
    if (ckdir && env.rank == 0 && c.requeue && !env.job_id.empty()) result.requeued = slurm_requeue(env);
  };

  for (; prog.epoch <= c.epochs && !result.preempted; ++prog.epoch) {
    set_lr(*optimizer, prog.lr);
    sampler.set_epoch(prog.epoch - 1);
    std::vector<int64_t> local = sampler.indices();
    at::Tensor order = at::from_blob(local.data(), {static_cast<int64_t>(local.size())}, at::kLong).to(device);
    const int64_t n_local = order.size(0);
    const int64_t batches = (n_local + batch - 1) / batch;
    auto t0 = Clock::now();
    auto t_log = t0;
    int64_t images_since_log = 0;
    bool stop = false;
    for (int64_t b = prog.batches_done; b < batches; ++b) {
      const int64_t start = b * batch;
      const int64_t len = std::min(batch, n_local - start);
      at::Tensor i = order.narrow(0, start, len);
      at::Tensor x = train_set.images.index_select(0, i);
      at::Tensor y = train_set.labels.index_select(0, i);
      optimizer->zero_grad();
      at::Tensor out = model->forward(x);
      at::Tensor loss = loss_of(*model, out, y, torch::kMean);
      loss.backward();
      optimizer->step();
      loss_sum += loss.detach().to(at::kDouble);
      ++prog.epoch_steps;
      ++prog.step;
      prog.batches_done = b + 1;
      images_since_log += len * env.world_size;
      prog.images_total += len * env.world_size;
      const bool last = b + 1 == batches || c.dry_run || (c.max_steps > 0 && prog.step >= c.max_steps);
      if (b % c.log_interval == 0 || last) {
        const double l = loss.item<double>();
        auto now = Clock::now();
        const double dt = std::chrono::duration<double>(now - t_log).count();
        const double ips = dt > 0 ? images_since_log / dt : 0.0;
        const int64_t seen = std::min<int64_t>(start * env.world_size, train_set.size());
        log::info("Train Epoch: " + std::to_string(prog.epoch) + " [" + std::to_string(seen) + "/" +
                  std::to_string(train_set.size()) + " (" + fmt("%.0f", 100.0 * b / batches) +
                  "%)]\tLoss: " + fmt("%.6f", l) + "\t" + fmt("%.0f", ips) + " img/s");
        metrics.write({{"event", "train"}, {"epoch", prog.epoch}, {"step", prog.step},
                       {"loss", l}, {"lr", prog.lr}, {"images_per_sec", ips}});
        t_log = now;
        images_since_log = 0;
      }
      if (c.dry_run) break;
      if (c.max_steps > 0 && prog.step >= c.max_steps) {
        stop = true;
        break;
      }
      if (b + 1 < batches) {
        std::string reason;
        if (prog.step % check_every == 0 && stop_requested(reason)) {
          prog.train_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
          preempt(reason);
          break;
        }
        if (ckdir && c.checkpoint_every > 0 && prog.step % c.checkpoint_every == 0) {
          prog.train_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
          t0 = Clock::now();
          if (env.rank == 0) write_checkpoint(*ckdir, *model, *optimizer, prog, loss_sum, run_shape, env, device, result);
        }
      }
    }
    if (result.preempted) break;
    if (device.is_cuda()) torch::cuda::synchronize();
    const double epoch_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    prog.train_seconds += epoch_seconds;
    at::Tensor mean_loss = (loss_sum / static_cast<double>(std::max<int64_t>(1, prog.epoch_steps))).reshape({1});
    if (pg) {
      pg->allreduce_sum(mean_loss);
      mean_loss /= env.world_size;
    }
    prog.last_train_loss = mean_loss.cpu().item<double>();
    EvalResult ev = evaluate(*model, test_set, c.test_batch_size, pg.get(), env.rank, env.world_size, c.dry_run);
    prog.last_test_loss = ev.loss;
    prog.last_test_accuracy = ev.accuracy;
    log::info("Test set: Average loss: " + fmt("%.4f", ev.loss) + ", Accuracy: " + std::to_string(ev.correct) + "/" +
              std::to_string(ev.count) + " (" + fmt("%.2f", 100.0 * ev.accuracy) + "%), epoch time " +
              fmt("%.1f", epoch_seconds) + " s");
    metrics.write({{"event", "epoch"}, {"epoch", prog.epoch}, {"step", prog.step},
                   {"train_loss", prog.last_train_loss}, {"test_loss", ev.loss}, {"test_accuracy", ev.accuracy},
                   {"images_per_sec", prog.train_seconds > 0 ? prog.images_total / prog.train_seconds : 0.0}});
    result.epochs = prog.epoch;
    // Next epoch's starting state: StepLR(step_size=1) multiplies each epoch, as torch's chainable form does.
    prog.lr *= gamma;
    prog.batches_done = 0;
    prog.epoch_steps = 0;
    loss_sum.zero_();
    if (stop) break;
    if (ckdir && env.rank == 0) {
      Progress next = prog;
      next.epoch += 1;
      write_checkpoint(*ckdir, *model, *optimizer, next, loss_sum, run_shape, env, device, result);
    }
  }
  result.epochs = std::min(prog.epoch, c.epochs);
  result.steps = prog.step;
  result.train_loss = prog.last_train_loss;
  result.test_loss = prog.last_test_loss;
  result.test_accuracy = prog.last_test_accuracy;
  result.images_per_sec = prog.train_seconds > 0 ? prog.images_total / prog.train_seconds : 0.0;
  result.params_sha256 = params_sha256(*model);
  if (!result.preempted && !c.save_model.empty() && env.rank == 0) {
    save_model_atomically(*model, c.save_model);
    log::info("saved the model to " + c.save_model);
  }
  if (pg) {
    pg->barrier();
    ddp.reset();
    pg->shutdown();
  }
  return result;
}

}  // namespace train
