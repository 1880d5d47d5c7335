// In-memory snapshots (snapshot.h): node-local files in the checkpoint format, written in the
// background, and the collective that finds the newest one any node holds.
#include "checkpoint/snapshot.h"

#include "train/base/absolute_path.h"
#include "train/base/error.h"
#include "train/base/files.h"
#include "train/base/log.h"
#include "train/process_group.h"
#include "train/base/sha256.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/zeros.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <unistd.h>

namespace train::detail {

std::string snapshot_job_dir(const std::string& job_id) {
  if (job_id.empty()) return "";
  return "/dev/shm/libtrain-" + std::to_string(::getuid()) + "-" + job_id;
}

std::string snapshot_dir(const std::string& job_id, const std::string& node, const std::string& checkpoint_dir) {
  const char* forced = std::getenv("TRAIN_SNAPSHOT_DIR");
  const std::string base = forced && *forced ? std::string(forced) : snapshot_job_dir(job_id);
  if (base.empty()) return "";
  const std::string key = files::absolute(checkpoint_dir);
  Sha256 h;
  h.update(key.data(), key.size());
  return files::join(base, h.hex().substr(0, 16) + "-" + (node.empty() ? std::string("node") : node));
}

int64_t SnapshotClock::propose(double last_cost_seconds, double train_seconds, int64_t steps, double budget) const {
  if (every_) return *every_;
  if (!(last_cost_seconds > 0) || steps < 1 || !(train_seconds > 0)) return kFirst;
  const double step_seconds = train_seconds / static_cast<double>(steps);
  const double interval = std::ceil(last_cost_seconds / (budget * step_seconds));
  return static_cast<int64_t>(std::min(static_cast<double>(kMaxInterval), std::max(1.0, interval)));
}

SnapshotStore::SnapshotStore(std::string dir, int keep) : dir_(std::move(dir), keep) {}

SnapshotStore::~SnapshotStore() { wait(); }

bool SnapshotStore::busy() const {
  return writing_.valid() && writing_.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
}

bool SnapshotStore::write_async(std::shared_ptr<const std::string> bytes, int64_t step) {
  if (busy()) {
    ++dropped_;
    return false;
  }
  const std::string previous = wait();
  if (!previous.empty()) log::warn("snapshot: " + previous + " (training goes on; the next snapshot tries again)");
  writing_ = std::async(std::launch::async, [this, bytes = std::move(bytes), step]() -> std::string {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      dir_.write(*bytes, step);
    } catch (const std::exception& e) {
      return e.what();
    }
    last_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total_seconds_ = total_seconds_.load() + last_seconds_.load();  // one writer at a time
    ++written_;
    return "";
  });
  return true;
}

std::string SnapshotStore::wait() {
  if (!writing_.valid()) return "";
  return writing_.get();
}

SnapshotStore::Found SnapshotStore::newest_valid() const {
  const auto all = dir_.list();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      Found f;
      f.bytes = CheckpointDir::read_verified(it->path);
      f.step = it->step;
      f.path = it->path;
      return f;
    } catch (const CheckpointError& e) {
      log::warn(std::string("skipping snapshot: ") + e.what());
    }
  }
  return {};
}

void SnapshotStore::remove_all() {
  wait();
  files::remove_tree(dir_.dir());
  const auto slash = dir_.dir().find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    const std::string parent = dir_.dir().substr(0, slash);
    if (files::list_dir(parent).empty()) files::remove_tree(parent);
  }
}

namespace {

// Every rank's (step, size) of its newest snapshot, gathered by one all-reduce of one slot each.
std::vector<int64_t> gather_pairs(ProcessGroup& group, const at::Device& device, int64_t step, int64_t size) {
  const int n = group.size();
  at::Tensor t = at::zeros({2 * n}, at::TensorOptions().dtype(at::kLong).device(device));
  t[2 * group.rank()] = step + 1;  // 0 = none, so the sum of the other slots' zeros stays exact
  t[2 * group.rank() + 1] = size;
  group.allreduce_sum(t);
  const at::Tensor host = t.cpu();
  std::vector<int64_t> out(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + 2 * n);
  for (int r = 0; r < n; ++r) out[2 * r] -= 1;
  return out;
}

}  // namespace

SharedSnapshot share_newest_snapshot(ProcessGroup* group, const at::Device& device, const SnapshotStore* store,
                                     int64_t newer_than) {
  SnapshotStore::Found mine;
  if (store) mine = store->newest_valid();
  SharedSnapshot out;
  if (!group) {
    if (mine.step > newer_than) out = {mine.step, 0, mine.path, std::move(mine.bytes)};
    return out;
  }
  const std::vector<int64_t> pairs =
      gather_pairs(*group, device, mine.step, static_cast<int64_t>(mine.bytes.size()));
  int64_t best = newer_than;
  for (int r = 0; r < group->size(); ++r) {
    if (pairs[2 * r] > best) {
      best = pairs[2 * r];
      out.holder = r;
    }
  }
  if (out.holder < 0) return out;
  out.step = best;
  const int64_t size = pairs[2 * out.holder + 1];
  at::Tensor buf = at::empty({size}, at::TensorOptions().dtype(at::kByte).device(device));
  if (group->rank() == out.holder) {
    buf.copy_(at::from_blob(mine.bytes.data(), {size}, at::TensorOptions().dtype(at::kByte)));
    out.path = mine.path;
  }
  group->broadcast(buf, out.holder);
  const at::Tensor host = buf.cpu();
  out.bytes.resize(static_cast<size_t>(size));
  std::memcpy(out.bytes.data(), host.data_ptr(), static_cast<size_t>(size));
  return out;
}

}  // namespace train::detail
