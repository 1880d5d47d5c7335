// The run log (run_log.h): progress lines, metrics records, the epoch line, the straggler report
// and the run record.
#include "log/run_log.h"

#include "device/train_device.h"
#include "health/rollcall.h"
#include "train/base/log.h"
#include "train/process_group.h"
#include "train/base/absolute_path.h"
#include "train/base/run_record.h"
#include "train/base/text.h"
#include "train/train_spec.h"

#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <cstdlib>
#include <set>

namespace train::detail {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

// ---- the run record

template <class Edit>
void RunRecordWriter::update(const Edit& edit) {
  if (path_.empty() || rank_ != 0) return;
  std::string err;
  try {
    err = RunRecord::update(path_, [&](RunRecord& r) { edit(r); });
  } catch (const std::exception& e) {
    err = e.what();
  }
  if (err.empty() || warned_.exchange(true)) return;  // once, from either thread
  log::warn("run record " + path_ + ": not written (" + err.substr(0, 300) +
            "); training goes on. Hint: trainctl status reads this file; check that its folder is writable "
            "(TRAIN_RUN_RECORD, or .train/runs/ in the job's submit folder).");
}

namespace {
double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

void RunRecordWriter::start(const TrainConfig& config, const DistEnv& env) {
  std::vector<std::string> nodes = env.nodes;
  if (nodes.empty() && env.num_nodes <= 1 && !env.host.empty()) nodes = {env.host};
  const char* launch = std::getenv("TRAIN_RESTART_COUNT");
  LaunchTimes times;
  times.number = launch != nullptr ? std::atoi(launch) : 0;
  if (!path_.empty() && rank_ == 0) times.started = process_start_time();
  update([&](RunRecord& r) {
    r.launch = times;
    r.state = "running";
    if (r.job_id.empty()) r.job_id = env.job_id;
    r.checkpoint_dir = files::absolute(config.checkpoint.dir);
    r.tensorboard_dir = files::absolute(config.logging.tensorboard);
    r.metrics_file = files::absolute(config.logging.metrics);
    r.world_size = env.world_size;
    r.nodes = nodes;
  });
}

void RunRecordWriter::checkpoint(const std::string& path, int64_t step, int epoch) {
  update([&](RunRecord& r) {
    r.last_checkpoint = files::absolute(path);
    r.step = step;
    r.epoch = epoch;
  });
}

void RunRecordWriter::connecting() {
  update([](RunRecord& r) { r.launch.connecting = unix_now(); });
}

void RunRecordWriter::connected() {
  update([](RunRecord& r) { r.launch.connected = unix_now(); });
}

void RunRecordWriter::loaded(const std::string& source, int64_t step) {
  update([&](RunRecord& r) {
    r.launch.loaded = unix_now();
    r.launch.source = source;
    r.launch.resumed_step = step;
  });
}

void RunRecordWriter::progress(int64_t step, bool force) {
  if (path_.empty() || rank_ != 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (trained_ && !force && now - last_progress_ < std::chrono::seconds(1)) return;
  last_progress_ = now;
  Progress p;
  p.step = step;
  p.time = unix_now();
  if (!trained_) p.first_step_time = p.time;
  trained_ = true;
  std::lock_guard<std::mutex> lock(mu_);
  // A first step not yet written stays the launch's first step.
  if (pending_ && pending_->first_step_time > 0) p.first_step_time = pending_->first_step_time;
  pending_ = p;
  if (!writer_.joinable()) writer_ = std::thread([this] { write_progress_loop(); });
  wake_.notify_all();
}

void RunRecordWriter::write_progress_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait(lock, [this] { return pending_.has_value() || stopping_; });
    if (!pending_) return;  // stopping, nothing left to write
    const Progress p = *pending_;
    pending_.reset();
    writing_ = true;
    lock.unlock();
    update([&](RunRecord& r) {
      r.progress_step = p.step;
      r.progress_time = p.time;
      if (p.first_step_time > 0) r.launch.training = p.first_step_time;
    });
    lock.lock();
    writing_ = false;
    wake_.notify_all();
  }
}

void RunRecordWriter::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  wake_.wait(lock, [this] { return !pending_ && !writing_; });
}

RunRecordWriter::~RunRecordWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (writer_.joinable()) writer_.join();  // after the pending progress is written
}

void RunRecordWriter::end(const std::string& state, std::optional<int64_t> step, std::optional<int> epoch) {
  flush();  // the last progress before the end state
  update([&](RunRecord& r) {
    r.state = state;
    if (step) r.step = *step;
    if (epoch) r.epoch = *epoch;
  });
}

std::string record_state(const TrainResult& result) {
  if (result.nonfinite) return "nonfinite";
  if (result.cancelled) return "cancelled";
  if (result.preempted) return "preempted";
  return "done";
}

// ---- progress lines and metrics

struct RunLog::PendingLine {
  std::unique_ptr<PendingValue> loss;
  int epoch = 0;
  int64_t step = 0, b = 0, batches = 0, seen = 0;
  double ips = 0, lr = 0, step_seconds = 0;
};

RunLog::RunLog(const LoggingConfig& config, const DistEnv& env, const TrainDevice& device)
    : config_(config), rank_(env.rank), world_size_(env.world_size), dev_(device),
      record_(RunRecord::path_from_env(), env.rank) {}

RunLog::~RunLog() = default;

void RunLog::open(const TrainSpec& spec, int64_t train_size, int64_t start_step, std::string evaluated) {
  spec_ = &spec;
  train_size_ = train_size;
  evaluated_ = std::move(evaluated);
  if (rank_ != 0) return;
  if (!config_.metrics.empty()) sinks_.push_back(make_jsonl_sink(config_.metrics));
  if (!config_.tensorboard.empty()) sinks_.push_back(make_tensorboard_sink(config_.tensorboard));
  sinks_.insert(sinks_.end(), spec.metrics_sinks.begin(), spec.metrics_sinks.end());
  for (const auto& sink : sinks_) sink->open(start_step);  // a resumed run's records go on from here
}

void RunLog::write_metrics(MetricsRecord record) {
  record.time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (const auto& sink : sinks_) sink->write(record);
}

void RunLog::start_epoch(int64_t step) {
  since_line_.time = Clock::now();
  since_line_.step = step;
  since_line_.images = 0;
}

void RunLog::step_done(const StepDone& d) {
  record_.progress(d.step);  // at most once a second (trainctl run, the goodput benchmark)
  since_line_.images += static_cast<double>(d.samples * d.world_size);
  if (d.batch % config_.log_interval == 0 || d.last) progress(d);
}

void RunLog::progress(const StepDone& d) {
  const auto now = Clock::now();
  const double dt = std::chrono::duration<double>(now - since_line_.time).count();
  auto line = std::make_unique<PendingLine>();
  line->epoch = d.epoch;
  line->step = d.step;
  line->b = d.batch;
  line->batches = d.batches;
  line->seen = std::min<int64_t>(d.start * world_size_, train_size_);
  line->ips = dt > 0 ? since_line_.images / dt : 0.0;
  line->lr = d.lr;
  line->step_seconds = dt / static_cast<double>(std::max<int64_t>(1, d.step - since_line_.step));
  since_line_.step = d.step;
  since_line_.time = now;
  since_line_.images = 0;
  // The previous line's loss arrived long ago; this one's travels while the device works on.
  flush();
  line->loss = dev_.read_later(d.loss);
  pending_ = std::move(line);
  if (dev_.traits().reads_at_once) flush();
}

void RunLog::flush() {
  if (!pending_) return;
  std::unique_ptr<PendingLine> line = std::move(pending_);
  print_line(*line, line->loss->get());
}

void RunLog::print_line(const PendingLine& line, double l) {
  const int64_t total = train_size_;
  log::info("Train Epoch: " + std::to_string(line.epoch) + " [" + std::to_string(line.seen) + "/" + std::to_string(total) +
            " (" + text::format("%.0f", 100.0 * static_cast<double>(line.b) / static_cast<double>(line.batches)) + "%)]\tLoss: " +
            text::format("%.6f", l) + "\t" + text::format("%.0f", line.ips * spec_->units_per_sample) + " " + spec_->unit + "/s");
  MetricsRecord r{"train", line.epoch, line.step,
                  {{"loss", l}, {"lr", line.lr}, {"images_per_sec", line.ips}, {"step_seconds", line.step_seconds}}};
  if (dev_.traits().gpu) r.values.emplace_back("peak_gpu_mb", dev_.peak_memory_mb());
  write_metrics(std::move(r));
}

// ---- the epoch's end

void RunLog::epoch_line(const Progress& p, const EvalResult& ev, double images, double epoch_seconds,
                        double eval_seconds, const std::string& stragglers_text, std::optional<int64_t> skipped,
                        std::optional<double> data_wait) {
  if (epoch_seconds > 0) epoch_ips_.push_back(images / epoch_seconds);
  // The share of the epoch the loop waited for the loader: data (near 100%) or compute (near 0)
  // is the bottleneck.
  const double wait_fraction = data_wait && epoch_seconds > 0 ? *data_wait / epoch_seconds : 0;
  const std::string wait_text = data_wait ? "; data wait " + text::format("%.1f", 100 * wait_fraction) + "% (" +
                                                text::format("%.2f", *data_wait) + " s)"
                                          : "";
  log::info(test_text(ev, evaluated_) + ", epoch time " + text::format("%.1f", epoch_seconds) + " s, evaluation " +
            text::format("%.2f", eval_seconds) + " s" + wait_text +
            (stragglers_text.empty() ? "" : "; " + stragglers_text));
  MetricsRecord line{"epoch", p.epoch, p.step,
                     {{"train_loss", p.last_train_loss}, {"test_loss", ev.loss}, {"test_accuracy", ev.accuracy()},
                      {"images_per_sec", p.train_seconds > 0 ? p.images_total / p.train_seconds : 0.0},
                      {"epoch_images_per_sec", epoch_ips_.empty() ? 0.0 : epoch_ips_.back()},
                      {"epoch_seconds", epoch_seconds}, {"eval_seconds", eval_seconds}}};
  if (dev_.traits().gpu) line.values.emplace_back("peak_gpu_mb", dev_.peak_memory_mb());
  if (skipped) line.values.emplace_back("skipped_steps", static_cast<double>(*skipped));
  if (data_wait) line.values.emplace_back("data_wait_fraction", wait_fraction);
  for (const auto& [name, value] : ev.metrics) {
    if (name != "accuracy") line.values.emplace_back(name, value);  // accuracy is test_accuracy
  }
  write_metrics(std::move(line));
}

std::string test_text(const EvalResult& ev, const std::string& evaluated) {
  return "Test set" + (evaluated.empty() ? "" : " (" + evaluated + ")") + ": Average loss: " + text::format("%.4f", ev.loss) +
         ", Accuracy: " + std::to_string(static_cast<int64_t>(std::llround(ev.accuracy() * static_cast<double>(ev.count)))) +
         "/" + std::to_string(ev.count) + " (" + text::format("%.2f", 100.0 * ev.accuracy()) + "%)";
}

// Steady state: the epochs after the first, which carries start-up (cuDNN tuning, capture).
double RunLog::steady_images_per_sec() const {
  if (epoch_ips_.empty()) return 0;
  double sum = 0;
  for (size_t i = epoch_ips_.size() > 1 ? 1 : 0; i < epoch_ips_.size(); ++i) sum += epoch_ips_[i];
  return sum / static_cast<double>(epoch_ips_.size() > 1 ? epoch_ips_.size() - 1 : 1);
}

}  // namespace train::detail
