// The training loop: whole dataset resident on the device, DistributedSampler batches, DDP when
// the world has more than one rank, evaluation sharded over ranks with exact totals.
#include "train/trainer.h"

#include "train/adadelta.h"
#include "train/datasets/dataset.h"
#include "train/ddp.h"
#include "train/error.h"
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

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

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

at::Device choose_device(const TrainConfig& c, const DistEnv& env) {
  const bool want_cuda = c.device == "cuda" || (c.device == "auto" && c.backend != "gloo");
  if (c.device == "cpu" || !want_cuda) return at::Device(at::kCPU);
  const bool available = torch::cuda::is_available();
  const int64_t count = available ? static_cast<int64_t>(torch::cuda::device_count()) : 0;
  if (count == 0) {
    if (c.device == "auto") return at::Device(at::kCPU);
    const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
    throw ConfigError("--device cuda: expected a visible CUDA device, found none (CUDA_VISIBLE_DEVICES=" +
                          std::string(vis ? vis : "<unset>") + ").",
                      "ask SLURM for GPUs (--gres=gpu:N or --gpus-per-node=N) and run on a GPU "
                      "partition, or use --device cpu.");
  }
  if (env.local_rank >= count) {
    throw ConfigError("local rank " + std::to_string(env.local_rank) + " on " + env.host +
                          ": expected at most one rank per GPU, found " +
                          std::to_string(env.local_world_size) + " ranks on this node and " +
                          std::to_string(count) + " visible GPUs.",
                      "start as many tasks per node as GPUs (--ntasks-per-node = --gpus-per-node).");
  }
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
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
  namespace fs = std::filesystem;
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    torch::serialize::OutputArchive archive;
    for (const auto& p : model.named_parameters()) archive.write(p.key(), p.value().detach().cpu());
    for (const auto& b : model.named_buffers()) archive.write(b.key(), b.value().detach().cpu(), true);
    archive.save_to(tmp);
    fs::rename(tmp, path);
  } catch (const std::exception& e) {
    std::error_code ec;
    fs::remove(tmp, ec);
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
  if (c.bucket_cap_mb <= 0) bad("--bucket-cap-mb", "a positive size in MB", fmt("%g", c.bucket_cap_mb), "the default is 25");
  if (c.device != "auto" && c.device != "cpu" && c.device != "cuda") bad("--device", "auto, cpu or cuda", "'" + c.device + "'", "");
  if (c.backend != "auto" && c.backend != "gloo" && c.backend != "nccl") bad("--backend", "auto, gloo or nccl", "'" + c.backend + "'", "");
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
  return j.dump();
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

  int threads = c.threads;
  if (threads == 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, cores / std::max(1, env.local_world_size));
  }
  at::set_num_threads(threads);

  const at::Device device = choose_device(c, env);
  const Backend backend = choose_backend(c, device);
  if (device.is_cuda()) torch::cuda::manual_seed_all(c.seed);

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
    log::info("rendezvous: " + std::to_string(env.world_size) + " ranks at " + env.master_addr + ":" +
              std::to_string(env.master_port) + ", backend " + to_string(backend));
    pg = ProcessGroup::create(env, po);
  }

  torch::manual_seed(c.seed);
  models::ModelOptions mo;
  mo.dropout = !c.no_dropout;
  std::shared_ptr<models::Model> model = models::make_model(c.model, mo);
  model->to(device);
  model->train();

  std::unique_ptr<DistributedDataParallel> ddp;
  if (pg) {
    DdpOptions dopt;
    dopt.bucket_cap_mb = c.bucket_cap_mb;
    ddp = std::make_unique<DistributedDataParallel>(model, pg, dopt);
  }
  auto optimizer = make_optimizer(c, recipe, *model, lr0);

  DistributedSampler sampler(train_set.size(), env.world_size, env.rank, /*shuffle=*/true, c.seed);
  MetricsWriter metrics(c.metrics, env.rank == 0);
  log::info("training " + c.model + " on " + train_set.name + " (" + std::to_string(train_set.size()) +
            " samples) for " + std::to_string(c.epochs) + " epochs, batch " + std::to_string(batch) +
            " per rank x " + std::to_string(env.world_size) + " ranks, lr " + fmt("%g", lr0) + ", device " +
            device.str() + ", " + std::to_string(threads) + " threads");

  TrainResult result;
  result.world_size = env.world_size;
  double lr = lr0;
  double train_seconds = 0;
  int64_t images_total = 0;
  int64_t step = 0;
  EvalResult last_eval;
  bool stop = false;
  for (int epoch = 1; epoch <= c.epochs && !stop; ++epoch) {
    set_lr(*optimizer, lr);
    sampler.set_epoch(epoch - 1);
    std::vector<int64_t> local = sampler.indices();
    at::Tensor order = at::from_blob(local.data(), {static_cast<int64_t>(local.size())}, at::kLong).to(device);
    const int64_t n_local = order.size(0);
    const int64_t batches = (n_local + batch - 1) / batch;
    at::Tensor loss_sum = torch::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device));
    int64_t epoch_steps = 0;
    auto t0 = Clock::now();
    auto t_log = t0;
    int64_t images_since_log = 0;
    for (int64_t b = 0; b < batches; ++b) {
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
      ++epoch_steps;
      ++step;
      images_since_log += len * env.world_size;
      images_total += len * env.world_size;
      const bool last = b + 1 == batches || c.dry_run || (c.max_steps > 0 && step >= c.max_steps);
      if (b % c.log_interval == 0 || last) {
        const double l = loss.item<double>();
        auto now = Clock::now();
        const double dt = std::chrono::duration<double>(now - t_log).count();
        const double ips = dt > 0 ? images_since_log / dt : 0.0;
        const int64_t seen = std::min<int64_t>(start * env.world_size, train_set.size());
        log::info("Train Epoch: " + std::to_string(epoch) + " [" + std::to_string(seen) + "/" +
                  std::to_string(train_set.size()) + " (" + fmt("%.0f", 100.0 * b / batches) +
                  "%)]\tLoss: " + fmt("%.6f", l) + "\t" + fmt("%.0f", ips) + " img/s");
        nlohmann::ordered_json j = {{"event", "train"}, {"epoch", epoch}, {"step", step},
                                    {"loss", l}, {"lr", lr}, {"images_per_sec", ips}};
        metrics.write(j);
        t_log = now;
        images_since_log = 0;
      }
      if (c.dry_run) break;
      if (c.max_steps > 0 && step >= c.max_steps) {
        stop = true;
        break;
      }
    }
    if (device.is_cuda()) torch::cuda::synchronize();
    const double epoch_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    train_seconds += epoch_seconds;
    at::Tensor mean_loss = (loss_sum / static_cast<double>(std::max<int64_t>(1, epoch_steps))).reshape({1});
    if (pg) {
      pg->allreduce_sum(mean_loss);
      mean_loss /= env.world_size;
    }
    result.train_loss = mean_loss.cpu().item<double>();
    last_eval = evaluate(*model, test_set, c.test_batch_size, pg.get(), env.rank, env.world_size, c.dry_run);
    log::info("Test set: Average loss: " + fmt("%.4f", last_eval.loss) + ", Accuracy: " +
              std::to_string(last_eval.correct) + "/" + std::to_string(last_eval.count) + " (" +
              fmt("%.2f", 100.0 * last_eval.accuracy) + "%), epoch time " + fmt("%.1f", epoch_seconds) + " s");
    nlohmann::ordered_json j = {{"event", "epoch"}, {"epoch", epoch}, {"step", step},
                                {"train_loss", result.train_loss}, {"test_loss", last_eval.loss},
                                {"test_accuracy", last_eval.accuracy},
                                {"epoch_seconds", epoch_seconds},
                                {"images_per_sec", train_seconds > 0 ? images_total / train_seconds : 0.0}};
    metrics.write(j);
    result.epochs = epoch;
    lr *= gamma;  // StepLR(step_size=1): multiplied each epoch, as torch's chainable form does
  }
  result.steps = step;
  result.test_loss = last_eval.loss;
  result.test_accuracy = last_eval.accuracy;
  result.images_per_sec = train_seconds > 0 ? images_total / train_seconds : 0.0;
  result.params_sha256 = params_sha256(*model);
  if (!c.save_model.empty() && env.rank == 0) {
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
