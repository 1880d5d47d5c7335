// The one gradient reducer: buckets the trainable parameters (last layer first, DDP's size caps),
// hooks their gradient accumulators, and hands each bucket, once all its gradients are done and
// in bucket order on every rank, to the communication hook that averages it (CommHook, below).
// Eager DDP, the shared-memory sum and the captured CUDA-graph step all run through it; only the
// hooks differ. Models: c10d's Reducer with its GradBucket/CommHook, Flashlight's add()/finalize().
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd
namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace train {

class CommHook;

/// How the parameters are cut into buckets.
struct BucketOptions {
  double cap_mb = 25.0;       ///< later buckets close once they reach this size
  double first_cap_mb = 1.0;  ///< the first bucket (the last layers) is small so it starts early
  /// The first module (whose gradients the backward makes last) gets a bucket of its own, so the
  /// rest of what would be the last bucket is averaged while its backward still runs. Worth it
  /// where a bucket costs little (the GPUs' peer all-reduce).
  bool split_first_module = false;
};

/// One bucket: parameters of one dtype, consecutive in the order the backward finishes them.
struct GradBucket {
  std::vector<size_t> params;  ///< indices into Reducer::params()
  at::ScalarType dtype = at::kFloat;
  int64_t numel = 0;
  size_t bytes() const { return static_cast<size_t>(numel) * c10::elementSize(dtype); }
};

/// Averages gradients over the ranks while the backward runs.
///
/// Each trainable parameter's AccumulateGrad node gets a post-hook. When a gradient is done the
/// reducer hands it to its bucket's hook (CommHook::add); when a bucket is complete, it and every
/// complete bucket after the last one launched go to their hooks (CommHook::launch), strictly in
/// bucket order: collectives pair up by sequence, so every rank must launch alike. At the end of
/// the backward every bucket's hook finalizes it, in bucket order: then each parameter's .grad
/// holds the average (or the hook has applied the update).
///
/// The end of a backward is found by an autograd engine callback (automatic), or the caller says
/// it (manual: finish()), as a captured CUDA-graph step does. Every parameter that requires grad
/// must get a gradient in each averaged backward.
class Reducer {
 public:
  /// Buckets the trainable parameters of `module` (all on one device). Throws train::ConfigError
  /// for a module without trainable parameters or with parameters on several devices.
  Reducer(torch::nn::Module& module, const BucketOptions& options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  /// The trainable parameters in registration order, and their names.
  const std::vector<at::Tensor>& params() const { return params_; }
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<GradBucket>& buckets() const { return buckets_; }
  /// Where parameter i sits: its bucket and its place in that bucket.
  size_t bucket_of(size_t i) const { return bucket_of_[i]; }
  size_t index_in_bucket(size_t i) const { return index_in_bucket_[i]; }

  /// The hook for each bucket (one entry per bucket; entries may share a hook), and whether the
  /// caller ends each backward with finish() (manual) instead of an engine callback.
  struct Hooks {
    std::vector<std::shared_ptr<CommHook>> per_bucket;
    bool manual = false;
  };
  /// Installs `hooks` for the backward passes that follow, and returns the ones it replaces.
  Hooks set_hooks(Hooks hooks);
  /// Every bucket's hook is `hook`.
  Hooks all_buckets(std::shared_ptr<CommHook> hook, bool manual = false) const;

  /// false: backward passes only accumulate local gradients (DDP's no_sync); the next averaged
  /// backward averages the sum.
  void set_enabled(bool enabled);
  bool enabled() const;

  /// Manual mode: the backward is over; checks that every gradient arrived, then finalizes every
  /// bucket. Throws c10::Error naming the parameters without a gradient.
  void finish();

  /// Forgets a backward that stopped midway (a capture that failed): the next one starts afresh.
  void abandon_backward();

  /// Called by the accumulator hooks.
  void mark_ready(size_t i);

 private:
  void collect_params(torch::nn::Module& module);
  void plan_buckets(const BucketOptions& options);
  void start_backward();
  void finalize(bool from_engine);
  std::string missing_gradients() const;

  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<GradBucket> buckets_;
  std::vector<size_t> bucket_of_, index_in_bucket_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keep the hooks alive
  Hooks hooks_;
  mutable std::mutex mu_;
  bool enabled_ = true;
  bool in_backward_ = false;
  std::vector<size_t> pending_;  // per bucket: gradients still missing in this backward
  std::vector<bool> ready_;      // per parameter
  size_t next_launch_ = 0;
  std::shared_ptr<bool> alive_;  // the engine callback's check that the reducer still exists
};

/// Per-bucket communication: how one bucket's gradients are averaged over the ranks. The
/// reducer calls add() for each gradient as it is done, launch() for each complete bucket in
/// bucket order, and finalize() for every bucket, in bucket order, at the end of the backward.
/// A hook may also update the bucket's parameters (the optimizer's epilogue).
class CommHook {
 public:
  virtual ~CommHook() = default;
  /// Gradient `i` (an index into r.params()) of bucket `k` is done for this backward.
  virtual void add(Reducer& r, size_t k, size_t i) { (void)r, (void)k, (void)i; }
  /// Every gradient of bucket `k` is done: start averaging it.
  virtual void launch(Reducer& r, size_t k) = 0;
  /// The backward is over: leave bucket `k`'s average in its parameters' gradients.
  virtual void finalize(Reducer& r, size_t k) { (void)r, (void)k; }
};

}  // namespace train
