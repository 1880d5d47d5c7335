// JPEG through TurboJPEG (one handle per thread) and PNG through libpng (its setjmp errors turned
// into DataError), decoded from memory; the channel conversions follow Pillow's convert().
#include "train/datasets/image.h"

#include "train/base/error.h"

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cctype>
#include <csetjmp>
#include <cstdio>
#include <cstring>

namespace train::datasets {
namespace {

constexpr uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
// Larger images are refused before any allocation (Pillow refuses above 2 * 89478485 pixels).
constexpr int64_t kMaxPixels = int64_t(1) << 28;
const char* const kSkipHint = " or remove it from the data set (train --bad-samples skip goes past such samples).";

std::string dims(int width, int height) { return std::to_string(width) + "x" + std::to_string(height); }

// "12 bytes starting 'hello wo'" or "3000 bytes starting 00 00 01 BA 00 44 00 04": what a reader
// recognizes (text, a magic number) of the first 8 bytes.
std::string describe_bytes(const uint8_t* bytes, size_t n) {
  if (n == 0) return "an empty file (0 bytes)";
  const size_t k = std::min<size_t>(n, 8);
  const bool text = std::all_of(bytes, bytes + k, [](uint8_t c) { return std::isprint(c) || c == '\n' || c == '\t'; });
  std::string head;
  for (size_t i = 0; i < k; ++i) {
    if (text) {
      head += bytes[i] == '\n' ? std::string("\\n") : bytes[i] == '\t' ? std::string("\\t") : std::string(1, char(bytes[i]));
    } else {
      char hex[4];
      std::snprintf(hex, sizeof(hex), i + 1 < k ? "%02X " : "%02X", bytes[i]);
      head += hex;
    }
  }
  return std::to_string(n) + " bytes starting " + (text ? "'" + head + "'" : head);
}

// The image formats people have that we don't read, by their magic numbers.
const char* other_format(const uint8_t* b, size_t n) {
  auto starts = [&](const char* magic, size_t len, size_t at = 0) {
    return n >= at + len && std::memcmp(b + at, magic, len) == 0;
  };
  if (starts("GIF87a", 6) || starts("GIF89a", 6)) return "GIF";
  if (starts("RIFF", 4) && starts("WEBP", 4, 8)) return "WebP";
  if (starts("BM", 2)) return "BMP";
  if (starts("II*\0", 4) || starts("MM\0*", 4)) return "TIFF";
  if (starts("ftyp", 4, 4)) return "HEIF/AVIF";
  if (starts("\xff\x4f\xff\x51", 4) || starts("\0\0\0\x0cjP  ", 8)) return "JPEG 2000";
  return nullptr;
}

[[noreturn]] void throw_not_an_image(const uint8_t* bytes, size_t n, const std::string& where) {
  if (const char* fmt = other_format(bytes, n)) {
    throw DataError(where + ": expected a JPEG or PNG image, found a " + fmt + " image (" + describe_bytes(bytes, n) + ").",
                    std::string("convert it to JPEG or PNG (e.g. Image.open(f).convert('RGB').save('x.jpg', quality=95) "
                                "with Pillow),") + kSkipHint);
  }
  throw DataError(where + ": expected a JPEG or PNG image, found " + describe_bytes(bytes, n) + ".",
                  std::string("the file is not an image (a text or HTML page saved under an image's name? a partial "
                              "download?): re-copy it from its source,") + kSkipHint);
}

void check_pixels(int width, int height, const std::string& what, const std::string& where) {
  if (width <= 0 || height <= 0 || int64_t(width) * height > kMaxPixels) {
    throw DataError(where + ": expected a " + what + " image of at most " + std::to_string(kMaxPixels) +
                        " pixels with both sides positive, found one of " + dims(width, height) + ".",
                    std::string("the header is corrupt, or the image is too large to train on: shrink it,") + kSkipHint);
  }
}

uint32_t read_be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

// ---- channel conversions (Pillow's convert) ----

uint8_t luma(const uint8_t* rgb) {
  // Pillow's ImagingConvert RGB -> L: ITU-R 601-2 in 16-bit fixed point, rounded.
  return uint8_t((rgb[0] * 19595 + rgb[1] * 38470 + rgb[2] * 7471 + 0x8000) >> 16);
}

// `pixels` pixels of c_in channels (1..4) to c_out (1 or 3) channels; alpha is dropped.
void convert_channels(const uint8_t* src, int c_in, uint8_t* dst, int c_out, size_t pixels) {
  for (size_t i = 0; i < pixels; ++i, src += c_in, dst += c_out) {
    if (c_out == 3) {
      if (c_in >= 3) {
        dst[0] = src[0], dst[1] = src[1], dst[2] = src[2];
      } else {
        dst[0] = dst[1] = dst[2] = src[0];
      }
    } else {
      dst[0] = c_in >= 3 ? luma(src) : src[0];
    }
  }
}

void convert_image(Image* image, int channels) {
  if (channels == 0 || channels == image->channels) return;
  std::vector<uint8_t> out(size_t(image->height) * image->width * channels);
  convert_channels(image->pixels.data(), image->channels, out.data(), channels, size_t(image->height) * image->width);
  image->pixels.swap(out);
  image->channels = channels;
}

// ---- JPEG ----

// One TurboJPEG decompressor per thread: a handle is not safe to share, and making one per image
// costs more than decoding a small one. After a failure the handle is replaced: TurboJPEG 2.1
// leaves a decompressor whose header read failed mid-stream in that state, and the next header
// it reads comes out as 0x0.
struct JpegHandle {
  tjhandle h = nullptr;
  ~JpegHandle() { reset(); }
  void reset() {
    if (h != nullptr) tjDestroy(h);
    h = nullptr;
  }
};
thread_local JpegHandle t_jpeg;

tjhandle jpeg_handle() {
  if (t_jpeg.h == nullptr) t_jpeg.h = tjInitDecompress();
  if (t_jpeg.h == nullptr) {
    throw DataError(std::string("TurboJPEG: expected a decompressor, found none (") + tjGetErrorStr2(nullptr) + ").",
                    "the process may be out of memory.");
  }
  return t_jpeg.h;
}

struct JpegInfo {
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
};

JpegInfo jpeg_info(tjhandle h, const uint8_t* bytes, size_t n, const std::string& where) {
  JpegInfo info;
  const int rc = tjDecompressHeader3(h, bytes, static_cast<unsigned long>(n), &info.width, &info.height,
                                     &info.subsamp, &info.colorspace);
  // A file cut inside its markers may read as a header of 0x0 without an error.
  if (rc != 0 || info.width == 0 || info.height == 0) {
    const std::string msg = rc != 0 ? tjGetErrorStr2(h) : "no frame header";
    t_jpeg.reset();
    throw DataError(where + ": expected a JPEG header (its first bytes say JPEG), found one libjpeg-turbo can't read (" +
                        msg + "; " + std::to_string(n) + " bytes).",
                    std::string("the file is corrupt or cut short: re-copy it from its source,") + kSkipHint);
  }
  check_pixels(info.width, info.height, "JPEG", where);
  return info;
}

// A failed tjDecompress2: an error, or a warning. libjpeg warns, and goes on with grey pixels, where
// the data ends early or is corrupt; those are errors here. A warning about bytes between markers
// leaves every pixel decoded, so it passes, as it does in Pillow. TurboJPEG keeps the last message
// (a fatal error stops the decode, so it is the last), and reports an error that follows a warning
// as a warning.
void check_jpeg_decode(tjhandle h, const JpegInfo& info, size_t n, const std::string& where) {
  const std::string msg = tjGetErrorStr2(h);
  const bool warning = tjGetErrorCode(h) == TJERR_WARNING;
  t_jpeg.reset();
  if (warning && msg.find("extraneous bytes") != std::string::npos) return;
  const std::string image = "a complete JPEG image of " + dims(info.width, info.height);
  if (msg.find("Premature end") != std::string::npos) {
    throw DataError(where + ": expected " + image + ", found one that ends early, after " + std::to_string(n) +
                        " bytes (libjpeg-turbo: " + msg + ").",
                    std::string("the file is truncated (an interrupted download or copy?): re-copy it from its source,") +
                        kSkipHint);
  }
  throw DataError(where + ": expected " + image + ", found corrupt data in it (libjpeg-turbo: " + msg + ").",
                  std::string("the file is damaged: re-copy it from its source,") + kSkipHint);
}

// Adobe's CMYK, as Photoshop writes it (stored inverted), to RGB as Pillow converts "CMYK;I".
void cmyk_to_rgb(std::vector<uint8_t>* pixels, size_t count) {
  auto muldiv255 = [](int a, int b) {
    const int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
  };
  uint8_t* p = pixels->data();
  for (size_t i = 0; i < count; ++i) {
    const int nk = p[4 * i + 3];
    for (int c = 0; c < 3; ++c) p[3 * i + c] = uint8_t(std::clamp(nk - muldiv255(255 - p[4 * i + c], nk), 0, 255));
  }
  pixels->resize(count * 3);
}

void decode_jpeg(const uint8_t* bytes, size_t n, const std::string& where, int channels, int scale_denom,
                 Image* out) {
  tjhandle h = jpeg_handle();
  const JpegInfo info = jpeg_info(h, bytes, n, where);
  const bool cmyk = info.colorspace == TJCS_CMYK || info.colorspace == TJCS_YCCK;
  if (channels == 0) channels = info.colorspace == TJCS_GRAY ? 1 : 3;
  Image& image = *out;
  image.width = jpeg_scaled_size(info.width, scale_denom);
  image.height = jpeg_scaled_size(info.height, scale_denom);
  image.channels = channels;
  const int decoded = cmyk ? 4 : channels;
  const int format = cmyk ? TJPF_CMYK : channels == 1 ? TJPF_GRAY : TJPF_RGB;
  image.pixels.resize(size_t(image.width) * image.height * decoded);
  if (tjDecompress2(h, bytes, static_cast<unsigned long>(n), image.pixels.data(), image.width, image.width * decoded,
                    image.height, format, TJFLAG_ACCURATEDCT) != 0) {
    check_jpeg_decode(h, info, n, where);
  }
  if (cmyk) {
    cmyk_to_rgb(&image.pixels, size_t(image.width) * image.height);
    image.channels = 3;
    convert_image(&image, channels);
  }
}

// ---- PNG ----

ImageHeader png_header(const uint8_t* bytes, size_t n, const std::string& where) {
  // Signature (8), then the IHDR chunk: length (4) = 13, "IHDR", width, height, depth, colour type.
  if (n < 8 + 8 + 13 || read_be32(bytes + 8) != 13 || std::memcmp(bytes + 12, "IHDR", 4) != 0) {
    throw DataError(where + ": expected a PNG header (its signature, then a 13-byte IHDR chunk), found " +
                        (n < 29 ? "a file of " + std::to_string(n) + " bytes" : std::string("another first chunk")) + ".",
                    std::string("the file is corrupt or cut short: re-copy it from its source,") + kSkipHint);
  }
  ImageHeader header;
  header.format = ImageFormat::png;
  const uint32_t w = read_be32(bytes + 16), h = read_be32(bytes + 20);
  check_pixels(w > 0x7fffffffu ? -1 : int(w), h > 0x7fffffffu ? -1 : int(h), "PNG", where);
  header.width = int(w), header.height = int(h);
  switch (bytes[25]) {  // colour type
    case 0: header.channels = 1; break;
    case 2: case 3: header.channels = 3; break;
    case 4: header.channels = 2; break;
    case 6: header.channels = 4; break;
    default:
      throw DataError(where + ": expected a PNG colour type of 0, 2, 3, 4 or 6, found " + std::to_string(bytes[25]) + ".",
                      std::string("the header is corrupt: re-copy the file from its source,") + kSkipHint);
  }
  return header;
}

// libpng's state for one decode. libpng reports errors by longjmp back to png_run's setjmp, so the
// frame between holds nothing with a destructor: the pixels and row pointers live here.
struct PngRead {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  bool truncated = false;
  char error[256] = {};
  Image* image = nullptr;
  std::vector<png_bytep> rows;
};

void png_read_memory(png_structp png, png_bytep out, size_t length) {
  auto* r = static_cast<PngRead*>(png_get_io_ptr(png));
  if (length > r->size - r->pos) {
    r->truncated = true;
    png_error(png, "the data ends before the image does");
  }
  std::memcpy(out, r->data + r->pos, length);
  r->pos += length;
}

void png_on_error(png_structp png, png_const_charp message) {
  auto* r = static_cast<PngRead*>(png_get_error_ptr(png));
  std::snprintf(r->error, sizeof(r->error), "%s", message);
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}  // e.g. a known-bad sRGB profile: the pixels are fine

// Decodes into r->image at 8 bits, palette expanded, as stored otherwise; false on libpng's error.
bool png_run(png_structp png, png_infop info, PngRead* r) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_read_fn(png, r, png_read_memory);
  png_read_info(png, info);
  const int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  if (depth == 16) png_set_strip_16(png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  Image* image = r->image;
  image->width = int(png_get_image_width(png, info));
  image->height = int(png_get_image_height(png, info));
  image->channels = png_get_channels(png, info);
  const size_t row_bytes = size_t(image->width) * image->channels;
  image->pixels.resize(row_bytes * image->height);
  r->rows.resize(image->height);
  for (int y = 0; y < image->height; ++y) r->rows[y] = image->pixels.data() + y * row_bytes;
  png_read_image(png, r->rows.data());
  return true;
}

void decode_png(const uint8_t* bytes, size_t n, const std::string& where, int channels, Image* out) {
  const ImageHeader header = png_header(bytes, n, where);  // checks the size before libpng allocates
  PngRead r;
  r.data = bytes, r.size = n, r.image = out;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, png_on_error, png_on_warning);
  png_infop info = png != nullptr ? png_create_info_struct(png) : nullptr;
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    throw DataError(where + ": expected libpng to start a decode, found it out of memory.", "free memory on the node.");
  }
  const bool ok = png_run(png, info, &r);  // may add an alpha channel for a tRNS chunk, dropped below
  png_destroy_read_struct(&png, &info, nullptr);
  const std::string image_desc = "a complete PNG image of " + dims(header.width, header.height);
  if (!ok && r.truncated) {
    throw DataError(where + ": expected " + image_desc + ", found one that ends early, after " + std::to_string(n) +
                        " bytes (libpng: " + r.error + ").",
                    std::string("the file is truncated (an interrupted download or copy?): re-copy it from its source,") +
                        kSkipHint);
  }
  if (!ok) {
    throw DataError(where + ": expected " + image_desc + ", found corrupt data in it (libpng: " + r.error + ").",
                    std::string("the file is damaged: re-copy it from its source,") + kSkipHint);
  }
  convert_image(out, channels == 0 ? header.channels : channels);
}

void check_arguments(int channels, int scale_denom, const std::string& where) {
  if (channels != 0 && channels != 1 && channels != 3) {
    throw ConfigError(where + ": decode_image: expected channels 0 (as stored), 1 (grey) or 3 (RGB), found " +
                          std::to_string(channels) + ".",
                      "ask for 1 or 3 channels; the model's first layer decides which.");
  }
  if (scale_denom != 1 && scale_denom != 2 && scale_denom != 4 && scale_denom != 8) {
    throw ConfigError(where + ": decode_image: expected a JPEG scale of 1/1, 1/2, 1/4 or 1/8, found 1/" +
                          std::to_string(scale_denom) + ".",
                      "libjpeg-turbo's DCT scaling goes in powers of two down to 1/8.");
  }
}

}  // namespace

const char* image_format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::jpeg: return "JPEG";
    case ImageFormat::png: return "PNG";
    default: return "unknown";
  }
}

ImageFormat sniff_image(const uint8_t* bytes, size_t n) {
  if (n >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff) return ImageFormat::jpeg;
  if (n >= 8 && std::memcmp(bytes, kPngSignature, 8) == 0) return ImageFormat::png;
  return ImageFormat::unknown;
}

ImageHeader read_image_header(const uint8_t* bytes, size_t n, const std::string& where) {
  switch (sniff_image(bytes, n)) {
    case ImageFormat::jpeg: {
      const JpegInfo info = jpeg_info(jpeg_handle(), bytes, n, where);
      return {ImageFormat::jpeg, info.height, info.width, info.colorspace == TJCS_GRAY ? 1 : 3};
    }
    case ImageFormat::png: return png_header(bytes, n, where);
    default: throw_not_an_image(bytes, n, where);
  }
}

bool image_ends_whole(ImageFormat format, const uint8_t* tail, size_t n) {
  if (format == ImageFormat::jpeg) {
    for (size_t i = n; i >= 2 && n - i < 64; --i) {
      if (tail[i - 2] == 0xFF && tail[i - 1] == 0xD9) return true;
    }
    return false;
  }
  static const uint8_t kIend[8] = {'I', 'E', 'N', 'D', 0xAE, 0x42, 0x60, 0x82};
  return format == ImageFormat::png && n >= 8 && std::memcmp(tail + n - 8, kIend, 8) == 0;
}

int jpeg_scaled_size(int size, int scale_denom) { return (size + scale_denom - 1) / scale_denom; }

Image decode_image(const uint8_t* bytes, size_t n, const std::string& where, int channels, int scale_denom) {
  Image image;
  decode_image_into(bytes, n, where, &image, channels, scale_denom);
  return image;
}

void decode_image_into(const uint8_t* bytes, size_t n, const std::string& where, Image* out, int channels,
                       int scale_denom) {
  check_arguments(channels, scale_denom, where);
  switch (sniff_image(bytes, n)) {
    case ImageFormat::jpeg: return decode_jpeg(bytes, n, where, channels, scale_denom, out);
    case ImageFormat::png: return decode_png(bytes, n, where, channels, out);
    default: throw_not_an_image(bytes, n, where);
  }
}

}  // namespace train::datasets
