// The float every byte value 0..255 of an image normalizes to, computed once by the in-memory
// readers' own ATen ops, so that readers serving one sample at a time give their bits. Private.
#pragma once

#include <ATen/ops/empty.h>

#include <array>
#include <cstdint>
#include <cstring>

namespace train::datasets::detail {

/// (x / 255 - mean) / std for x = 0..255, as float32: the ops load_idx, load_cifar10 (and
/// torchvision's ToTensor + Normalize) apply to a whole split, applied to the 256 byte values.
inline std::array<float, 256> normalized_uint8_table(double mean, double std) {
  at::Tensor bytes = at::empty({256}, at::kByte);
  for (int v = 0; v < 256; ++v) bytes.data_ptr<uint8_t>()[v] = static_cast<uint8_t>(v);
  const at::Tensor table = bytes.to(at::kFloat).div_(255.0).sub_(mean).div_(std).contiguous();
  std::array<float, 256> out{};
  std::memcpy(out.data(), table.data_ptr<float>(), sizeof(float) * out.size());
  return out;
}

}  // namespace train::datasets::detail
