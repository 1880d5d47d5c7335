// WebDataset's shard patterns ("DIR/train-{000000..000127}.tar", "{a,b}", "A::B"): brace expansion
// as the braceexpand package does it, which webdataset calls on its URLs. No LibTorch and no file
// system access, so that trainctl (staging shards) and the datasets (reading them) share one expander.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace train {

/// Most strings one pattern may expand to: more is a typo ({0..99999999}), not a data set.
constexpr std::size_t kMaxBraceExpansion = 10'000'000;

/// The patterns of a "::"-joined list, in order, as webdataset splits its URL strings before it
/// expands braces: "a.tar::b-{0..1}.tar" gives "a.tar" and "b-{0..1}.tar"; a pattern without "::"
/// gives itself. The split ignores braces ("{a::b}" splits too, as in webdataset).
std::vector<std::string> split_pattern_list(const std::string& spec);

/// WebDataset's expansion of a shard pattern, with the rules of the braceexpand package (0.1.7):
/// - integer ranges keep a zero-padded width ("{000000..000127}" gives 000000 ... 000127, "{07..10}"
///   gives 07 08 09 10), may count down ("{3..1}") and take a step ("{0..10..2}");
/// - letter ranges over A-Z then a-z ("{a..e}", "{a..e..2}");
/// - lists ("{a,b}", "{x,}" gives "x" and "", nested "{a,b{1..2}}");
/// - several braces in one pattern multiply, left to right ("{a,b}{1..2}": a1 a2 b1 b2);
/// - a brace holding neither a range nor a list stays as written ("{a}" gives "{a}");
/// - '\' escapes the next character ("\{" is a literal brace, "\\" a backslash) and is removed.
/// Several patterns may be joined by "::" (split_pattern_list), as webdataset allows; their
/// expansions follow each other.
/// @param spec the pattern, e.g. "/data/train-{000000..000127}.tar".
/// @return the expanded strings, in braceexpand's order (duplicates kept).
/// @throws train::ConfigError naming the pattern for unbalanced braces, a range bound too large
///   for 64 bits, or more than kMaxBraceExpansion strings.
std::vector<std::string> expand_braces(const std::string& spec);

}  // namespace train
