// Private: the c10d store and backend behind train::ProcessGroup, shared by libtrain's sources.
#pragma once

#include "train/process_group.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <functional>
#include <string>

namespace train::detail {

struct ProcessGroupImpl {
  DistEnv env;
  Backend backend = Backend::gloo;
  std::chrono::milliseconds timeout{0};
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> pg;
  bool shut_down = false;

  /// Runs fn, turning c10d/Gloo/NCCL exceptions into train::CommError / TimeoutError that name
  /// this rank, host and the operation.
  void guarded(const std::string& op, const std::function<void()>& fn);
  /// Waits for work with the group's timeout, translating failures like guarded().
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& op);
};

}  // namespace train::detail
