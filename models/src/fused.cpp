// max_pool2_relu_dropout: a custom autograd function over row kernels (fused_kernels.h) run per
// (n, c) plane, in parallel over planes.
#include "train/models/fused.h"

#include "fused_kernels.h"
#include "train/models/dropout.h"

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/max_pool2d.h>
#include <ATen/ops/relu.h>
#include <torch/csrc/autograd/custom_function.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <cstring>
#include <optional>

namespace train::models {

namespace detail {

void pool_forward_row_portable(const float* r0, const float* r1, int64_t n, float* out,
                               uint8_t* codes, const DropoutMask* mask, int64_t first) {
  uint64_t h = 0;
  for (int64_t ox = 0; ox < n; ++ox) {
    const float a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], d = r1[2 * ox + 1];
    // ATen's max_pool scans the window in row-major order from -inf; a strictly greater value
    // or a NaN replaces the maximum (x != x is the NaN test). Starting from `a` is the same:
    // a only loses to -inf's initial value when a == -inf, and then both are -inf at index 0.
    float v = a;
    uint8_t k = 0;
    if (b > v || b != b) v = b, k = 1;
    if (c > v || c != c) v = c, k = 2;
    if (d > v || d != d) v = d, k = 3;
    // ATen's relu is vmaxps(0, v): 0 > v ? 0 : v (keeps NaN and -0); threshold_backward then
    // passes the gradient only where the result is > 0 or NaN.
    float r = 0.0f > v ? 0.0f : v;
    if (!(r > 0.0f || r != r)) k |= kKilled;
    if (mask) {
      const int64_t i = first + ox;
      if (ox == 0 || (i & 3) == 0) h = mask->hash(i >> 2);
      const float m = mask->value(h, i);
      r = r * m;  // as at::mul(x, mask): 0 * inf is NaN, and so on
      if (m == 0.0f) k |= kDropped;
    }
    out[ox] = r;
    codes[ox] = k;
  }
}

void pool_backward_row_portable(const float* g, const uint8_t* codes, int64_t n, float scale,
                                float* r0, float* r1) {
  for (int64_t ox = 0; ox < n; ++ox) {
    const uint8_t k = codes[ox];
    // The composed backward: mul by the mask, threshold_backward, then max_pool's
    // grad_input[argmax] += onto zeros (so +0 + -0 gives +0).
    const float gm = g[ox] * ((k & kDropped) ? 0.0f : scale);
    const float v = (k & kKilled) ? 0.0f : 0.0f + gm;
    const uint8_t pos = k & 3;
    r0[2 * ox] = pos == 0 ? v : 0.0f;
    r0[2 * ox + 1] = pos == 1 ? v : 0.0f;
    r1[2 * ox] = pos == 2 ? v : 0.0f;
    r1[2 * ox + 1] = pos == 3 ? v : 0.0f;
  }
}

bool avx512_kernels_available() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool ok = kAvx512KernelsBuiltIn && __builtin_cpu_supports("avx512f") &&
                         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                         __builtin_cpu_supports("avx512vl");
  return ok;
#else
  return false;
#endif
}

}  // namespace detail

namespace {

std::atomic<bool> g_force_portable{false};

struct Kernels {
  detail::ForwardRow forward;
  detail::BackwardRow backward;
};

// TRAIN_CPU_KERNELS=portable (docs/reference.md): CPU runs whose bits don't depend on the x86-64
// CPU, so the portable kernels (the same bits as the AVX-512 ones; one path less to trust).
bool portable_from_env() {
  static const bool portable = [] {
    const char* env = std::getenv("TRAIN_CPU_KERNELS");
    return env != nullptr && std::string(env) == "portable";
  }();
  return portable;
}

Kernels kernels() {
  if (!g_force_portable.load(std::memory_order_relaxed) && !portable_from_env() && detail::avx512_kernels_available()) {
    return {detail::pool_forward_row_avx512, detail::pool_backward_row_avx512};
  }
  return {detail::pool_forward_row_portable, detail::pool_backward_row_portable};
}

struct Geometry {
  int64_t planes, h, w, oh, ow;
  explicit Geometry(at::IntArrayRef sizes)
      : planes(sizes[0] * sizes[1]), h(sizes[2]), w(sizes[3]), oh(sizes[2] / 2), ow(sizes[3] / 2) {}
};

// `codes` may be null (no backward needed).
void forward_kernel(const float* x, float* out, uint8_t* codes, const Geometry& g,
                    const std::optional<detail::DropoutMask>& mask) {
  const Kernels k = kernels();
  at::parallel_for(0, g.planes, 8, [&](int64_t begin, int64_t end) {
    std::vector<uint8_t> scratch(codes ? 0 : g.ow);
    for (int64_t plane = begin; plane < end; ++plane) {
      const float* xp = x + plane * g.h * g.w;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        const int64_t i = (plane * g.oh + oy) * g.ow;
        const float* r0 = xp + 2 * oy * g.w;
        k.forward(r0, r0 + g.w, g.ow, out + i, codes ? codes + i : scratch.data(),
                  mask ? &*mask : nullptr, i);
      }
    }
  });
}

void backward_kernel(const float* grad_out, const uint8_t* codes, float* grad_x, const Geometry& g,
                     float scale) {
  const Kernels k = kernels();
  at::parallel_for(0, g.planes, 8, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      float* gp = grad_x + plane * g.h * g.w;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        const int64_t i = (plane * g.oh + oy) * g.ow;
        float* r0 = gp + 2 * oy * g.w;
        k.backward(grad_out + i, codes + i, g.ow, scale, r0, r0 + g.w);
        if (g.w % 2) r0[g.w - 1] = r0[2 * g.w - 1] = 0.0f;  // floor mode: the unpooled column
      }
      if (g.h % 2) std::memset(gp + (g.h - 1) * g.w, 0, sizeof(float) * g.w);  // and row
    }
  });
}

class MaxPool2ReluDropout : public torch::autograd::Function<MaxPool2ReluDropout> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            std::optional<detail::DropoutMask> mask) {
    const Geometry g(x.sizes());
    at::Tensor out = at::empty({x.size(0), x.size(1), g.oh, g.ow}, x.options());
    at::Tensor codes = at::empty({x.size(0), x.size(1), g.oh, g.ow}, x.options().dtype(at::kByte));
    forward_kernel(x.data_ptr<float>(), out.data_ptr<float>(), codes.data_ptr<uint8_t>(), g, mask);
    ctx->save_for_backward({codes});
    ctx->saved_data["sizes"] = x.sizes();
    ctx->saved_data["scale"] = static_cast<double>(mask ? mask->scale : 1.0f);
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor codes = ctx->get_saved_variables()[0];
    const auto sizes = ctx->saved_data["sizes"].toIntVector();
    const float scale = static_cast<float>(ctx->saved_data["scale"].toDouble());
    const at::Tensor grad_out = grads[0].contiguous();
    at::Tensor grad_x = at::empty(sizes, grad_out.options());
    backward_kernel(grad_out.data_ptr<float>(), codes.data_ptr<uint8_t>(), grad_x.data_ptr<float>(),
                    Geometry(sizes), scale);
    return {grad_x, at::Tensor()};
  }
};

}  // namespace

std::string fused_kernels_isa() {
  return kernels().forward == detail::pool_forward_row_avx512 ? "avx512" : "portable";
}

void force_portable_fused_kernels(bool on) { g_force_portable.store(on); }

at::Tensor max_pool2_relu_dropout(const at::Tensor& x, double p, bool training) {
  const bool drop = training && p > 0.0;
  if (!x.device().is_cpu() || x.scalar_type() != at::kFloat || x.dim() != 4 || x.size(2) < 2 ||
      x.size(3) < 2 || p >= 1.0) {
    at::Tensor y = at::relu(at::max_pool2d(x, {2, 2}));
    return drop ? fast_dropout(y, p, training) : y;
  }
  std::optional<detail::DropoutMask> mask;
  if (drop) mask = detail::DropoutMask::for_p(detail::draw_dropout_seed(), p);
  const at::Tensor in = x.contiguous();
  if (in.requires_grad() && at::GradMode::is_enabled()) {
    return MaxPool2ReluDropout::apply(in, mask);
  }
  const Geometry g(in.sizes());
  at::Tensor out = at::empty({in.size(0), in.size(1), g.oh, g.ow}, in.options());
  forward_kernel(in.data_ptr<float>(), out.data_ptr<float>(), nullptr, g, mask);
  return out;
}

}  // namespace train::models
