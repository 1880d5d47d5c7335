// The IDX files' header, size and label checks, shared by the reader that loads a split whole
// (idx.cpp) and the one that maps it for the loader (idx_stream.cpp), so both say the same. Private.
#pragma once

#include <cstdint>
#include <string>

namespace train::datasets::detail {

/// What an IDX images file's header says.
struct IdxImages {
  uint64_t count = 0, rows = 0, cols = 0;
};

/// Checks an images file of `size` bytes at `bytes` (its header, dimensions, and a body of
/// count x rows x cols bytes) and returns its header.
/// @throws train::DataError naming `path`: a header cut short, a wrong magic number, impossible
///   dimensions, a truncated or oversized body.
IdxImages check_idx_images(const uint8_t* bytes, uint64_t size, const std::string& path);

/// Checks the labels file of `count` images (its header, its size, every label in 0..9).
/// @throws train::DataError naming `labels_path` (and `images_path` for a count mismatch).
void check_idx_labels(const uint8_t* bytes, uint64_t size, const std::string& labels_path,
                      const std::string& images_path, uint64_t count);

}  // namespace train::datasets::detail
