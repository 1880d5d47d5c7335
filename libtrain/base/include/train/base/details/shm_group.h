// Not API (spdlog's details/ convention): a shared-memory segment and sum-allreduce for ranks that
// run on one machine (no LibTorch). train::base's own; libtrain's process group and reducer use it
// for CPU gradient buckets instead of Gloo over loopback TCP.
//
// Layout: a header, then world + 1 regions of `capacity` bytes: region r is rank r's input slot,
// the last one holds the reduced result. A sum over [offset, offset + count):
//   barrier; rank r sums its 1/world share of every slot, in rank order, into the result;
//   barrier. Each rank writes only its own slot, and reads the result only between the second
//   barrier of one allreduce and the first of the next, so no further synchronisation is needed.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace train::details {

class ShmGroup {
 public:
  enum class DType { f32, f64, i64 };

  /// How ranks exchange the few strings the set-up needs (the rendezvous store).
  struct Exchange {
    std::function<void(const std::string& key, const std::string& value)> set;
    std::function<std::string(const std::string& key)> get;  ///< waits for the key
  };

  /// Collective: whether every rank runs on this machine (same boot id and host), by the keys
  /// under `prefix`. Also used by other same-machine transports (the GPUs' peer all-reduce).
  static bool all_on_one_machine(const Exchange& ex, const std::string& prefix, int rank, int world);
  /// Collective: every rank reports `problem` ("" when it is fine) under `prefix`; returns this
  /// rank's problem, else the first other rank's ("rank R: ..."), "" when no rank has one.
  static std::string first_problem_of_any_rank(const Exchange& ex, const std::string& prefix, int rank, int world,
                                               const std::string& problem);

  /// Collective: every rank calls it with the same key, capacity and world. Returns null on
  /// every rank (with the reason in *why_not) unless all ranks share one machine (boot id and
  /// PID namespace), the segment could be created with its memory reserved, and every rank
  /// mapped it. `where` names this rank in errors ("rank 1/2 on node3"), `host` this machine.
  static std::unique_ptr<ShmGroup> create(const Exchange& exchange, const std::string& key, int rank,
                                          int world, size_t capacity, std::chrono::milliseconds timeout,
                                          std::string where, std::string host, std::string* why_not);
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  size_t capacity() const { return capacity_; }
  /// This rank's input slot and the shared result region (capacity bytes each).
  void* slot() const;
  const void* result() const;

  /// Sums every rank's slot over [offset, offset + count elements) into result(), in rank order
  /// (bit-identical on every rank). All ranks, same arguments. Throws train::CommError when a
  /// peer process exits or another rank aborted, train::TimeoutError after the timeout; both
  /// name the rank(s) concerned. `diagnose` adds the caller's words to a timeout message.
  void allreduce_sum(size_t offset_bytes, size_t count, DType dtype, const std::string& op);

  /// Marks the group failed so peers stop waiting at once (called before a rank gives up).
  void abort();

 private:
  struct Header;
  ShmGroup() = default;
  /// Maps `bytes` of fd shared; "" or the error.
  std::string map(int fd, size_t bytes);
  /// Rank 0's part of create(): makes a segment of `total` bytes, maps it, writes the header and
  /// publishes its name (empty on failure). Sets *name for the unlink; returns "" or the problem.
  std::string create_segment(const Exchange& ex, const std::string& prefix, size_t total, std::string* name);
  /// The other ranks' part: maps the segment rank 0 published and checks it is this group's.
  /// Sets *name when one was published; returns "" or the problem.
  std::string open_segment(const Exchange& ex, const std::string& prefix, size_t total, std::string* name);
  void barrier(const std::string& op);
  std::string peer_exited() const;

  int rank_ = 0, world_ = 1;
  size_t capacity_ = 0, mapped_bytes_ = 0;
  Header* header_ = nullptr;
  char* base_ = nullptr;
  std::chrono::milliseconds timeout_{0};
  std::string where_, host_;
};

}  // namespace train::details
