// Eager averaging: each gradient is scaled by 1/world into its bucket's flat buffer as it is done;
// a complete bucket is all-reduced (summed) by the process group in the background, or, for CPU
// ranks on one machine, summed through shared memory at the end of the backward; then the sums go
// back into the gradients. The step has no host synchronisation of its own and works on fixed buffers.
#include "comm/eager_hooks.h"

#include "dist/process_group_impl.h"
#include "train/base/log.h"

#include <ATen/ops/from_blob.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros.h>

namespace train {
namespace {

// What both hooks share: a flat buffer per bucket, the gradients' views of it, and add().
class FlatBucketHook : public CommHook {
 public:
  explicit FlatBucketHook(int world) {
    // A 0-dim CPU double marked as a wrapped number: it scales gradients of any device and dtype.
    scale_ = at::scalar_tensor(1.0 / world, at::TensorOptions().dtype(at::kDouble));
    scale_.unsafeGetTensorImpl()->set_wrapped_number(true);
  }
  void add(Reducer& r, size_t k, size_t i) override {
    at::Tensor& view = views_[k][r.index_in_bucket(i)];
    const at::Tensor& grad = r.params()[i].grad();
    if (grad.defined()) {
      at::mul_out(view, grad, scale_);
    } else {
      view.zero_();
    }
  }

 protected:
  // Views of `flat` shaped like each parameter of bucket k.
  static std::vector<at::Tensor> views_of(const Reducer& r, size_t k, const at::Tensor& flat) {
    std::vector<at::Tensor> views;
    int64_t off = 0;
    for (size_t i : r.buckets()[k].params) {
      const at::Tensor& p = r.params()[i];
      views.push_back(flat.narrow(0, off, p.numel()).view(p.sizes()));
      off += p.numel();
    }
    return views;
  }
  // The averaged values back into the gradients.
  static void write_back(Reducer& r, size_t k, const std::vector<at::Tensor>& summed) {
    const GradBucket& b = r.buckets()[k];
    for (size_t j = 0; j < b.params.size(); ++j) {
      const at::Tensor& p = r.params()[b.params[j]];  // its gradient is mutable through a const handle
      if (p.grad().defined()) {
        p.mutable_grad().copy_(summed[j]);
      } else {
        p.mutable_grad() = summed[j].clone();
      }
    }
  }
  static std::string op(size_t k) { return "DDP gradient allreduce (bucket " + std::to_string(k) + ")"; }

  at::Tensor scale_;
  std::vector<std::vector<at::Tensor>> views_;  // per bucket
};

// Gloo or NCCL through c10d: a complete bucket's all-reduce starts at once and is waited for at
// the end of the backward.
class ProcessGroupHook : public FlatBucketHook {
 public:
  ProcessGroupHook(const Reducer& r, detail::ProcessGroupImpl& pg, int world) : FlatBucketHook(world), pg_(pg) {
    for (size_t k = 0; k < r.buckets().size(); ++k) {
      const GradBucket& b = r.buckets()[k];
      flats_.push_back(at::zeros({b.numel}, r.params()[b.params.front()].options().requires_grad(false)));
      views_.push_back(views_of(r, k, flats_.back()));
    }
    works_.resize(flats_.size());
    numbers_.resize(flats_.size());
  }
  void launch(Reducer&, size_t k) override {
    std::vector<at::Tensor> v{flats_[k]};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    o.timeout = pg_.timeout;
    numbers_[k] = pg_.rollcall.launch();
    pg_.guarded(op(k), [&] { works_[k] = pg_.pg->allreduce(v, o); });
  }
  void finalize(Reducer& r, size_t k) override {
    pg_.rollcall.begin_wait(numbers_[k], detail::CollectiveKind::allreduce, static_cast<int32_t>(k));
    pg_.wait(works_[k], op(k));
    pg_.rollcall.end_wait();
    works_[k].reset();
    write_back(r, k, views_[k]);
  }

 private:
  detail::ProcessGroupImpl& pg_;
  std::vector<at::Tensor> flats_;
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  std::vector<int64_t> numbers_;  // each bucket's collective number (the roll-call)
};

// CPU ranks on one machine: the buckets' flat buffers live in this rank's slot of a shared-memory
// segment and are summed there at the end of the backward (each rank summing its share, in rank
// order: deterministic, and no background thread competing for the cores).
class SharedMemoryHook : public FlatBucketHook {
 public:
  SharedMemoryHook(const Reducer& r, std::unique_ptr<details::ShmGroup> shm, const std::vector<size_t>& offsets, int world,
                   detail::RollCallRecord& rollcall)
      : FlatBucketHook(world), shm_(std::move(shm)), offsets_(offsets), rollcall_(rollcall) {
    for (size_t k = 0; k < r.buckets().size(); ++k) {
      const GradBucket& b = r.buckets()[k];
      const auto opts = r.params()[b.params.front()].options().requires_grad(false);
      at::Tensor flat = at::from_blob(static_cast<char*>(shm_->slot()) + offsets_[k], {b.numel}, opts);
      flat.zero_();
      at::Tensor result = at::from_blob(const_cast<char*>(static_cast<const char*>(shm_->result())) + offsets_[k],
                                        {b.numel}, opts);
      views_.push_back(views_of(r, k, flat));
      results_.push_back(views_of(r, k, result));
    }
  }
  void launch(Reducer&, size_t) override {}  // summed synchronously in finalize()
  void finalize(Reducer& r, size_t k) override {
    const GradBucket& b = r.buckets()[k];
    rollcall_.begin_wait(rollcall_.launch(), detail::CollectiveKind::allreduce, static_cast<int32_t>(k));
    shm_->allreduce_sum(offsets_[k], static_cast<size_t>(b.numel), *detail::shm_dtype_of(b.dtype), op(k));
    rollcall_.end_wait();
    write_back(r, k, results_[k]);
  }

 private:
  std::unique_ptr<details::ShmGroup> shm_;  // before the views: they point into its mapping
  std::vector<size_t> offsets_;
  std::vector<std::vector<at::Tensor>> results_;  // per bucket: the sum's place in the shared result region
  detail::RollCallRecord& rollcall_;
};

}  // namespace

std::shared_ptr<CommHook> make_eager_hook(Reducer& r, ProcessGroup& process_group, bool shared_memory,
                                          std::string* why) {
  detail::ProcessGroupImpl& pg = details::core_of(process_group);
  // Floating-point gradients only: an integer parameter can't require grad.
  bool shm_dtypes = r.params().front().device().is_cpu();
  std::vector<size_t> offsets;
  size_t shm_bytes = 0;
  for (const GradBucket& b : r.buckets()) {
    if (!detail::shm_dtype_of(b.dtype)) shm_dtypes = false;
    offsets.push_back(shm_bytes);
    shm_bytes += (b.bytes() + 63) / 64 * 64;
  }
  if (shm_dtypes && shared_memory && process_group.backend() == Backend::gloo && process_group.size() > 1) {
    std::string why_not;
    auto shm = pg.create_shm_group(shm_bytes, &why_not);
    if (shm) {
      *why = "gradients are summed in shared memory (" + std::to_string(shm_bytes >> 10) + " KiB per rank)";
      return std::make_shared<SharedMemoryHook>(r, std::move(shm), offsets, process_group.size(), pg.rollcall);
    }
    *why = "Gloo sums the gradients (" + why_not + ")";
  } else {
    *why = to_string(process_group.backend()) + " sums the gradients";
  }
  return std::make_shared<ProcessGroupHook>(r, pg, process_group.size());
}

}  // namespace train
