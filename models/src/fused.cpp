// max_pool2_relu_dropout: a custom autograd function over row kernels (fused_kernels.h) run per
// (n, c) plane, in parallel over planes.
#include "train/models/fused.h"

#include "fused_kernels.h"
#include "train/base/error.h"
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
#include <vector>

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

bool avx2_kernels_available() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool ok = kAvx2KernelsBuiltIn && __builtin_cpu_supports("avx2");
  return ok;
#else
  return false;
#endif
}

}  // namespace detail

namespace {

struct Kernels {
  const char* isa;
  detail::ForwardRow forward;
  detail::BackwardRow backward;
};

const Kernels kPortable{"portable", detail::pool_forward_row_portable, detail::pool_backward_row_portable};
const Kernels kAvx2{"avx2", detail::pool_forward_row_avx2, detail::pool_backward_row_avx2};
const Kernels kAvx512{"avx512", detail::pool_forward_row_avx512, detail::pool_backward_row_avx512};

// The version force_fused_kernels() picked; null: none (auto).
std::atomic<const Kernels*> g_forced{nullptr};

bool cpu_has(const Kernels& k) {
  if (&k == &kAvx512) return detail::avx512_kernels_available();
  if (&k == &kAvx2) return detail::avx2_kernels_available();
  return true;
}

// A version by name, checked against this build and CPU; null for "auto".
const Kernels* by_name(const std::string& isa, const std::string& what) {
  if (isa == "auto") return nullptr;
  for (const Kernels* k : {&kPortable, &kAvx2, &kAvx512}) {
    if (isa != k->isa) continue;
    if (!cpu_has(*k)) {
      std::string have;
      for (const std::string& name : fused_kernels_available()) have += (have.empty() ? "" : ", ") + name;
      throw ConfigError(what + ": the " + isa + " fused kernels can't run here: expected a version this " +
                            "build and CPU have (" + have + "), found " + isa + ".",
                        "set auto (the best this CPU has) or portable.");
    }
    return k;
  }
  throw ConfigError(what + ": expected auto, portable, avx2 or avx512, found '" + isa + "'.",
                    "set auto (the best this CPU has); the others are for tests and benchmarks.");
}

// TRAIN_FUSED_KERNELS (docs/reference.md): a version for tests and benchmarks; else
// TRAIN_CPU_KERNELS=portable, for CPU runs whose bits don't depend on the x86-64 CPU, takes the
// portable kernels (the same bits as the others; one path less to trust); else the best.
const Kernels& from_env() {
  static const Kernels* const chosen = [] {
    const char* fused = std::getenv("TRAIN_FUSED_KERNELS");
    if (fused != nullptr && *fused != '\0') {
      if (const Kernels* k = by_name(fused, std::string("TRAIN_FUSED_KERNELS=") + fused)) return k;
    }
    const char* cpu = std::getenv("TRAIN_CPU_KERNELS");
    if (cpu != nullptr && std::string(cpu) == "portable") return &kPortable;
    if (detail::avx512_kernels_available()) return &kAvx512;
    return detail::avx2_kernels_available() ? &kAvx2 : &kPortable;
  }();
  return *chosen;
}

const Kernels& kernels() {
  const Kernels* forced = g_forced.load(std::memory_order_relaxed);
  return forced != nullptr ? *forced : from_env();
}

struct Geometry {
  int64_t planes, h, w, oh, ow;
  explicit Geometry(at::IntArrayRef sizes)
      : planes(sizes[0] * sizes[1]), h(sizes[2]), w(sizes[3]), oh(sizes[2] / 2), ow(sizes[3] / 2) {}
};

// `codes` may be null (no backward needed).
void forward_kernel(const float* x, float* out, uint8_t* codes, const Geometry& g,
                    const std::optional<detail::DropoutMask>& mask) {
  const Kernels& k = kernels();
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
  const Kernels& k = kernels();
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

std::string fused_kernels_isa() { return kernels().isa; }

std::vector<std::string> fused_kernels_available() {
  std::vector<std::string> names;
  for (const Kernels* k : {&kPortable, &kAvx2, &kAvx512}) {
    if (cpu_has(*k)) names.emplace_back(k->isa);
  }
  return names;
}

void force_fused_kernels(const std::string& isa) { g_forced.store(by_name(isa, "force_fused_kernels(\"" + isa + "\")")); }

void force_portable_fused_kernels(bool on) { g_forced.store(on ? &kPortable : nullptr); }

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
