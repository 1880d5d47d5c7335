// The JPEG frame walk of --decode gpu's records (gpu_records.h).
#include "gpu_records.h"

namespace train::datasets::detail {

JpegFrame jpeg_frame(const uint8_t* b, size_t n) {
  JpegFrame f;
  if (n < 4 || b[0] != 0xFF || b[1] != 0xD8) return f;
  size_t at = 2;
  while (at + 4 <= n) {
    if (b[at] != 0xFF) return f;  // not a marker where one must be
    const int marker = b[at + 1];
    if (marker == 0xFF) {  // fill bytes before a marker
      ++at;
      continue;
    }
    if (marker == 0xD8 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {  // no length
      at += 2;
      continue;
    }
    const size_t length = (size_t(b[at + 2]) << 8) | b[at + 3];
    if (length < 2) return f;
    // SOF0..SOF15, except DHT (C4), JPG (C8) and DAC (CC): the frame header.
    if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC) {
      if (at + 2 + 8 > n || length < 8) return f;
      f.marker = marker;
      f.components = b[at + 2 + 7];  // length(2) precision(1) height(2) width(2) components(1)
      return f;
    }
    if (marker == 0xDA || marker == 0xD9) return f;  // a scan or the end before any frame header
    at += 2 + length;
  }
  return f;
}

}  // namespace train::datasets::detail
