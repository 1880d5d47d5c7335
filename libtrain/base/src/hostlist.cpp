// SLURM hostlist expressions: a strict parser (items, bracket groups, zero-padded ranges), the
// expansion in scontrol's order, and the compression back to an expression.
#include "train/base/hostlist.h"

#include <cctype>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "train/base/error.h"

namespace train {
namespace {

/// Longest expression accepted; real node lists are a few kilobytes at most.
constexpr std::size_t kMaxExpressionBytes = 1024 * 1024;
/// Longest numeric suffix hostlist_compress treats as a number (fits in uint64_t with room).
constexpr std::size_t kMaxSuffixDigits = 18;

constexpr char kSyntaxHint[] =
    "SLURM writes host lists like 'node[01-04,07]', 'a,b[1-2]' or 'gpu[1-2]-ib[3-4]'; check the "
    "value (compare with `scontrol show hostnames '<expr>'`).";

struct Range {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  std::size_t width = 0;  ///< digits written for lo: numbers are zero-padded to it
};

struct Group {
  std::vector<Range> ranges;
  std::size_t count = 0;
};

/// One item of the expression: texts[0] groups[0] texts[1] ... groups[k-1] texts[k].
struct Item {
  std::vector<std::string> texts;
  std::vector<Group> groups;
  std::size_t column = 0;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

/// The expression as quoted in messages: long ones are cut so the message stays readable.
std::string quoted(const std::string& expr) {
  constexpr std::size_t kShown = 120;
  if (expr.size() <= kShown) return "'" + expr + "'";
  return "'" + expr.substr(0, kShown) + "...' (" + std::to_string(expr.size()) + " characters)";
}

/// How a character is named in messages.
std::string describe_char(const std::string& expr, std::size_t pos) {
  if (pos >= expr.size()) return "the end of the expression";
  const unsigned char c = static_cast<unsigned char>(expr[pos]);
  if (c == ' ') return "a space";
  if (c == '\t') return "a tab";
  if (c == '\n' || c == '\r') return "a line break";
  if (std::isprint(c)) return std::string("'") + static_cast<char>(c) + "'";
  static const char* kHex = "0123456789abcdef";
  return std::string("byte 0x") + kHex[c >> 4] + kHex[c & 15];
}

[[noreturn]] void fail(const std::string& expr, std::size_t pos, const std::string& expected,
                       const std::string& found, const std::string& hint = kSyntaxHint) {
  throw ConfigError("hostlist " + quoted(expr) + ": expected " + expected + ", found " + found +
                        " at column " + std::to_string(pos + 1) + ".",
                    hint);
}

std::string pad(std::uint64_t value, std::size_t width) {
  std::string digits = std::to_string(value);
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return digits;
}

/// Reads the decimal number starting at pos (advanced past it); begin/end bound the bracket.
std::uint64_t parse_number(const std::string& expr, std::size_t& pos, std::size_t end,
                           const std::string& what) {
  const std::size_t start = pos;
  std::uint64_t value = 0;
  while (pos < end && is_digit(expr[pos])) {
    const std::uint64_t digit = static_cast<std::uint64_t>(expr[pos] - '0');
    if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) {
      fail(expr, start, what + " below 2^64", "'" + expr.substr(start, end - start) + "'");
    }
    value = value * 10 + digit;
    ++pos;
  }
  if (pos == start) fail(expr, pos, what, describe_char(expr, pos));
  return value;
}

/// Parses the inside of a bracket group, expr[begin, end), e.g. "01-04,07".
Group parse_group(const std::string& expr, std::size_t begin, std::size_t end) {
  Group group;
  if (begin == end) {
    fail(expr, begin - 1, "a number or a range such as 1-4 inside the brackets", "'[]'");
  }
  std::size_t pos = begin;
  while (true) {
    const std::size_t element = pos;
    if (pos == end || expr[pos] == ',') {
      fail(expr, pos, "a number or a range such as 1-4", "an empty element in the brackets");
    }
    Range range;
    range.lo = parse_number(expr, pos, end, "a decimal number");
    range.width = pos - element;
    range.hi = range.lo;
    if (pos < end && expr[pos] == '-') {
      ++pos;
      range.hi = parse_number(expr, pos, end, "a decimal number after '-'");
    }
    if (pos < end && expr[pos] != ',') {
      fail(expr, pos, "',' or ']' after a range", describe_char(expr, pos));
    }
    const std::string text = expr.substr(element, pos - element);
    if (range.lo > range.hi) {
      fail(expr, element, "a range LO-HI with LO <= HI", "'" + text + "'",
           "write the lower bound first, e.g. n[1-3] rather than n[3-1].");
    }
    if (range.hi - range.lo >= kMaxHostlistRange) {
      fail(expr, element, "at most " + std::to_string(kMaxHostlistRange) + " hosts in one range",
           "'" + text + "' (" + std::to_string(range.hi - range.lo) + "+1 hosts)",
           "a node list this long is almost certainly a typo; SLURM refuses it too.");
    }
    group.count += static_cast<std::size_t>(range.hi - range.lo + 1);
    group.ranges.push_back(range);
    if (pos == end) break;
    ++pos;  // past ','
  }
  return group;
}

/// Parses one item starting at pos (advanced to the separator or the end that follows it).
Item parse_item(const std::string& expr, std::size_t& pos) {
  Item item;
  item.column = pos;
  std::string text;
  while (pos < expr.size() && expr[pos] != ',' && !is_space(expr[pos])) {
    const char c = expr[pos];
    if (c == ']') fail(expr, pos, "']' only after a '['", "an unmatched ']'");
    if (c != '[') {
      text += c;
      ++pos;
      continue;
    }
    const std::size_t open = pos;
    std::size_t close = open + 1;
    while (close < expr.size() && expr[close] != ']') {
      if (expr[close] == '[') {
        fail(expr, close, "']' to close the '[' at column " + std::to_string(open + 1),
             "a nested '['", "brackets can't be nested; write n[1-2]x[3-4], not n[1-[2]].");
      }
      ++close;
    }
    if (close == expr.size()) {
      fail(expr, open, "a ']' closing this '['", "none before the end of the expression");
    }
    item.texts.push_back(std::move(text));
    text.clear();
    item.groups.push_back(parse_group(expr, open + 1, close));
    pos = close + 1;
  }
  item.texts.push_back(std::move(text));
  return item;
}

std::vector<Item> parse(const std::string& expr) {
  if (expr.size() > kMaxExpressionBytes) {
    fail(expr, 0, "at most " + std::to_string(kMaxExpressionBytes) + " characters",
         std::to_string(expr.size()));
  }
  std::vector<Item> items;
  bool expect_item = true;  // at the start, or right after a comma
  bool seen_comma = false;
  std::size_t last_comma = 0;
  std::size_t pos = 0;
  while (pos < expr.size()) {
    if (is_space(expr[pos])) {
      ++pos;
    } else if (expr[pos] == ',') {
      if (expect_item) {
        fail(expr, pos, "a host name before ','", seen_comma ? "two commas in a row" : "a leading comma");
      }
      expect_item = true;
      seen_comma = true;
      last_comma = pos;
      ++pos;
    } else {
      items.push_back(parse_item(expr, pos));
      expect_item = false;
    }
  }
  if (items.empty()) {
    fail(expr, 0, "at least one host name", "an empty expression",
         "the variable holding the node list is empty; inside a job SLURM sets SLURM_JOB_NODELIST.");
  }
  if (expect_item) fail(expr, last_comma, "a host name after ','", "a trailing comma");
  return items;
}

/// Hosts an item expands to, saturated at kMaxHostlistHosts + 1.
std::size_t item_count(const Item& item) {
  std::size_t total = 1;
  for (const Group& group : item.groups) {
    if (group.count > (kMaxHostlistHosts + 1) / total) return kMaxHostlistHosts + 1;
    total *= group.count;
  }
  return total;
}

std::vector<std::string> group_values(const Group& group) {
  std::vector<std::string> values;
  values.reserve(group.count);
  for (const Range& range : group.ranges) {
    for (std::uint64_t v = range.lo;; ++v) {
      values.push_back(pad(v, range.width));
      if (v == range.hi) break;  // also safe when hi is the largest uint64_t
    }
  }
  return values;
}

void expand_item(const Item& item, std::vector<std::string>& out) {
  const std::size_t k = item.groups.size();
  if (k == 0) {
    out.push_back(item.texts[0]);
    return;
  }
  std::vector<std::vector<std::string>> values;
  values.reserve(k);
  for (const Group& group : item.groups) values.push_back(group_values(group));

  // SLURM peels groups off from the right: it expands the group before the last one outermost,
  // then the ones before it, the first group, and the last group innermost. For two groups this
  // is plain row-major order; for three it is (2nd, 1st, 3rd). scontrol prints that order.
  std::vector<std::size_t> nesting;
  for (std::size_t g = k - 1; g-- > 0;) nesting.push_back(g);
  nesting.push_back(k - 1);

  std::vector<std::size_t> index(k, 0);
  while (true) {
    std::string host = item.texts[0];
    for (std::size_t g = 0; g < k; ++g) {
      host += values[g][index[g]];
      host += item.texts[g + 1];
    }
    out.push_back(std::move(host));
    std::size_t level = k;
    while (level > 0) {
      const std::size_t g = nesting[level - 1];
      if (++index[g] < values[g].size()) break;
      index[g] = 0;
      --level;
    }
    if (level == 0) return;
  }
}

}  // namespace

std::vector<std::string> hostlist_expand(const std::string& expr) {
  const std::vector<Item> items = parse(expr);
  std::size_t total = 0;
  for (const Item& item : items) {
    total += item_count(item);
    if (total > kMaxHostlistHosts) {
      fail(expr, item.column, "at most " + std::to_string(kMaxHostlistHosts) + " hosts in all",
           "an expression that expands to more",
           "a node list this long is almost certainly a typo (several large bracket groups in one "
           "name multiply).");
    }
  }
  std::vector<std::string> hosts;
  hosts.reserve(total);
  for (const Item& item : items) expand_item(item, hosts);
  return hosts;
}

std::string hostlist_compress(const std::vector<std::string>& hosts) {
  struct Parsed {
    std::string prefix;
    std::string digits;  ///< numeric suffix; empty when the host has none worth merging
    std::uint64_t number = 0;
  };
  std::vector<Parsed> parsed;
  parsed.reserve(hosts.size());
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    const std::string& host = hosts[i];
    for (const char c : host) {
      if (c == '[' || c == ']' || c == ',' || is_space(c)) {
        throw ConfigError("hostlist_compress: host #" + std::to_string(i) + " '" + host +
                              "': expected a host name, found " + describe_char(host, host.find(c)) +
                              ", which has a meaning in hostlist expressions.",
                          "pass plain host names (e.g. the output of `scontrol show hostnames`).");
      }
    }
    if (host.empty()) {
      throw ConfigError("hostlist_compress: host #" + std::to_string(i) +
                            ": expected a host name, found an empty string.",
                        "drop empty entries before compressing.");
    }
    std::size_t cut = host.size();
    while (cut > 0 && is_digit(host[cut - 1])) --cut;
    Parsed p;
    p.prefix = host.substr(0, cut);
    if (host.size() - cut <= kMaxSuffixDigits) p.digits = host.substr(cut);
    if (!p.digits.empty()) p.number = std::stoull(p.digits);
    else p.prefix = host;
    parsed.push_back(std::move(p));
  }

  std::string out;
  std::size_t i = 0;
  while (i < parsed.size()) {
    if (!out.empty()) out += ',';
    if (parsed[i].digits.empty()) {
      out += hosts[i++];
      continue;
    }
    std::vector<Range> ranges;
    std::size_t j = i;
    for (; j < parsed.size() && !parsed[j].digits.empty() && parsed[j].prefix == parsed[i].prefix; ++j) {
      const Parsed& p = parsed[j];
      if (!ranges.empty() && p.number == ranges.back().hi + 1 &&
          pad(p.number, ranges.back().width) == p.digits) {
        ranges.back().hi = p.number;
      } else {
        ranges.push_back(Range{p.number, p.number, p.digits.size()});
      }
    }
    if (j == i + 1) {
      out += hosts[i];
    } else {
      out += parsed[i].prefix + '[';
      for (std::size_t r = 0; r < ranges.size(); ++r) {
        if (r > 0) out += ',';
        out += pad(ranges[r].lo, ranges[r].width);
        if (ranges[r].hi != ranges[r].lo) out += '-' + pad(ranges[r].hi, ranges[r].width);
      }
      out += ']';
    }
    i = j;
  }
  return out;
}

}  // namespace train
