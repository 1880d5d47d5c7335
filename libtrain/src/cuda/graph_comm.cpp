// Averaging inside the captured step (graph_comm.h): each gradient is averaged where autograd left
// it (no copy into a flat buffer, no accumulation into zeroed memory), except small buckets of
// several gradients, which go as one message (NCCL's latency, not its bandwidth, is what a small
// all-reduce costs, and a grouped call pays it per tensor).
#include "cuda/graph_comm.h"

#include "cuda/nccl_calls.h"
#include "cuda/peer_reduce.h"
#include "dist/process_group_impl.h"
#include "train/base/log.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <limits>
#include <vector>

namespace train::detail {

// What the hooks of one GraphComm share.
struct GraphCommState {
  // A bucket of several gradients this small goes as one message.
  static constexpr int64_t kFlatBucketBytes = int64_t{1} << 20;

  struct Bucket {
    at::Tensor flat;         // one message for several gradients, or undefined
    int peer_slot = -1;      // >= 0: averaged by the peer all-reduce as this message
  };
  Reducer* reducer = nullptr;
  const NcclCalls* nccl = nullptr;
  ncclComm_t comm = nullptr;
  int world = 1;
  std::vector<Bucket> buckets;
  std::unique_ptr<PeerReduce> peer;      // buckets with a peer_slot go through it
  std::shared_ptr<BucketEpilogue> epilogue;  // set: try it on each bucket after its average
  bool updated_in_buckets = false;           // this capture ran the epilogue on every bucket
  int fused_updates = 0;                     // buckets whose epilogue ran inside the peer kernel
  bool told = false;                         // the updates' placement was logged
  std::optional<c10::cuda::CUDAStream> capture_stream, side_stream;
  std::vector<cudaEvent_t> forks;
  cudaEvent_t start = nullptr, join = nullptr;
  std::vector<at::Tensor> kept;  // gradients copied into a flat bucket: the graph still writes them

  ~GraphCommState() {
    for (cudaEvent_t e : forks) (void)cudaEventDestroy(e);
    if (start != nullptr) (void)cudaEventDestroy(start);
    if (join != nullptr) (void)cudaEventDestroy(join);
  }

  bool all_peer() const {
    return std::all_of(buckets.begin(), buckets.end(), [](const Bucket& b) { return b.peer_slot >= 0; });
  }

  at::Tensor dense_grad(size_t i) const {
    const at::Tensor& p = reducer->params()[i];
    const at::Tensor& g = p.grad();
    TORCH_CHECK(g.defined() && g.scalar_type() == at::kFloat && g.is_non_overlapping_and_dense() &&
                    g.device() == p.device(),
                "the gradient of ", reducer->names()[i], " is not a dense float32 tensor on its parameter's device");
    return g;
  }

  std::vector<at::Tensor> grads_of(size_t k) const {
    std::vector<at::Tensor> grads;
    for (size_t i : reducer->buckets()[k].params) grads.push_back(dense_grad(i));
    return grads;
  }

  // The side stream takes over from the capture stream at this point of the backward.
  void fork(size_t k) {
    C10_CUDA_CHECK(cudaEventRecord(forks[k], capture_stream->stream()));
    C10_CUDA_CHECK(cudaStreamWaitEvent(side_stream->stream(), forks[k], 0));
  }

  // Bucket k's gradients become views of its averaged flat buffer (laid out like their
  // parameters), which the update and later replays read. (`keep`: the old gradients are a
  // graph's, which still writes them.)
  void rebind_to_flat(size_t k, const std::vector<at::Tensor>& grads, bool keep) {
    const GradBucket& b = reducer->buckets()[k];
    int64_t offset = 0;
    for (size_t j = 0; j < b.params.size(); ++j) {
      const at::Tensor& q = reducer->params()[b.params[j]];
      if (keep) kept.push_back(grads[j]);
      q.mutable_grad() =
          buckets[k].flat.narrow(0, offset, grads[j].numel()).as_strided(grads[j].sizes(), grads[j].strides());
      offset += grads[j].numel();
    }
  }

  std::vector<at::Tensor> params_of(size_t k) const {
    std::vector<at::Tensor> out;
    for (size_t i : reducer->buckets()[k].params) out.push_back(reducer->params()[i]);
    return out;
  }

  // The bucket's epilogue right after its average, on the side stream. The first bucket
  // decides; a later one can't fall back, earlier buckets' parameters being updated.
  void update_bucket(size_t k) {
    if (!updated_in_buckets) return;
    if (epilogue->run(params_of(k))) return;
    TORCH_CHECK(k == 0, "the epilogue (the optimizer's update) of gradient bucket ", k, " could not run");
    updated_in_buckets = false;
  }

  // The peer kernel's inputs: the gradients themselves, or (more than it takes) their copy in
  // the bucket's flat buffer.
  std::vector<PeerInput> peer_inputs(size_t k, const std::vector<at::Tensor>& grads) const {
    std::vector<PeerInput> inputs;
    const Bucket& b = buckets[k];
    if (grads.size() > static_cast<size_t>(kPeerMaxInputs)) {
      std::vector<at::Tensor> pieces;
      for (const at::Tensor& g : grads) pieces.push_back(g.as_strided({g.numel()}, {1}));
      at::Tensor flat = b.flat;
      at::cat_out(flat, pieces);
      inputs.push_back({b.flat.data_ptr<float>(), b.flat.numel()});
    } else {
      for (const at::Tensor& g : grads) inputs.push_back({g.data_ptr<float>(), g.numel()});
    }
    return inputs;
  }

  // Where the average goes: the flat buffer (several gradients) or the one gradient itself.
  float* peer_out(size_t k, const std::vector<at::Tensor>& grads) const {
    return buckets[k].flat.defined() ? buckets[k].flat.data_ptr<float>() : grads.front().data_ptr<float>();
  }
};

namespace {

// NCCL inside the graph: one grouped ncclAllReduce(avg) of the bucket's gradients (or one of its
// flat copy) on the side stream, then the epilogue.
class NcclGraphHook : public CommHook {
 public:
  explicit NcclGraphHook(std::shared_ptr<GraphCommState> s) : s_(std::move(s)) {}
  void launch(Reducer&, size_t k) override {
    GraphCommState& s = *s_;
    std::vector<at::Tensor> grads = s.grads_of(k);
    s.fork(k);
    c10::cuda::CUDAStreamGuard on_side(*s.side_stream);
    const at::Tensor& flat = s.buckets[k].flat;
    if (flat.defined()) {
      // One copy kernel in, one message; the gradients become views of the averaged buffer.
      std::vector<at::Tensor> pieces;
      for (const at::Tensor& g : grads) pieces.push_back(g.as_strided({g.numel()}, {1}));
      at::Tensor out = flat;
      at::cat_out(out, pieces);
      check(s.nccl->all_reduce(flat.data_ptr<float>(), flat.data_ptr<float>(), static_cast<size_t>(flat.numel()),
                               ncclFloat32, ncclAvg, s.comm, s.side_stream->stream()),
            k);
      s.rebind_to_flat(k, grads, /*keep=*/true);
    } else {
      check(s.nccl->group_start(), k);
      for (at::Tensor& g : grads) {
        const ncclResult_t r = s.nccl->all_reduce(g.data_ptr<float>(), g.data_ptr<float>(),
                                                  static_cast<size_t>(g.numel()), ncclFloat32, ncclAvg, s.comm,
                                                  s.side_stream->stream());
        if (r != ncclSuccess) {
          (void)s.nccl->group_end();
          check(r, k);
        }
      }
      check(s.nccl->group_end(), k);
    }
    s.update_bucket(k);
  }

 private:
  void check(ncclResult_t r, size_t k) const {
    TORCH_CHECK(r == ncclSuccess, "NCCL all-reduce of gradient bucket ", k, " failed: ", s_->nccl->error_string(r));
  }
  std::shared_ptr<GraphCommState> s_;
};

// The GPUs' one-shot peer all-reduce inside the graph: one kernel reads the bucket's gradients,
// exchanges them through the other GPUs' mapped memory and writes the average into the gradient
// itself (one tensor) or the flat buffer the gradients then view. A small bucket's epilogue rides
// along in the same kernel where it has a form for it (one launch less where nothing hides it); a
// large one's takes the whole GPU in its own kernel instead of holding up the later buckets' averages.
class PeerGraphHook : public CommHook {
 public:
  explicit PeerGraphHook(std::shared_ptr<GraphCommState> s) : s_(std::move(s)) {}
  void launch(Reducer&, size_t k) override {
    GraphCommState& s = *s_;
    const GraphCommState::Bucket& b = s.buckets[k];
    std::vector<at::Tensor> grads = s.grads_of(k);
    s.fork(k);
    c10::cuda::CUDAStreamGuard on_side(*s.side_stream);
    const std::vector<PeerInput> inputs = s.peer_inputs(k, grads);
    float* out = s.peer_out(k, grads);
    if (b.flat.defined()) s.rebind_to_flat(k, grads, /*keep=*/true);
    int64_t numel = 0;
    for (const PeerInput& in : inputs) numel += in.numel;
    if (s.updated_in_buckets && inputs.size() == grads.size() && numel * 4 <= GraphCommState::kFlatBucketBytes) {
      const bool updated = s.epilogue->run_fused(s.params_of(k), [&](const PeerFusedEpilogue& fused) {
        s.peer->average(b.peer_slot, inputs, out, s.side_stream->stream(), &fused);
      });
      if (updated) {
        ++s.fused_updates;
        return;
      }
    }
    s.peer->average(b.peer_slot, inputs, out, s.side_stream->stream());
    s.update_bucket(k);
  }

 private:
  std::shared_ptr<GraphCommState> s_;
};

// An eager step's average where the graph's goes through peer memory (the epoch's last, smaller
// batch): every bucket through the peer all-reduce on the current stream, in bucket order on
// every rank, like a replay's, once the backward is over.
class PeerEagerHook : public CommHook {
 public:
  explicit PeerEagerHook(std::shared_ptr<GraphCommState> s) : s_(std::move(s)) {}
  void launch(Reducer&, size_t) override {}
  void finalize(Reducer&, size_t k) override {
    GraphCommState& s = *s_;
    const GraphCommState::Bucket& b = s.buckets[k];
    std::vector<at::Tensor> grads = s.grads_of(k);
    s.peer->average(b.peer_slot, s.peer_inputs(k, grads), s.peer_out(k, grads),
                    c10::cuda::getCurrentCUDAStream().stream());
    if (b.flat.defined()) s.rebind_to_flat(k, grads, /*keep=*/false);
  }

 private:
  std::shared_ptr<GraphCommState> s_;
};

// The buckets whose one-shot exchange (each rank reads every other's message) stays small go
// through the GPUs' peer memory; without an NCCL communicator (the Gloo group --backend auto
// takes for two such GPUs) every bucket does, whatever its size. Collective: every rank decides
// the same from the same buckets.
void setup_peer(GraphCommState& s, ProcessGroup& pg, const std::string& peer_flag) {
  const Reducer& r = *s.reducer;
  const int64_t max_bytes = s.comm != nullptr ? kPeerMaxReadBytes : std::numeric_limits<int64_t>::max();
  std::vector<int64_t> messages;
  int slots = 0;
  int64_t bytes = 0;
  std::vector<size_t> peer_flat;  // flat buffers only the peer path needs
  for (size_t k = 0; k < r.buckets().size(); ++k) {
    const GradBucket& gb = r.buckets()[k];
    GraphCommState::Bucket& b = s.buckets[k];
    if (gb.numel * 4 * (s.world - 1) > max_bytes) continue;
    b.peer_slot = slots++;
    messages.push_back(gb.numel);
    bytes += gb.numel * 4;
    if (gb.params.size() > 1 && !b.flat.defined()) {
      b.flat = at::empty({gb.numel}, r.params().front().options().dtype(at::kFloat).requires_grad(false));
      peer_flat.push_back(k);
    }
  }
  if (slots == 0) return;
  std::string why;
  s.peer = PeerReduce::create(details::core_of(pg), messages, &why);
  if (!s.peer) {
    for (GraphCommState::Bucket& b : s.buckets) b.peer_slot = -1;
    for (size_t k : peer_flat) s.buckets[k].flat = at::Tensor();  // NCCL sends large buckets as they are
    log::info("--peer-allreduce " + peer_flag + ": no peer all-reduce (" + why + ")");
    return;
  }
  log::info("--peer-allreduce " + peer_flag + ": " + std::to_string(slots) + " of " + std::to_string(s.buckets.size()) +
            " gradient buckets (" + std::to_string(bytes) + " bytes) averaged through the GPUs' peer memory (" +
            std::to_string(s.peer->low_latency_messages()) + " small ones the low-latency way" +
            (s.peer->two_shot_messages() > 0 ? ", " + std::to_string(s.peer->two_shot_messages()) + " in two passes" : "") +
            ")" +
            (static_cast<size_t>(slots) < s.buckets.size() ? ", NCCL for the rest" : ""));
}

}  // namespace

GraphComm::GraphComm(std::shared_ptr<GraphCommState> state) : state_(std::move(state)) {}
GraphComm::~GraphComm() = default;

std::unique_ptr<GraphComm> GraphComm::create(Reducer& reducer, ProcessGroup& pg, std::shared_ptr<BucketEpilogue> epilogue,
                                             bool peer, const std::string& peer_flag) {
  auto s = std::make_shared<GraphCommState>();
  s->reducer = &reducer;
  s->nccl = nccl_calls();
  s->comm = static_cast<ncclComm_t>(details::core_of(pg).nccl_comm());
  s->world = pg.size();
  for (const GradBucket& gb : reducer.buckets()) {
    GraphCommState::Bucket b;
    if (gb.params.size() > 1 && gb.numel * 4 <= GraphCommState::kFlatBucketBytes) {
      b.flat = at::empty({gb.numel}, reducer.params().front().options().dtype(at::kFloat).requires_grad(false));
    }
    s->buckets.push_back(std::move(b));
  }
  if (peer) setup_peer(*s, pg, peer_flag);
  if (!s->all_peer() && (s->nccl == nullptr || s->comm == nullptr)) {
    log::warn(std::string("--graph-allreduce in-graph: ") +
              (s->nccl == nullptr ? "NCCL's calls aren't loaded" : "no NCCL communicator (backend isn't NCCL)") +
              " and no peer all-reduce for every bucket; falling back to one eager all-reduce between two graphs"
              " (slower). Hint: --backend nccl averages inside the graph with NCCL.");
    return nullptr;
  }
  if (!s->all_peer()) details::core_of(pg).lend_comm_to_graphs();  // NCCL for some buckets, in the graph
  s->epilogue = std::move(epilogue);
  s->side_stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/true, reducer.params().front().device().index());
  s->forks.resize(s->buckets.size(), nullptr);
  for (cudaEvent_t& e : s->forks) C10_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  C10_CUDA_CHECK(cudaEventCreateWithFlags(&s->start, cudaEventDisableTiming));
  C10_CUDA_CHECK(cudaEventCreateWithFlags(&s->join, cudaEventDisableTiming));
  log::debug("--graph-allreduce in-graph: " + std::to_string(s->buckets.size()) + " gradient buckets");
  return std::unique_ptr<GraphComm>(new GraphComm(std::move(s)));
}

Reducer::Hooks GraphComm::capture_hooks() const {
  Reducer::Hooks h;
  h.manual = true;
  auto nccl = std::make_shared<NcclGraphHook>(state_);
  auto peer = std::make_shared<PeerGraphHook>(state_);
  for (const GraphCommState::Bucket& b : state_->buckets) {
    h.per_bucket.push_back(b.peer_slot >= 0 ? std::shared_ptr<CommHook>(peer) : std::shared_ptr<CommHook>(nccl));
  }
  return h;
}

std::optional<Reducer::Hooks> GraphComm::eager_hooks() const {
  if (!state_->all_peer()) return std::nullopt;
  return state_->reducer->all_buckets(std::make_shared<PeerEagerHook>(state_), /*manual=*/true);
}

// The side stream forks at the capture's start for the epilogue's first work (beside the
// forward), then at each bucket.
void GraphComm::begin(const c10::cuda::CUDAStream& capture_stream) {
  GraphCommState& s = *state_;
  s.capture_stream = capture_stream;
  s.kept.clear();
  s.fused_updates = 0;
  s.updated_in_buckets = false;
  if (s.epilogue == nullptr) return;
  C10_CUDA_CHECK(cudaEventRecord(s.start, capture_stream.stream()));
  C10_CUDA_CHECK(cudaStreamWaitEvent(s.side_stream->stream(), s.start, 0));
  c10::cuda::CUDAStreamGuard on_side(*s.side_stream);
  s.updated_in_buckets = s.epilogue->begin();
}

void GraphComm::join() {
  GraphCommState& s = *state_;
  C10_CUDA_CHECK(cudaEventRecord(s.join, s.side_stream->stream()));
  C10_CUDA_CHECK(cudaStreamWaitEvent(s.capture_stream->stream(), s.join, 0));
  if (s.updated_in_buckets && !s.told) {
    s.told = true;
    log::info("--graph-allreduce in-graph: the optimizer updates each gradient bucket once it is averaged (" +
              std::to_string(s.fused_updates) + " of " + std::to_string(s.buckets.size()) +
              " inside the peer all-reduce's kernel)");
  }
}

bool GraphComm::updated_in_buckets() const { return state_->updated_in_buckets; }

}  // namespace train::detail
