// The one gradient reducer (libtrain/src/comm/reducer.h) with a recording hook: buckets in
// reverse registration order with the size caps and the first module's own bucket, hooks called
// add -> launch (strictly in bucket order) -> finalize, manual and automatic ends of a backward,
// the reducer off, and a missing gradient named. The process-group and shared-memory hooks are
// tested through DistributedDataParallel (ddp_test.cpp), the graph hooks on GPUs (gpu tests).
#include "comm/reducer.h"

#include "train/base/error.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace {

// Three layers; the middle one is big enough to close a bucket of its own under a small cap.
struct Net : torch::nn::Module {
  Net() {
    a = register_module("a", torch::nn::Linear(4, 8));
    b = register_module("b", torch::nn::Linear(8, 64));
    c = register_module("c", torch::nn::Linear(64, 2));
  }
  torch::Tensor forward(const torch::Tensor& x) { return c(torch::relu(b(torch::relu(a(x))))); }
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr};
};

// Records every call, and at finalize() writes the bucket's index into its gradients.
class RecordingHook : public train::CommHook {
 public:
  std::vector<std::string> calls;
  void add(train::Reducer& r, size_t k, size_t i) override {
    calls.push_back("add " + std::to_string(k) + " " + r.names()[i]);
  }
  void launch(train::Reducer&, size_t k) override { calls.push_back("launch " + std::to_string(k)); }
  void finalize(train::Reducer& r, size_t k) override {
    calls.push_back("finalize " + std::to_string(k));
    for (size_t i : r.buckets()[k].params) r.params()[i].grad().fill_(static_cast<double>(k));
  }
};

std::vector<std::string> only(const std::vector<std::string>& calls, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& c : calls) {
    if (c.rfind(prefix, 0) == 0) out.push_back(c);
  }
  return out;
}

}  // namespace

TEST(Reducer, BucketsAreReverseOrderWithCapsAndTheFirstModulesOwn) {
  Net net;
  train::BucketOptions o;
  o.first_cap_mb = 1e-4;  // ~100 bytes: c (64*2+2 floats) closes the first bucket
  o.cap_mb = 25;
  train::Reducer r(net, o);
  ASSERT_EQ(r.params().size(), 6u);
  ASSERT_EQ(r.buckets().size(), 2u);
  EXPECT_EQ(r.buckets()[0].params, (std::vector<size_t>{5, 4}));  // c.bias, c.weight
  EXPECT_EQ(r.buckets()[1].params, (std::vector<size_t>{3, 2, 1, 0}));
  EXPECT_EQ(r.buckets()[1].numel, 8 * 64 + 64 + 4 * 8 + 8);
  EXPECT_EQ(r.buckets()[1].bytes(), static_cast<size_t>(r.buckets()[1].numel) * 4);

  o.split_first_module = true;  // module "a" (the backward's last) gets a bucket of its own
  Net net2;
  train::Reducer s(net2, o);
  ASSERT_EQ(s.buckets().size(), 3u);
  EXPECT_EQ(s.buckets()[1].params, (std::vector<size_t>{3, 2}));
  EXPECT_EQ(s.buckets()[2].params, (std::vector<size_t>{1, 0}));
  EXPECT_EQ(s.bucket_of(0), 2u);
  EXPECT_EQ(s.index_in_bucket(0), 1u);
}

TEST(Reducer, HooksRunAddLaunchInBucketOrderThenFinalize) {
  Net net;
  train::BucketOptions o;
  o.first_cap_mb = 1e-4;
  train::Reducer r(net, o);
  auto hook = std::make_shared<RecordingHook>();
  r.set_hooks(r.all_buckets(hook));
  net.forward(torch::randn({3, 4})).sum().backward();  // automatic: an engine callback ends it
  // Every gradient was added once, bucket 0 launched before bucket 1, and each finalized in order.
  EXPECT_EQ(only(hook->calls, "add").size(), 6u);
  EXPECT_EQ(only(hook->calls, "launch"), (std::vector<std::string>{"launch 0", "launch 1"}));
  EXPECT_EQ(only(hook->calls, "finalize"), (std::vector<std::string>{"finalize 0", "finalize 1"}));
  const auto first_launch = std::find(hook->calls.begin(), hook->calls.end(), "launch 0");
  EXPECT_EQ(std::count(hook->calls.begin(), first_launch, std::string("add 0 c.weight")), 1);
  EXPECT_EQ(std::count(hook->calls.begin(), first_launch, std::string("add 0 c.bias")), 1);
  // What the hook left in the gradients stays there.
  EXPECT_EQ(net.c->weight.grad().max().item<double>(), 0.0);
  EXPECT_EQ(net.a->weight.grad().min().item<double>(), 1.0);

  // The reducer off: the backward only accumulates, no hook runs.
  hook->calls.clear();
  r.set_enabled(false);
  net.forward(torch::randn({3, 4})).sum().backward();
  EXPECT_TRUE(hook->calls.empty());
  r.set_enabled(true);

  // Manual: no engine callback; finish() ends the backward.
  hook->calls.clear();
  r.set_hooks(r.all_buckets(hook, /*manual=*/true));
  net.forward(torch::randn({3, 4})).sum().backward();
  EXPECT_TRUE(only(hook->calls, "finalize").empty());
  r.finish();
  EXPECT_EQ(only(hook->calls, "finalize"), (std::vector<std::string>{"finalize 0", "finalize 1"}));
}

TEST(Reducer, AMissingGradientIsNamed) {
  Net net;
  train::Reducer r(net, train::BucketOptions{});
  r.set_hooks(r.all_buckets(std::make_shared<RecordingHook>()));
  try {
    net.c(torch::randn({3, 64})).sum().backward();  // a and b take no part
    FAIL() << "expected a ConfigError";
  } catch (const train::ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("found none for: a.weight, a.bias, b.weight, b.bias"), std::string::npos) << what;
  }
  // Manual mode says it as a c10::Error (a failed capture falls back to the eager step).
  Net net2;
  train::Reducer m(net2, train::BucketOptions{});
  m.set_hooks(m.all_buckets(std::make_shared<RecordingHook>(), /*manual=*/true));
  net2.c(torch::randn({3, 64})).sum().backward();
  EXPECT_THROW(m.finish(), c10::Error);
}

TEST(Reducer, RefusesAModelWithoutTrainableParameters) {
  torch::nn::Sequential empty;
  EXPECT_THROW(train::Reducer(*empty.ptr(), train::BucketOptions{}), train::ConfigError);
  Net net;
  train::BucketOptions bad;
  bad.cap_mb = 0;
  EXPECT_THROW(train::Reducer(net, bad), train::ConfigError);
}
