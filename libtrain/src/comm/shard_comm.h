// ZeRO-1's communication (--shard-optimizer): each gradient bucket laid out flat with every
// parameter starting on a multiple of kShardAlign elements and cut into one equal chunk per rank;
// the averaged gradients reduce-scattered into this rank's chunk while the backward runs, and, after
// this rank updated its chunk, every rank's chunk all-gathered back. Private.
#pragma once

#include "comm/reducer.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace train {
class ProcessGroup;
}  // namespace train

namespace train::detail {

/// Shard boundaries fall on multiples of this many elements of each parameter: ATen's CPU fused
/// optimizer kernels treat an element alike (vector lanes, not the scalar tail) only when a slice
/// starts where the whole tensor's vector loop would have a lane boundary (measured: cuts at 8
/// keep the bits, cuts at odd places don't). 64 covers AVX-512 floats and doubles with unrolling.
inline constexpr int64_t kShardAlign = 64;

/// The elements of one parameter that this rank owns: parameter-relative [begin, begin + length),
/// at `chunk_offset` in this rank's chunk of the bucket.
struct OwnedSlice {
  size_t param = 0;  ///< index into Reducer::params()
  int64_t begin = 0, length = 0, chunk_offset = 0;
};

/// One bucket's flat layout: `world` chunks of `chunk` elements; parameter j (bucket order) at
/// offsets[j], which is a multiple of kShardAlign, as is `chunk`.
struct BucketShards {
  int64_t chunk = 0;
  std::vector<int64_t> offsets;
  std::vector<OwnedSlice> owned;  ///< this rank's, in bucket order (only non-empty ones)
  int64_t world = 1;
  int64_t flat() const { return chunk * world; }  ///< the padded flat buffer's elements
};

/// The layout of every bucket for `rank` of `world`. `numels[k]` are bucket k's parameters'
/// element counts in bucket order, `params[k]` their indices into Reducer::params().
std::vector<BucketShards> plan_shards(const std::vector<std::vector<int64_t>>& numels,
                                      const std::vector<std::vector<size_t>>& params, int world, int rank);

/// How a captured CUDA graph step moves ZeRO-1's chunks (cuda/shard_graph.h: NCCL's own calls,
/// queued on the device), in place of the process group's collectives, whose waits a graph can't
/// hold. Each call queues its work and returns; the communication knows no optimizer.
class ShardCollectives {
 public:
  virtual ~ShardCollectives() = default;
  /// Averages `flat` (world x chunk elements) over the ranks and leaves this rank's chunk in
  /// `chunk`: each rank's term multiplied by 1/world, then summed (NCCL's average of floats, the
  /// same arithmetic as the process group's path, which scales first and sums).
  virtual void reduce_scatter_average(size_t k, const at::Tensor& flat, at::Tensor& chunk) = 0;
  /// Every rank's `mine` into `full` (world x chunk, rank order).
  virtual void all_gather(size_t k, const at::Tensor& mine, at::Tensor& full) = 0;
  /// Sums `t` over the ranks, in place.
  virtual void all_reduce_sum(at::Tensor& t) = 0;
};

/// The reducer's hook for a sharded optimizer: scales each gradient by 1/world into its bucket's
/// flat buffer as DDP does and leaves this rank's chunk of the sum in grad_chunk(k). Ranks of one
/// machine sum through shared memory (the same rank-ordered sum as DDP's: the same bits at any
/// world size); others through the process group's reduce-scatter (Gloo, or NCCL on GPUs; at 2
/// ranks the same bits, at more its own order); inside a CUDA graph through the graph's
/// collectives (use_collectives: NCCL's average, which scales as it sums). The parameters' .grad
/// keep this rank's own (unaveraged) gradients; in a captured step they are views of the flat
/// buffers (bind_grads), which the all-gather then reuses.
class ShardComm : public CommHook {
 public:
  /// Collective (the shared-memory set-up): every rank calls it alike. `why` gets the transport.
  /// Moves every parameter into its bucket's parameter buffer, laid out as the gradients' flat
  /// buffer (set_data: the same tensors, the same values; call before anything keeps a view of a
  /// parameter).
  static std::shared_ptr<ShardComm> create(Reducer& reducer, ProcessGroup& pg, bool shared_memory, std::string* why);
  ~ShardComm() override;

  const std::vector<BucketShards>& layout() const;
  int rank() const;
  /// This rank's chunk of bucket k's averaged gradients, valid after a synchronised backward.
  const at::Tensor& grad_chunk(size_t k) const;
  /// Collective: every rank's `mine` (bucket k's chunk, `chunk` elements of the bucket's dtype)
  /// into `full` (world x chunk, rank order). Exact copies: no value changes a bit.
  void all_gather(size_t k, const at::Tensor& mine, at::Tensor& full);
  /// Collective: sums `t` over the ranks, in place (the process group's allreduce_sum).
  void all_reduce_sum(at::Tensor& t);
  /// Bucket k's buffer for all_gather()'s `full` (world x chunk elements): the gradients' flat
  /// buffer where nothing else needs it once the reduce-scatter is over (the process group's and
  /// a graph's collectives), so a sharded rank keeps no second copy of the parameters.
  at::Tensor gather_buffer(size_t k);
  /// A captured step: every parameter's .grad becomes its view of the bucket's flat buffer, so the
  /// backward accumulates straight into what is reduce-scattered (no gradient tensors of their own,
  /// no copy, and with the graph's collectives no scaling: they average). Call before the capture;
  /// the captured step starts with zero_grads().
  void bind_grads(Reducer& r);
  /// Zeroes every flat buffer (the bound gradients and the padding).
  void zero_grads();
  /// Bucket k's parameter buffer (world x chunk elements, the gradients' layout) when every one of
  /// its parameters still lives there and the all-gather can fill it in place (the graph's
  /// collectives, or shared memory): this rank's slices of the parameters are then its chunk of
  /// it, and all_gather(k, that chunk, the buffer) updates the parameters (no send buffer, no
  /// gathered copy). Undefined otherwise (Gloo, a parameter moved since: the step copies).
  at::Tensor params_in_place(size_t k) const;
  /// create() moved the parameters into the buckets' parameter buffers (not where a parameter
  /// shares its memory with another tensor).
  bool params_bound() const;
  /// The collectives of a CUDA graph capture, from now until set back to null (the process
  /// group's): launch() hands each bucket to `c` and finalize() waits for nothing.
  void use_collectives(std::shared_ptr<ShardCollectives> c);

  void add(Reducer& r, size_t k, size_t i) override;
  void launch(Reducer& r, size_t k) override;
  void finalize(Reducer& r, size_t k) override;

 private:
  struct Impl;
  explicit ShardComm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace train::detail
