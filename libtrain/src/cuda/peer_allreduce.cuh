// The one-shot peer all-reduce's kernel (peer_allreduce.h), as a template over an epilogue that
// works on each element's average as the kernel writes it: peer_allreduce.cu compiles it with none,
// and a side that fuses its own work into the exchange (the fused Adadelta's update, see
// adadelta_peer.cu) compiles it with its own and hands the launch over as a PeerFusedEpilogue.
// The communication code knows no epilogue but the empty one.
//
// An epilogue E provides (device functions are called by every thread of every block):
//   static constexpr bool kActive;              false: the kernel is the plain average
//   struct Block;                               per-block values read once (e.g. a rate on the device)
//   __device__ Block begin_block() const;       after the exchange, before the sums
//   __device__ bool aligned16(int k, int64_t j0) const;   input k's own memory from element j0 takes float4s
//   __device__ void apply4(const Block&, int k, int64_t j0, int64_t jq, float4 g) const;  elements j0 + 4 jq ..
//   __device__ void apply1(const Block&, int k, int64_t j, float g) const;                element j
//   __host__ bool fits(const PeerCall&) const;  false: the launch returns cudaErrorInvalidValue
//
// A rank's buffer: [counters: slots x 64 bytes][flags, twice: slots x kPeerMaxBlocks x
// kPeerMaxRanks uint32][data half 0][data half 1]. Per slot, counter[0] is the epoch of the last
// finished call and counter[1] counts the blocks of the running call that are done; flags[0][slot]
// [b][r] is the epoch up to which rank r's block b has packed its chunk into rank r's buffer
// (written by rank r into every rank's buffer); flags[1] the same for a two-pass call's averages.
//
// A two-pass call (PeerCall::two_shot, three or more ranks) packs and signals as a one-shot call
// does, then each rank sums only its own part of each block's chunk (part r of W) over the ranks,
// in rank order, writes those averages over its own packed values and signals again (flags[1]);
// then it copies the other ranks' parts of averages. Each rank reads 2 (W - 1) / W of the message
// across the links where a one-shot call reads W - 1 messages, and every element's average is
// the same sum in the same order, so the same bits.
//
// A low-latency call (PeerCall::low_latency) packs nothing and raises no flag: each element goes to
// every other rank as one 8-byte word, {the float's bits, e}, stored into that rank's words for this
// rank, half e % 2; the reader waits until each word it needs carries e (an aligned 8-byte store
// is seen whole or not at all, so the epoch vouches for the bits beside it).
//
// Why it is safe: a call's epoch e is the slot's counter + 1, read by every block at its start;
// the last block to finish stores e (every block read the counter before it counted itself
// done). Rank r packs call e into half e % 2; a peer reads that half of r's buffer only after r
// said so (flag >= e). r next writes that half at call e + 2, which starts after r's call e + 1
// saw the peer's block signal e + 1, which the peer sent after its call e (stream order) had read
// everything.
#pragma once

#include "peer_allreduce.h"

#include <cuda_runtime.h>

#include <cstdio>

namespace train::detail {
// Internal linkage: each .cu that includes this compiles its own copy (no relocatable device code).
namespace peer_kernel {
namespace {


constexpr int kThreads = 256;
constexpr int kUnroll = 4;               // float4 loads in flight per thread
constexpr int kMinFloatsPerThread = 4;
// Enough blocks to read a few MB over NVLink in tens of microseconds, few enough to leave most
// of the GPU to the backward it runs beside (2x H100, batch 64: 64 blocks 301k img/s, 128 blocks
// 284k, 32 blocks 276k).
constexpr int kMaxBlocks = 64;
// Two passes (4x H200, MNIST's 4.7 MB bucket at batch 64, images/s: 16 blocks 405k, 24 482k,
// 32 527k, 64 520k, 128 495k): half the reads of one-shot, so half the blocks keep pace with the
// backward and take less of the GPU from it.
constexpr int kTwoShotMaxBlocks = 32;
constexpr size_t kCounterBytes = 64;
constexpr size_t kAlign = 256;

constexpr size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// Floats from one data half to the next: whole kAlign blocks, so both halves start aligned.
__host__ __device__ size_t half_floats(size_t capacity) {
  return (capacity * sizeof(float) + kAlign - 1) / kAlign * kAlign / sizeof(float);
}

constexpr int kFlagSets = 2;  // packed; a two-pass call's averages

__host__ __device__ size_t flag_area_bytes(int slots) {
  const size_t counters = static_cast<size_t>(slots) * kCounterBytes;
  const size_t flags = kFlagSets * static_cast<size_t>(slots) * kPeerMaxBlocks * kPeerMaxRanks * sizeof(uint32_t);
  return (counters + flags + kAlign - 1) / kAlign * kAlign;
}

struct Args {
  PeerMaps maps;
  PeerInput inputs[kPeerMaxInputs];
  int input_count;
  int slot;
  size_t offset;
  float* out;
  int64_t n;
  int64_t chunk;  // floats per block, a multiple of 4 (one-shot)
  uint64_t timeout_ns;
  bool two_shot;  // the one-shot kernel in two passes (each rank sums its part, then copies the others')
  bool overlap_loads;  // low-latency kernel: every peer's word loaded before any is waited for (3+ ranks)
};

__device__ uint32_t* counters(unsigned char* base, int slot) {
  return reinterpret_cast<uint32_t*>(base + static_cast<size_t>(slot) * kCounterBytes);
}

__device__ uint32_t* flag(unsigned char* base, int slots, int slot, int block, int rank, int set = 0) {
  auto* flags = reinterpret_cast<uint32_t*>(base + static_cast<size_t>(slots) * kCounterBytes);
  return flags + ((static_cast<size_t>(set) * slots + slot) * kPeerMaxBlocks + block) * kPeerMaxRanks + rank;
}

// The start of a call, every thread of every block: the call's epoch (the slot's last + 1, read
// once per block) and the block's chunk [begin, end) of the message. Both kernels start this way.
struct CallStart {
  uint32_t epoch;
  int64_t begin, end;
};

__device__ __forceinline__ CallStart start_call(const Args& a, unsigned char* mine) {
  __shared__ uint32_t epoch_shared;
  if (threadIdx.x == 0) epoch_shared = *reinterpret_cast<volatile uint32_t*>(counters(mine, a.slot)) + 1u;
  __syncthreads();
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * a.chunk;
  return {epoch_shared, begin, begin + a.chunk < a.n ? begin + a.chunk : a.n};
}

// The end of a call, every thread of every block: once the block's threads are done, its first
// counts the block done, and the last block to finish stores the call's epoch as the slot's (the
// next call's epoch is one more) and resets the count. Both kernels end this way.
__device__ __forceinline__ void finish_call(unsigned char* mine, int slot, uint32_t epoch) {
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t* c = counters(mine, slot);
    __threadfence();
    if (atomicAdd(c + 1, 1u) == gridDim.x - 1) {
      c[1] = 0;
      *reinterpret_cast<volatile uint32_t*>(c) = epoch;
      __threadfence();
    }
  }
}

__device__ float* data_half(const PeerMaps& m, int rank, uint32_t epoch) {
  auto* data = reinterpret_cast<float*>(m.base[rank] + flag_area_bytes(m.slots));
  return data + (epoch & 1u) * half_floats(m.capacity);
}

// Rank `src`'s run of low-latency words in `base`'s buffer, in the half of `epoch`.
__device__ uint64_t* ll_words(unsigned char* base, const PeerMaps& m, uint32_t epoch, int src) {
  auto* words = reinterpret_cast<uint64_t*>(base + flag_area_bytes(m.slots) + 2 * half_floats(m.capacity) * sizeof(float));
  return words + ((epoch & 1u) * static_cast<size_t>(m.world) + static_cast<size_t>(src)) * m.ll_capacity;
}

__device__ void store_relaxed_sys(uint64_t* p, uint64_t v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ uint64_t load_relaxed_sys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ void store_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ uint32_t load_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Copies src[0, n) to dst[0, n): float4 loads, kUnroll of them in flight per thread before the
// first store (a store could alias a later load, so the compiler would otherwise wait for each).
__device__ void copy_block(const float* __restrict__ src, float* __restrict__ dst, int64_t n) {
  int64_t i0 = 0;
  if (reinterpret_cast<uintptr_t>(src) % 16 == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
    const int64_t n4 = n / 4;
    const auto* s4 = reinterpret_cast<const float4*>(src);
    auto* d4 = reinterpret_cast<float4*>(dst);
    for (int64_t j = threadIdx.x; j < n4; j += int64_t{kThreads} * kUnroll) {
      float4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (j + u * kThreads < n4) v[u] = s4[j + u * kThreads];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (j + u * kThreads < n4) d4[j + u * kThreads] = v[u];
      }
    }
    i0 = 4 * n4;
  }
  for (int64_t i = i0 + threadIdx.x; i < n; i += kThreads) dst[i] = src[i];
}

// This block's part of the message: the inputs' elements [begin, end) into `dst`.
__device__ void pack(const Args& a, int64_t begin, int64_t end, float* dst) {
  int64_t first = 0;
  for (int k = 0; k < a.input_count; ++k) {
    const int64_t last = first + a.inputs[k].numel;
    const int64_t lo = begin > first ? begin : first;
    const int64_t hi = end < last ? end : last;
    if (lo < hi) copy_block(a.inputs[k].data + (lo - first), dst + lo, hi - lo);
    first = last;
  }
}

__device__ bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// out[lo, hi) = the mean over the ranks of src[r][lo, hi), summed in rank order (also into
// also[lo, hi) where `also` is set); with an active epilogue, also its work on input k's elements
// [j0, j0 + hi - lo) with that mean.
template <class Epilogue>
__device__ void sum_range(const Args& a, const float* const* src, int64_t lo, int64_t hi, const Epilogue& e,
                          const typename Epilogue::Block& eb, int k, int64_t j0, float* also = nullptr) {
  const int world = a.maps.world;
  const float inv = 1.0f / static_cast<float>(world);
  int64_t tail = lo;
  bool vec = aligned16(a.out + lo) && (also == nullptr || aligned16(also + lo));
  for (int r = 0; r < world; ++r) vec = vec && aligned16(src[r] + lo);
  if (Epilogue::kActive) vec = vec && e.aligned16(k, j0);
  if (vec) {
    const int64_t n4 = (hi - lo) / 4;
    auto* out4 = reinterpret_cast<float4*>(a.out + lo);
    for (int64_t j = threadIdx.x; j < n4; j += int64_t{kThreads} * kUnroll) {
      float4 s[kUnroll];
#pragma unroll
      for (int q = 0; q < kUnroll; ++q) {
        if (j + q * kThreads < n4) s[q] = __ldcg(reinterpret_cast<const float4*>(src[0] + lo) + j + q * kThreads);
      }
      for (int r = 1; r < world; ++r) {
        float4 v[kUnroll];
#pragma unroll
        for (int q = 0; q < kUnroll; ++q) {
          if (j + q * kThreads < n4) v[q] = __ldcg(reinterpret_cast<const float4*>(src[r] + lo) + j + q * kThreads);
        }
#pragma unroll
        for (int q = 0; q < kUnroll; ++q) s[q].x += v[q].x, s[q].y += v[q].y, s[q].z += v[q].z, s[q].w += v[q].w;
      }
#pragma unroll
      for (int q = 0; q < kUnroll; ++q) {
        const int64_t jq = j + q * kThreads;
        if (jq >= n4) break;
        const float4 g = make_float4(s[q].x * inv, s[q].y * inv, s[q].z * inv, s[q].w * inv);
        out4[jq] = g;
        if (also != nullptr) reinterpret_cast<float4*>(also + lo)[jq] = g;
        if (Epilogue::kActive) e.apply4(eb, k, j0, jq, g);
      }
    }
    tail = lo + 4 * n4;
  }
  for (int64_t i = tail + threadIdx.x; i < hi; i += kThreads) {
    float s = __ldcg(src[0] + i);
    for (int r = 1; r < world; ++r) s += __ldcg(src[r] + i);
    const float g = s * inv;
    a.out[i] = g;
    if (also != nullptr) also[i] = g;
    if (Epilogue::kActive) e.apply1(eb, k, j0 + (i - lo), g);
  }
}

// out[lo, hi) = from[lo, hi) (another rank's averages); with an active epilogue, also its work on
// input k's elements [j0, j0 + hi - lo).
template <class Epilogue>
__device__ void copy_range(const Args& a, const float* from, int64_t lo, int64_t hi, const Epilogue& e,
                           const typename Epilogue::Block& eb, int k, int64_t j0) {
  int64_t tail = lo;
  if (aligned16(a.out + lo) && aligned16(from + lo) && (!Epilogue::kActive || e.aligned16(k, j0))) {
    const int64_t n4 = (hi - lo) / 4;
    auto* out4 = reinterpret_cast<float4*>(a.out + lo);
    const auto* from4 = reinterpret_cast<const float4*>(from + lo);
    for (int64_t j = threadIdx.x; j < n4; j += int64_t{kThreads} * kUnroll) {
      float4 g[kUnroll];
#pragma unroll
      for (int q = 0; q < kUnroll; ++q) {
        if (j + q * kThreads < n4) g[q] = __ldcg(from4 + j + q * kThreads);
      }
#pragma unroll
      for (int q = 0; q < kUnroll; ++q) {
        const int64_t jq = j + q * kThreads;
        if (jq >= n4) break;
        out4[jq] = g[q];
        if (Epilogue::kActive) e.apply4(eb, k, j0, jq, g[q]);
      }
    }
    tail = lo + 4 * n4;
  }
  for (int64_t i = tail + threadIdx.x; i < hi; i += kThreads) {
    const float g = __ldcg(from + i);
    a.out[i] = g;
    if (Epilogue::kActive) e.apply1(eb, k, j0 + (i - lo), g);
  }
}

// Input k's part of the message's elements [begin, end): [lo, hi), its first element j0 of input k.
struct InputPart {
  int64_t lo, hi, j0;
};

__device__ InputPart input_part(const Args& a, int k, int64_t first, int64_t begin, int64_t end) {
  const int64_t last = first + a.inputs[k].numel;
  return {begin > first ? begin : first, end < last ? end : last, (begin > first ? begin : first) - first};
}

// Once the block's threads are done with what they write (the barrier orders it before the fence
// and the release store), tells the same block on every other rank, in flag set `set`, and waits
// for theirs (in our own memory).
__device__ void signal_and_wait(const Args& a, unsigned char* mine, uint32_t epoch, int set) {
  const PeerMaps& m = a.maps;
  __syncthreads();
  const int peer = static_cast<int>(threadIdx.x);
  if (peer < m.world && peer != m.rank) {
    __threadfence_system();
    store_release_sys(flag(m.base[peer], m.slots, a.slot, blockIdx.x, m.rank, set), epoch);
    const uint32_t* theirs = flag(mine, m.slots, a.slot, blockIdx.x, peer, set);
    const uint64_t start = global_ns();
    for (uint32_t spins = 1; static_cast<int32_t>(load_acquire_sys(theirs) - epoch) < 0; ++spins) {
      if (a.timeout_ns != 0 && spins % 4096 == 0 && global_ns() - start > a.timeout_ns) {
        printf("libtrain peer all-reduce: rank %d waited %llu s for rank %d (slot %d, block %d); aborting\n", m.rank,
               static_cast<unsigned long long>(a.timeout_ns / 1000000000ull), peer, a.slot, blockIdx.x);
        __trap();
      }
    }
  }
  __syncthreads();
}

template <class Epilogue>
__global__ void __launch_bounds__(kThreads) peer_allreduce_kernel(const Args a, const Epilogue e) {
  const PeerMaps& m = a.maps;
  unsigned char* mine = m.base[m.rank];
  const CallStart c = start_call(a, mine);
  const uint32_t epoch = c.epoch;
  const int64_t begin = c.begin, end = c.end;

  // 1. Pack this block's chunk into our half, tell every other rank's same block, wait for theirs.
  pack(a, begin, end, data_half(m, m.rank, epoch) + a.offset);
  signal_and_wait(a, mine, epoch, 0);

  // 2. Sum the chunk (two passes: our part of it) over the ranks in rank order (every rank computes
  // the same bits), input by input, with the epilogue's work on each input's elements where there is one.
  const float* src[kPeerMaxRanks];
  for (int r = 0; r < m.world; ++r) src[r] = data_half(m, r, epoch) + a.offset;
  const typename Epilogue::Block eb = e.begin_block();
  const int64_t part = a.two_shot ? static_cast<int64_t>(round_up(static_cast<size_t>((end - begin + m.world - 1) / m.world), 4))
                                  : end - begin;
  auto part_end = [&](int r) { return begin + (r + 1) * part < end ? begin + (r + 1) * part : end; };
  const int64_t lo = a.two_shot ? begin + m.rank * part : begin;
  const int64_t hi = a.two_shot ? part_end(m.rank) : end;
  // Two passes: our averages also over our packed values, where the others read them.
  float* also = a.two_shot ? data_half(m, m.rank, epoch) + a.offset : nullptr;
  int64_t first = 0;
  for (int k = 0; k < a.input_count; ++k) {
    const InputPart p = input_part(a, k, first, lo, hi);
    if (p.lo < p.hi) sum_range(a, src, p.lo, p.hi, e, eb, k, p.j0, also);
    first += a.inputs[k].numel;
  }

  // 3. Two passes: tell the others our averages are there, wait for theirs, copy their parts.
  if (a.two_shot) {
    signal_and_wait(a, mine, epoch, 1);
    for (int r = 0; r < m.world; ++r) {
      if (r == m.rank) continue;
      first = 0;
      for (int k = 0; k < a.input_count; ++k) {
        const InputPart p = input_part(a, k, first, begin + r * part, part_end(r));
        if (p.lo < p.hi) copy_range(a, src[r], p.lo, p.hi, e, eb, k, p.j0);
        first += a.inputs[k].numel;
      }
    }
  }

  // 4. The last block done makes this epoch the slot's.
  finish_call(mine, a.slot, epoch);
}

// The low-latency kernel: this block's elements go to every other rank as words (1), then each
// element's average is the sum, in rank order, of this rank's own value and the words the others
// sent (2), with the epilogue's work on it. Each thread reads, sends, sums and writes the same
// elements, so `out` may be an input's own memory.
__device__ float wait_word(const uint64_t* p, uint32_t epoch, const Args& a, int peer) {
  uint64_t w = load_relaxed_sys(p);
  if (static_cast<uint32_t>(w >> 32) != epoch) {
    const uint64_t start = global_ns();
    for (uint32_t spins = 1; static_cast<uint32_t>((w = load_relaxed_sys(p)) >> 32) != epoch; ++spins) {
      if (a.timeout_ns != 0 && spins % 4096 == 0 && global_ns() - start > a.timeout_ns) {
        printf("libtrain peer all-reduce: rank %d waited %llu s for rank %d (slot %d, block %d); aborting\n", a.maps.rank,
               static_cast<unsigned long long>(a.timeout_ns / 1000000000ull), peer, a.slot, blockIdx.x);
        __trap();
      }
    }
  }
  return __uint_as_float(static_cast<uint32_t>(w));
}

// Word `w`, loaded from `p` before: its value when it carries the epoch, or the wait for it.
__device__ __forceinline__ float word_or_wait(uint64_t w, const uint64_t* p, uint32_t epoch, const Args& a, int peer) {
  return static_cast<uint32_t>(w >> 32) == epoch ? __uint_as_float(static_cast<uint32_t>(w)) : wait_word(p, epoch, a, peer);
}

template <class Epilogue>
__global__ void __launch_bounds__(kThreads) peer_ll_kernel(const Args a, const Epilogue e) {
  const PeerMaps& m = a.maps;
  unsigned char* mine = m.base[m.rank];
  const CallStart c = start_call(a, mine);
  const uint32_t epoch = c.epoch;
  const int64_t begin = c.begin, end = c.end;

  // 1. Send: each element, with the epoch, into every other rank's words for this rank.
  uint64_t* to[kPeerMaxRanks];
  for (int r = 0; r < m.world; ++r) to[r] = ll_words(m.base[r], m, epoch, m.rank) + a.offset;
  int64_t first = 0;
  for (int k = 0; k < a.input_count; ++k) {
    const int64_t last = first + a.inputs[k].numel;
    const int64_t lo = begin > first ? begin : first;
    const int64_t hi = end < last ? end : last;
    for (int64_t i = lo + threadIdx.x; i < hi; i += kThreads) {
      const uint64_t w = (static_cast<uint64_t>(epoch) << 32) | __float_as_uint(a.inputs[k].data[i - first]);
      for (int r = 0; r < m.world; ++r) {
        if (r != m.rank) store_relaxed_sys(to[r] + i, w);
      }
    }
    first = last;
  }

  // 2. Sum in rank order, the same arithmetic as sum_range's.
  const float inv = 1.0f / static_cast<float>(m.world);
  // Rank r's words are at from0 + r x ll_capacity (ll_words' layout).
  const uint64_t* from0 = ll_words(mine, m, epoch, 0) + a.offset;
  const size_t stride = m.ll_capacity;
  const typename Epilogue::Block eb = e.begin_block();
  first = 0;
  for (int k = 0; k < a.input_count; ++k) {
    const int64_t last = first + a.inputs[k].numel;
    const int64_t lo = begin > first ? begin : first;
    const int64_t hi = end < last ? end : last;
    for (int64_t i = lo + threadIdx.x; i < hi; i += kThreads) {
      float s = 0.0f;
      if (!a.overlap_loads) {
        for (int r = 0; r < m.world; ++r) {
          const float v = r == m.rank ? a.inputs[k].data[i - first] : wait_word(from0 + r * stride + i, epoch, a, r);
          s = r == 0 ? v : s + v;
        }
      } else {
        // Every peer's word is loaded before any is waited for: the loads' trips overlap, and a
        // word that came while waiting for another is not loaded again. With one peer there is
        // nothing to overlap, and the loop above is quicker (GRU 2 x 64 on 2x H200: +0.2%).
        uint64_t w[kPeerMaxRanks];
#pragma unroll
        for (int r = 0; r < kPeerMaxRanks; ++r) {
          if (r < m.world && r != m.rank) w[r] = load_relaxed_sys(from0 + r * stride + i);
        }
#pragma unroll
        for (int r = 0; r < kPeerMaxRanks; ++r) {
          if (r < m.world) {
            const float v = r == m.rank ? a.inputs[k].data[i - first] : word_or_wait(w[r], from0 + r * stride + i, epoch, a, r);
            s = r == 0 ? v : s + v;
          }
        }
      }
      const float g = s * inv;
      a.out[i] = g;
      if (Epilogue::kActive) e.apply1(eb, k, i - first, g);
    }
    first = last;
  }

  // 3. The last block done makes this epoch the slot's (as the one-shot kernel does).
  finish_call(mine, a.slot, epoch);
}

/// The plain average: no epilogue.
struct NoEpilogue {
  static constexpr bool kActive = false;
  struct Block {};
  __device__ Block begin_block() const { return {}; }
  __device__ bool aligned16(int, int64_t) const { return true; }
  __device__ void apply4(const Block&, int, int64_t, int64_t, float4) const {}
  __device__ void apply1(const Block&, int, int64_t, float) const {}
  __host__ bool fits(const PeerCall&) const { return true; }
};

/// Queues the call's kernel, compiled with epilogue `e`, on `stream` (a cudaStream_t). Returns the
/// CUDA error code of the launch (0 on success). What peer_allreduce_launch does, with `e`.
template <class Epilogue>
int peer_allreduce_launch_with(const PeerMaps& maps, const PeerCall& call, const Epilogue& e, void* stream) {
  if (call.input_count < 1 || call.input_count > kPeerMaxInputs || maps.world < 2 || maps.world > kPeerMaxRanks ||
      call.slot < 0 || call.slot >= maps.slots || call.offset % 64 != 0) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  Args a{};
  a.maps = maps;
  a.n = 0;
  for (int k = 0; k < call.input_count; ++k) {
    a.inputs[k] = call.inputs[k];
    a.n += call.inputs[k].numel;
  }
  if (a.n == 0) return 0;
  if (call.offset + static_cast<size_t>(a.n) > (call.low_latency ? maps.ll_capacity : maps.capacity)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  a.input_count = call.input_count;
  a.slot = call.slot;
  a.offset = call.offset;
  a.out = call.out;
  a.timeout_ns = call.timeout_ns;
  a.two_shot = call.two_shot && !call.low_latency && maps.world > 2;
  // With 3+ ranks the overlapped loads win (GRU 4 x 64 on 4x H200: +0.4%).
  a.overlap_loads = maps.world > 2;
  if (!e.fits(call)) return static_cast<int>(cudaErrorInvalidValue);
  static_assert(kMaxBlocks <= kPeerMaxBlocks, "one flag per block and rank");
  if (call.low_latency) {
    // One element a thread where the message is small: the words' trips run side by side.
    int64_t blocks = (a.n + kThreads - 1) / kThreads;
    if (blocks > kMaxBlocks) blocks = kMaxBlocks;
    a.chunk = (a.n + blocks - 1) / blocks;
    blocks = (a.n + a.chunk - 1) / a.chunk;
    peer_ll_kernel<Epilogue><<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a, e);
    return static_cast<int>(cudaGetLastError());
  }
  const int64_t per_block_min = int64_t{kThreads} * kMinFloatsPerThread;
  int64_t blocks = (a.n + per_block_min - 1) / per_block_min;
  const int64_t max_blocks = a.two_shot ? kTwoShotMaxBlocks : kMaxBlocks;
  if (blocks > max_blocks) blocks = max_blocks;
  a.chunk = round_up(static_cast<size_t>((a.n + blocks - 1) / blocks), 4);
  blocks = (a.n + a.chunk - 1) / a.chunk;
  peer_allreduce_kernel<Epilogue><<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a, e);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace
}  // namespace peer_kernel
}  // namespace train::detail
