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

}  // namespace train::text
