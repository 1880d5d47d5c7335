// WebDataset's shard patterns (braces.h): a port of the braceexpand package (0.1.7), which webdataset
// expands its URLs with, kept step for step so that the corner cases ("}{", "{a}", "{x,}", escapes)
// give what Python gives.
#include "train/base/braces.h"

#include <cstdint>
#include <cstdio>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "train/base/error.h"

namespace train {
namespace {

using Strings = std::vector<std::string>;

[[noreturn]] void throw_too_many(const std::string& spec, const std::string& found) {
  throw ConfigError("shard pattern '" + spec + "': expected at most " + std::to_string(kMaxBraceExpansion) +
                        " names from its braces, found " + found + ".",
                    "check the numbers in braces: {000000..000127} names 128 shards.");
}

// itertools.product over the items, left to right (the last item varies fastest).
Strings product(const std::vector<Strings>& items, const std::string& spec) {
  std::size_t count = 1;
  for (const Strings& item : items) {
    if (!item.empty() && count > kMaxBraceExpansion / item.size()) throw_too_many(spec, "more");
    count *= item.size();
  }
  Strings out{""};
  for (const Strings& item : items) {
    Strings next;
    next.reserve(out.size() * item.size());
    for (const std::string& left : out) {
      for (const std::string& right : item) next.push_back(left + right);
    }
    out = std::move(next);
  }
  return out;
}

// make_int_range: zero-padded to the longer bound's text when either bound (other than 0 or -0)
// starts with 0 or -0; a step of 0 counts as 1; the end is included in both directions.
Strings int_range(const std::string& spec, const std::string& a, const std::string& b, const std::string& step_text) {
  auto zero_led = [](const std::string& s) {
    return s != "0" && s != "-0" && (s.rfind('0', 0) == 0 || s.rfind("-0", 0) == 0);
  };
  const int padding = zero_led(a) || zero_led(b) ? static_cast<int>(std::max(a.size(), b.size())) : 0;
  std::int64_t start = 0, end = 0, step = 1;
  try {
    start = std::stoll(a);
    end = std::stoll(b);
    if (!step_text.empty()) step = std::stoll(step_text);
  } catch (const std::exception&) {
    throw ConfigError("shard pattern '" + spec + "': expected range bounds that fit 64 bits, found {" + a + ".." + b +
                          (step_text.empty() ? "" : ".." + step_text) + "}.",
                      "check the numbers in braces: {000000..000127} names 128 shards.");
  }
  if (step == 0) step = 1;
  const std::uint64_t span = start < end ? static_cast<std::uint64_t>(end) - static_cast<std::uint64_t>(start)
                                         : static_cast<std::uint64_t>(start) - static_cast<std::uint64_t>(end);
  if (span / static_cast<std::uint64_t>(step) >= kMaxBraceExpansion) throw_too_many(spec, "more");
  Strings out;
  char buf[48];
  const std::int64_t signed_step = start < end ? step : -step;
  for (std::uint64_t k = 0; k <= span / static_cast<std::uint64_t>(step); ++k) {
    const std::int64_t i = start + static_cast<std::int64_t>(k) * signed_step;
    std::snprintf(buf, sizeof(buf), "%0*lld", padding, static_cast<long long>(i));
    out.emplace_back(buf);
  }
  return out;
}

// make_char_range: a slice of A-Z then a-z, the end included in both directions.
Strings char_range(char a, char b, const std::string& step_text) {
  static const std::string kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  // The regex allows any digits; a step beyond the alphabet's length gives the first letter alone.
  std::int64_t step = step_text.empty() ? 1 : (step_text.size() > 6 ? 1000 : std::stoll(step_text));
  if (step == 0) step = 1;
  const auto start = static_cast<std::int64_t>(kAlphabet.find(a));
  const auto end = static_cast<std::int64_t>(kAlphabet.find(b));
  Strings out;
  if (start < end) {
    for (std::int64_t i = start; i <= end; i += step) out.emplace_back(1, kAlphabet[static_cast<std::size_t>(i)]);
  } else {
    for (std::int64_t i = start; i >= end; i -= step) out.emplace_back(1, kAlphabet[static_cast<std::size_t>(i)]);
  }
  return out;
}

Strings parse_pattern(const std::string& pattern, const std::string& spec);

// parse_sequence: the alternatives between top-level commas, chained; none without a comma (then
// the brace is not a list), and none when its braces don't balance.
std::optional<Strings> parse_sequence(const std::string& seq, const std::string& spec) {
  std::vector<Strings> items;
  std::size_t start = 0;
  int depth = 0;
  for (std::size_t pos = 0; pos < seq.size(); ++pos) {
    if (seq[pos] == '\\') {
      ++pos;
    } else if (seq[pos] == '{') {
      ++depth;
    } else if (seq[pos] == '}') {
      --depth;
    } else if (seq[pos] == ',' && depth == 0) {
      items.push_back(parse_pattern(seq.substr(start, pos - start), spec));
      start = pos + 1;
    }
  }
  if (depth != 0 || items.empty()) return std::nullopt;
  items.push_back(parse_pattern(seq.substr(std::min(start, seq.size())), spec));
  Strings out;
  for (Strings& item : items) {
    if (out.size() + item.size() > kMaxBraceExpansion) throw_too_many(spec, "more");
    out.insert(out.end(), item.begin(), item.end());
  }
  return out;
}

// parse_expression: an integer range, a letter range, else a list (or nothing).
std::optional<Strings> parse_expression(const std::string& expr, const std::string& spec) {
  static const std::regex kIntRange(R"(^(-?[0-9]+)\.\.(-?[0-9]+)(?:\.\.-?([0-9]+))?$)");
  static const std::regex kCharRange(R"(^([A-Za-z])\.\.([A-Za-z])(?:\.\.-?([0-9]+))?$)");
  std::smatch m;
  if (std::regex_match(expr, m, kIntRange)) return int_range(spec, m[1].str(), m[2].str(), m[3].str());
  if (std::regex_match(expr, m, kCharRange)) return char_range(m[1].str()[0], m[2].str()[0], m[3].str());
  return parse_sequence(expr, spec);
}

// parse_pattern: literals and top-level braces, multiplied left to right. Escapes stay in the strings
// until they are whole (strip_escapes), as braceexpand removes them last.
Strings parse_pattern(const std::string& pattern, const std::string& spec) {
  std::vector<Strings> items;
  std::size_t start = 0;
  int depth = 0;
  std::size_t pos = 0;
  for (; pos < pattern.size(); ++pos) {
    if (pattern[pos] == '\\') {
      ++pos;
    } else if (pattern[pos] == '{') {
      if (depth == 0 && pos > start) {
        items.push_back({pattern.substr(start, pos - start)});
        start = pos;
      }
      ++depth;
    } else if (pattern[pos] == '}' && --depth == 0) {
      const std::string expr = pattern.substr(start + 1, pos - start - 1);
      if (std::optional<Strings> item = parse_expression(expr, spec)) {
        items.push_back(std::move(*item));
      } else {
        items.push_back({"{"});
        items.push_back(parse_pattern(expr, spec));
        items.push_back({"}"});
      }
      start = pos + 1;
    }
  }
  if (depth != 0) {
    throw ConfigError("shard pattern '" + spec + "': expected balanced braces, found " +
                          (depth > 0 ? "a '{' without its '}'" : "a '}' without its '{'") + ".",
                      "write ranges as DIR/train-{000000..000127}.tar and lists as {a,b}; escape a literal brace "
                      "as \\{.");
  }
  if (start < pattern.size()) items.push_back({pattern.substr(start)});
  return product(items, spec);
}

// braceexpand's escape_re.sub(r'\1', s): "\X" becomes X, except before a line end ('.' in Python's re).
std::string strip_escapes(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] != '\n') ++i;
    out.push_back(s[i]);
  }
  return out;
}

}  // namespace

std::vector<std::string> split_pattern_list(const std::string& spec) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t sep = spec.find("::", start);
    out.push_back(spec.substr(start, sep == std::string::npos ? std::string::npos : sep - start));
    if (sep == std::string::npos) return out;
    start = sep + 2;
  }
}

std::vector<std::string> expand_braces(const std::string& spec) {
  std::vector<std::string> out;
  for (const std::string& pattern : split_pattern_list(spec)) {
    for (const std::string& s : parse_pattern(pattern, spec)) {
      if (out.size() >= kMaxBraceExpansion) throw_too_many(spec, "more");
      out.push_back(strip_escapes(s));
    }
  }
  return out;
}

}  // namespace train
