// Small string helpers the launcher's parsers share (SLURM output, job scripts, flags). No LibTorch.
#pragma once

#include <string>
#include <vector>

namespace train::text {

/// `s` cut at every `sep`; empty fields are kept ("a,,b" gives "a", "", "b"; "" gives one "").
std::vector<std::string> split(const std::string& s, char sep);

/// `s` without leading and trailing spaces, tabs and line ends.
std::string trim(const std::string& s);

/// Whether `s` is one or more decimal digits and nothing else.
bool all_digits(const std::string& s);

/// `v` formatted with one printf conversion, e.g. format("%.3f", 0.5) gives "0.500".
std::string format(const char* printf_format, double v);

/// The number of single-character insertions, deletions, substitutions and swaps of two
/// neighbours that turn `a` into `b` (optimal string alignment distance): "epoch" to "epochs" is 1.
std::size_t edit_distance(const std::string& a, const std::string& b);

/// The `candidates` a mistyped `word` most likely meant, for a "did you mean": those at the
/// smallest edit distance when it is small for the word's length (1 up to 7 characters, 2 beyond),
/// else those that start with `word` (3 characters or more); at most 3, in `candidates`' order;
/// none when nothing is close. Compares case-insensitively, with '_' as '-'.
std::vector<std::string> closest(const std::string& word, const std::vector<std::string>& candidates);

/// "a", "a or b", "a, b or c".
std::string or_list(const std::vector<std::string>& items);

/// The items with `sep` between them: join({"node1", "node2"}, ",") gives "node1,node2"; no
/// items give "".
std::string join(const std::vector<std::string>& items, const std::string& sep);

}  // namespace train::text
