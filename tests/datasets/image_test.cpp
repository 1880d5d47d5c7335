// The JPEG and PNG decoders (datasets/src/image.cpp) on images this test writes: headers read
// without decoding, every PNG colour type, reduced-DCT sizes, one handle per thread, each bad input's
// message, and the conversions against Pillow's own where the venv has it.
#include "error_checks.h"
#include "image_files.h"
#include "test_util.h"
#include "train/base/error.h"
#include "train/datasets/image.h"

#include <gtest/gtest.h>

#include <sstream>
#include <thread>

namespace train::test {

using train::datasets::decode_image;
using train::datasets::Image;
using train::datasets::ImageFormat;
using train::datasets::read_image_header;

namespace {

Image decode(const std::vector<uint8_t>& b, int channels = 0, int scale = 1) {
  return decode_image(b.data(), b.size(), "test.img", channels, scale);
}

double mean_abs_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  EXPECT_EQ(a.size(), b.size());
  double sum = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) sum += std::abs(int(a[i]) - int(b[i]));
  return a.empty() ? 0 : sum / a.size();
}

TEST(ImageDecode, JpegHeaderAndPixels) {
  const Image rgb = train::test::make_image(75, 100, 3);
  const auto jpeg = train::test::encode_jpeg(rgb, /*quality=*/95, TJSAMP_444);
  const auto h = read_image_header(jpeg.data(), jpeg.size(), "a.jpg");
  EXPECT_EQ(h.format, ImageFormat::jpeg);
  EXPECT_EQ(h.height, 75);
  EXPECT_EQ(h.width, 100);
  EXPECT_EQ(h.channels, 3);
  const Image back = decode(jpeg);
  ASSERT_EQ(back.height, 75);
  ASSERT_EQ(back.width, 100);
  ASSERT_EQ(back.channels, 3);
  EXPECT_LT(mean_abs_diff(back.pixels, rgb.pixels), 6.0);  // quality 95 on noise: a few levels of loss
  // A grey JPEG is one channel as stored, and three equal ones as RGB.
  const Image grey = train::test::make_image(40, 30, 1);
  const auto gjpeg = train::test::encode_jpeg(grey, 95);
  EXPECT_EQ(read_image_header(gjpeg.data(), gjpeg.size(), "g.jpg").channels, 1);
  const Image g1 = decode(gjpeg), g3 = decode(gjpeg, 3);
  ASSERT_EQ(g1.channels, 1);
  ASSERT_EQ(g3.channels, 3);
  for (size_t i = 0; i < g1.pixels.size(); ++i) {
    ASSERT_EQ(g3.pixels[3 * i], g1.pixels[i]);
    ASSERT_EQ(g3.pixels[3 * i + 1], g1.pixels[i]);
    ASSERT_EQ(g3.pixels[3 * i + 2], g1.pixels[i]);
  }
  // A colour JPEG as grey: its luma, close to the RGB decode's weighted sum.
  const Image y = decode(jpeg, 1);
  ASSERT_EQ(y.channels, 1);
  double diff = 0;
  for (size_t i = 0; i < y.pixels.size(); ++i) {
    const double l = 0.299 * back.pixels[3 * i] + 0.587 * back.pixels[3 * i + 1] + 0.114 * back.pixels[3 * i + 2];
    diff += std::abs(l - y.pixels[i]);
  }
  EXPECT_LT(diff / y.pixels.size(), 1.0);
}

TEST(ImageDecode, JpegScaledDecodeSizes) {
  const auto jpeg = train::test::encode_jpeg(train::test::make_image(375, 500, 3), 90);
  for (int d : {1, 2, 4, 8}) {
    const Image im = decode(jpeg, 3, d);
    EXPECT_EQ(im.width, (500 + d - 1) / d) << "1/" << d;
    EXPECT_EQ(im.height, (375 + d - 1) / d) << "1/" << d;
    EXPECT_EQ(train::datasets::jpeg_scaled_size(375, d), im.height);
  }
  // A scaled decode is the image at lower resolution: each pixel near its d x d block's mean.
  const Image full = decode(jpeg, 3), half = decode(jpeg, 3, 2);
  double diff = 0;
  int n = 0;
  for (int y = 0; y < 187; ++y) {
    for (int x = 0; x < 250; ++x) {
      for (int c = 0; c < 3; ++c) {
        double m = 0;
        for (int k = 0; k < 4; ++k) m += full.pixels[((2 * y + k / 2) * 500 + 2 * x + k % 2) * 3 + c];
        diff += std::abs(m / 4 - half.pixels[(y * 250 + x) * 3 + c]);
        ++n;
      }
    }
  }
  EXPECT_LT(diff / n, 4.0);
  expect_message(error_of<train::ConfigError>([&] { decode(jpeg, 3, 3); }), {"test.img", "1/3"});
  expect_message(error_of<train::ConfigError>([&] { decode(jpeg, 2); }), {"test.img", "channels", "found 2"});
}

// Grey, grey + alpha, RGB, RGBA (8 and 16 bits), 1-bit grey, a palette with transparency and an
// interlaced file: as stored, and as 1 and 3 channels where the conversion is a copy.
TEST(ImageDecode, PngColourTypes) {
  using train::test::PngSpec;
  const int h = 9, w = 13;
  for (int channels : {1, 2, 3, 4}) {
    const Image im = train::test::make_image(h, w, channels, 7 + channels);
    for (bool interlaced : {false, true}) {
      PngSpec spec;
      spec.color_type = std::vector<int>{0, PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA, PNG_COLOR_TYPE_RGB,
                                         PNG_COLOR_TYPE_RGB_ALPHA}[channels];
      spec.interlaced = interlaced;
      const auto png = train::test::write_png(im.pixels, h, w, spec);
      const auto hd = read_image_header(png.data(), png.size(), "a.png");
      EXPECT_EQ(hd.format, ImageFormat::png);
      EXPECT_EQ(hd.channels, channels);
      EXPECT_EQ(hd.height, h);
      EXPECT_EQ(hd.width, w);
      EXPECT_EQ(decode(png).pixels, im.pixels) << channels << " channels, interlaced " << interlaced;
      const Image rgb = decode(png, 3);
      for (int i = 0; i < h * w; ++i) {
        for (int c = 0; c < 3; ++c) {
          ASSERT_EQ(rgb.pixels[3 * i + c], im.pixels[channels * i + (channels >= 3 ? c : 0)]) << channels;
        }
      }
    }
  }
  // 16 bits: the high byte of each sample.
  std::vector<uint8_t> samples16(h * w * 3 * 2);
  for (size_t i = 0; i < samples16.size(); ++i) samples16[i] = uint8_t(i * 37 + 11);
  PngSpec s16;
  s16.bit_depth = 16;
  const Image d16 = decode(train::test::write_png(samples16, h, w, s16));
  ASSERT_EQ(d16.pixels.size(), size_t(h * w * 3));
  for (size_t i = 0; i < d16.pixels.size(); ++i) ASSERT_EQ(d16.pixels[i], samples16[2 * i + 1]);
  // 1-bit grey: 0 and 255.
  std::vector<uint8_t> bits(h * w);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = (i % 3 == 0);
  PngSpec s1;
  s1.color_type = PNG_COLOR_TYPE_GRAY;
  s1.bit_depth = 1;
  const Image d1 = decode(train::test::write_png(bits, h, w, s1));
  for (size_t i = 0; i < bits.size(); ++i) ASSERT_EQ(d1.pixels[i], bits[i] ? 255 : 0);
}

TEST(ImageDecode, PngPalette) {
  train::test::PngSpec spec;
  spec.color_type = PNG_COLOR_TYPE_PALETTE;
  spec.palette = {{255, 0, 0}, {0, 128, 255}, {10, 20, 30}};
  spec.trns = {255, 0, 128};  // transparency is not alpha here: RGB as Pillow's convert("RGB")
  const std::vector<uint8_t> idx = {0, 1, 2, 2, 1, 0};
  const auto png = train::test::write_png(idx, 2, 3, spec);
  EXPECT_EQ(read_image_header(png.data(), png.size(), "p.png").channels, 3);
  const Image im = decode(png);
  ASSERT_EQ(im.channels, 3);
  for (size_t i = 0; i < idx.size(); ++i) {
    EXPECT_EQ(im.pixels[3 * i], spec.palette[idx[i]].red);
    EXPECT_EQ(im.pixels[3 * i + 1], spec.palette[idx[i]].green);
    EXPECT_EQ(im.pixels[3 * i + 2], spec.palette[idx[i]].blue);
  }
}

TEST(ImageDecode, ThreadsDecodeTheSameBits) {
  const auto jpeg = train::test::encode_jpeg(train::test::make_image(120, 160, 3), 90);
  const auto png = train::test::encode_png(train::test::make_image(50, 60, 4));
  const Image ref_j = decode(jpeg), ref_p = decode(png, 3);
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        bad[t] += decode(jpeg).pixels != ref_j.pixels;
        bad[t] += decode(png, 3).pixels != ref_p.pixels;
        bad[t] += decode(jpeg, 3, 2).height != 60;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
}

// A failed header read or decode leaves the thread's decoder ready for the next image.
TEST(ImageDecode, AFailureLeavesTheThreadsDecoderClean) {
  const auto jpeg = train::test::encode_jpeg(train::test::make_image(64, 96, 3), 90);
  const Image want = decode(jpeg);
  // Cut in the markers (the header read fails), and in the scan (the decode fails).
  for (size_t cut : {size_t(20), size_t(300), jpeg.size() / 2}) {
    const std::vector<uint8_t> head(jpeg.begin(), jpeg.begin() + cut);
    EXPECT_THROW(decode(head), train::DataError) << cut;
    if (cut < jpeg.size() / 2) EXPECT_THROW(read_image_header(head.data(), head.size(), "x.jpg"), train::DataError) << cut;
    EXPECT_EQ(read_image_header(jpeg.data(), jpeg.size(), "x.jpg").width, 96) << "after a cut at " << cut;
    EXPECT_EQ(decode(jpeg).pixels, want.pixels) << "after a cut at " << cut;
  }
}

TEST(ImageDecode, NotAnImageIsNamed) {
  const std::string text = "hello world!";
  const std::vector<uint8_t> hello(text.begin(), text.end());
  expect_message(error_of([&] { decode_image(hello.data(), hello.size(), "DIR/train/cat/x.jpg"); }),
                 {"DIR/train/cat/x.jpg: expected a JPEG or PNG image, found 12 bytes starting 'hello wo'."});
  expect_message(error_of([&] { read_image_header(hello.data(), hello.size(), "x.jpg"); }), {"x.jpg", "'hello wo'"});
  const std::vector<uint8_t> gif = {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0, 0, 0};
  expect_message(error_of([&] { decode_image(gif.data(), gif.size(), "s.tar: member 7.jpg"); }),
                 {"s.tar: member 7.jpg", "found a GIF image (13 bytes starting 47 49 46 38 39 61 01 00)", "convert"});
  expect_message(error_of([&] { decode_image(gif.data(), 0, "empty.png"); }), {"empty.png", "an empty file (0 bytes)"});
}

TEST(ImageDecode, TruncatedJpegIsAnErrorNotGrey) {
  const auto jpeg = train::test::encode_jpeg(train::test::make_image(64, 96, 3), 90);
  const std::vector<uint8_t> cut(jpeg.begin(), jpeg.begin() + jpeg.size() * 2 / 3);
  const std::string what = error_of([&] { decode_image(cut.data(), cut.size(), "DIR/a/cut.jpg", 3); });
  expect_message(what, {"DIR/a/cut.jpg: expected a complete JPEG image of 96x64, found one that ends early, after " +
                            std::to_string(cut.size()) + " bytes",
                        "Premature end", "truncated"});
  // Cut inside the header: the header read says so.
  const std::vector<uint8_t> head(jpeg.begin(), jpeg.begin() + 20);
  expect_message(error_of([&] { read_image_header(head.data(), head.size(), "h.jpg"); }),
                 {"h.jpg: expected a JPEG header", "20 bytes"});
}

// Damage libjpeg notices: a marker inside the scan (a restart marker in an image without restart
// intervals), and bytes of 0xFF (an unknown marker). JPEG has no checksum: damage that still parses
// as entropy-coded data decodes to wrong pixels in this decoder as in any other.
TEST(ImageDecode, CorruptJpegIsAnError) {
  const auto jpeg = train::test::encode_jpeg(train::test::make_image(64, 96, 3), 90);
  auto rst = jpeg;
  rst[rst.size() / 2] = 0xff;
  rst[rst.size() / 2 + 1] = 0xd3;
  expect_message(error_of([&] { decode_image(rst.data(), rst.size(), "bad.jpg", 3); }),
                 {"bad.jpg: expected a complete JPEG image of 96x64, found corrupt data in it (libjpeg-turbo: Corrupt "
                  "JPEG data: premature end of data segment).",
                  "damaged"});
  auto ff = jpeg;
  std::fill(ff.begin() + ff.size() / 2, ff.begin() + ff.size() / 2 + 100, 0xff);
  expect_message(error_of([&] { decode_image(ff.data(), ff.size(), "ff.jpg", 3); }),
                 {"ff.jpg: expected a complete JPEG image of 96x64, found corrupt data in it (libjpeg-turbo: "});
}

TEST(ImageDecode, ExtraneousBytesBeforeAMarkerPass) {
  const auto jpeg = train::test::encode_jpeg(train::test::make_image(32, 48, 3), 90);
  ASSERT_EQ(jpeg[jpeg.size() - 2], 0xff);
  ASSERT_EQ(jpeg[jpeg.size() - 1], 0xd9);
  auto padded = jpeg;
  padded.insert(padded.end() - 2, {0x12, 0x34, 0x56});  // junk between the scan and EOI
  EXPECT_EQ(decode(padded).pixels, decode(jpeg).pixels);
}

TEST(ImageDecode, BrokenPngsAreNamed) {
  const auto png = train::test::encode_png(train::test::make_image(40, 50, 3));
  const std::vector<uint8_t> cut(png.begin(), png.begin() + png.size() / 2);
  expect_message(error_of([&] { decode_image(cut.data(), cut.size(), "DIR/b/cut.png"); }),
                 {"DIR/b/cut.png: expected a complete PNG image of 50x40, found one that ends early, after " +
                      std::to_string(cut.size()) + " bytes",
                  "truncated"});
  auto bad = png;
  bad[bad.size() / 2] ^= 0x5a;  // inside IDAT: its CRC no longer matches
  expect_message(error_of([&] { decode_image(bad.data(), bad.size(), "bad.png"); }),
                 {"bad.png: expected a complete PNG image of 50x40, found corrupt data in it (libpng: "});
  const std::vector<uint8_t> sig_only(png.begin(), png.begin() + 12);
  expect_message(error_of([&] { read_image_header(sig_only.data(), sig_only.size(), "s.png"); }),
                 {"s.png: expected a PNG header", "a file of 12 bytes"});
}

// Pillow's convert("RGB") and convert("L") of the same files, byte for byte: RGB, RGBA, grey +
// alpha, a palette, and a CMYK JPEG (Adobe's inverted CMYK, as Photoshop writes it).
TEST(ImageDecode, ConversionsMatchPillow) {
  const std::string py = train::test::venv_python();
  if (py.empty()) GTEST_SKIP() << "no .venv with torch and Pillow (scripts/setup.sh makes it)";
  train::test::TempDir dir("image-pillow");
  std::vector<std::string> files;
  auto add = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
    train::test::write_file(dir.file(name), bytes);
    files.push_back(name);
  };
  add("rgb.png", train::test::encode_png(train::test::make_image(21, 17, 3, 3)));
  add("rgba.png", train::test::encode_png(train::test::make_image(21, 17, 4, 4)));
  add("ga.png", train::test::encode_png(train::test::make_image(21, 17, 2, 5)));
  train::test::PngSpec pal;
  pal.color_type = PNG_COLOR_TYPE_PALETTE;
  for (int i = 0; i < 16; ++i) pal.palette.push_back({uint8_t(i * 16), uint8_t(255 - i * 9), uint8_t(i * i)});
  std::vector<uint8_t> idx(21 * 17);
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = uint8_t(i * 7 % 16);
  add("pal.png", train::test::write_png(idx, 21, 17, pal));
  add("cmyk.jpg", train::test::encode_jpeg(train::test::make_image(24, 32, 4, 6), 95, TJSAMP_444));
  // Pillow writes each file's RGB and L bytes next to it.
  const char* script =
      "import sys\nfrom PIL import Image\nfor f in sys.argv[2:]:\n"
      "    im = Image.open(sys.argv[1] + '/' + f)\n"
      "    for m in ('RGB', 'L'):\n"
      "        open(sys.argv[1] + '/' + f + '.' + m, 'wb').write(im.convert(m).tobytes())\n";
  std::vector<std::string> argv = {py, "-c", script, dir.path()};
  argv.insert(argv.end(), files.begin(), files.end());
  const auto r = train::test::run_program(argv, {}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const auto& f : files) {
    const auto bytes = train::test::read_bytes(dir.file(f));
    EXPECT_EQ(decode(bytes, 3).pixels, train::test::read_bytes(dir.file(f + ".RGB"))) << f << " as RGB";
    if (f != "cmyk.jpg") {  // a JPEG's grey is its own luma, not Pillow's sum of RGB
      EXPECT_EQ(decode(bytes, 1).pixels, train::test::read_bytes(dir.file(f + ".L"))) << f << " as L";
    }
  }
}

}  // namespace
}  // namespace train::test
