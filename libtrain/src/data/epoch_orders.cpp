// The epochs' sample orders, one drawn ahead (epoch_orders.h).
#include "data/epoch_orders.h"

#include "train/sampler.h"

namespace train::detail {

EpochOrders::EpochOrders(int64_t dataset_size, int world_size, int rank, uint64_t seed)
    : dataset_size_(dataset_size), world_size_(world_size), rank_(rank), seed_(seed) {
  (void)DistributedSampler(dataset_size_, world_size_, rank_, /*shuffle=*/true, seed_);  // bad sizes throw here
}

EpochOrders::~EpochOrders() {
  if (ahead_.valid()) ahead_.wait();
}

std::vector<int64_t> EpochOrders::draw(int64_t epoch) const {
  DistributedSampler sampler(dataset_size_, world_size_, rank_, /*shuffle=*/true, seed_);
  sampler.set_epoch(epoch);
  return sampler.indices();
}

std::vector<int64_t> EpochOrders::take(int64_t epoch, bool next) {
  std::vector<int64_t> order;
  if (ahead_.valid()) {
    const bool mine = ahead_epoch_ == epoch;
    std::vector<int64_t> drawn = ahead_.get();  // rethrows the drawing's error
    if (mine) order = std::move(drawn);
    ahead_epoch_ = -1;
  }
  if (order.empty()) order = draw(epoch);
  if (next) {
    ahead_epoch_ = epoch + 1;
    ahead_ = std::async(std::launch::async, [this, e = epoch + 1] { return draw(e); });
  }
  return order;
}

}  // namespace train::detail
