// Adadelta's update of one element, shared by the fused kernel and the peer all-reduce that
// updates as it averages. Every operation is rounded on its own, as torch's separate ops do (no
// fused multiply-add the compiler may or may not contract, depending on the code around it), so
// both kernels give the same bits for the same inputs.
#pragma once

#include "adadelta_fused.h"

namespace train::detail {

__device__ __forceinline__ void adadelta_element(float& p, float g, float& sq, float& acc,
                                                 const AdadeltaFusedOptions& o, float lr) {
  const float one_minus_rho = __fsub_rn(1.0f, o.rho);
  float gj = o.maximize ? -g : g;
  if (o.weight_decay != 0.0f) gj = __fadd_rn(gj, __fmul_rn(o.weight_decay, p));
  const float s = __fadd_rn(__fmul_rn(sq, o.rho), __fmul_rn(__fmul_rn(one_minus_rho, gj), gj));
  const float std = __fsqrt_rn(__fadd_rn(s, o.eps));
  const float delta = __fmul_rn(__fdiv_rn(__fsqrt_rn(__fadd_rn(acc, o.eps)), std), gj);
  sq = s;
  acc = __fadd_rn(__fmul_rn(acc, o.rho), __fmul_rn(__fmul_rn(one_minus_rho, delta), delta));
  p = __fsub_rn(p, __fmul_rn(lr, delta));
}

}  // namespace train::detail
