// Small POSIX file helpers. libtorch.so exports its own (partly broken) copies of the
// std::filesystem symbols, which win symbol lookup in any process that links it (remove_all
// jumps to address 0), so code that may run next to LibTorch uses these instead.
#pragma once

#include <string>
#include <vector>

namespace train::files {

bool exists(const std::string& path);
bool is_regular_file(const std::string& path);
bool is_directory(const std::string& path);
/// "a" + "/" + "b", without doubling the slash.
std::string join(const std::string& a, const std::string& b);
/// The last component of a path.
std::string basename(const std::string& path);
/// mkdir -p. Returns "" on success, else the error text.
std::string make_dirs(const std::string& path);
/// Names (not paths) in a folder, unsorted; empty if it can't be read.
std::vector<std::string> list_dir(const std::string& dir);
/// unlink; true if the file is gone afterwards.
bool remove_file(const std::string& path);
/// rm -rf; never follows symbolic links out of the tree.
void remove_tree(const std::string& path);
/// rename(2). Returns "" on success, else the error text.
std::string rename(const std::string& from, const std::string& to);
/// Copies a regular file. Returns "" on success, else the error text.
std::string copy_file(const std::string& from, const std::string& to);
/// The whole file as bytes; "" when it can't be read (then *ok, if given, is false).
std::string read_text(const std::string& path, bool* ok = nullptr);

}  // namespace train::files
