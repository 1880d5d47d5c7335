// The decoder-free part of the records' device stage (gpu_records.h): pixel records copied to the
// GPU, decoded JPEGs cropped and resized with the CPU path's filter (ATen's antialiased bilinear,
// Pillow's coefficients), the flips and the normalization, on the current (the loader's side)
// stream. Device-agnostic ATen ops only: it compiles in every build and runs where a CUDA device is.
#include "gpu_records.h"

#include "train/base/error.h"

#include <ATen/ops/_upsample_bilinear2d_aa.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/flip.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/where.h>

#include <cstring>
#include <mutex>
#include <utility>

namespace train::datasets::detail {

std::vector<RecordHeader> record_headers(const Batch& host, const std::string& name) {
  const int64_t n = host.inputs.size(0), stride = host.inputs.size(1);
  const auto* base = host.inputs.const_data_ptr<uint8_t>();
  std::vector<RecordHeader> recs(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(&recs[i], base + i * stride, sizeof(RecordHeader));
    if (recs[i].magic != kRecordMagic) {
      throw DataError(name + ": expected the image records of the loader's batch, found sample " + std::to_string(i) +
                          " of the batch without the record's mark.",
                      "this is a bug in libtrain: please report it with the command line.");
    }
  }
  return recs;
}

RecordFinisher::RecordFinisher(const ImageOptions& options) : options_(options) {
  for (int c = 0; c < options.channels; ++c) {
    mean_.push_back(static_cast<float>(options.mean.size() == 1 ? options.mean[0] : options.mean[c]));
    std_.push_back(static_cast<float>(options.std.size() == 1 ? options.std[0] : options.std[c]));
  }
}

// The pixel records' bytes on the device, [B, size, size, c] (rows of other records unspecified).
at::Tensor RecordFinisher::pixels(const Batch& host, const std::vector<RecordHeader>& recs, const at::Device& device) {
  const int64_t n = host.inputs.size(0), s = options_.size, c = options_.channels, payload = s * s * c;
  bool all = true;
  for (const RecordHeader& r : recs) all = all && r.kind == RecordKind::pixels;
  if (all) {  // one copy of the whole batch, headers and all (64 bytes a sample more)
    return host.inputs.to(device, /*non_blocking=*/true).narrow(1, kRecordHeaderBytes, payload).view({n, s, s, c});
  }
  at::Tensor px = at::empty({n, s, s, c}, at::TensorOptions().dtype(at::kByte).device(device));
  for (int64_t i = 0; i < n; ++i) {
    if (recs[static_cast<size_t>(i)].kind != RecordKind::pixels) continue;
    px.select(0, i).copy_(host.inputs.select(0, i).narrow(0, kRecordHeaderBytes, payload).view({s, s, c}),
                          /*non_blocking=*/true);
  }
  return px;
}

// The mean and std on the device, [1, c, 1, 1], copied there once.
std::pair<at::Tensor, at::Tensor> RecordFinisher::normalization(const at::Device& device) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!mean_d_.defined() || mean_d_.device() != device) {
    const int64_t c = options_.channels;
    mean_d_ = at::from_blob(mean_.data(), {1, c, 1, 1}, at::kFloat).to(device);
    std_d_ = at::from_blob(std_.data(), {1, c, 1, 1}, at::kFloat).to(device);
  }
  return {mean_d_, std_d_};
}

Batch RecordFinisher::finish(const Batch& host, const std::vector<RecordHeader>& recs, const at::Tensor& decoded,
                             const std::vector<int64_t>& offsets, const at::Device& device) {
  const int64_t n = host.inputs.size(0);
  const int size = options_.size;
  const int64_t c = options_.channels;
  const at::Tensor px = pixels(host, recs, device);
  at::Tensor out = at::empty({n, c, size, size}, at::TensorOptions().dtype(at::kFloat).device(device));
  at::Tensor flips = at::empty({n}, at::TensorOptions().dtype(at::kBool).pinned_memory(true));
  bool* flip = flips.data_ptr<bool>();
  bool any_jpeg = false;
  for (const RecordHeader& r : recs) any_jpeg = any_jpeg || r.kind == RecordKind::jpeg;
  if (!any_jpeg) out.copy_(px.permute({0, 3, 1, 2}));  // bytes to float, the whole batch at once
  for (int64_t i = 0; i < n; ++i) {
    const RecordHeader& r = recs[static_cast<size_t>(i)];
    flip[i] = r.flip != 0;
    at::Tensor slot = out.narrow(0, i, 1);
    if (r.kind == RecordKind::pixels) {
      if (any_jpeg) slot.copy_(px.narrow(0, i, 1).permute({0, 3, 1, 2}));
      continue;
    }
    const at::Tensor image =
        decoded.narrow(0, offsets[static_cast<size_t>(i)], int64_t{r.height} * r.width * 3).view({r.height, r.width, 3});
    if (r.resize_h > 0) {  // eval: the whole image resized, then its center window
      const at::Tensor whole = image.permute({2, 0, 1}).unsqueeze(0).to(at::kFloat);
      const at::Tensor resized = at::_upsample_bilinear2d_aa(whole, {r.resize_h, r.resize_w}, /*align_corners=*/false);
      slot.copy_(resized.narrow(2, r.crop_top, size).narrow(3, r.crop_left, size));
    } else {  // train: the crop, then resized
      const at::Tensor crop = image.narrow(0, r.crop_top, r.crop_height)
                                  .narrow(1, r.crop_left, r.crop_width)
                                  .permute({2, 0, 1})
                                  .unsqueeze(0)
                                  .to(at::kFloat);
      at::_upsample_bilinear2d_aa_out(slot, crop, {size, size}, /*align_corners=*/false);
    }
  }
  // The resample rounded to bytes, as on the CPU (the pixel records are bytes already).
  if (any_jpeg) out.round_().clamp_(0, 255);
  const at::Tensor flip_d = flips.to(device, /*non_blocking=*/true).view({n, 1, 1, 1});
  out = at::where(flip_d, out.flip({3}), out);
  // (x / 255 - mean) / std in float32, as the CPU path's ops (and its byte table) compute it.
  const auto [mean, std] = normalization(device);
  out.div_(255.0).sub_(mean).div_(std);
  return Batch{out, host.targets.to(device, /*non_blocking=*/true)};
}

namespace {

class PixelStage : public DeviceStage {
 public:
  explicit PixelStage(const ImageDataset& data) : data_(data), finisher_(data.options()) {}
  Batch finish(const Batch& host, const at::Device& device) override {
    return finisher_.finish(host, record_headers(host, data_.name()), at::Tensor(), {}, device);
  }

 private:
  const ImageDataset& data_;
  RecordFinisher finisher_;
};

}  // namespace

std::shared_ptr<DeviceStage> make_pixel_stage(const ImageDataset& data) { return std::make_shared<PixelStage>(data); }

}  // namespace train::datasets::detail
