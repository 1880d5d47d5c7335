// AVX2 versions of the fused pooling row kernels, for CPUs without AVX-512 (AMD EPYC before Zen 4,
// Intel before Skylake-SP): 8 outputs per step, vmaskmovps for the row's tail only. Compiled with
// -mavx2 only, no -mfma (models/CMakeLists.txt), so no multiply and add can fuse into one rounding:
// the same bits as the portable kernels. Callers check avx2_kernels_available() (fused.cpp) first.
// As in fused_avx512.cpp, nothing here may instantiate an inline or template function shared with
// other files (DropoutMask::hash, std::min...): the linker could keep this file's AVX2 copy.
#include "fused_kernels.h"

#if defined(TRAIN_AVX2_KERNELS)
#include <immintrin.h>
#endif

namespace train::models::detail {

#if defined(TRAIN_AVX2_KERNELS)

namespace {

// DropoutMask::hash, spelled out here (see the file's opening comment).
uint64_t block_hash(const DropoutMask& m, int64_t block) {
  uint64_t z = m.seed ^ (static_cast<uint64_t>(block) * 0xd1b54a32d192ed03ULL);
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// All-ones in lanes 0 .. count-1 (count may be <= 0 or >= 8).
__m256i first_lanes(int count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Floats p[0 .. lanes-1] (0 beyond): a plain load for a whole vector, vmaskmovps only for a
// row's tail (slow on some AMD CPUs), nothing for none.
__m256 load_lanes(const float* p, int lanes) {
  if (lanes >= 8) return _mm256_loadu_ps(p);
  return lanes <= 0 ? _mm256_setzero_ps() : _mm256_maskload_ps(p, first_lanes(lanes));
}

// Stores lanes 0 .. lanes-1 of v to p[0 .. lanes-1]. The tail in 4-, 2- and 1-float stores:
// vmaskmovps stores measured 3x slower per row of 12 outputs on a Xeon.
void store_lanes(float* p, int lanes, __m256 v) {
  if (lanes >= 8) {
    _mm256_storeu_ps(p, v);
    return;
  }
  __m128 part = _mm256_castps256_ps128(v);
  if (lanes >= 4) {
    _mm_storeu_ps(p, part);
    part = _mm256_extractf128_ps(v, 1);
    p += 4;
    lanes -= 4;
  }
  if (lanes >= 2) {
    _mm_storel_pi(reinterpret_cast<__m64*>(p), part);
    part = _mm_movehl_ps(part, part);
    p += 2;
    lanes -= 2;
  }
  if (lanes == 1) _mm_store_ss(p, part);
}

// The forward works on 8 outputs in the order kSwapped = 0, 1, 4, 5, 2, 3, 6, 7, the order an in-lane
// shuffle leaves them in; one cross-lane permute (kUnswap, its own inverse) puts each result back.
constexpr int kUnswap = 0xD8;  // 64-bit chunks 0, 2, 1, 3

// The 16-bit words 2s .. 2s + 15 (bytes) of hi:lo, for s = 0 .. 3 (alignr wants an immediate).
__m128i words_from(__m128i hi, __m128i lo, int64_t s) {
  switch (s) {
    case 0: return lo;
    case 1: return _mm_alignr_epi8(hi, lo, 2);
    case 2: return _mm_alignr_epi8(hi, lo, 4);
    default: return _mm_alignr_epi8(hi, lo, 6);
  }
}

// Keep lanes (all-ones) of DropoutMask::value for the 8 flat elements i0 .. i0 + 7, in the order
// kSwapped: element i's 16-bit uniform is bits 16 * (i & 3) of hash(i / 4), i.e. word i - 4 * (i0 / 4)
// of the consecutive block hashes taken as one little-endian number. Built in registers: a wide load
// of narrow stores would stall.
__m256i keep8_swapped(const DropoutMask& m, int64_t i0) {
  const int64_t b0 = i0 >> 2;
  const __m128i lo = _mm_set_epi64x(static_cast<long long>(block_hash(m, b0 + 1)),
                                    static_cast<long long>(block_hash(m, b0)));
  // An aligned i0 (MNIST's rows are 12 outputs) needs two blocks only.
  const __m128i hi = (i0 & 3) ? _mm_cvtsi64_si128(static_cast<long long>(block_hash(m, b0 + 2)))
                              : _mm_setzero_si128();
  const __m128i words = _mm_shuffle_epi32(words_from(hi, lo, i0 & 3), 0xD8);  // word pairs 0, 2, 1, 3
  const __m256i u = _mm256_cvtepu16_epi32(words);
  // u >= threshold, in signed 32-bit lanes (u < 2^16, threshold <= 2^16).
  return _mm256_xor_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(m.threshold)), u),
                          _mm256_set1_epi32(-1));
}

// The even (odd = 1) elements of the 16 floats lo, hi, in the order kSwapped.
__m256 deinterleave_swapped(__m256 lo, __m256 hi, int odd) {
  return odd ? _mm256_shuffle_ps(lo, hi, 0xDD) : _mm256_shuffle_ps(lo, hi, 0x88);
}

// ATen's max_pool step: a strictly greater value or a NaN replaces the maximum (and its code).
void take_if_greater(__m256 x, int code, __m256& v, __m256i& k) {
  const __m256 t = _mm256_or_ps(_mm256_cmp_ps(x, v, _CMP_GT_OQ), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  v = _mm256_blendv_ps(v, x, t);
  k = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(k), _mm256_castsi256_ps(_mm256_set1_epi32(code)), t));
}

// The low bytes of k's 8 lanes (each 0..15), stored to codes[0 .. count-1]. The tail goes
// through a register, not a stack buffer: a wide load after narrow stores stalls.
void store_codes(__m256i k, uint8_t* codes, int count) {
  const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(k), _mm256_extracti128_si256(k, 1));
  const __m128i b = _mm_packus_epi16(w, w);
  if (count >= 8) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(codes), b);
    return;
  }
  uint64_t bytes = static_cast<uint64_t>(_mm_cvtsi128_si64(b));
  for (int j = 0; j < count; ++j, bytes >>= 8) codes[j] = static_cast<uint8_t>(bytes);
}

// codes[0 .. count-1] as 8 int32 lanes (0 beyond count).
__m256i load_codes(const uint8_t* codes, int count) {
  if (count >= 8) return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes)));
  uint64_t bytes = 0;
  for (int j = 0; j < count; ++j) bytes |= static_cast<uint64_t>(codes[j]) << (8 * j);
  return _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(bytes)));
}

}  // namespace

extern const bool kAvx2KernelsBuiltIn = true;

void pool_forward_row_avx2(const float* r0, const float* r1, int64_t n, float* out, uint8_t* codes,
                           const DropoutMask* mask, int64_t first) {
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t ox = 0; ox < n; ox += 8) {
    const int count = static_cast<int>(n - ox < 8 ? n - ox : 8);
    const int lo = 2 * count, hi = 2 * count - 8;  // lanes of the two input vectors per row
    const __m256 t0 = load_lanes(r0 + 2 * ox, lo), t1 = load_lanes(r0 + 2 * ox + 8, hi);
    const __m256 b0 = load_lanes(r1 + 2 * ox, lo), b1 = load_lanes(r1 + 2 * ox + 8, hi);
    __m256 v = deinterleave_swapped(t0, t1, 0);
    __m256i k = _mm256_setzero_si256();
    take_if_greater(deinterleave_swapped(t0, t1, 1), 1, v, k);
    take_if_greater(deinterleave_swapped(b0, b1, 0), 2, v, k);
    take_if_greater(deinterleave_swapped(b0, b1, 1), 3, v, k);
    // relu as ATen's vmaxps(0, v): 0 > v ? 0 : v; the gradient passes where r > 0 or NaN.
    __m256 r = _mm256_blendv_ps(v, zero, _mm256_cmp_ps(zero, v, _CMP_GT_OQ));
    const __m256 pass = _mm256_or_ps(_mm256_cmp_ps(r, zero, _CMP_GT_OQ), _mm256_cmp_ps(r, r, _CMP_UNORD_Q));
    k = _mm256_or_si256(k, _mm256_andnot_si256(_mm256_castps_si256(pass), _mm256_set1_epi32(kKilled)));
    if (mask) {
      const __m256i keep = keep8_swapped(*mask, first + ox);
      // r * m with m = scale or 0, as at::mul(x, mask) computes it (0 * inf is NaN, and so on).
      r = _mm256_mul_ps(r, _mm256_and_ps(_mm256_castsi256_ps(keep), _mm256_set1_ps(mask->scale)));
      k = _mm256_or_si256(k, _mm256_andnot_si256(keep, _mm256_set1_epi32(kDropped)));
    }
    store_lanes(out + ox, count, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(r), kUnswap)));
    store_codes(_mm256_permute4x64_epi64(k, kUnswap), codes + ox, count);
  }
}

void pool_backward_row_avx2(const float* g, const uint8_t* codes, int64_t n, float scale, float* r0,
                            float* r1) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256 vscale = _mm256_set1_ps(scale);
  const __m256i none = _mm256_setzero_si256();
  for (int64_t ox = 0; ox < n; ox += 8) {
    const int count = static_cast<int>(n - ox < 8 ? n - ox : 8);
    const int lo = 2 * count, hi = 2 * count - 8;  // lanes of the two output vectors per row
    const __m256i k = load_codes(codes + ox, count);
    const __m256 gv = load_lanes(g + ox, count);
    const __m256i kept = _mm256_cmpeq_epi32(_mm256_and_si256(k, _mm256_set1_epi32(kDropped)), none);
    const __m256i alive = _mm256_cmpeq_epi32(_mm256_and_si256(k, _mm256_set1_epi32(kKilled)), none);
    const __m256 gm = _mm256_mul_ps(gv, _mm256_and_ps(_mm256_castsi256_ps(kept), vscale));
    const __m256 v = _mm256_and_ps(_mm256_castsi256_ps(alive), _mm256_add_ps(zero, gm));
    const __m256i pos = _mm256_and_si256(k, _mm256_set1_epi32(3));
    auto at = [&](int p) {
      return _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(pos, _mm256_set1_epi32(p))), v);
    };
    const __m256 p0 = at(0), p1 = at(1), p2 = at(2), p3 = at(3);
    // Interleave (p0, p1) into row r0 and (p2, p3) into r1: unpack works within 128-bit halves.
    const __m256 a_lo = _mm256_unpacklo_ps(p0, p1), a_hi = _mm256_unpackhi_ps(p0, p1);
    const __m256 c_lo = _mm256_unpacklo_ps(p2, p3), c_hi = _mm256_unpackhi_ps(p2, p3);
    store_lanes(r0 + 2 * ox, lo, _mm256_permute2f128_ps(a_lo, a_hi, 0x20));
    store_lanes(r0 + 2 * ox + 8, hi, _mm256_permute2f128_ps(a_lo, a_hi, 0x31));
    store_lanes(r1 + 2 * ox, lo, _mm256_permute2f128_ps(c_lo, c_hi, 0x20));
    store_lanes(r1 + 2 * ox + 8, hi, _mm256_permute2f128_ps(c_lo, c_hi, 0x31));
  }
}

#else  // no AVX2 kernels in this build

extern const bool kAvx2KernelsBuiltIn = false;
void pool_forward_row_avx2(const float* r0, const float* r1, int64_t n, float* out, uint8_t* codes,
                           const DropoutMask* mask, int64_t first) {
  pool_forward_row_portable(r0, r1, n, out, codes, mask, first);
}
void pool_backward_row_avx2(const float* g, const uint8_t* codes, int64_t n, float scale, float* r0,
                            float* r1) {
  pool_backward_row_portable(g, codes, n, scale, r0, r1);
}

#endif

}  // namespace train::models::detail
