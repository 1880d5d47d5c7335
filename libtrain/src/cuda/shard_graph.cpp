// ZeRO-1's collectives inside the captured step (shard_graph.h).
#include "cuda/shard_graph.h"

#include "cuda/nccl_calls.h"
#include "dist/process_group_impl.h"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <optional>
#include <vector>

namespace train::detail {

struct ShardGraph::State {
  const NcclCalls* nccl = nullptr;
  ncclComm_t comm = nullptr;
  int world = 1, rank = 0;
  c10::cuda::CUDAStream side;
  std::optional<c10::cuda::CUDAStream> capture;
  std::vector<cudaEvent_t> forks;  // per bucket
  cudaEvent_t joined = nullptr;

  explicit State(c10::cuda::CUDAStream s) : side(s) {}
  ~State() {
    for (cudaEvent_t e : forks) (void)cudaEventDestroy(e);
    if (joined != nullptr) (void)cudaEventDestroy(joined);
  }

  void check(ncclResult_t r, const char* what, size_t k) const {
    TORCH_CHECK(r == ncclSuccess, "--shard-optimizer: NCCL ", what, " of gradient bucket ", k,
                " failed: ", nccl->error_string(r));
  }

  cudaEvent_t fork_event(size_t k) {
    while (forks.size() <= k) {
      forks.push_back(nullptr);
      C10_CUDA_CHECK(cudaEventCreateWithFlags(&forks.back(), cudaEventDisableTiming));
    }
    return forks[k];
  }
};

namespace {

ncclDataType_t nccl_type(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    default: TORCH_CHECK(false, "--shard-optimizer: NCCL moves no ", t.scalar_type(), " tensors inside the graph");
  }
}

}  // namespace

std::shared_ptr<ShardGraph> ShardGraph::create(ProcessGroup& pg, c10::DeviceIndex device, std::string* why_not) {
  const NcclCalls* nccl = nccl_calls();
  auto comm = static_cast<ncclComm_t>(details::core_of(pg).nccl_comm());
  if (nccl == nullptr || comm == nullptr) {
    *why_not = nccl == nullptr ? "NCCL's reduce-scatter and all-gather aren't loaded"
                               : "no NCCL communicator (the process group's backend isn't NCCL)";
    return nullptr;
  }
  details::core_of(pg).lend_comm_to_graphs();
  auto s = std::make_unique<State>(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device));
  s->nccl = nccl;
  s->comm = comm;
  s->world = pg.size();
  s->rank = pg.rank();
  C10_CUDA_CHECK(cudaEventCreateWithFlags(&s->joined, cudaEventDisableTiming));
  return std::shared_ptr<ShardGraph>(new ShardGraph(std::move(s)));
}

ShardGraph::ShardGraph(std::unique_ptr<State> s) : s_(std::move(s)) {}
ShardGraph::~ShardGraph() = default;

void ShardGraph::begin(const c10::cuda::CUDAStream& capture_stream) { s_->capture = capture_stream; }

void ShardGraph::reduce_scatter_average(size_t k, const at::Tensor& flat, at::Tensor& chunk) {
  State& s = *s_;
  TORCH_CHECK(s.capture.has_value(), "ShardGraph::begin() was not called before the captured backward");
  // The side stream picks up where the backward has written this bucket's flat buffer.
  const cudaEvent_t fork = s.fork_event(k);
  C10_CUDA_CHECK(cudaEventRecord(fork, s.capture->stream()));
  C10_CUDA_CHECK(cudaStreamWaitEvent(s.side.stream(), fork, 0));
  s.check(s.nccl->reduce_scatter(flat.const_data_ptr(), chunk.mutable_data_ptr(), static_cast<size_t>(chunk.numel()),
                                 nccl_type(flat), ncclAvg, s.comm, s.side.stream()),
          "reduce-scatter", k);
}

void ShardGraph::join() {
  State& s = *s_;
  C10_CUDA_CHECK(cudaEventRecord(s.joined, s.side.stream()));
  C10_CUDA_CHECK(cudaStreamWaitEvent(s.capture->stream(), s.joined, 0));
}

void ShardGraph::all_gather(size_t k, const at::Tensor& mine, at::Tensor& full) {
  State& s = *s_;
  TORCH_CHECK(mine.is_contiguous() && full.is_contiguous() && full.numel() == mine.numel() * s.world,
              "--shard-optimizer: all-gather of bucket ", k, " expects contiguous chunks of equal size");
  s.check(s.nccl->all_gather(mine.const_data_ptr(), full.mutable_data_ptr(), static_cast<size_t>(mine.numel()),
                             nccl_type(mine), s.comm, c10::cuda::getCurrentCUDAStream().stream()),
          "all-gather", k);
}

void ShardGraph::all_reduce_sum(at::Tensor& t) {
  State& s = *s_;
  TORCH_CHECK(t.is_contiguous(), "--shard-optimizer: the all-reduce expects a contiguous tensor");
  const ncclResult_t r = s.nccl->all_reduce(t.const_data_ptr(), t.mutable_data_ptr(), static_cast<size_t>(t.numel()),
                                            nccl_type(t), ncclSum, s.comm, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(r == ncclSuccess, "--shard-optimizer: NCCL all-reduce of the clipping's squared norm failed: ",
              s.nccl->error_string(r));
}

}  // namespace train::detail
