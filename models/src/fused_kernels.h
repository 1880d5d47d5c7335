// Row kernels behind max_pool2_relu_dropout (models/src/fused.cpp): a portable version, an AVX2
// one (fused_avx2.cpp) and an AVX-512 one (fused_avx512.cpp), each vector file built with its own
// flags and used only where the CPU has them. All compute exactly the composed ATen ops' values;
// tests run every version the CPU has.
#pragma once

#include "dropout_mask.h"

#include <cstdint>

namespace train::models::detail {

// Code per pooled output: bits 0-1 the window position of the maximum (row-major), then flags.
constexpr uint8_t kKilled = 4;   // the ReLU zeroed this output: no gradient flows back
constexpr uint8_t kDropped = 8;  // dropout zeroed this output

/// One output row of n values from input rows r0 and r1 (2n floats each): max over each 2x2
/// window (ATen's rule: scan row-major, a strictly greater value or a NaN wins), ReLU, then,
/// with `mask`, dropout of flat output elements first .. first + n. Writes out[n], codes[n].
using ForwardRow = void (*)(const float* r0, const float* r1, int64_t n, float* out,
                            uint8_t* codes, const DropoutMask* mask, int64_t first);
/// The input gradient of one output row: g[n] times the mask value (`scale` where kept, 0 where
/// dropped; 1 without dropout), zeroed where the ReLU was, placed at the window's maximum in
/// rows r0 and r1 (2n floats each), zeros elsewhere.
using BackwardRow = void (*)(const float* g, const uint8_t* codes, int64_t n, float scale,
                             float* r0, float* r1);

void pool_forward_row_portable(const float* r0, const float* r1, int64_t n, float* out,
                               uint8_t* codes, const DropoutMask* mask, int64_t first);
void pool_backward_row_portable(const float* g, const uint8_t* codes, int64_t n, float scale,
                                float* r0, float* r1);

/// True when the AVX-512 kernels were compiled in and this CPU has AVX-512 F, BW, DQ and VL.
/// Defined in fused.cpp: the check must not itself be compiled with AVX-512 flags.
bool avx512_kernels_available();
/// Whether fused_avx512.cpp was built with the AVX-512 kernels (data only, no code).
extern const bool kAvx512KernelsBuiltIn;
void pool_forward_row_avx512(const float* r0, const float* r1, int64_t n, float* out,
                             uint8_t* codes, const DropoutMask* mask, int64_t first);
void pool_backward_row_avx512(const float* g, const uint8_t* codes, int64_t n, float scale,
                              float* r0, float* r1);

/// True when the AVX2 kernels were compiled in and this CPU has AVX2. Defined in fused.cpp.
bool avx2_kernels_available();
/// Whether fused_avx2.cpp was built with the AVX2 kernels (data only, no code).
extern const bool kAvx2KernelsBuiltIn;
void pool_forward_row_avx2(const float* r0, const float* r1, int64_t n, float* out, uint8_t* codes,
                           const DropoutMask* mask, int64_t first);
void pool_backward_row_avx2(const float* g, const uint8_t* codes, int64_t n, float scale, float* r0,
                            float* r1);

}  // namespace train::models::detail
