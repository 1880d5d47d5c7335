// Non-finite losses and gradients (--nonfinite): a watch that records, with device ops
// only, the first step whose loss or gradients held a NaN or an infinity, for the ranks' stop
// agreement to carry; or, with --nonfinite skip, decides on the host before each update whether
// to apply it. Private.
#pragma once

#include "train/config.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace train {
class ProcessGroup;
}  // namespace train

namespace train::detail {

struct GradClip;  // step/grad_clip.h

class NonFiniteWatch {
 public:
  NonFiniteWatch(const TrainConfig& config, torch::nn::Module& model, const at::Device& device, int rank,
                 int world_size);
  bool skip_mode() const { return skip_; }
  /// --clip-grad-norm: after_step reads the gradients' norms the clipping computed (each step's,
  /// before clipping) instead of computing them again. `clip` outlives the watch's use.
  void share_norms(const GradClip* clip) { clip_ = clip; }

  /// --nonfinite stop, after each step: notes (device ops, no host sync) whether the step's loss
  /// and its gradients' norm are finite, and the first step where they weren't.
  void after_step(const at::Tensor& loss, int64_t step);
  /// A CUDA graph's capture, at the end of the captured step: the same note as after_step, its step
  /// read from a device counter that the captured ops advance, so that each replay notes its own
  /// step with no host work. Each replay of such a graph follows a before_replay().
  void note_in_capture(const at::Tensor& loss);
  /// The Trainer, before each step runs: the step's number (noted_in_graph() is false until a
  /// replay notes it).
  void step_begins(int64_t step) {
    pending_step_ = step;
    noted_ = false;
  }
  /// Before a replay of a graph that holds note_in_capture(): sets the device counter to the step
  /// step_begins() named where it isn't that already (after an eager step), and counts the step noted.
  void before_replay();
  /// Whether the graph's replay noted this step (after_step is then not needed).
  bool noted_in_graph() const { return noted_; }

  /// For the stop agreement: an int64 scalar on the device, 1 once a non-finite value was seen.
  at::Tensor flag() const;
  /// Every rank at once, syncs: whether any rank saw a non-finite value since the start (always
  /// false with skip, whose steps never applied one). Called before every checkpoint and at the
  /// epoch's end, where the stop agreement may not have seen the latest steps yet.
  bool any_rank(ProcessGroup* pg);

  /// --nonfinite skip, between the backward and the update (host sync; every rank at once):
  /// whether to apply the update. Counts the steps it drops.
  bool before_update(const at::Tensor& loss, int64_t step, ProcessGroup* pg);
  /// --nonfinite skip: --nonfinite-max-skips steps in a row were dropped.
  bool gave_up() const { return skip_ && in_a_row_ >= max_skips_; }
  int64_t skipped() const { return skipped_; }

  /// Every rank at once, after a non-finite value stopped the run (the slow path): the step,
  /// epoch and rank(s), and the loss or which parameter's gradient.
  std::string describe(int epoch, ProcessGroup* pg);

  /// Tests: whether after_step and note_in_capture may run the note as one CUDA kernel (on by
  /// default; off: the ATen ops); whether this watch can (a CUDA device, the kernel compiled);
  /// whether the last note did; and the code noted (-1: none), read back (syncs).
  void allow_kernel(bool on) { kernel_allowed_ = on; }
  bool kernel_ready() const { return kernel_scratch_.defined(); }
  bool last_note_fused() const { return last_fused_; }
  int64_t first_code() const { return first_.item<int64_t>(); }

 private:
  // [loss, gradient norms...] as one vector's non-finite flags; sets first_ where none was yet.
  // Returns whether this step's were (a bool scalar on the device).
  at::Tensor note(const at::Tensor& loss, int64_t step, bool shared_norms = false);
  // Whether the clipping's norms stand for the `grads` gradients noted (share_norms).
  bool clip_norms_fit(size_t grads) const;
  // [loss, gradient norms...]'s non-finite flags (a bool vector on the device).
  at::Tensor bad_values(const at::Tensor& loss, bool shared_norms);
  // Sets first_ (in place: a graph may hold it) to `code` where none was yet; returns bad.any().
  at::Tensor record(const at::Tensor& bad, const at::Tensor& code);
  // The note as one CUDA kernel (cuda/nonfinite_fused.h), defined in cuda/nonfinite_note.cpp
  // (cpu/nonfinite_no_kernel.cpp where the build has no CUDA). init_kernel, from the constructor
  // (outside any capture), allocates the kernel's scratch memory where it can run. note_kernel
  // returns false, having done nothing, where the kernel or a tensor doesn't qualify. `step`: the
  // host's step, or null for step_dev_'s, which the kernel then advances.
  void init_kernel();
  bool note_kernel(const at::Tensor& loss, const int64_t* step);

  bool skip_ = false;
  int64_t max_skips_ = 0;
  at::Device device_;
  int rank_ = 0, world_size_ = 1;
  std::vector<std::pair<std::string, at::Tensor>> params_;
  std::vector<int> with_grad_;  // params_'s indices with a gradient at the last step noted
  std::vector<at::Tensor> norms_in_;
  const GradClip* clip_ = nullptr;
  at::Tensor first_;  // int64 on the device: -1, or step * (n + 1) + (0: the loss | 1 + i: gradient i)
  int64_t stride_ = 1;
  at::Tensor step_dev_;         // int64 on the device: the step the next replay notes (graph steps)
  int64_t counter_next_ = -1;   // what step_dev_ holds for the next replay, as far as the host knows
  int64_t pending_step_ = 0;
  bool noted_ = false;
  at::Tensor kernel_scratch_;  // bytes on the device, zeroed (note_kernel); none where it can't run
  bool kernel_allowed_ = true, last_fused_ = false;
  int64_t in_a_row_ = 0, skipped_ = 0;
};

}  // namespace train::detail
