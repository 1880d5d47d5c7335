// ProcessGroup: TCPStore rendezvous and Gloo/NCCL backends from torch's c10d, with errors that
// name the rank, host and operation so that a dead peer is reported instead of hanging.
#include "dist/process_group_impl.h"

#include "comm/comm_in_graphs.h"
#include "train/base/error.h"
#include "train/base/log.h"
#include "train/base/net_interfaces.h"

#include <ATen/ops/from_blob.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>
#include <cstring>
#include <optional>

#include <unistd.h>

namespace train {

std::string to_string(Backend backend) { return backend == Backend::nccl ? "nccl" : "gloo"; }

namespace detail {

namespace {
std::string where(const DistEnv& env) {
  return "rank " + std::to_string(env.rank) + "/" + std::to_string(env.world_size) + " on " +
         env.host;
}

// Every rank builds the same backend, or none does: ranks that differ would each wait for the
// others' half of a rendezvous until --dist-timeout. Rank 0 posts its choice; each other rank
// compares and posts the first difference it sees; the last to arrive opens the gate, and every
// rank, having passed it, fails alike with the same words. The keys are numbered by the rank's
// groups so far (one store may serve several: torchrun's agent keeps it across groups).
void agree_on_backend(c10d::Store& store, const DistEnv& env, Backend mine) {
  const auto bytes = [](const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); };
  const auto text = [](const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); };
  const std::string key = "backend_" + std::to_string(store.add("groups_of_rank_" + std::to_string(env.rank), 1));
  if (env.rank == 0) store.set(key, bytes(to_string(mine)));
  const std::string first = text(store.get(key));
  if (first != to_string(mine)) {
    store.compareSet(key + "_differs", {}, bytes(to_string(mine) + " on rank " + std::to_string(env.rank) + " on " + env.host));
  }
  if (store.add(key + "_agreed", 1) == env.world_size) store.set(key + "_gate", bytes("1"));
  store.wait({key + "_gate"});
  if (store.check({key + "_differs"})) {
    throw ConfigError("the process group's backend: expected rank 0's, " + first + ", on every rank; found " +
                          text(store.get(key + "_differs")) + " (this is " + where(env) + ")",
                      "pass the same --backend to every rank. With --backend auto, 2-4 GPUs of one machine take "
                      "gloo where every rank sees all of its GPUs (the same CUDA_VISIBLE_DEVICES) and they read "
                      "each other's memory: give every rank the same GPUs, or pass --backend nccl.");
  }
}

// Rank 0's listening socket for the rendezvous store, bound to the address of this host that
// MASTER_ADDR resolves to (on `interface` where it resolves there) instead of every interface;
// nullopt (c10d binds every interface) when MASTER_ADDR is no address of this host.
std::optional<int> store_listen_fd(const DistEnv& env, const std::string& interface) {
  std::string note, error;
  const std::string address = net::store_bind_address(env.master_addr, interface, &note);
  if (address.empty()) {
    log::debug(note);
    return std::nullopt;
  }
  const int fd = net::listen_on(address, env.master_port, &error);
  if (fd < 0) {
    log::debug("the store's own socket: " + error + "; c10d binds it instead");
    return std::nullopt;
  }
  log::debug(note + ":" + std::to_string(env.master_port));
  return fd;
}

bool looks_like_timeout(const std::string& what) {
  return what.find("imeout") != std::string::npos || what.find("imed out") != std::string::npos;
}
}  // namespace

std::string chosen_interface(const std::string& flag) {
  if (!flag.empty()) return flag;
  const char* from_env = std::getenv("TRAIN_INTERFACE");
  return from_env != nullptr ? from_env : "";
}

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                                    std::chrono::milliseconds timeout, const std::string& interface) {
  auto o = c10d::ProcessGroupGloo::Options::create(timeout);
  // Bind to the address other ranks can reach us at; the default device resolves the host
  // name, which on clusters often maps to a management interface or 127.0.1.1.
  const char* from_env = std::getenv("GLOO_SOCKET_IFNAME");
  const std::string iface = !interface.empty() ? interface : from_env != nullptr ? from_env : "";
  if (!iface.empty()) {
    o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(iface));
  } else {
    o->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  o->threads = 2;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, o);
}

void ProcessGroupImpl::guarded(const std::string& op, const std::function<void()>& fn) {
  try {
    fn();
  } catch (const train::Error&) {
    throw;
  } catch (const std::exception& e) {
    std::string what = e.what();
    // c10::Error carries a backtrace after the first line; keep the message readable.
    auto nl = what.find('\n');
    if (nl != std::string::npos && nl > 0) what = what.substr(0, nl);
    const std::string msg = where(env) + ": " + op + " failed: " + what + diagnose_peers();
    const std::string hint =
        "another rank probably died or stalled; look for the first error in the other ranks' "
        "logs (srun prints them per task). Raise --dist-timeout if ranks are just slow.";
    if (looks_like_timeout(what)) {
      const std::string ranks = read_roll_call(store.get(), env.rank, env.world_size, rollcall);
      throw TimeoutError(msg + " (timeout " + std::to_string(timeout.count() / 1000) + " s)" +
                             (ranks.empty() ? "" : ". Roll-call: " + ranks + "."), hint);
    }
    throw CommError(msg, hint);
  }
}

void ProcessGroupImpl::start_heartbeat() {
  if (env.world_size <= 1 || !store) return;
  c10::intrusive_ptr<c10d::Store> own = store->clone();
  own->setTimeout(std::chrono::seconds(5));
  const std::string key = "beat/" + std::to_string(env.rank);
  own->set("host/" + std::to_string(env.rank), [&] {
    std::string h = env.host + " (pid " + std::to_string(::getpid()) + ")";
    return std::vector<uint8_t>(h.begin(), h.end());
  }());
  heartbeat = std::thread([this, own, key] {
    std::unique_lock<std::mutex> lock(heartbeat_mu);
    while (!heartbeat_stop) {
      try {
        own->add(key, 1);
      } catch (const std::exception&) {
        return;  // the store (rank 0) is gone; diagnose_peers() will say so
      }
      heartbeat_cv.wait_for(lock, std::chrono::seconds(1));
    }
  });
}

void ProcessGroupImpl::stop_heartbeat() {
  {
    std::lock_guard<std::mutex> lock(heartbeat_mu);
    heartbeat_stop = true;
  }
  heartbeat_cv.notify_all();
  if (heartbeat.joinable()) heartbeat.join();
}

std::string ProcessGroupImpl::diagnose_peers() {
  if (env.world_size <= 1 || !store) return "";
  try {
    c10::intrusive_ptr<c10d::Store> s = store->clone();
    s->setTimeout(std::chrono::seconds(5));
    auto read_beats = [&] {
      std::vector<int64_t> beats(env.world_size);
      for (int r = 0; r < env.world_size; ++r) beats[r] = s->add("beat/" + std::to_string(r), 0);
      return beats;
    };
    const auto before = read_beats();
    std::this_thread::sleep_for(std::chrono::milliseconds(3500));
    const auto after = read_beats();
    std::string silent;
    for (int r = 0; r < env.world_size; ++r) {
      if (after[r] != before[r]) continue;
      std::string host = "?";
      if (s->check({"host/" + std::to_string(r)})) {
        auto h = s->get("host/" + std::to_string(r));
        host.assign(h.begin(), h.end());
      }
      silent += (silent.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " on " + host;
    }
    if (silent.empty()) return ". Every rank's process is still alive.";
    return ". Not responding (dead or frozen): " + silent + ".";
  } catch (const std::exception&) {
    return ". The rendezvous store served by rank 0 at " + env.master_addr + ":" +
           std::to_string(env.master_port) + " is unreachable: rank 0 has probably died.";
  }
}

ShmGroup::Exchange ProcessGroupImpl::store_exchange() {
  ShmGroup::Exchange ex;
  ex.set = [this](const std::string& k, const std::string& v) {
    store->set(k, std::vector<uint8_t>(v.begin(), v.end()));
  };
  ex.get = [this](const std::string& k) {
    const auto v = store->get(k);
    return std::string(v.begin(), v.end());
  };
  return ex;
}

std::unique_ptr<ShmGroup> ProcessGroupImpl::create_shm_group(size_t capacity, std::string* why_not) {
  if (!shared_memory_allreduce || backend != Backend::gloo || env.world_size < 2 || !store) {
    if (why_not) *why_not = "not enabled for this process group";
    return nullptr;
  }
  const ShmGroup::Exchange ex = store_exchange();
  std::unique_ptr<ShmGroup> group;
  const std::string key = std::to_string(shm_groups_created++);
  guarded("setting up the shared-memory allreduce", [&] {
    group = ShmGroup::create(ex, key, env.rank, env.world_size, capacity, timeout, where(env), env.host, why_not);
  });
  return group;
}

void ProcessGroupImpl::wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& op) {
  if (backend == Backend::nccl) {
    // NCCL: wait() makes the current CUDA stream wait for the collective, without blocking the
    // host. Passing a timeout would turn it into a host-side busy wait every step (c10d does
    // that for any explicit timeout); NCCL's watchdog enforces the group's timeout instead.
    guarded(op, [&] { work->wait(); });
    return;
  }
  guarded(op, [&] { work->wait(timeout); });
}

}  // namespace detail

ProcessGroup::ProcessGroup(std::unique_ptr<details::ProcessGroupCore> core) : core_(std::move(core)) {}

details::ProcessGroupCore& details::core_of(ProcessGroup& pg) { return *pg.core_; }

bool detail::comm_in_graphs(ProcessGroup& pg) { return details::core_of(pg).comm_in_graphs; }

ProcessGroup::~ProcessGroup() {
  try {
    shutdown();
  } catch (const std::exception& e) {
    log::warn(std::string("process group shutdown: ") + e.what());
  }
}

std::shared_ptr<ProcessGroup> ProcessGroup::create(const DistEnv& env,
                                                   const ProcessGroupOptions& options) {
  auto impl = std::make_unique<details::ProcessGroupCore>();
  impl->env = env;
  impl->backend = options.backend;
  impl->timeout = options.timeout;
  impl->device_index = options.device_index;
  impl->shared_memory_allreduce = options.shared_memory_allreduce;
  // Port 0 (the OS picks one) only serves a group of one: nobody else could find it.
  if (env.master_port < (env.world_size == 1 ? 0 : 1) || env.master_port > 65535) {
    throw ConfigError("MASTER_PORT: expected 1..65535, found " + std::to_string(env.master_port) + ".",
                      "unset MASTER_PORT to let libtrain derive one from the job id.");
  }
  const std::string interface = detail::chosen_interface(options.interface);
  impl->interface = interface;
  if (!interface.empty()) {
    net::require_interface(interface, "--interface");  // a ConfigError naming the interfaces here
    // Read by NCCL when its communicator is created (after this); the flag wins over the environment.
    if (options.backend == Backend::nccl) ::setenv("NCCL_SOCKET_IFNAME", interface.c_str(), 1);
  }
  impl->guarded("rendezvous with " + env.master_addr + ":" + std::to_string(env.master_port), [&] {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(env.master_port);
    // Under torchrun the agent already serves the store on MASTER_PORT: binding it again fails,
    // so every rank connects as a client (as torch.distributed does).
    so.isServer = env.rank == 0 && !env.agent_store;
    so.numWorkers = env.world_size;
    so.waitWorkers = true;  // clients count themselves in; the server waits for all of them
    so.timeout = options.timeout;
    if (so.isServer && env.world_size > 1) so.masterListenFd = detail::store_listen_fd(env, interface);
    auto tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
    // A prefix keeps our keys apart should the user reuse the store, and one attempt's keys
    // apart from the next when torchrun restarts the workers.
    const std::string prefix =
        env.agent_store ? "libtrain/attempt_" + std::to_string(env.restart_count) : std::string("libtrain");
    impl->store = c10::make_intrusive<c10d::PrefixStore>(prefix, tcp);
  });
  impl->start_heartbeat();
  if (env.world_size > 1) {
    impl->guarded("agreeing on the backend", [&] { detail::agree_on_backend(*impl->store, env, options.backend); });
  }

  if (options.backend == Backend::gloo) {
    impl->guarded("creating the Gloo backend", [&] {
      impl->pg = detail::make_gloo_backend(impl->store, env.rank, env.world_size, options.timeout, interface);
    });
    if (impl->shared_memory_allreduce && env.world_size > 1) {
      std::string why;
      impl->small_shm = impl->create_shm_group(detail::ProcessGroupImpl::kSmallShmBytes, &why);
      log::debug(impl->small_shm ? std::string("small allreduces go through shared memory")
                                 : "small allreduces use Gloo (" + why + ")");
    }
  } else {
    impl->guarded("creating the NCCL backend", [&] {
      impl->pg = detail::make_nccl_backend(impl->store, env.rank, env.world_size, options.timeout,
                                           options.device_index);
    });
  }
  return std::shared_ptr<ProcessGroup>(new ProcessGroup(std::move(impl)));
}

int ProcessGroup::rank() const { return core_->env.rank; }
int ProcessGroup::size() const { return core_->env.world_size; }
Backend ProcessGroup::backend() const { return core_->backend; }
const DistEnv& ProcessGroup::env() const { return core_->env; }
std::chrono::milliseconds ProcessGroup::timeout() const { return core_->timeout; }

void ProcessGroup::allreduce_sum(at::Tensor& tensor) {
  details::ShmGroup* shm = core_->small_shm.get();
  const auto dtype = detail::shm_dtype_of(tensor.scalar_type());
  // The choice depends only on what the contract makes equal on every rank (dtype, size), never
  // on memory layout or device, so all ranks always take the same path.
  const detail::CollectiveWait in_collective(&core_->rollcall, detail::CollectiveKind::allreduce);
  if (shm != nullptr && dtype && tensor.nbytes() <= shm->capacity()) {
    // A small tensor goes through the ranks' shared memory wherever it lives: Gloo would copy a
    // device tensor to the host anyway and then sum it over TCP. The copies to and from the device
    // are synchronous, as the wait for Gloo's work is.
    const bool plain = tensor.device().is_cpu() && tensor.is_contiguous();
    const auto on_host = [&](const void* p) {
      return at::from_blob(const_cast<void*>(p), tensor.sizes(), tensor.options().device(at::kCPU));
    };
    if (plain) {
      std::memcpy(shm->slot(), tensor.const_data_ptr(), tensor.nbytes());
    } else {
      on_host(shm->slot()).copy_(tensor);
    }
    shm->allreduce_sum(0, static_cast<size_t>(tensor.numel()), *dtype, "allreduce");
    if (plain) {
      std::memcpy(tensor.mutable_data_ptr(), shm->result(), tensor.nbytes());
    } else {
      tensor.copy_(on_host(shm->result()));
    }
    return;
  }
  std::vector<at::Tensor> v{tensor};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  o.timeout = core_->timeout;
  c10::intrusive_ptr<c10d::Work> work;
  core_->guarded("allreduce", [&] { work = core_->pg->allreduce(v, o); });
  core_->wait(work, "allreduce");
}

void ProcessGroup::broadcast(at::Tensor& tensor, int root) {
  const detail::CollectiveWait in_collective(&core_->rollcall, detail::CollectiveKind::broadcast);
  std::vector<at::Tensor> v{tensor};
  c10d::BroadcastOptions o;
  o.rootRank = root;
  o.timeout = core_->timeout;
  c10::intrusive_ptr<c10d::Work> work;
  core_->guarded("broadcast", [&] { work = core_->pg->broadcast(v, o); });
  core_->wait(work, "broadcast");
}

void ProcessGroup::barrier() {
  const detail::CollectiveWait in_collective(&core_->rollcall, detail::CollectiveKind::barrier);
  c10d::BarrierOptions o;
  o.timeout = core_->timeout;
  if (core_->backend == Backend::nccl) o.device_ids = {static_cast<int64_t>(core_->device_index)};
  c10::intrusive_ptr<c10d::Work> work;
  core_->guarded("barrier", [&] { work = core_->pg->barrier(o); });
  core_->wait(work, "barrier");
}

void ProcessGroup::shutdown() {
  if (core_->shut_down) return;
  core_->shut_down = true;
  core_->stop_heartbeat();
  core_->small_shm.reset();
  if (core_->pg) core_->pg->shutdown();
  core_->pg.reset();
  core_->store.reset();
}

}  // namespace train
