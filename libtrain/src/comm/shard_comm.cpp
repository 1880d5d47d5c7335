// ZeRO-1's communication (shard_comm.h): the padded bucket layout, the gradients' reduce-scatter
// and the chunks' all-gather, through shared memory on one machine or the process group.
#include "comm/shard_comm.h"

#include "dist/process_group_impl.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <limits>

namespace train::detail {
namespace {

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

std::string op(const char* what, size_t k) {
  return std::string("--shard-optimizer ") + what + " (bucket " + std::to_string(k) + ")";
}

}  // namespace

std::vector<BucketShards> plan_shards(const std::vector<std::vector<int64_t>>& numels,
                                      const std::vector<std::vector<size_t>>& params, int world, int rank) {
  std::vector<BucketShards> layout;
  for (size_t k = 0; k < numels.size(); ++k) {
    BucketShards b;
    b.world = world;
    int64_t end = 0;
    for (const int64_t n : numels[k]) {
      b.offsets.push_back(end);
      end = round_up(end + n, kShardAlign);
    }
    b.chunk = round_up((end + world - 1) / world, kShardAlign);
    const int64_t lo = b.chunk * rank, hi = lo + b.chunk;
    for (size_t j = 0; j < numels[k].size(); ++j) {
      const int64_t from = std::max(lo, b.offsets[j]), to = std::min(hi, b.offsets[j] + numels[k][j]);
      if (to > from) b.owned.push_back({params[k][j], from - b.offsets[j], to - from, from - lo});
    }
    layout.push_back(std::move(b));
  }
  return layout;
}

struct ShardComm::Impl {
  int world = 1, rank = 0;
  std::vector<BucketShards> layout;
  at::Tensor scale;                             // 1/world, a wrapped number as DDP's
  std::vector<at::Tensor> flats;                // per bucket: the padded input (shared slot or own tensor)
  std::vector<std::vector<at::Tensor>> views;   // per bucket: each parameter's view of its flat
  std::vector<at::Tensor> chunks;               // per bucket: this rank's chunk of the average
  // Shared memory (one machine).
  std::unique_ptr<details::ShmGroup> shm;
  std::vector<size_t> offsets;                  // per bucket: byte offset in the slot
  std::vector<at::Tensor> results;              // per bucket: the flat's place in the shared result
  // The process group (Gloo's reduce-scatter and all-gather).
  ProcessGroup* group = nullptr;
  ProcessGroupImpl* pg = nullptr;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::vector<int64_t> numbers;                 // each bucket's collective number (the roll-call)
  RollCallRecord* rollcall = nullptr;
  std::shared_ptr<ShardCollectives> graph;      // set while a CUDA graph is captured
  std::vector<at::Tensor> gather;               // per bucket, shared memory only: all_gather's output
  std::vector<at::Tensor> param_flats;          // per bucket: where its parameters live (the flat layout)
  std::vector<std::vector<at::Tensor>> members; // per bucket: its parameters, bucket order

  void make_buffers(const Reducer& r);
  void bind_params(const Reducer& r);
};

void ShardComm::Impl::make_buffers(const Reducer& r) {
  for (size_t k = 0; k < r.buckets().size(); ++k) {
    const GradBucket& b = r.buckets()[k];
    const BucketShards& s = layout[k];
    const auto opts = r.params()[b.params.front()].options().requires_grad(false);
    if (shm) {
      flats.push_back(at::from_blob(static_cast<char*>(shm->slot()) + offsets[k], {s.flat()}, opts));
      results.push_back(at::from_blob(const_cast<char*>(static_cast<const char*>(shm->result())) + offsets[k],
                                      {s.flat()}, opts));
    } else {
      flats.push_back(at::empty({s.flat()}, opts));
    }
    flats.back().zero_();  // the padding between parameters stays zero
    std::vector<at::Tensor> v;
    for (size_t j = 0; j < b.params.size(); ++j) {
      const at::Tensor& p = r.params()[b.params[j]];
      v.push_back(flats.back().narrow(0, s.offsets[j], p.numel()).view(p.sizes()));
    }
    views.push_back(std::move(v));
    chunks.push_back(at::zeros({s.chunk}, opts));
  }
  works.resize(flats.size());
  numbers.resize(flats.size());
}

void ShardComm::Impl::bind_params(const Reducer& r) {
  for (const at::Tensor& p : r.params()) {
    // Only a parameter that alone holds its memory moves: a view of it kept elsewhere (another
    // parameter made of it, a detached alias) would go on reading the old memory. Those stay, and
    // the step copies around the all-gather. (The reducer lists a tied weight once.)
    // Non-contiguous ones: ShardedOptimizer refuses.
    if (!p.is_contiguous() || p.storage_offset() != 0 || p.storage().use_count() != 1 ||
        p.storage().nbytes() != p.nbytes()) {
      return;
    }
  }
  for (size_t k = 0; k < r.buckets().size(); ++k) {
    const GradBucket& b = r.buckets()[k];
    const BucketShards& s = layout[k];
    const auto opts = r.params()[b.params.front()].options().requires_grad(false);
    param_flats.push_back(at::zeros({s.flat()}, opts));
    members.emplace_back();
    for (size_t j = 0; j < b.params.size(); ++j) {
      at::Tensor p = r.params()[b.params[j]];
      at::Tensor home = param_flats.back().narrow(0, s.offsets[j], p.numel()).view(p.sizes());
      home.copy_(p.detach());
      p.set_data(home);  // the same tensor (its identity, its grad, the optimizer's state), moved
      members.back().push_back(p);
    }
  }
}

std::shared_ptr<ShardComm> ShardComm::create(Reducer& r, ProcessGroup& process_group, bool shared_memory,
                                             std::string* why) {
  auto impl = std::make_unique<Impl>();
  ProcessGroupImpl& pg = details::core_of(process_group);
  impl->world = process_group.size();
  impl->rank = process_group.rank();
  impl->pg = &pg;
  impl->group = &process_group;
  impl->rollcall = &pg.rollcall;
  impl->scale = at::scalar_tensor(1.0 / impl->world, at::TensorOptions().dtype(at::kDouble));
  impl->scale.unsafeGetTensorImpl()->set_wrapped_number(true);
  std::vector<std::vector<int64_t>> numels;
  std::vector<std::vector<size_t>> params;
  for (const GradBucket& b : r.buckets()) {
    numels.emplace_back();
    for (size_t i : b.params) numels.back().push_back(r.params()[i].numel());
    params.push_back(b.params);
  }
  impl->layout = plan_shards(numels, params, impl->world, impl->rank);
  bool shm_dtypes = r.params().front().device().is_cpu();
  size_t shm_bytes = 0;
  for (size_t k = 0; k < r.buckets().size(); ++k) {
    const GradBucket& b = r.buckets()[k];
    if (!shm_dtype_of(b.dtype)) shm_dtypes = false;
    impl->offsets.push_back(shm_bytes);
    shm_bytes += round_up(impl->layout[k].flat() * static_cast<int64_t>(c10::elementSize(b.dtype)), 64);
  }
  *why = to_string(process_group.backend()) + " reduce-scatters the gradients and all-gathers the parameters";
  if (shm_dtypes && shared_memory && process_group.backend() == Backend::gloo && impl->world > 1) {
    std::string why_not;
    impl->shm = pg.create_shm_group(shm_bytes, &why_not);
    *why = impl->shm ? "gradients are summed and parameters gathered in shared memory (" +
                           std::to_string(shm_bytes >> 10) + " KiB per rank)"
                     : "Gloo reduce-scatters the gradients and all-gathers the parameters (" + why_not + ")";
  }
  impl->make_buffers(r);
  impl->bind_params(r);
  if (impl->param_flats.empty() && r.params().front().is_cuda()) {
    *why += " (a parameter shares its memory with another tensor, so the parameters stay where they are and "
            "the captured step copies them around the all-gather)";
  }
  return std::shared_ptr<ShardComm>(new ShardComm(std::move(impl)));
}

ShardComm::ShardComm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShardComm::~ShardComm() = default;

const std::vector<BucketShards>& ShardComm::layout() const { return impl_->layout; }
int ShardComm::rank() const { return impl_->rank; }
const at::Tensor& ShardComm::grad_chunk(size_t k) const { return impl_->chunks[k]; }

void ShardComm::add(Reducer& r, size_t k, size_t i) {
  at::Tensor& view = impl_->views[k][r.index_in_bucket(i)];
  const at::Tensor& grad = r.params()[i].grad();
  if (impl_->graph) {
    // The graph's collectives average: the flat buffer takes the gradient as it is.
    if (!grad.defined()) {
      view.zero_();
    } else if (!grad.is_same(view)) {
      view.copy_(grad);
    }  // else bound (bind_grads): the backward wrote it there
  } else if (grad.defined() && grad.is_same(view)) {
    view.mul_(impl_->scale);  // bound, eagerly: the same product, in place
  } else if (grad.defined()) {
    at::mul_out(view, grad, impl_->scale);  // DDP's scaling, for DDP's bits
  } else {
    view.zero_();
  }
}

void ShardComm::launch(Reducer&, size_t k) {
  Impl& m = *impl_;
  if (m.graph) {
    m.graph->reduce_scatter_average(k, m.flats[k], m.chunks[k]);
    return;
  }
  if (m.shm) return;  // summed synchronously in finalize()
  c10d::ReduceScatterOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  o.timeout = m.pg->timeout;
  m.numbers[k] = m.rollcall->launch();
  m.pg->guarded(op("reduce-scatter", k), [&] { m.works[k] = m.pg->pg->_reduce_scatter_base(m.chunks[k], m.flats[k], o); });
}

void ShardComm::finalize(Reducer&, size_t k) {
  Impl& m = *impl_;
  const BucketShards& s = m.layout[k];
  if (m.graph) return;  // queued in launch(): the graph orders what reads the chunk after it
  if (m.shm) {
    m.rollcall->begin_wait(m.rollcall->launch(), CollectiveKind::reduce_scatter, static_cast<int32_t>(k));
    m.shm->allreduce_sum(m.offsets[k], static_cast<size_t>(s.flat()), *shm_dtype_of(m.flats[k].scalar_type()),
                         op("reduce-scatter", k));
    m.rollcall->end_wait();
    m.chunks[k].copy_(m.results[k].narrow(0, s.chunk * m.rank, s.chunk));
    return;
  }
  m.rollcall->begin_wait(m.numbers[k], CollectiveKind::reduce_scatter, static_cast<int32_t>(k));
  m.pg->wait(m.works[k], op("reduce-scatter", k));
  m.rollcall->end_wait();
  m.works[k].reset();
}

void ShardComm::all_gather(size_t k, const at::Tensor& mine, at::Tensor& full) {
  Impl& m = *impl_;
  const BucketShards& s = m.layout[k];
  if (m.graph) {
    m.graph->all_gather(k, mine, full);
    return;
  }
  const CollectiveWait in_collective(m.rollcall, CollectiveKind::all_gather);
  if (m.shm) {
    // A sum whose other terms are all -0.0 copies every bit (x + -0.0 == x, -0.0 included).
    m.flats[k].fill_(-0.0);
    m.flats[k].narrow(0, s.chunk * m.rank, s.chunk).copy_(mine);
    m.shm->allreduce_sum(m.offsets[k], static_cast<size_t>(s.flat()), *shm_dtype_of(m.flats[k].scalar_type()),
                         op("all-gather", k));
    full.copy_(m.results[k]);  // the flat's padding keeps -0.0: no gradient's view covers it
    return;
  }
  c10d::AllgatherOptions o;
  o.timeout = m.pg->timeout;
  c10::intrusive_ptr<c10d::Work> work;
  at::Tensor in = mine.contiguous();
  m.pg->guarded(op("all-gather", k), [&] { work = m.pg->pg->_allgather_base(full, in, o); });
  m.pg->wait(work, op("all-gather", k));
}

}  // namespace train::detail

namespace train::detail {

void ShardComm::all_reduce_sum(at::Tensor& t) {
  if (impl_->graph) {
    impl_->graph->all_reduce_sum(t);
  } else {
    impl_->group->allreduce_sum(t);
  }
}

at::Tensor ShardComm::gather_buffer(size_t k) {
  Impl& m = *impl_;
  if (!m.shm) return m.flats[k];
  // Shared memory: the flat is the rank's slot, which all_gather() itself fills.
  if (m.gather.size() <= k) m.gather.resize(m.flats.size());
  if (!m.gather[k].defined()) m.gather[k] = at::empty_like(m.flats[k]);
  return m.gather[k];
}

void ShardComm::bind_grads(Reducer& r) {
  for (size_t k = 0; k < impl_->views.size(); ++k) {
    const auto& members = r.buckets()[k].params;
    for (size_t j = 0; j < members.size(); ++j) r.params()[members[j]].mutable_grad() = impl_->views[k][j];
  }
}

void ShardComm::zero_grads() {
  for (at::Tensor& f : impl_->flats) f.zero_();
}

bool ShardComm::params_bound() const { return !impl_->param_flats.empty(); }

at::Tensor ShardComm::params_in_place(size_t k) const {
  const Impl& m = *impl_;
  // In place: NCCL's all-gather inside a graph (send = recv + rank x chunk), or the shared-memory
  // sum, which copies this rank's chunk into its slot first. Not Gloo's.
  if ((!m.graph && !m.shm) || k >= m.param_flats.size()) return {};
  const at::Tensor& flat = m.param_flats[k];
  const auto* base = static_cast<const char*>(flat.const_data_ptr());
  const BucketShards& s = m.layout[k];
  for (size_t j = 0; j < m.members[k].size(); ++j) {
    const at::Tensor& p = m.members[k][j];
    if (!p.is_contiguous() || p.scalar_type() != flat.scalar_type() ||
        p.const_data_ptr() != base + s.offsets[j] * static_cast<int64_t>(flat.element_size())) {
      return {};  // moved since (a user's set_data): the step copies
    }
  }
  return flat;
}

void ShardComm::use_collectives(std::shared_ptr<ShardCollectives> c) { impl_->graph = std::move(c); }

}  // namespace train::detail
