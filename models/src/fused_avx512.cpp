// AVX-512 versions of the fused pooling row kernels: 16 outputs per step, masked loads and
// stores for the row's tail, so rows as short as the MNIST CNN's 12 outputs vectorize. This file
// is compiled with -mavx512f/bw/dq/vl when the compiler supports them (models/CMakeLists.txt);
// callers check avx512_kernels_available() (fused.cpp, compiled without those flags, since it
// runs on every CPU) first. Nothing here may instantiate an inline or
// template function shared with other files (std::min, DropoutMask::hash...): the linker could
// keep this file's AVX-512 copy for everyone.
#include "fused_kernels.h"

#if defined(TRAIN_AVX512_KERNELS)
#include <immintrin.h>
#endif

namespace train::models::detail {

#if defined(TRAIN_AVX512_KERNELS)

namespace {

inline __m512i splitmix64(__m512i z) {
  z = _mm512_add_epi64(z, _mm512_set1_epi64(static_cast<long long>(0x9e3779b97f4a7c15ULL)));
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)),
                         _mm512_set1_epi64(static_cast<long long>(0xbf58476d1ce4e5b9ULL)));
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)),
                         _mm512_set1_epi64(static_cast<long long>(0x94d049bb133111ebULL)));
  return _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
}

// Keep-bits of DropoutMask::value for 8 consecutive flat elements starting at i0.
inline __mmask8 keep8(const DropoutMask& m, int64_t i0) {
  const __m512i i = _mm512_add_epi64(_mm512_set1_epi64(i0), _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
  const __m512i block = _mm512_srli_epi64(i, 2);
  const __m512i key = _mm512_xor_si512(
      _mm512_set1_epi64(static_cast<long long>(m.seed)),
      _mm512_mullo_epi64(block, _mm512_set1_epi64(static_cast<long long>(0xd1b54a32d192ed03ULL))));
  const __m512i h = splitmix64(key);
  const __m512i shift = _mm512_slli_epi64(_mm512_and_si512(i, _mm512_set1_epi64(3)), 4);
  const __m512i u = _mm512_and_si512(_mm512_srlv_epi64(h, shift), _mm512_set1_epi64(0xffff));
  return _mm512_cmpge_epu64_mask(u, _mm512_set1_epi64(m.threshold));
}

inline __mmask16 first_bits(int count) {
  return count >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << count) - 1);
}

}  // namespace

extern const bool kAvx512KernelsBuiltIn = true;

void pool_forward_row_avx512(const float* r0, const float* r1, int64_t n, float* out,
                             uint8_t* codes, const DropoutMask* mask, int64_t first) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t ox = 0; ox < n; ox += 16) {
    const int count = static_cast<int>(n - ox < 16 ? n - ox : 16);
    const __mmask16 lo = first_bits(2 * count), hi = first_bits(count > 8 ? 2 * count - 16 : 0);
    const __mmask16 om = first_bits(count);
    const __m512 t0 = _mm512_maskz_loadu_ps(lo, r0 + 2 * ox), t1 = _mm512_maskz_loadu_ps(hi, r0 + 2 * ox + 16);
    const __m512 b0 = _mm512_maskz_loadu_ps(lo, r1 + 2 * ox), b1 = _mm512_maskz_loadu_ps(hi, r1 + 2 * ox + 16);
    const __m512 a = _mm512_permutex2var_ps(t0, even, t1), b = _mm512_permutex2var_ps(t0, odd, t1);
    const __m512 c = _mm512_permutex2var_ps(b0, even, b1), d = _mm512_permutex2var_ps(b0, odd, b1);
    __m512 v = a;
    __m512i k = _mm512_setzero_si512();
    __mmask16 t = _mm512_cmp_ps_mask(b, v, _CMP_GT_OQ) | _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q);
    v = _mm512_mask_blend_ps(t, v, b);
    k = _mm512_mask_blend_epi32(t, k, _mm512_set1_epi32(1));
    t = _mm512_cmp_ps_mask(c, v, _CMP_GT_OQ) | _mm512_cmp_ps_mask(c, c, _CMP_UNORD_Q);
    v = _mm512_mask_blend_ps(t, v, c);
    k = _mm512_mask_blend_epi32(t, k, _mm512_set1_epi32(2));
    t = _mm512_cmp_ps_mask(d, v, _CMP_GT_OQ) | _mm512_cmp_ps_mask(d, d, _CMP_UNORD_Q);
    v = _mm512_mask_blend_ps(t, v, d);
    k = _mm512_mask_blend_epi32(t, k, _mm512_set1_epi32(3));
    // relu as ATen's vmaxps(0, v): 0 > v ? 0 : v; the gradient passes where r > 0 or NaN.
    __m512 r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(zero, v, _CMP_GT_OQ), v, zero);
    const __mmask16 pass = _mm512_cmp_ps_mask(r, zero, _CMP_GT_OQ) | _mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q);
    k = _mm512_mask_or_epi32(k, static_cast<__mmask16>(~pass), k, _mm512_set1_epi32(kKilled));
    if (mask) {
      const int64_t i0 = first + ox;
      const __mmask16 keep = static_cast<__mmask16>(keep8(*mask, i0) | (keep8(*mask, i0 + 8) << 8));
      // r * m with m = scale or 0, as at::mul(x, mask) computes it (0 * inf is NaN, and so on).
      r = _mm512_mul_ps(r, _mm512_mask_blend_ps(keep, zero, _mm512_set1_ps(mask->scale)));
      k = _mm512_mask_or_epi32(k, static_cast<__mmask16>(~keep), k, _mm512_set1_epi32(kDropped));
    }
    _mm512_mask_storeu_ps(out + ox, om, r);
    _mm512_mask_cvtepi32_storeu_epi8(codes + ox, om, k);
  }
}

void pool_backward_row_avx512(const float* g, const uint8_t* codes, int64_t n, float scale,
                              float* r0, float* r1) {
  const __m512i il_lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i il_hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512 zero = _mm512_setzero_ps();
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int64_t ox = 0; ox < n; ox += 16) {
    const int count = static_cast<int>(n - ox < 16 ? n - ox : 16);
    const __mmask16 lo = first_bits(2 * count), hi = first_bits(count > 8 ? 2 * count - 16 : 0);
    const __mmask16 om = first_bits(count);
    const __m512i k = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(om, codes + ox));
    const __m512 gv = _mm512_maskz_loadu_ps(om, g + ox);
    const __mmask16 dropped = _mm512_test_epi32_mask(k, _mm512_set1_epi32(kDropped));
    const __mmask16 killed = _mm512_test_epi32_mask(k, _mm512_set1_epi32(kKilled));
    const __m512 gm = _mm512_mul_ps(gv, _mm512_mask_blend_ps(dropped, vscale, zero));
    const __m512 v = _mm512_mask_blend_ps(killed, _mm512_add_ps(zero, gm), zero);
    const __m512i pos = _mm512_and_si512(k, _mm512_set1_epi32(3));
    const __m512 p0 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(pos, _mm512_set1_epi32(0)), v);
    const __m512 p1 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(pos, _mm512_set1_epi32(1)), v);
    const __m512 p2 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(pos, _mm512_set1_epi32(2)), v);
    const __m512 p3 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(pos, _mm512_set1_epi32(3)), v);
    _mm512_mask_storeu_ps(r0 + 2 * ox, lo, _mm512_permutex2var_ps(p0, il_lo, p1));
    _mm512_mask_storeu_ps(r0 + 2 * ox + 16, hi, _mm512_permutex2var_ps(p0, il_hi, p1));
    _mm512_mask_storeu_ps(r1 + 2 * ox, lo, _mm512_permutex2var_ps(p2, il_lo, p3));
    _mm512_mask_storeu_ps(r1 + 2 * ox + 16, hi, _mm512_permutex2var_ps(p2, il_hi, p3));
  }
}

#else  // no AVX-512 kernels in this build

extern const bool kAvx512KernelsBuiltIn = false;
void pool_forward_row_avx512(const float* r0, const float* r1, int64_t n, float* out,
                             uint8_t* codes, const DropoutMask* mask, int64_t first) {
  pool_forward_row_portable(r0, r1, n, out, codes, mask, first);
}
void pool_backward_row_avx512(const float* g, const uint8_t* codes, int64_t n, float scale,
                              float* r0, float* r1) {
  pool_backward_row_portable(g, codes, n, scale, r0, r1);
}

#endif

}  // namespace train::models::detail
