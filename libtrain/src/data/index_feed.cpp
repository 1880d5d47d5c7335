// The feed of data held in memory (batch_feed.h): each epoch's order from the sampler (drawn ahead
// by EpochOrders), copied to the device once, handed to the step as slices of indices.
#include "data/batch_feed.h"

#include "data/epoch_orders.h"

#include <ATen/ops/from_blob.h>

#include <vector>

namespace train::detail {
namespace {

class IndexFeed : public BatchFeed {
 public:
  IndexFeed(int64_t dataset_size, int world_size, int rank, uint64_t seed, const at::Device& device)
      : orders_(dataset_size, world_size, rank, seed), device_(device) {}

  int64_t start_epoch(int epoch, int64_t /*first*/, int64_t /*step_samples*/, bool next_follows) override {
    local_ = orders_.take(epoch - 1, next_follows);
    // On the CPU to() keeps the blob itself: local_ lives as long as the order does.
    order_ = at::from_blob(local_.data(), {static_cast<int64_t>(local_.size())}, at::kLong).to(device_);
    return order_.size(0);
  }

  StepBatch batch(int64_t start, int64_t len) override {
    StepBatch b;
    b.indices = order_.narrow(0, start, len);
    return b;
  }

 private:
  EpochOrders orders_;
  at::Device device_;
  std::vector<int64_t> local_;  // this epoch's indices on the host
  at::Tensor order_;            // ... and on the device
};

}  // namespace

std::unique_ptr<BatchFeed> make_index_feed(int64_t dataset_size, int world_size, int rank, uint64_t seed,
                                           const at::Device& device) {
  return std::make_unique<IndexFeed>(dataset_size, world_size, rank, seed, device);
}

}  // namespace train::detail
