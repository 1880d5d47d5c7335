// Decoding JPEG (libjpeg-turbo's TurboJPEG) and PNG (libpng) images from memory into 8-bit pixels,
// with a cheap header read (size and channels without decoding) and JPEG's reduced-DCT scaling.
// No LibTorch here; image_transform.h turns pixels into a model's input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace train::datasets {

/// A decoded image: 8-bit pixels, rows top to bottom, each pixel's channels together (HWC).
struct Image {
  int height = 0;
  int width = 0;
  int channels = 0;             ///< 1 grey, 2 grey + alpha, 3 RGB, 4 RGBA
  std::vector<uint8_t> pixels;  ///< height * width * channels bytes
};

/// The encodings decode_image() reads.
enum class ImageFormat { unknown, jpeg, png };

/// "JPEG", "PNG" or "unknown".
const char* image_format_name(ImageFormat format);

/// The format named by the first bytes (JPEG: FF D8 FF; PNG: its 8-byte signature); unknown for
/// anything else, and for fewer bytes than the signature.
ImageFormat sniff_image(const uint8_t* bytes, size_t n);

/// What an image's header says, read without decoding its pixels.
struct ImageHeader {
  ImageFormat format = ImageFormat::unknown;
  int height = 0;
  int width = 0;
  /// As stored: JPEG 1 (grey) or 3 (colour: YCbCr, RGB, and CMYK, which decodes to RGB); PNG 1
  /// (grey), 2 (grey + alpha), 3 (RGB, or a palette) or 4 (RGB + alpha).
  int channels = 0;
};

/// Reads the header of a JPEG (its markers up to the frame header) or a PNG (its IHDR chunk).
/// @param where the input, for messages ("DIR/train/cat/001.jpg").
/// @throws train::DataError naming `where`: neither JPEG nor PNG (with what the bytes start with,
///   and the format when it is a known other one: GIF, WebP, BMP, TIFF), or a header that can't be
///   parsed.
ImageHeader read_image_header(const uint8_t* bytes, size_t n, const std::string& where);

/// Whether `tail` (an image's last `n` bytes, or all of them) ends as a complete image of `format`
/// ends: a JPEG's EOI marker (FF D9, possibly followed by up to 62 bytes of padding some writers
/// add), a PNG's IEND chunk. A truncated file fails it without being decoded.
bool image_ends_whole(ImageFormat format, const uint8_t* tail, size_t n);

/// The side of a JPEG decoded at 1/`scale_denom`, as TurboJPEG computes it: ceil(size / denom).
int jpeg_scaled_size(int size, int scale_denom);

/// Decodes a JPEG or PNG held in memory. Safe to call from several threads at once (each thread
/// has its own TurboJPEG handle).
///
/// @param where the input, for messages.
/// @param channels 0: as stored (ImageHeader::channels; a palette PNG gives RGB, and a
///   transparency chunk (tRNS) is not turned into alpha); 1: grey; 3: RGB. Conversions are Pillow's convert("L") and
///   convert("RGB"): grey is copied to R, G and B; colour becomes L = (19595 R + 38470 G + 7471 B
///   + 32768) >> 16 (ITU-R 601-2, in Pillow's fixed point), except for JPEGs, whose grey is the
///   decoder's own luma channel (Y); alpha is dropped, not composited. 16-bit PNGs keep their high
///   byte, as Pillow does.
/// @param scale_denom JPEG only: decode at 1/1, 1/2, 1/4 or 1/8 of the size inside the inverse DCT
///   (TurboJPEG's scaling factors), giving jpeg_scaled_size() of each side. PNGs are decoded whole.
/// @throws train::DataError naming `where`, with what was expected and found and a hint: not a JPEG
///   or PNG; a corrupt or truncated file (libpng's error, or TurboJPEG's error or warning: a
///   premature end or corrupt entropy-coded data is an error, not grey pixels; only a warning
///   about extraneous bytes between markers, which leaves the pixels whole, is let through).
/// @throws train::ConfigError for `channels` other than 0, 1 or 3, or a `scale_denom` other than
///   1, 2, 4 or 8.
Image decode_image(const uint8_t* bytes, size_t n, const std::string& where, int channels = 0, int scale_denom = 1);

/// decode_image() into `out`, reusing its pixel buffer: no allocation when a thread decodes images
/// of the same size one after another. `out` is unspecified after a throw.
void decode_image_into(const uint8_t* bytes, size_t n, const std::string& where, Image* out, int channels = 0,
                       int scale_denom = 1);

}  // namespace train::datasets
