// CIFAR-10's batch files decoded and checked whole, without LibTorch: the binary version (records of
// a label byte and 3072 pixel bytes) and the Python version (pickles, read by a restricted reader
// that never runs what a pickle asks for). The dataset reader and `trainctl preflight` share them.
#pragma once

#include "train/catalog/catalog.h"

#include <cstdint>
#include <string>
#include <vector>

namespace train::cifar {

/// One decoded batch file.
struct Batch {
  std::vector<uint8_t> labels;  ///< N labels in 0..9
  std::vector<uint8_t> pixels;  ///< N x 3072 bytes: R, G, B planes of 32x32, row-major
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
};

/// Decodes a file of the binary version: whole records of 1 label byte and 3072 pixel bytes.
/// @param path names the file in errors.
/// @throws train::DataError naming the file: an empty file or partial records (with its size), a
///   label outside 0..9 (with its record).
Batch decode_binary(const std::string& path, const std::vector<uint8_t>& bytes);

/// Decodes a batch pickle (protocol 2 to 5, as written by Python 2's cPickle, by Python 3's pickle
/// with protocol 2 to 4, or by protocol 5, Python 3.14's default, where numpy writes the array
/// through numpy._core.numeric._frombuffer; keys as bytes or str). Accepts only the opcodes that
/// structure needs and the globals numpy.core.multiarray._reconstruct (or numpy._core...),
/// numpy.ndarray, numpy.dtype, numpy.core.numeric._frombuffer (or numpy._core...) and
/// _codecs.encode, each interpreted by this reader, never called.
/// @param path names the file in errors.
/// @throws train::DataError naming the file and, for an unexpected opcode or global, it and its
///   byte offset; for a wrong structure, what was found (the dict's keys, a dtype, a shape); for a
///   file cut short, where it ended ("truncated?"); for a length that runs past the end of a file
///   that otherwise ends as a pickle does, "malformed"; for labels outside 0..9, the index.
Batch decode_pickle(const std::string& path, const std::vector<uint8_t>& bytes);

/// Reads `path` and decodes it in `format` (catalog::Format::cifar_binary or cifar_pickle).
/// @throws train::DataError for an unreadable file, or as decode_binary / decode_pickle.
Batch read_batch(const std::string& path, catalog::Format format);

/// The warning for a batch file of fewer (or more) records than the official 10000 of each
/// CIFAR-10 batch (a file cut at a record boundary, or a subset made on purpose); "" for 10000.
std::string record_count_warning(const std::string& path, int64_t records);

}  // namespace train::cifar
