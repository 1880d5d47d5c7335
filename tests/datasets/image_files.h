// What the image tests write and read: JPEGs through TurboJPEG, PNGs of every colour type through
// libpng, an ImageSource held in memory, and scikit-image's photos when the venv has them.
#pragma once

#include "train/datasets/image.h"
#include "train/datasets/image_source.h"

#include <png.h>
#include <turbojpeg.h>

#include <gtest/gtest.h>

#include <csetjmp>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace train::test {

using datasets::EncodedImage;
using datasets::Image;

/// An image of `channels` filled with smooth gradients and some noise (a photo's texture, roughly).
inline Image make_image(int height, int width, int channels, uint32_t seed = 1) {
  Image im{height, width, channels, std::vector<uint8_t>(size_t(height) * width * channels)};
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> noise(-12, 12);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) {
        const int v = (x * 255 / std::max(width - 1, 1) * (c + 1) + y * 255 / std::max(height - 1, 1) * (3 - c)) / 4;
        im.pixels[(size_t(y) * width + x) * channels + c] = uint8_t(std::clamp(v + noise(gen), 0, 255));
      }
    }
  }
  return im;
}

/// `image` (1 grey, 3 RGB or 4 CMYK channels) as a JPEG of `quality` with chroma subsampling
/// `subsamp`; `flags` adds TurboJPEG's, e.g. TJFLAG_PROGRESSIVE.
inline std::vector<uint8_t> encode_jpeg(const Image& image, int quality = 90, int subsamp = TJSAMP_420, int flags = 0) {
  tjhandle h = tjInitCompress();
  const int format = image.channels == 1 ? TJPF_GRAY : image.channels == 3 ? TJPF_RGB : TJPF_CMYK;
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(h, image.pixels.data(), image.width, 0, image.height, format, &out, &size,
                             image.channels == 1 ? TJSAMP_GRAY : subsamp, quality, TJFLAG_ACCURATEDCT | flags);
  if (rc != 0) {
    std::string msg = tjGetErrorStr2(h);
    tjDestroy(h);
    throw std::runtime_error("tjCompress2: " + msg);
  }
  std::vector<uint8_t> bytes(out, out + size);
  tjFree(out);
  tjDestroy(h);
  return bytes;
}

/// What write_png() writes: IHDR's colour type and bit depth, a palette for colour type 3, an
/// optional tRNS chunk, and Adam7 interlacing.
struct PngSpec {
  int color_type = PNG_COLOR_TYPE_RGB;
  int bit_depth = 8;
  bool interlaced = false;
  std::vector<png_color> palette;  // colour type 3
  std::vector<uint8_t> trns;       // palette alpha (colour type 3)
};

namespace detail {
inline void png_append(png_structp png, png_bytep data, size_t n) {
  auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}
inline void png_flush(png_structp) {}
// libpng's setjmp in a frame with nothing to destroy; false on its error.
inline bool png_write_rows(png_structp png, png_infop info, const PngSpec& spec, int width, int height,
                           png_bytep* rows, std::vector<uint8_t>* out) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_write_fn(png, out, png_append, png_flush);
  png_set_IHDR(png, info, width, height, spec.bit_depth, spec.color_type,
               spec.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!spec.palette.empty()) png_set_PLTE(png, info, spec.palette.data(), int(spec.palette.size()));
  if (!spec.trns.empty()) png_set_tRNS(png, info, spec.trns.data(), int(spec.trns.size()), nullptr);
  png_write_info(png, info);
  if (spec.bit_depth < 8) png_set_packing(png);  // rows hold one sample a byte
  if (spec.bit_depth == 16) png_set_swap(png);   // rows hold little-endian uint16
  png_write_image(png, rows);
  png_write_end(png, info);
  return true;
}
}  // namespace detail

/// A PNG of `samples`: height rows of width * channels samples (bytes, or little-endian uint16
/// pairs for 16 bits; palette indices for colour type 3), channels as the colour type has them.
inline std::vector<uint8_t> write_png(const std::vector<uint8_t>& samples, int height, int width, const PngSpec& spec) {
  const int channels = spec.color_type == PNG_COLOR_TYPE_GRAY || spec.color_type == PNG_COLOR_TYPE_PALETTE ? 1
                       : spec.color_type == PNG_COLOR_TYPE_GRAY_ALPHA                                      ? 2
                       : spec.color_type == PNG_COLOR_TYPE_RGB                                             ? 3
                                                                                                           : 4;
  const size_t row_bytes = size_t(width) * channels * (spec.bit_depth == 16 ? 2 : 1);
  if (samples.size() != row_bytes * height) throw std::runtime_error("write_png: sample count");
  std::vector<png_bytep> rows(height);
  for (int y = 0; y < height; ++y) rows[y] = const_cast<png_bytep>(samples.data() + y * row_bytes);
  std::vector<uint8_t> out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  const bool ok = detail::png_write_rows(png, info, spec, width, height, rows.data(), &out);
  png_destroy_write_struct(&png, &info);
  if (!ok) throw std::runtime_error("write_png: libpng failed");
  return out;
}

/// An 8-bit image as a PNG of its own colour type (1 grey, 2 grey + alpha, 3 RGB, 4 RGBA).
inline std::vector<uint8_t> encode_png(const Image& image) {
  static const int kTypes[] = {0, PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA, PNG_COLOR_TYPE_RGB,
                               PNG_COLOR_TYPE_RGB_ALPHA};
  PngSpec spec;
  spec.color_type = kTypes[image.channels];
  return write_png(image.pixels, image.height, image.width, spec);
}

/// Images held in memory, each with a label and a made-up path: a source for ImageDataset's tests.
class MemorySource : public datasets::ImageSource {
 public:
  void add(std::vector<uint8_t> bytes, int64_t label, const std::string& where) {
    images_.push_back(EncodedImage{std::move(bytes), label, where});
  }
  void set_classes(std::vector<std::string> classes) { classes_ = std::move(classes); }
  int64_t size() const override { return int64_t(images_.size()); }
  EncodedImage read(int64_t index) const override { return images_.at(size_t(index)); }
  const std::vector<std::string>& classes() const override { return classes_; }
  std::string name() const override { return "memory:test"; }

 private:
  std::vector<EncodedImage> images_;
  std::vector<std::string> classes_;
};

/// The bytes of a file, or empty when it can't be read.
inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

/// scikit-image's photo `name` (e.g. "chelsea.png") from the repo's venv, or "" when absent.
inline std::string skimage_photo(const std::string& name) {
  const std::string path = std::string(TRAIN_SOURCE_DIR) + "/.venv/lib/python3.11/site-packages/skimage/data/" + name;
  std::ifstream f(path);
  return f.good() ? path : "";
}

}  // namespace train::test
