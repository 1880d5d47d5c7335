// A restricted reader for CIFAR-10's Python batches (cifar-10-batches-py/data_batch_N, test_batch):
// it decodes exactly the pickle that holds {data: uint8 ndarray N x 3072, labels: [N ints], ...}
// and nothing else. No LibTorch, no Python, and nothing a pickle asks for is ever executed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace train::datasets::detail {

/// One decoded batch.
struct CifarPickleBatch {
  std::vector<uint8_t> labels;  ///< N labels in 0..9
  std::vector<uint8_t> pixels;  ///< N x 3072 bytes: R, G, B planes of 32x32, row-major
};

/// Decodes a CIFAR-10 batch pickle (protocol 2 to 5, as written by Python 2's cPickle or by
/// Python 3's pickle, keys as bytes or str). Accepts only the opcodes that structure needs and the
/// globals numpy.core.multiarray._reconstruct (or numpy._core...), numpy.ndarray, numpy.dtype and
/// _codecs.encode, each interpreted by this reader, never called.
/// @param path names the file in errors.
/// @throws train::DataError naming the file and, for an unexpected opcode or global, it and its
///   byte offset; for a wrong structure, what was found (the dict's keys, a dtype, a shape); for
///   a truncated file, where it ended; for labels outside 0..9, the index.
CifarPickleBatch decode_cifar_pickle(const std::string& path, const std::vector<uint8_t>& bytes);

}  // namespace train::datasets::detail
