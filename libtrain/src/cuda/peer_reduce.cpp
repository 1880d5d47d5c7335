// The peer all-reduce's set-up (peer_reduce.h). CUDA builds only.
#include "cuda/peer_reduce.h"

#include "dist/process_group_impl.h"

#include <c10/util/Exception.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace train::detail {
namespace {

std::string cuda_problem(const char* what, cudaError_t e) {
  (void)cudaGetLastError();  // clear it: a failed set-up must not poison later CUDA calls
  return std::string(what) + ": " + cudaGetErrorString(e);
}

std::string to_hex(const void* data, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    const auto b = static_cast<const unsigned char*>(data)[i];
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

bool from_hex(const std::string& s, void* data, size_t n) {
  if (s.size() != 2 * n) return false;
  auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (size_t i = 0; i < n; ++i) {
    static_cast<unsigned char*>(data)[i] = static_cast<unsigned char>(nibble(s[2 * i]) * 16 + nibble(s[2 * i + 1]));
  }
  return true;
}

}  // namespace

std::unique_ptr<PeerReduce> PeerReduce::create(ProcessGroupImpl& pg, const std::vector<int64_t>& messages,
                                               std::string* why_not) {
  auto fail = [&](const std::string& why) -> std::unique_ptr<PeerReduce> {
    if (why_not) *why_not = why;
    return nullptr;
  };
  const int world = pg.env.world_size;
  const int rank = pg.env.rank;
  if (!peer_allreduce_available()) return fail("this build has no peer all-reduce kernel");
  if (world < 2 || world > kPeerMaxRanks) return fail("world size " + std::to_string(world) + " is out of range");
  if (messages.empty()) return fail("nothing to reduce");
  const ShmGroup::Exchange ex = pg.store_exchange();
  const std::string prefix = "peer/" + std::to_string(pg.peer_groups_created++) + "/";
  if (!ShmGroup::all_on_one_machine(ex, prefix, rank, world)) return fail("the ranks are not all on one machine");

  // Every rank's kernels must take the same ways: TRAIN_PEER_ONE_SHOT as rank 0 has it, or no peer
  // all-reduce at all (a one-shot rank would never raise the two-pass flags the others wait for).
  const char* one_shot_env = std::getenv("TRAIN_PEER_ONE_SHOT");
  const bool one_shot_only = one_shot_env != nullptr && std::string(one_shot_env) == "1";
  ex.set(prefix + "one-shot/" + std::to_string(rank), one_shot_only ? "1" : "0");
  const bool rank0_one_shot = ex.get(prefix + "one-shot/0") == "1";
  const std::string unlike = ShmGroup::first_problem_of_any_rank(
      ex, prefix + "ways/", rank, world,
      one_shot_only == rank0_one_shot ? ""
                                      : std::string("TRAIN_PEER_ONE_SHOT is ") + (one_shot_only ? "1" : "not 1") +
                                            " here but " + (rank0_one_shot ? "1" : "not 1") +
                                            " on rank 0; set it alike on every rank");
  if (!unlike.empty()) return fail(unlike);
  std::unique_ptr<PeerReduce> p(new PeerReduce());
  p->maps_.rank = rank;
  p->maps_.world = world;
  p->maps_.slots = static_cast<int>(messages.size());
  for (int64_t floats : messages) {
    Message m;
    m.floats = floats;
    m.low_latency = floats <= kPeerLowLatencyMaxFloats;
    m.two_shot = world > 2 && floats >= kPeerTwoShotMinFloats && !one_shot_only;
    size_t& used = m.low_latency ? p->maps_.ll_capacity : p->maps_.capacity;
    m.offset = used;
    used += (static_cast<size_t>(floats) + 63) / 64 * 64;
    p->messages_.push_back(m);
  }
  p->timeout_ns_ = static_cast<uint64_t>(pg.timeout.count()) * 1000000ull;
  std::string problem = p->map_peers(pg, prefix);
  problem = ShmGroup::first_problem_of_any_rank(ex, prefix + "mapped/", rank, world, problem);
  if (!problem.empty()) return fail(problem);
  // One check call through the first message of each way (every rank makes the same calls).
  std::string checked;
  const char* ways[] = {"the check all-reduce", "the low-latency check all-reduce", "the two-pass check all-reduce"};
  for (int way = 0; way < 3; ++way) {
    for (size_t i = 0; i < p->messages_.size() && checked.empty(); ++i) {
      const Message& m = p->messages_[i];
      if ((m.low_latency ? 1 : m.two_shot ? 2 : 0) != way) continue;
      checked = p->check(static_cast<int>(i), ways[way]);
      break;
    }
  }
  problem = ShmGroup::first_problem_of_any_rank(ex, prefix + "checked/", rank, world, checked);
  if (!problem.empty()) return fail(problem);
  return p;
}

int PeerReduce::low_latency_messages() const {
  return static_cast<int>(std::count_if(messages_.begin(), messages_.end(), [](const Message& m) { return m.low_latency; }));
}

int PeerReduce::two_shot_messages() const {
  return static_cast<int>(std::count_if(messages_.begin(), messages_.end(), [](const Message& m) { return m.two_shot; }));
}

// This rank's buffer (zeroed), its handle published, every other rank's handle opened.
std::string PeerReduce::map_peers(ProcessGroupImpl& pg, const std::string& prefix) {
  const ShmGroup::Exchange ex = pg.store_exchange();
  const size_t bytes = peer_buffer_bytes(maps_.slots, maps_.capacity, maps_.ll_capacity, maps_.world);
  std::string problem;
  cudaIpcMemHandle_t handle{};
  if (cudaError_t e = cudaMalloc(&own_, bytes); e != cudaSuccess) {
    own_ = nullptr;
    problem = cuda_problem("allocating the peer buffer", e);
  } else if (e = cudaMemset(own_, 0, bytes); e != cudaSuccess) {
    problem = cuda_problem("clearing the peer buffer", e);
  } else if (e = cudaDeviceSynchronize(); e != cudaSuccess) {
    problem = cuda_problem("clearing the peer buffer", e);
  } else if (e = cudaIpcGetMemHandle(&handle, own_); e != cudaSuccess) {
    problem = cuda_problem("cudaIpcGetMemHandle", e);
  }
  const int rank = maps_.rank;
  ex.set(prefix + "handle/" + std::to_string(rank), problem.empty() ? to_hex(&handle, sizeof(handle)) : "");
  maps_.base[rank] = static_cast<unsigned char*>(own_);
  for (int r = 0; r < maps_.world; ++r) {
    if (r == rank) continue;
    const std::string v = ex.get(prefix + "handle/" + std::to_string(r));
    cudaIpcMemHandle_t theirs{};
    if (!problem.empty()) continue;
    if (!from_hex(v, &theirs, sizeof(theirs))) {
      problem = "rank " + std::to_string(r) + " published no buffer";
      continue;
    }
    void* mapped = nullptr;
    if (cudaError_t e = cudaIpcOpenMemHandle(&mapped, theirs, cudaIpcMemLazyEnablePeerAccess); e != cudaSuccess) {
      problem = cuda_problem(("mapping rank " + std::to_string(r) + "'s GPU memory").c_str(), e);
      continue;
    }
    opened_.push_back(mapped);
    maps_.base[r] = static_cast<unsigned char*>(mapped);
  }
  return problem;
}

// A small all-reduce through the mapped buffers, in `message`'s place (every rank runs it, so the
// epochs stay paired), compared with the same sums on the host.
std::string PeerReduce::check(int message, const std::string& where) {
  const int64_t n = std::min<int64_t>(messages_[message].floats, 4099);
  std::vector<float> host(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 97) * 0.25f + static_cast<float>(maps_.rank);
  float* dev = nullptr;
  cudaStream_t stream = nullptr;
  std::string problem;
  if (cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&dev), sizeof(float) * n); e != cudaSuccess) return cuda_problem(where.c_str(), e);
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess) {
    (void)cudaFree(dev);
    return cuda_problem(where.c_str(), e);
  }
  const PeerInput in{dev, n};
  PeerCall call;
  call.slot = message;
  call.offset = messages_[message].offset;
  call.low_latency = messages_[message].low_latency;
  call.two_shot = messages_[message].two_shot;
  call.inputs = &in;
  call.input_count = 1;
  call.out = dev;
  call.timeout_ns = 60ull * 1000000000ull;
  cudaError_t e = cudaMemcpyAsync(dev, host.data(), sizeof(float) * n, cudaMemcpyHostToDevice, stream);
  if (e == cudaSuccess) e = static_cast<cudaError_t>(peer_allreduce_launch(maps_, call, stream));
  if (e == cudaSuccess) e = cudaMemcpyAsync(host.data(), dev, sizeof(float) * n, cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) problem = cuda_problem(where.c_str(), e);
  (void)cudaStreamDestroy(stream);
  (void)cudaFree(dev);
  if (!problem.empty()) return problem;
  const float inv = 1.0f / static_cast<float>(maps_.world);
  for (int64_t i = 0; i < n; ++i) {
    float s = static_cast<float>(i % 97) * 0.25f;
    for (int r = 1; r < maps_.world; ++r) s += static_cast<float>(i % 97) * 0.25f + static_cast<float>(r);
    const float want = s * inv;
    if (std::fabs(host[i] - want) > 1e-6f * std::fabs(want) + 1e-6f) {
      char buf[160];
      std::snprintf(buf, sizeof(buf), "%s gave %.7g at element %lld, expected %.7g", where.c_str(), host[i],
                    static_cast<long long>(i), want);
      return buf;
    }
  }
  return "";
}

void PeerReduce::average(int message, const std::vector<PeerInput>& inputs, float* out, void* stream,
                         const PeerFusedEpilogue* fused) const {
  const Message& m = messages_.at(static_cast<size_t>(message));
  PeerCall call;
  call.slot = message;
  call.offset = m.offset;
  call.low_latency = m.low_latency;
  call.two_shot = m.two_shot;
  call.inputs = inputs.data();
  call.input_count = static_cast<int>(inputs.size());
  call.out = out;
  call.timeout_ns = timeout_ns_;
  call.fused = fused;
  const int e = peer_allreduce_launch(maps_, call, stream);
  if (e != 0) (void)cudaGetLastError();
  // A c10::Error: inside a capture, the step falls back to eager on every rank.
  TORCH_CHECK(e == 0, "the peer all-reduce of gradient message ", message,
              " could not be launched: ", cudaGetErrorString(static_cast<cudaError_t>(e)));
}

PeerReduce::~PeerReduce() {
  // No call may still run: the graphs that hold them are gone, and a collective after the last
  // step (evaluation, the final barrier) waited for every rank's last step to finish.
  (void)cudaDeviceSynchronize();
  for (void* p : opened_) (void)cudaIpcCloseMemHandle(p);
  if (own_ != nullptr) (void)cudaFree(own_);
}

}  // namespace train::detail
