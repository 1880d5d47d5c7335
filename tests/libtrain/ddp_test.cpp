// DistributedDataParallel on Gloo over loopback, ranks as threads of this process: gradients
// must equal the single-process gradients of the combined batch.
#include "test_util.h"
#include "train/ddp.h"
#include "train/base/error.h"
#include "train/models/model.h"
#include "train/process_group.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <unistd.h>

#include <thread>

namespace {

train::DistEnv env_for(int rank, int world, int port) {
  train::DistEnv e;
  e.source = train::EnvSource::torchrun;
  e.rank = rank;
  e.world_size = world;
  e.local_rank = rank;
  e.local_world_size = world;
  e.master_addr = "127.0.0.1";
  e.master_port = port;
  e.host = "localhost";
  return e;
}

// Runs fn(rank, process_group) on `world` threads; rethrows the first failure.
void run_ranks(int world, const std::function<void(int, std::shared_ptr<train::ProcessGroup>)>& fn,
               train::Backend backend = train::Backend::gloo) {
  const int port = train::test::free_port();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(world);
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        train::ProcessGroupOptions o;
        o.timeout = std::chrono::seconds(60);
        o.backend = backend;
        o.device_index = r;
        if (backend == train::Backend::nccl) c10::cuda::set_device(static_cast<c10::DeviceIndex>(r));
        auto pg = train::ProcessGroup::create(env_for(r, world, port), o);
        fn(r, pg);
        pg->shutdown();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) ASSERT_TRUE(errors[r].empty()) << "rank " << r << ": " << errors[r];
}

std::vector<torch::Tensor> reference_grads(const torch::Tensor& x, const torch::Tensor& y) {
  torch::manual_seed(7);
  train::models::ModelOptions o;
  o.dropout = false;
  auto m = train::models::make_model("mnist", o);
  m->to(x.device(), x.scalar_type());
  auto loss = torch::nll_loss(m->forward(x), y);
  loss.backward();
  std::vector<torch::Tensor> g;
  for (auto& p : m->parameters()) g.push_back(p.grad().clone());
  return g;
}

double rel_err(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).norm().item<double>() / std::max(1e-30, b.norm().item<double>());
}

}  // namespace

// In float64 the only difference between the two computations is rounding, so the bound is the
// issue's 1e-6 with a wide margin; in float32 the summation order of a batch of 16 versus two of
// 8 already moves conv1's gradient by ~1.5e-6, so float32 is checked at 1e-5.
void check_gradient_parity(at::ScalarType dtype, double tolerance,
                           train::Backend backend = train::Backend::gloo) {
  at::set_num_threads(1);
  const bool cuda = backend == train::Backend::nccl;
  constexpr int kWorld = 2, kBatch = 8;
  torch::manual_seed(123);
  auto x = torch::randn({kWorld * kBatch, 1, 28, 28}, dtype);
  auto y = torch::randint(0, 10, {kWorld * kBatch}, torch::kLong);
  auto want = cuda ? [&] {
    auto g = reference_grads(x.to(torch::kCUDA), y.to(torch::kCUDA));
    for (auto& t : g) t = t.cpu();
    return g;
  }() : reference_grads(x, y);
  std::vector<std::vector<torch::Tensor>> got(kWorld);
  // Models are built here: the default generator is global, so seeding inside the rank threads
  // would race. A different init on rank 1 proves the constructor's broadcast from rank 0.
  std::vector<std::shared_ptr<train::models::Model>> models;
  for (int r = 0; r < kWorld; ++r) {
    torch::manual_seed(r == 0 ? 7 : 99);
    train::models::ModelOptions o;
    o.dropout = false;
    models.push_back(train::models::make_model("mnist", o));
    models.back()->to(dtype);
  }
  run_ranks(kWorld, [&](int rank, std::shared_ptr<train::ProcessGroup> pg) {
    auto m = models[rank];
    const torch::Device dev = cuda ? torch::Device(torch::kCUDA, rank) : torch::Device(torch::kCPU);
    m->to(dev);
    train::DistributedDataParallel ddp(m, pg);
    auto xs = x.narrow(0, rank * kBatch, kBatch).to(dev), ys = y.narrow(0, rank * kBatch, kBatch).to(dev);
    // Two steps: the second checks that per-backward state resets.
    for (int step = 0; step < 2; ++step) {
      m->zero_grad();
      torch::nll_loss(m->forward(xs), ys).backward();
    }
    for (auto& p : m->parameters()) got[rank].push_back(p.grad().cpu());
  }, backend);
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_EQ(got[r].size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_LE(rel_err(got[r][i], want[i]), tolerance) << "rank " << r << " param " << i;
    }
  }
  // Every rank holds bit-identical gradients.
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(torch::equal(got[0][i], got[1][i]));
}

TEST(Ddp, GradientsEqualSingleProcessOnCombinedBatchFloat64) { check_gradient_parity(at::kDouble, 1e-6); }
TEST(Ddp, GradientsEqualSingleProcessOnCombinedBatchFloat32) { check_gradient_parity(at::kFloat, 1e-5); }

// The same on two GPUs over NCCL, one GPU per rank (label gpu; scripts/gpu-check.sh runs it).
TEST(DdpGpu, GradientsEqualSingleProcessOnCombinedBatchNccl) {
  if (!torch::cuda::is_available() || torch::cuda::device_count() < 2) {
    GTEST_SKIP() << "needs 2 CUDA GPUs, found " << (torch::cuda::is_available() ? torch::cuda::device_count() : 0)
                 << ": run scripts/gpu-check.sh on a node with 2 GPUs (docs/gpu.md)";
  }
  // TF32 would change the convolutions' rounding; compare in full float64.
  check_gradient_parity(at::kDouble, 1e-6, train::Backend::nccl);
}

TEST(Ddp, BucketsFollowReverseOrderAndCaps) {
  run_ranks(2, [&](int, std::shared_ptr<train::ProcessGroup> pg) {
    auto m = train::models::make_model("mnist");
    train::DistributedDataParallel ddp(m, pg);
    // Reverse order: fc2.b, fc2.w, fc1.b, fc1.w (4.7 MB, closes the 1 MB first bucket), then
    // conv2.b, conv2.w, conv1.b, conv1.w under the 25 MB cap.
    EXPECT_EQ(ddp.bucket_param_counts(), (std::vector<size_t>{4, 4}));
    EXPECT_EQ(ddp.bucket_bytes(), (std::vector<size_t>{(10 + 1280 + 128 + 1179648) * 4, (64 + 18432 + 32 + 288) * 4}));
    train::DdpOptions small;
    small.first_bucket_cap_mb = 0.001;
    small.bucket_cap_mb = 0.05;
    train::DistributedDataParallel ddp2(train::models::make_model("mnist"), pg, small);
    EXPECT_EQ(ddp2.bucket_param_counts(), (std::vector<size_t>{2, 2, 2, 2}));
  });
}

TEST(Ddp, NoSyncAccumulatesThenAveragesTheSum) {
  at::set_num_threads(1);
  torch::manual_seed(5);
  auto x = torch::randn({8, 1, 28, 28});
  auto y = torch::randint(0, 10, {8}, torch::kLong);
  // Reference: one process, grads of micro-batches [0:2] + [2:4] (rank 0) and [4:6] + [6:8]
  // (rank 1) averaged over ranks = sum of four micro-batch grads / 2.
  torch::manual_seed(7);
  train::models::ModelOptions o;
  o.dropout = false;
  auto ref = train::models::make_model("mnist", o);
  for (int k = 0; k < 4; ++k) torch::nll_loss(ref->forward(x.narrow(0, 2 * k, 2)), y.narrow(0, 2 * k, 2)).backward();
  std::vector<torch::Tensor> want;
  for (auto& p : ref->parameters()) want.push_back(p.grad() / 2);
  std::vector<std::vector<torch::Tensor>> got(2);
  std::vector<std::shared_ptr<train::models::Model>> models;
  for (int r = 0; r < 2; ++r) {
    torch::manual_seed(7);
    models.push_back(train::models::make_model("mnist", o));
  }
  run_ranks(2, [&](int rank, std::shared_ptr<train::ProcessGroup> pg) {
    auto m = models[rank];
    train::DistributedDataParallel ddp(m, pg);
    {
      auto guard = ddp.no_sync();
      torch::nll_loss(m->forward(x.narrow(0, 4 * rank, 2)), y.narrow(0, 4 * rank, 2)).backward();
    }
    torch::nll_loss(m->forward(x.narrow(0, 4 * rank + 2, 2)), y.narrow(0, 4 * rank + 2, 2)).backward();
    for (auto& p : m->parameters()) got[rank].push_back(p.grad().clone());
  });
  for (int r = 0; r < 2; ++r)
    for (size_t i = 0; i < want.size(); ++i) EXPECT_LE(rel_err(got[r][i], want[i]), 1e-6) << "rank " << r << " param " << i;
}

TEST(Ddp, UnusedParameterIsAClearError) {
  run_ranks(2, [&](int, std::shared_ptr<train::ProcessGroup> pg) {
    struct Two : torch::nn::Module {
      Two() {
        a = register_module("a", torch::nn::Linear(4, 1));
        b = register_module("b", torch::nn::Linear(4, 1));
      }
      torch::nn::Linear a{nullptr}, b{nullptr};
    };
    auto m = std::make_shared<Two>();
    train::DistributedDataParallel ddp(m, pg);
    try {
      m->a->forward(torch::ones({2, 4})).sum().backward();
      ADD_FAILURE() << "expected an error naming b.weight";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("b.weight"), std::string::npos) << e.what();
    }
  });
}

TEST(ProcessGroup, AllreduceSumForEveryPathAndLayout) {
  // Ranks of one process share one machine, so small CPU tensors take the shared-memory path
  // and large ones Gloo; integers, a non-contiguous view and both paths must all give the sum.
  run_ranks(3, [](int r, std::shared_ptr<train::ProcessGroup> pg) {
    auto ints = torch::full({5}, static_cast<int64_t>(r + 1) * 1000000007LL, torch::kLong);
    pg->allreduce_sum(ints);
    EXPECT_TRUE(torch::equal(ints, torch::full({5}, 6 * 1000000007LL, torch::kLong))) << ints;

    auto base = torch::arange(12, torch::kFloat).reshape({3, 4}) * (r + 1);
    auto view = base.t();  // non-contiguous
    pg->allreduce_sum(view);
    EXPECT_TRUE(torch::equal(base, torch::arange(12, torch::kFloat).reshape({3, 4}) * 6));

    auto big = torch::full({100000}, 0.5 * (r + 1), torch::kDouble);  // 800 KB: over the 64 KiB segment
    pg->allreduce_sum(big);
    EXPECT_TRUE(torch::equal(big, torch::full({100000}, 3.0, torch::kDouble)));
  });
}

// Small GPU tensors over a Gloo group of ranks on one machine (as two GPUs of a machine get) take
// the shared-memory path too: copied to the host, summed in rank order, copied back. Their sums
// are a CPU tensor's, bit for bit, where the order of a float sum shows (1e8 - 1e8 + 1 in rank
// order is 1; another order gives 0); large ones go through Gloo. The ranks share GPU 0.
TEST(ProcessGroupGpu, SmallCudaTensorsOverGlooSumAsCpuOnes) {
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "needs a CUDA GPU, found 0: run scripts/gpu-check.sh on a node with a GPU (docs/gpu.md)";
  }
  run_ranks(3, [](int r, std::shared_ptr<train::ProcessGroup> pg) {
    const auto cuda = torch::TensorOptions().device(torch::kCUDA, 0);
    const float values[] = {1e8f, -1e8f, 1.0f};
    auto cpu = torch::full({7}, values[r], torch::kFloat);
    auto gpu = cpu.to(cuda.device());
    pg->allreduce_sum(cpu);
    pg->allreduce_sum(gpu);
    EXPECT_TRUE(gpu.device().is_cuda());
    EXPECT_TRUE(torch::equal(gpu.cpu(), cpu)) << gpu << cpu;
    EXPECT_EQ(cpu[0].item<float>(), 1.0f) << "rank order: (1e8 + -1e8) + 1";

    auto ints = torch::full({5}, static_cast<int64_t>(r + 1) * 1000000007LL, cuda.dtype(torch::kLong));
    pg->allreduce_sum(ints);
    EXPECT_TRUE(torch::equal(ints.cpu(), torch::full({5}, 6 * 1000000007LL, torch::kLong))) << ints;

    auto base = (torch::arange(12, torch::kDouble).reshape({3, 4}) * (r + 1)).to(cuda.device());
    auto view = base.t();  // non-contiguous
    pg->allreduce_sum(view);
    EXPECT_TRUE(torch::equal(base.cpu(), torch::arange(12, torch::kDouble).reshape({3, 4}) * 6));

    auto big = torch::full({100000}, 0.5 * (r + 1), cuda.dtype(torch::kDouble));  // over the 64 KiB segment: Gloo
    pg->allreduce_sum(big);
    EXPECT_TRUE(torch::equal(big.cpu(), torch::full({100000}, 3.0, torch::kDouble)));
  });
}

// Ranks that would build different backends (a flag that differs, or --backend auto deciding
// apart where ranks see different GPUs) fail at once, every one of them, naming the rank that
// differs, instead of waiting for each other's half of a rendezvous until the timeout.
TEST(ProcessGroup, RanksOfDifferentBackendsFailAtOnceNamingTheRank) {
  const int port = train::test::free_port();
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      train::ProcessGroupOptions o;
      o.timeout = std::chrono::seconds(120);  // far longer than the test: the failure must not be a timeout
      o.backend = r == 2 ? train::Backend::nccl : train::Backend::gloo;
      try {
        train::ProcessGroup::create(env_for(r, 3, port), o);
        errors[r] = "no error";
      } catch (const train::ConfigError& e) {
        errors[r] = e.what();
      } catch (const std::exception& e) {
        errors[r] = std::string("not a ConfigError: ") + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(errors[r].find("expected rank 0's, gloo, on every rank; found nccl on rank 2 on localhost"), std::string::npos)
        << "rank " << r << ": " << errors[r];
    EXPECT_NE(errors[r].find("rank " + std::to_string(r) + "/3"), std::string::npos) << errors[r];
  }
}

TEST(ProcessGroup, MissingPeerTimesOutNamingTheRendezvous) {
  train::ProcessGroupOptions o;
  o.timeout = std::chrono::seconds(3);
  const int port = train::test::free_port();
  try {
    train::ProcessGroup::create(env_for(0, 2, port), o);
    FAIL() << "expected a TimeoutError";
  } catch (const train::TimeoutError& e) {
    // A timeout, not any communication failure: rank 1 never came, nothing broke.
    std::string w = e.what();
    EXPECT_NE(w.find("rank 0/2"), std::string::npos) << w;
    EXPECT_NE(w.find("rendezvous"), std::string::npos) << w;
    EXPECT_NE(w.find("(timeout 3 s)"), std::string::npos) << w;
  } catch (const train::CommError& e) {
    FAIL() << "expected a TimeoutError, got another CommError: " << e.what();
  }
}
