// A process group for libtrain: TCPStore rendezvous plus a Gloo (CPU) or NCCL (CUDA) backend.
// The c10d types stay behind this interface; user code never includes c10d headers.
#pragma once

#include "train/details/process_group_core.h"
#include "train/base/env.h"

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace train {


/// Which collective library to use.
enum class Backend { gloo, nccl };

/// "gloo" or "nccl".
std::string to_string(Backend backend);

/// Options for ProcessGroup::create.
struct ProcessGroupOptions {
  Backend backend = Backend::gloo;
  /// Limit for the rendezvous and for every collective; a peer that dies or never arrives is
  /// reported within it.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  /// CUDA device of this rank (NCCL only).
  int device_index = 0;
  /// Gloo only: when every rank runs on one machine, DDP sums CPU gradients through a shared
  /// memory segment instead of Gloo over loopback TCP (same results). false: always Gloo.
  bool shared_memory_allreduce = true;
  /// Network interface (e.g. "ib0") for Gloo, NCCL (NCCL_SOCKET_IFNAME) and the rendezvous
  /// store's listening socket: TrainConfig's distributed.interface (--interface). Empty: the
  /// TRAIN_INTERFACE variable, else the backends' own defaults (GLOO_SOCKET_IFNAME, the host name).
  /// create() throws train::ConfigError naming this host's interfaces when it has no such one.
  std::string interface;
};

/// The ranks of one job and the collectives among them.
///
/// Contract: every collective must be called by every rank, in the same order, with tensors of
/// the same shape and dtype. Collectives are synchronous from the caller's view. Failures throw
/// train::CommError (or train::TimeoutError) naming this rank and host.
class ProcessGroup {
 public:
  /// Rendezvous through a TCPStore at env.master_addr:env.master_port (rank 0 serves it), then
  /// builds the backend. Every rank of the job must call it. Throws train::CommError or
  /// train::TimeoutError if a peer doesn't arrive within options.timeout.
  static std::shared_ptr<ProcessGroup> create(const DistEnv& env, const ProcessGroupOptions& options);

  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int size() const;
  Backend backend() const;
  const DistEnv& env() const;
  std::chrono::milliseconds timeout() const;

  /// Sums `tensor` over all ranks, in place. All ranks.
  void allreduce_sum(at::Tensor& tensor);
  /// Copies `tensor` from `root` to every rank, in place. All ranks.
  void broadcast(at::Tensor& tensor, int root = 0);
  /// Returns when every rank has reached it. All ranks.
  void barrier();
  /// Ends the backend cleanly (NCCL communicators are destroyed). Idempotent; the destructor
  /// calls it too.
  void shutdown();


 private:
  friend details::ProcessGroupCore& details::core_of(ProcessGroup& pg);
  explicit ProcessGroup(std::unique_ptr<details::ProcessGroupCore> core);
  std::unique_ptr<details::ProcessGroupCore> core_;
};

}  // namespace train
