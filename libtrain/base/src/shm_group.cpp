// ShmGroup: POSIX shared memory, a futex-backed barrier, and a rank-ordered sum.
#include "train/base/details/shm_group.h"

#include "train/base/error.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace train::details {

namespace {

constexpr uint64_t kMagic = 0x6c69627472616e31ULL;  // "libtran1"
constexpr int kMaxRanks = 1024;                      // ranks on one machine
constexpr size_t kAlign = 4096;
constexpr int kSpins = 20000;  // busy-wait before sleeping on the futex

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string link_target(const std::string& path) {
  char buf[256];
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Same boot id and PID namespace: one machine, and peers' pids mean the same processes here.
std::string machine_identity() {
  const std::string boot = read_first_line("/proc/sys/kernel/random/boot_id");
  const std::string pidns = link_target("/proc/self/ns/pid");
  if (boot.empty() || pidns.empty()) return "";
  return boot + "|" + pidns;
}

// State and start time of a process from /proc/<pid>/stat; false when it is gone.
bool process_stat(pid_t pid, char* state, uint64_t* start_time) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  const auto paren = line.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  std::istringstream fields(line.substr(paren + 2));
  std::string f;
  fields >> *state;
  for (int i = 0; i < 19 && fields >> f; ++i) {}  // fields 4..22: start time is field 22
  *start_time = std::strtoull(f.c_str(), nullptr, 10);
  return true;
}

void futex_wait(std::atomic<uint32_t>* addr, uint32_t expected, long timeout_ns) {
  timespec ts{0, timeout_ns};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* addr) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

template <class T>
void sum_range(const char* slots, size_t stride, int world, size_t offset, size_t begin, size_t end,
               char* result) {
  T* out = reinterpret_cast<T*>(result + offset);
  const T* s0 = reinterpret_cast<const T*>(slots + offset);
  const T* s1 = reinterpret_cast<const T*>(slots + stride + offset);
  for (size_t i = begin; i < end; ++i) out[i] = s0[i] + s1[i];
  for (int k = 2; k < world; ++k) {
    const T* sk = reinterpret_cast<const T*>(slots + k * stride + offset);
    for (size_t i = begin; i < end; ++i) out[i] += sk[i];  // left to right: ((s0 + s1) + s2) ...
  }
}

}  // namespace

struct ShmGroup::Header {
  uint64_t magic;
  char token[40];
  uint32_t world;
  uint64_t capacity;
  alignas(64) std::atomic<uint32_t> count;
  alignas(64) std::atomic<uint32_t> gen;
  alignas(64) std::atomic<int32_t> aborted_by;  // -1, or the first rank that gave up
  int32_t pid[kMaxRanks];
  uint64_t start_time[kMaxRanks];  // with the pid: a reused pid is not mistaken for the rank
  std::atomic<uint32_t> arrivals[kMaxRanks];  // barriers each rank has entered
  // Each rank's node name (SLURMD_NODENAME): on a test cluster whose nodes share one machine, the
  // ranks of one segment are on different nodes, and an error must name the dead rank's own.
  char host[kMaxRanks][64];
};

// 1. One machine? Every rank publishes its identity and reads everyone's.
bool ShmGroup::all_on_one_machine(const ShmGroup::Exchange& ex, const std::string& prefix, int rank, int world) {
  const std::string me = machine_identity();
  ex.set(prefix + "id/" + std::to_string(rank), me.empty() ? "?" + std::to_string(rank) : me);
  bool same = !me.empty();
  for (int r = 0; r < world; ++r) {
    if (ex.get(prefix + "id/" + std::to_string(r)) != me) same = false;
  }
  return same;
}

// 3. Everyone reports `problem` ("" when this rank has the group) and reads the others' reports:
// the group is used only if every rank has it. Returns this rank's problem, else the first rank's.
std::string ShmGroup::first_problem_of_any_rank(const ShmGroup::Exchange& ex, const std::string& prefix, int rank, int world,
                                      const std::string& problem) {
  ex.set(prefix + "ok/" + std::to_string(rank), problem.empty() ? "1" : "0" + problem);
  std::string first_problem = problem;
  for (int r = 0; r < world; ++r) {
    const std::string v = ex.get(prefix + "ok/" + std::to_string(r));
    if (v != "1" && first_problem.empty()) first_problem = "rank " + std::to_string(r) + ": " + v.substr(1);
  }
  return first_problem;
}

std::unique_ptr<ShmGroup> ShmGroup::create(const Exchange& ex, const std::string& key, int rank,
                                           int world, size_t capacity, std::chrono::milliseconds timeout,
                                           std::string where, std::string host, std::string* why_not) {
  auto fail = [&](const std::string& why) -> std::unique_ptr<ShmGroup> {
    if (why_not) *why_not = why;
    return nullptr;
  };
  if (world < 2 || world > kMaxRanks) return fail("world size " + std::to_string(world) + " is out of range");
  const std::string prefix = "shm/" + key + "/";
  if (!all_on_one_machine(ex, prefix, rank, world)) return fail("the ranks are not all on one machine");

  const size_t region = round_up(capacity == 0 ? 1 : capacity, kAlign);
  const size_t header = round_up(sizeof(Header), kAlign);
  const size_t total = header + region * static_cast<size_t>(world + 1);

  // 2. Rank 0 creates the segment and publishes its name; the others map it and check it.
  std::string name;
  std::unique_ptr<ShmGroup> g(new ShmGroup());
  g->rank_ = rank;
  g->world_ = world;
  g->capacity_ = capacity;
  g->timeout_ = timeout;
  g->where_ = std::move(where);
  g->host_ = std::move(host);
  const std::string problem =
      rank == 0 ? g->create_segment(ex, prefix, total, &name) : g->open_segment(ex, prefix, total, &name);
  if (problem.empty()) {
    char state = 0;
    uint64_t start = 0;
    process_stat(::getpid(), &state, &start);
    g->header_->start_time[rank] = start;
    std::snprintf(g->header_->host[rank], sizeof(g->header_->host[rank]), "%s", g->host_.c_str());
    g->header_->pid[rank] = static_cast<int32_t>(::getpid());
  }

  // 3. Rank 0 unlinks the name once every rank has reported, so nothing is left in /dev/shm
  // whatever happens to the job later.
  const std::string first_problem = first_problem_of_any_rank(ex, prefix, rank, world, problem);
  if (rank == 0 && !name.empty()) ::shm_unlink(name.c_str());
  if (!first_problem.empty()) return fail(first_problem);
  return g;
}

std::string ShmGroup::create_segment(const Exchange& ex, const std::string& prefix, size_t total, std::string* name) {
  // Reserving the memory up front means no SIGBUS later on a full /dev/shm.
  std::string problem;
  std::random_device rd;
  char token[33];
  std::snprintf(token, sizeof(token), "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  *name = "/libtrain-" + std::to_string(::getpid()) + "-" + token;
  const int fd = ::shm_open(name->c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    problem = std::string("shm_open: ") + std::strerror(errno);
  } else if (int e = ::posix_fallocate(fd, 0, static_cast<off_t>(total)); e != 0) {
    problem = "reserving " + std::to_string(total >> 20) + " MiB in /dev/shm: " + std::strerror(e);
  }
  if (problem.empty() && (problem = map(fd, total)).empty()) {
    header_ = new (base_) Header();
    header_->magic = kMagic;
    std::snprintf(header_->token, sizeof(header_->token), "%s", token);
    header_->world = static_cast<uint32_t>(world_);
    header_->capacity = capacity_;
    header_->count.store(0);
    header_->gen.store(0);
    header_->aborted_by.store(-1);
  }
  if (fd >= 0) ::close(fd);
  ex.set(prefix + "name", problem.empty() ? *name + "|" + token : "");
  if (!problem.empty()) ::shm_unlink(name->c_str());
  return problem;
}

std::string ShmGroup::open_segment(const Exchange& ex, const std::string& prefix, size_t total, std::string* name) {
  const std::string published = ex.get(prefix + "name");
  if (published.empty()) return "rank 0 could not create the segment";
  std::string problem;
  const auto bar = published.find('|');
  *name = published.substr(0, bar);
  const std::string token = published.substr(bar + 1);
  const int fd = ::shm_open(name->c_str(), O_RDWR, 0600);
  struct stat st {};
  if (fd < 0) {
    problem = std::string("shm_open ") + *name + ": " + std::strerror(errno) + " (another /dev/shm?)";
  } else if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != total) {
    problem = "segment " + *name + " has an unexpected size";
  } else if ((problem = map(fd, total)).empty()) {
    header_ = reinterpret_cast<Header*>(base_);
    if (header_->magic != kMagic || token != header_->token || header_->world != static_cast<uint32_t>(world_)) {
      problem = "segment " + *name + " is not this job's";
    }
  }
  if (fd >= 0) ::close(fd);
  return problem;
}

std::string ShmGroup::map(int fd, size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return std::string("mmap: ") + std::strerror(errno);
  base_ = static_cast<char*>(p);
  mapped_bytes_ = bytes;
  return "";
}

ShmGroup::~ShmGroup() {
  if (base_ != nullptr) ::munmap(base_, mapped_bytes_);
}

void* ShmGroup::slot() const {
  const size_t header = round_up(sizeof(Header), kAlign);
  return base_ + header + round_up(capacity_ == 0 ? 1 : capacity_, kAlign) * static_cast<size_t>(rank_);
}

const void* ShmGroup::result() const {
  const size_t header = round_up(sizeof(Header), kAlign);
  return base_ + header + round_up(capacity_ == 0 ? 1 : capacity_, kAlign) * static_cast<size_t>(world_);
}

void ShmGroup::abort() {
  int32_t none = -1;
  header_->aborted_by.compare_exchange_strong(none, rank_);
  header_->gen.fetch_add(0x10000);  // wake sleepers without completing anyone's barrier count
  futex_wake_all(&header_->gen);
}

std::string ShmGroup::peer_exited() const {
  std::string out;
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    const pid_t pid = header_->pid[r];
    if (pid <= 0) continue;
    char state = 0;
    uint64_t start = 0;
    const bool gone = !process_stat(pid, &state, &start) || state == 'Z' || state == 'X' ||
                      start != header_->start_time[r];
    if (gone) {
      const std::string host(header_->host[r], ::strnlen(header_->host[r], sizeof(header_->host[r])));
      out += (out.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " on " +
             (host.empty() ? host_ : host) + " (pid " + std::to_string(pid) + ")";
    }
  }
  return out;
}

void ShmGroup::barrier(const std::string& op) {
  Header& h = *header_;
  const std::string hint =
      "a peer rank failed or stalled; its own log says why (srun prints each task's output). "
      "--shm-allreduce off uses Gloo over TCP instead; raise --dist-timeout if ranks are just slow.";
  auto check_abort = [&] {
    const int32_t by = h.aborted_by.load(std::memory_order_acquire);
    if (by >= 0) {
      throw CommError(where_ + ": " + op + " failed: rank " + std::to_string(by) +
                          " gave up on the shared-memory allreduce.", hint);
    }
  };
  check_abort();
  h.arrivals[rank_].fetch_add(1, std::memory_order_relaxed);
  const uint32_t my_gen = h.gen.load(std::memory_order_acquire);
  if (h.count.fetch_add(1, std::memory_order_acq_rel) == static_cast<uint32_t>(world_ - 1)) {
    h.count.store(0, std::memory_order_relaxed);
    h.gen.fetch_add(1, std::memory_order_release);
    futex_wake_all(&h.gen);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  auto next_check = start + std::chrono::milliseconds(100);
  for (int spin = 0;; ++spin) {
    if (h.gen.load(std::memory_order_acquire) != my_gen) {
      check_abort();
      return;
    }
    if (spin < kSpins) {
      cpu_relax();
      continue;
    }
    futex_wait(&h.gen, my_gen, 10 * 1000 * 1000);
    const auto now = std::chrono::steady_clock::now();
    if (now < next_check) continue;
    next_check = now + std::chrono::milliseconds(100);
    check_abort();
    const std::string dead = peer_exited();
    if (!dead.empty()) {
      abort();
      throw CommError(where_ + ": " + op + " failed. Not responding (dead or frozen): " + dead +
                          ": the process has exited.", hint);
    }
    if (now - start > timeout_) {
      std::string missing;
      const uint32_t mine = h.arrivals[rank_].load();
      for (int r = 0; r < world_; ++r) {
        if (h.arrivals[r].load() < mine) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      abort();
      throw TimeoutError(where_ + ": " + op + " failed: rank(s) " + missing + " did not arrive within " +
                             std::to_string(timeout_.count() / 1000) + " s (timeout).", hint);
    }
  }
}

void ShmGroup::allreduce_sum(size_t offset_bytes, size_t count, DType dtype, const std::string& op) {
  const size_t elem = dtype == DType::f32 ? 4 : 8;  // f64 and i64: 8
  if (offset_bytes + count * elem > capacity_) {
    throw CommError(where_ + ": " + op + ": " + std::to_string(count * elem) + " bytes at offset " +
                        std::to_string(offset_bytes) + " do not fit the " + std::to_string(capacity_) +
                        "-byte shared segment.", "this is a libtrain bug; please report it.");
  }
  barrier(op);  // every slot holds this allreduce's input
  const size_t per = round_up((count + world_ - 1) / world_, 64 / elem);
  const size_t begin = std::min(count, per * static_cast<size_t>(rank_));
  const size_t end = std::min(count, begin + per);
  const size_t header = round_up(sizeof(Header), kAlign);
  const size_t stride = round_up(capacity_ == 0 ? 1 : capacity_, kAlign);
  const char* slots = base_ + header;
  char* result = base_ + header + stride * static_cast<size_t>(world_);
  if (dtype == DType::f32) {
    sum_range<float>(slots, stride, world_, offset_bytes, begin, end, result);
  } else if (dtype == DType::f64) {
    sum_range<double>(slots, stride, world_, offset_bytes, begin, end, result);
  } else {
    sum_range<int64_t>(slots, stride, world_, offset_bytes, begin, end, result);
  }
  barrier(op);  // the whole result is there
}

}  // namespace train::details
