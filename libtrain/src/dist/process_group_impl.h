// Private: the c10d store and backend behind train::ProcessGroup, shared by libtrain's sources.
#pragma once

#include "health/rank_record.h"
#include "train/base/details/shm_group.h"
#include "train/process_group.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace train::detail {

using details::ShmGroup;

/// The shared-memory allreduce's element type for a tensor dtype; nullopt where it has none.
inline std::optional<ShmGroup::DType> shm_dtype_of(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return ShmGroup::DType::f32;
    case at::kDouble: return ShmGroup::DType::f64;
    case at::kLong: return ShmGroup::DType::i64;
    default: return std::nullopt;
  }
}

/// c10d's NCCL backend bound to CUDA device `device_index` (cuda/nccl_backend.cpp); `name`, where
/// set, tells a subgroup apart in NCCL's logs and the flight recorder. Builds without CUDA throw
/// train::ConfigError.
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                                    std::chrono::milliseconds timeout, int device_index,
                                                    const std::string& name = "");

struct ProcessGroupImpl;

/// NCCL: sets TORCH_FR_BUFFER_SIZE (unless it or the older TORCH_NCCL_TRACE_BUFFER_SIZE is set)
/// before the backend is created, so that torch's flight recorder keeps the last collectives
/// (cuda/nccl_backend.cpp; no-op without CUDA).
void enable_flight_recorder();
/// NCCL: writes this rank's flight recorder to dir/nccl_trace_rank_<rank>.json and returns the
/// path; "" where there is none (Gloo, no CUDA) or it can't be written.
std::string dump_flight_recorder(const ProcessGroupImpl& core, const std::string& dir);

/// The interface a group uses: `flag` (ProcessGroupOptions::interface, --interface), else the
/// TRAIN_INTERFACE variable, else "" (the backends' own defaults).
std::string chosen_interface(const std::string& flag);

/// c10d's Gloo backend on `interface` (chosen_interface), else GLOO_SOCKET_IFNAME, else the host
/// name's address (process_group.cpp); the main group's and the health check's subgroups'.
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                                    std::chrono::milliseconds timeout, const std::string& interface);

struct ProcessGroupImpl {
  ~ProcessGroupImpl() { stop_heartbeat(); }  // also when create() fails after the rendezvous
  DistEnv env;
  Backend backend = Backend::gloo;
  std::chrono::milliseconds timeout{0};
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> pg;
  int device_index = 0;  // CUDA device of this rank (NCCL)
  bool shared_memory_allreduce = true;
  std::string interface;  // chosen_interface(ProcessGroupOptions::interface): subgroups use it too
  int shm_groups_created = 0;
  int peer_groups_created = 0;  // GPU peer all-reduce groups (their store keys)
  /// set/get through the rendezvous store, for the set-up of same-machine transports.
  ShmGroup::Exchange store_exchange();
  // Small CPU allreduces (the per-step stop check, metrics) go through this when every rank is
  // on one machine: a few microseconds instead of a Gloo round trip over TCP.
  std::unique_ptr<ShmGroup> small_shm;
  static constexpr size_t kSmallShmBytes = 64 * 1024;
  bool shut_down = false;
  /// Where this rank is (the hung-rank roll-call, rollcall.h); collectives count themselves here.
  RollCallRecord rollcall;

  /// Collective: a shared-memory group of `capacity` bytes per rank when allowed and every rank
  /// is on this machine; else null with the reason in *why_not.
  std::unique_ptr<ShmGroup> create_shm_group(size_t capacity, std::string* why_not);

  // Liveness: every rank bumps "beat/<rank>" in the store once a second from its own store
  // connection, so that after a failed collective we can name the ranks that stopped beating.
  std::thread heartbeat;
  std::mutex heartbeat_mu;
  std::condition_variable heartbeat_cv;
  bool heartbeat_stop = false;
  void start_heartbeat();
  void stop_heartbeat();
  /// After a failure: which ranks are dead or unreachable, in words ("" if it can't tell).
  std::string diagnose_peers();

  /// Runs fn, turning c10d/Gloo/NCCL exceptions into train::CommError / TimeoutError that name
  /// this rank, host and the operation.
  void guarded(const std::string& op, const std::function<void()>& fn);
  /// Waits for work with the group's timeout, translating failures like guarded().
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& op);
  /// The NCCL backend's communicator for this rank's device (an ncclComm_t), once a collective
  /// has created it; null for Gloo, before the first collective, or in a build without CUDA
  /// (cuda/nccl_backend.cpp; cpu/no_cuda.cpp).
  void* nccl_comm() const;
  /// Whether a CUDA graph calls NCCL on that communicator (set by lend_comm_to_graphs()). NCCL
  /// runs one communicator's operations one at a time in the order they reach each GPU, so the
  /// group's own collectives must then stay in the steps' stream order (Preemption::post).
  bool comm_in_graphs = false;
  /// Before a graph is captured with NCCL calls on nccl_comm(): sets comm_in_graphs and waits
  /// for this device's work, a collective queued on another stream included.
  void lend_comm_to_graphs();
};

}  // namespace train::detail

namespace train {
// What the public header names (train/details/process_group_core.h): the objects above.
namespace details {
struct ProcessGroupCore : detail::ProcessGroupImpl {};
}  // namespace details
}  // namespace train
