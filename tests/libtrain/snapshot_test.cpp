// In-memory snapshots (libtrain/src/snapshot.h): per-run folders, background writes in the
// checkpoint format, the newest valid one found past damaged files, and the collective that gives
// every rank the newest snapshot any rank's node holds (ranks as threads over Gloo on loopback).
#include "checkpoint/snapshot.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/base/files.h"
#include "train/process_group.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <thread>

namespace {

using train::detail::SnapshotStore;

std::string bytes_of(int64_t step) {
  torch::serialize::OutputArchive a;
  a.write("step", torch::tensor({step}));
  a.write("payload", torch::arange(1000, torch::kFloat) * static_cast<float>(step));
  return train::CheckpointDir::serialize(a, step);
}

std::shared_ptr<const std::string> snap_bytes(int64_t step) { return std::make_shared<const std::string>(bytes_of(step)); }

TEST(Snapshot, EachRunOfEachJobHasItsOwnFolder) {
  ::unsetenv("TRAIN_SNAPSHOT_DIR");
  const std::string a = train::detail::snapshot_dir("41", "node1", "/scratch/ck-a");
  const std::string b = train::detail::snapshot_dir("41", "node1", "/scratch/ck-b");
  const std::string c = train::detail::snapshot_dir("42", "node1", "/scratch/ck-a");
  EXPECT_EQ(a.rfind("/dev/shm/libtrain-", 0), 0u) << a;
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a, train::detail::snapshot_dir("41", "node1", "/scratch/ck-a"));
  EXPECT_NE(a, train::detail::snapshot_dir("41", "node2", "/scratch/ck-a"));  // nodes sharing a host stay apart
  EXPECT_EQ(a.rfind(train::detail::snapshot_job_dir("41") + "/", 0), 0u);
  EXPECT_EQ(train::detail::snapshot_dir("", "node1", "/scratch/ck-a"), "");  // no job: nothing outlives it
  ::setenv("TRAIN_SNAPSHOT_DIR", "/tmp/snaps", 1);
  EXPECT_EQ(train::detail::snapshot_dir("", "node1", "/scratch/ck-a").rfind("/tmp/snaps/", 0), 0u);
  ::unsetenv("TRAIN_SNAPSHOT_DIR");
}

TEST(Snapshot, WrittenInTheBackgroundAndFoundNewestFirst) {
  train::test::TempDir d("snap");
  SnapshotStore store(d.file("s"), /*keep=*/2);
  for (int64_t step : {10, 20, 30}) {
    ASSERT_TRUE(store.write_async(snap_bytes(step), step));
    ASSERT_EQ(store.wait(), "");
  }
  EXPECT_EQ(store.written(), 3);
  EXPECT_EQ(train::CheckpointDir(d.file("s"), 2).list().size(), 2u);  // kept to 2
  const SnapshotStore::Found f = store.newest_valid();
  EXPECT_EQ(f.step, 30);
  const std::string expected = bytes_of(30);
  ASSERT_EQ(f.bytes.size(), expected.size());
  EXPECT_TRUE(std::equal(f.bytes.begin(), f.bytes.end(), expected.begin()));
}

TEST(Snapshot, ADamagedNewestSnapshotFallsBackToTheOneBefore) {
  train::test::TempDir d("snap");
  SnapshotStore store(d.file("s"), 2);
  store.write_async(snap_bytes(5), 5);
  store.wait();
  store.write_async(snap_bytes(6), 6);
  store.wait();
  {
    std::fstream f(train::CheckpointDir(d.file("s"), 2).path_for(6), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');  // one flipped byte: the SHA-256 no longer matches
  }
  EXPECT_EQ(store.newest_valid().step, 5);
}

TEST(Snapshot, RemoveAllLeavesNothingOfTheJob) {
  train::test::TempDir d("snap");
  const std::string job = d.file("libtrain-job");
  {
    SnapshotStore store(job + "/run", 2);
    store.write_async(snap_bytes(1), 1);
    store.remove_all();
  }
  EXPECT_FALSE(train::files::exists(job + "/run"));
  EXPECT_FALSE(train::files::exists(job));  // the job's folder went with its last run
}

TEST(Snapshot, OneProcessTakesItsSnapshotOnlyWhenNewerThanTheCheckpoint) {
  train::test::TempDir d("snap");
  SnapshotStore store(d.file("s"), 2);
  store.write_async(snap_bytes(40), 40);
  store.wait();
  auto newer = train::detail::share_newest_snapshot(nullptr, torch::kCPU, &store, /*newer_than=*/30);
  EXPECT_EQ(newer.step, 40);
  EXPECT_EQ(newer.holder, 0);
  EXPECT_FALSE(newer.bytes.empty());
  auto older = train::detail::share_newest_snapshot(nullptr, torch::kCPU, &store, /*newer_than=*/40);
  EXPECT_EQ(older.step, -1);
  EXPECT_TRUE(older.bytes.empty());
}

// Three ranks, as on three nodes: rank 0's node lost its snapshots, rank 1 holds step 12, rank 2
// step 8. Every rank gets rank 1's bytes.
TEST(Snapshot, EveryRankGetsTheNewestSnapshotAnyNodeHolds) {
  train::test::TempDir d("snap");
  std::vector<std::unique_ptr<SnapshotStore>> stores;
  for (int r = 0; r < 3; ++r) stores.push_back(std::make_unique<SnapshotStore>(d.file("node" + std::to_string(r)), 2));
  stores[1]->write_async(snap_bytes(12), 12);
  stores[2]->write_async(snap_bytes(8), 8);
  for (auto& s : stores) ASSERT_EQ(s->wait(), "");
  const int port = train::test::free_port();
  std::vector<train::detail::SharedSnapshot> got(3);
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      try {
        train::DistEnv e;
        e.source = train::EnvSource::torchrun;
        e.rank = r;
        e.world_size = 3;
        e.local_rank = r;
        e.local_world_size = 3;
        e.master_addr = "127.0.0.1";
        e.master_port = port;
        e.host = "localhost";
        train::ProcessGroupOptions o;
        o.timeout = std::chrono::seconds(60);
        auto pg = train::ProcessGroup::create(e, o);
        got[r] = train::detail::share_newest_snapshot(pg.get(), torch::kCPU, stores[r].get(), /*newer_than=*/4);
        pg->shutdown();
      } catch (const std::exception& ex) {
        errors[r] = ex.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  const std::string expected = bytes_of(12);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(errors[r].empty()) << "rank " << r << ": " << errors[r];
    EXPECT_EQ(got[r].step, 12) << "rank " << r;
    EXPECT_EQ(got[r].holder, 1) << "rank " << r;
    ASSERT_EQ(got[r].bytes.size(), expected.size()) << "rank " << r;
    EXPECT_TRUE(std::equal(got[r].bytes.begin(), got[r].bytes.end(), expected.begin())) << "rank " << r;
  }
}

}  // namespace

namespace {

TEST(SnapshotClock, AFixedIntervalTakesEveryNthStep) {
  train::detail::SnapshotClock clock(/*every=*/4, /*start=*/10);
  EXPECT_FALSE(clock.due(13));
  EXPECT_TRUE(clock.due(14));
  EXPECT_EQ(clock.propose(/*last_cost=*/5.0, /*train_seconds=*/1.0, /*steps=*/4), 4);  // fixed: cost has no say
  clock.advance(14, 4);
  EXPECT_EQ(clock.next(), 18);
}

TEST(SnapshotClock, AutoKeepsTheCostWithinItsShareOfTheTrainingTime) {
  using train::detail::SnapshotClock;
  SnapshotClock clock(std::nullopt, /*start=*/100);
  EXPECT_EQ(clock.next(), 100 + SnapshotClock::kFirst);
  EXPECT_EQ(clock.propose(0.0, 1.0, 5), SnapshotClock::kFirst);  // no cost measured yet
  // 20 ms a snapshot, 0.2 s a step: 0.02 / (0.005 * 0.2) = 20 steps.
  EXPECT_EQ(clock.propose(0.02, 2.0, 10), 20);
  // 20 ms a snapshot, 200 us a step (a GPU): 20000 steps, about 4 s of training.
  EXPECT_NEAR(static_cast<double>(clock.propose(0.02, 0.002, 10)), 20000.0, 1.0);
  // Where the write counts too (CPU ranks on every core), the budget is 0.7%: 0.02 / (0.007 * 0.2) = 14.3.
  EXPECT_EQ(clock.propose(0.02, 2.0, 10, SnapshotClock::kSharedCoresBudget), 15);
  EXPECT_EQ(clock.propose(1e-9, 100.0, 10), 1);  // never less than every step
}

}  // namespace
