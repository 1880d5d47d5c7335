// ShmGroup (libtrain's shared-memory allreduce for ranks on one machine), with real forked
// processes: results in rank order for every dtype, repeated to stress the barrier, and the
// failure cases: a peer that exits, one that stalls past the timeout, one that aborts, and ranks
// that are not on one machine.
#include "train/base/details/shm_group.h"
#include "train/base/error.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>
#include <vector>

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

using train::details::ShmGroup;
using namespace std::chrono_literals;

namespace {

struct Dir {
  std::string path;
  Dir() {
    char t[] = "/tmp/shm_group_test.XXXXXX";
    path = ::mkdtemp(t);
  }
  ~Dir() { std::system(("rm -rf " + path).c_str()); }
  std::string file(const std::string& name) const { return path + "/" + name; }
};

std::string read_file(const std::string& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string& p, const std::string& text) {
  {
    std::ofstream out(p + ".tmp");
    out << text;
  }
  std::rename((p + ".tmp").c_str(), p.c_str());
}

// The rendezvous store for forked ranks: one file per key.
ShmGroup::Exchange file_exchange(const Dir& d, int rank, bool pretend_other_machine = false) {
  ShmGroup::Exchange ex;
  auto name = [&d](std::string k) {
    for (char& c : k) c = c == '/' ? '_' : c;
    return d.file("kv_" + k);
  };
  ex.set = [=](const std::string& k, const std::string& v) {
    const bool id = k.find("/id/") != std::string::npos;
    write_file(name(k), id && pretend_other_machine ? v + "-elsewhere-" + std::to_string(rank) : v);
  };
  ex.get = [=](const std::string& k) {
    for (int i = 0; i < 20000; ++i) {
      if (::access(name(k).c_str(), F_OK) == 0) return read_file(name(k));
      std::this_thread::sleep_for(1ms);
    }
    return std::string("<no value for ") + k + ">";
  };
  return ex;
}

// Forks `world` ranks running body(rank) -> the text it reports; returns each rank's report.
std::vector<std::string> run_ranks(int world, const Dir& d, const std::function<std::string(int)>& body) {
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      std::string report;
      try {
        report = body(r);
      } catch (const std::exception& e) {
        report = std::string("exception: ") + e.what();
      }
      write_file(d.file("report" + std::to_string(r)), report);
      ::_exit(0);
    }
    pids.push_back(pid);
  }
  for (pid_t p : pids) ::waitpid(p, nullptr, 0);
  std::vector<std::string> out;
  for (int r = 0; r < world; ++r) out.push_back(read_file(d.file("report" + std::to_string(r))));
  return out;
}

std::unique_ptr<ShmGroup> make(const Dir& d, int rank, int world, size_t capacity,
                               std::chrono::milliseconds timeout, std::string* why = nullptr,
                               bool other_machine = false, const std::string& host = "test") {
  return ShmGroup::create(file_exchange(d, rank, other_machine), "t", rank, world, capacity, timeout,
                          "rank " + std::to_string(rank) + "/" + std::to_string(world) + " on " + host,
                          host, why);
}

template <class T>
T value(int rank, size_t i, int round) {
  // Magnitudes that make the addition order visible in float.
  const double v = (rank == 0 ? 1e7 : rank == 1 ? 0.3 : -1e7) * (1.0 + 1e-3 * static_cast<double>(i % 97)) +
                   round * 0.01;
  return static_cast<T>(std::is_integral_v<T> ? (rank + 1) * 1000003LL * static_cast<long long>(i + round) : v);
}

template <class T>
std::string check_sums(ShmGroup& g, ShmGroup::DType dtype, int rounds) {
  for (int round = 0; round < rounds; ++round) {
    const size_t count = 1 + static_cast<size_t>(round * 37) % 3000;
    const size_t offset = (static_cast<size_t>(round) % 5) * 64;
    T* slot = reinterpret_cast<T*>(static_cast<char*>(g.slot()) + offset);
    for (size_t i = 0; i < count; ++i) slot[i] = value<T>(g.rank(), i, round);
    g.allreduce_sum(offset, count, dtype, "test allreduce");
    const T* res = reinterpret_cast<const T*>(static_cast<const char*>(g.result()) + offset);
    for (size_t i = 0; i < count; ++i) {
      T expect = value<T>(0, i, round);
      for (int r = 1; r < g.world(); ++r) expect += value<T>(r, i, round);
      if (std::memcmp(&expect, &res[i], sizeof(T)) != 0) {
        return "round " + std::to_string(round) + " element " + std::to_string(i) + ": " +
               std::to_string(res[i]) + " != " + std::to_string(expect);
      }
    }
  }
  return "ok";
}

}  // namespace

TEST(ShmGroup, SumsEveryDtypeInRankOrderOnEveryRank) {
  for (int world : {2, 3}) {
    Dir d;
    auto reports = run_ranks(world, d, [&](int rank) {
      auto g = make(d, rank, world, 64 * 1024, 30s);
      if (!g) return std::string("no group");
      std::string out = check_sums<float>(*g, ShmGroup::DType::f32, 300);
      out += " " + check_sums<double>(*g, ShmGroup::DType::f64, 100);
      out += " " + check_sums<int64_t>(*g, ShmGroup::DType::i64, 100);
      return out;
    });
    for (int r = 0; r < world; ++r) EXPECT_EQ(reports[r], "ok ok ok") << "world " << world << " rank " << r;
  }
}

// The dead rank is named with its own node: on a test cluster whose SLURM nodes share one machine
// (scripts/local-slurm.sh), one segment holds ranks of node1 and node2.
TEST(ShmGroup, APeerThatExitsIsNamedWithinASecond) {
  Dir d;
  auto reports = run_ranks(2, d, [&](int rank) {
    auto g = make(d, rank, 2, 4096, 60s, nullptr, false, "node" + std::to_string(rank + 1));
    if (!g) return std::string("no group");
    if (rank == 1) ::_exit(3);  // dies before the allreduce
    const auto t0 = std::chrono::steady_clock::now();
    try {
      g->allreduce_sum(0, 4, ShmGroup::DType::f32, "DDP gradient allreduce (bucket 0)");
    } catch (const train::TimeoutError& e) {
      return std::string("timeout instead: ") + e.what();
    } catch (const train::CommError& e) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return std::string(e.what()) + (s < 5.0 ? " [fast]" : " [slow]");
    }
    return std::string("no error");
  });
  EXPECT_NE(reports[0].find("rank 0/2 on node1: DDP gradient allreduce (bucket 0) failed"), std::string::npos) << reports[0];
  EXPECT_NE(reports[0].find("Not responding (dead or frozen): rank 1 on node2 (pid"), std::string::npos) << reports[0];
  EXPECT_NE(reports[0].find("Hint:"), std::string::npos) << reports[0];
  EXPECT_NE(reports[0].find("[fast]"), std::string::npos) << reports[0];
}

TEST(ShmGroup, AStalledPeerIsATimeoutNamingIt) {
  Dir d;
  auto reports = run_ranks(2, d, [&](int rank) {
    auto g = make(d, rank, 2, 4096, 1000ms);
    if (!g) return std::string("no group");
    if (rank == 1) {
      std::this_thread::sleep_for(4s);  // alive but late
      try {
        g->allreduce_sum(0, 4, ShmGroup::DType::f32, "late");
      } catch (const train::CommError& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    }
    try {
      g->allreduce_sum(0, 4, ShmGroup::DType::f32, "allreduce");
    } catch (const train::TimeoutError& e) {
      return std::string(e.what());
    }
    return std::string("no timeout");
  });
  EXPECT_NE(reports[0].find("rank(s) 1 did not arrive within 1 s"), std::string::npos) << reports[0];
  // The late rank learns that rank 0 gave up instead of waiting for its own timeout.
  EXPECT_NE(reports[1].find("rank 0 gave up"), std::string::npos) << reports[1];
}

TEST(ShmGroup, RanksOnDifferentMachinesGetNoGroup) {
  Dir d;
  auto reports = run_ranks(2, d, [&](int rank) {
    std::string why;
    auto g = make(d, rank, 2, 4096, 10s, &why, /*other_machine=*/rank == 1);
    return g ? std::string("group") : why;
  });
  EXPECT_EQ(reports[0], "the ranks are not all on one machine");
  EXPECT_EQ(reports[1], "the ranks are not all on one machine");
}

TEST(ShmGroup, OversizedRequestsAreRejectedNotWrittenPastTheSegment) {
  Dir d;
  auto reports = run_ranks(2, d, [&](int rank) {
    auto g = make(d, rank, 2, 256, 10s);
    if (!g) return std::string("no group");
    try {
      g->allreduce_sum(128, 64, ShmGroup::DType::f64, "big");  // 512 bytes at 128 > 256
    } catch (const train::CommError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  });
  EXPECT_NE(reports[0].find("do not fit the 256-byte shared segment"), std::string::npos) << reports[0];
}
