// Unpacked copies of data files that can't be memory-mapped as they are (gzip has no random
// access; CIFAR-10's Python batches are pickles): written once into a cache folder, atomically,
// and reused while the source keeps its size and modification time. Private.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace train::datasets::detail {

/// Writes the unpacked bytes of the file at `source` to the open file descriptor `fd`; returns
/// how many it wrote. @throws train::DataError naming `source` for data it can't read or decode.
using Unpacker = std::function<uint64_t(const std::string& source, int fd)>;

/// The path of an unpacked copy of `source` in `cache_dir`, made with `unpack` when there is none
/// yet. The copy's name is `stem` and a 16-hex-digit key of the source's absolute path, size and
/// modification time (nanoseconds): a source changed since gets a new copy, an unchanged one its
/// old copy. A new copy is written to a file of its own (".tmp.<host>.<pid>.<n>"), flushed to disk,
/// then renamed into place, so ranks of a node (or of nodes sharing the folder) that race write
/// the same bytes and each rename replaces a whole file; a reader never sees a partial copy. One
/// log line says what was unpacked (or reused), its bytes and where. Old copies are not removed.
/// `what` names the format in that line ("gzip", "CIFAR-10 pickle").
/// @throws train::DataError naming the source (missing, unreadable, corrupt) or the cache folder
///   and file (not creatable, not writable, disk full), each with a hint.
std::string unpacked_copy(const std::string& source, const std::string& cache_dir, const std::string& stem,
                          const std::string& what, const Unpacker& unpack);

/// Unpacker for gzip files: the decompressed stream, read and written 1 MiB at a time.
/// @throws train::DataError naming the file for a corrupt or truncated archive.
uint64_t gunzip_to(const std::string& source, int fd);

/// Writes `size` bytes to `fd` (whole, despite short writes). `path` names the file in errors.
/// @throws train::DataError naming `path` on a write error (disk full, ...).
void write_all(int fd, const void* data, uint64_t size, const std::string& path);

/// Whether the file at `path` starts with gzip's magic bytes (1f 8b).
bool is_gzip(const std::string& path);

}  // namespace train::datasets::detail
