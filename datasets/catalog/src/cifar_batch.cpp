// CIFAR-10 batch files read whole: the binary version's records here, the pickles in
// cifar_pickle.cpp. Shared by the dataset reader (train) and `trainctl preflight`.
#include "train/catalog/cifar_batch.h"

#include "read_open.h"

#include "train/base/error.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace train::cifar {

Batch decode_binary(const std::string& path, const std::vector<uint8_t>& bytes) {
  const int64_t record = catalog::kCifarRecordBytes;
  if (bytes.empty() || int64_t(bytes.size()) % record != 0) {
    throw DataError(path + ": expected whole records of " + std::to_string(record) + " bytes (" +
                        std::to_string(catalog::kCifarRecordsPerFile * record) + " bytes for " +
                        std::to_string(catalog::kCifarRecordsPerFile) + " records), found " +
                        std::to_string(bytes.size()) + " bytes (truncated? a record size other than 3073?).",
                    "re-extract cifar-10-binary.tar.gz.");
  }
  const int64_t records = int64_t(bytes.size()) / record;
  Batch b;
  b.labels.reserve(records);
  b.pixels.reserve(records * catalog::kCifarPixelBytes);
  for (int64_t r = 0; r < records; ++r) {
    const uint8_t* rec = bytes.data() + r * record;
    if (rec[0] >= catalog::kNumClasses) {
      throw DataError(path + ": expected labels in 0..9, found " + std::to_string(int(rec[0])) + " in record " +
                          std::to_string(r) + ".",
                      "this is not the CIFAR-10 binary version (CIFAR-100 has 2 label bytes); "
                      "re-extract cifar-10-binary.tar.gz.");
    }
    b.labels.push_back(rec[0]);
    b.pixels.insert(b.pixels.end(), rec + 1, rec + record);
  }
  return b;
}

namespace {

std::vector<uint8_t> read_bytes(const std::string& path) {
  const int fd =
      catalog::detail::open_readable(path, "check that the file exists and its filesystem is mounted on this node.");
  std::vector<uint8_t> out;
  uint8_t chunk[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw DataError(path + ": expected to read the whole file, found a read error after " + std::to_string(out.size()) +
                          " bytes (" + std::strerror(err) + ").",
                      "check the filesystem on this node, or copy the dataset again.");
    }
    if (n == 0) break;
    out.insert(out.end(), chunk, chunk + n);
  }
  ::close(fd);
  return out;
}

}  // namespace

Batch read_batch(const std::string& path, catalog::Format format) {
  const std::vector<uint8_t> bytes = read_bytes(path);
  return format == catalog::Format::cifar_pickle ? decode_pickle(path, bytes) : decode_binary(path, bytes);
}

std::string record_count_warning(const std::string& path, int64_t records) {
  if (records == catalog::kCifarRecordsPerFile) return "";
  return path + ": holds " + std::to_string(records) + " records, where each official CIFAR-10 batch holds " +
         std::to_string(catalog::kCifarRecordsPerFile) + "; all " + std::to_string(records) +
         " are used. If the file was cut short (a copy or download that stopped at a record boundary), "
         "re-extract the archive; a subset made on purpose can ignore this.";
}

}  // namespace train::cifar
