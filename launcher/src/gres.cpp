// The one gres parser: split_gres_items and the fields of an item are shared; parse_gres_items reads
// SLURM's text leniently, parse_gres_request checks a user's --gres strictly.
#include "train/launcher/gres.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "train/base/error.h"
#include "train/base/text.h"

namespace train {
namespace {

/// The most a count may be (fits an int).
constexpr std::int64_t kMaxCount = 0x7fffffff;

/// An item's text split into its name, type and count words: NAME, NAME:COUNT (COUNT starts with a
/// digit), NAME:TYPE, NAME:TYPE:COUNT. `parts` is how many ':'-separated words there were.
struct GresFields {
  std::string name, type, count;
  bool has_count = false;  ///< a COUNT word was there (perhaps empty, as in "gpu:a100:")
  std::size_t parts = 0;
};

GresFields fields_of(const std::string& item) {
  const std::vector<std::string> parts = text::split(item, ':');
  GresFields f;
  f.parts = parts.size();
  if (parts.empty()) return f;
  f.name = parts[0];
  if (parts.size() == 2) {
    if (!parts[1].empty() && std::isdigit(static_cast<unsigned char>(parts[1][0])) != 0) {
      f.count = parts[1];
      f.has_count = true;
    } else {
      f.type = parts[1];
    }
  } else if (parts.size() >= 3) {
    f.type = parts[1];
    f.count = parts[2];
    f.has_count = true;
  }
  return f;
}

/// The leading digits of `s` as a number; 0 when there are none (or too many).
std::int64_t leading_number(const std::string& s) {
  std::size_t end = 0;
  while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end])) != 0) ++end;
  if (end == 0 || end > 18) return 0;
  return std::stoll(s.substr(0, end));
}

bool name_ok(const std::string& name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](unsigned char c) {
    return std::isalnum(c) != 0 || c == '_' || c == '-' || c == '/';
  });
}

/// A strict COUNT: decimal digits (at most 18), with a K/M/G/T suffix allowed when `suffix_ok`.
bool strict_count(std::string digits, bool suffix_ok, std::int64_t& n) {
  if (suffix_ok && !digits.empty() && std::string("KMGTkmgt").find(digits.back()) != std::string::npos) {
    digits.pop_back();
  }
  if (!text::all_digits(digits) || digits.size() > 18) return false;
  n = std::stoll(digits);
  return n >= 1 && n <= kMaxCount;
}

}  // namespace

std::vector<std::string> split_gres_items(const std::string& gres) {
  std::vector<std::string> items;
  if (gres.empty()) return items;
  std::size_t start = 0;
  int depth = 0;
  for (std::size_t i = 0; i <= gres.size(); ++i) {
    const char c = i < gres.size() ? gres[i] : ',';
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c != ',' || depth > 0) continue;
    const std::string item = gres.substr(start, i - start);
    items.push_back(item.substr(0, item.find('(')));
    start = i + 1;
  }
  return items;
}

std::vector<GresItem> parse_gres_items(const std::string& gres) {
  std::vector<GresItem> items;
  if (gres == "(null)") return items;
  for (const std::string& text : split_gres_items(gres)) {
    const GresFields f = fields_of(text);
    if (f.name.empty() || f.name == "(null)") continue;
    GresItem g;
    g.name = f.name;
    g.type = f.type;
    g.count = f.has_count ? leading_number(f.count) : 1;
    items.push_back(g);
  }
  return items;
}

std::int64_t gres_total(const std::vector<GresItem>& items, const std::string& name) {
  std::int64_t n = 0;
  for (const GresItem& g : items) {
    if (g.name == name) n += g.count;
  }
  return n;
}

std::int64_t gres_largest(const std::vector<GresItem>& items, const std::string& name) {
  std::int64_t n = 0;
  for (const GresItem& g : items) {
    if (g.name == name) n = std::max(n, g.count);
  }
  return n;
}

GresRequest parse_gres_request(const std::string& gres, const std::string& flag) {
  GresRequest out;
  for (const std::string& item : text::split(gres, ',')) {
    const GresFields f = fields_of(item);
    if (!name_ok(f.name) || f.parts > 3) {
      throw ConfigError(flag + " '" + gres + "': expected items NAME[:TYPE][:COUNT] separated by commas, found '" +
                            item + "'.",
                        "e.g. " + flag + " gpu:2, " + flag + " gpu:a100:2 or " + flag + " shard:16 (a shared GPU).");
    }
    const std::string count = f.has_count ? f.count : "1";
    const bool is_gpu = f.name == "gpu";
    const bool is_shard = f.name == "shard";
    std::int64_t n = 0;
    if (!strict_count(count, !is_gpu && !is_shard, n)) {  // other gres may count in K/M/G/T
      throw ConfigError(flag + " '" + gres + "': expected a positive count in '" + item + "', found '" + count + "'.",
                        "write NAME:COUNT or NAME:TYPE:COUNT, e.g. gpu:2 or gpu:a100:2.");
    }
    if ((is_gpu && out.gpus > 0) || (is_shard && out.shards > 0)) {
      throw ConfigError(flag + " '" + gres + "': expected " + f.name + " once, found it twice.",
                        "give one " + f.name + " item with the count per node.");
    }
    if (is_gpu) out.gpus = static_cast<int>(n);
    if (is_shard) out.shards = static_cast<int>(n);
    if (is_gpu || is_shard) out.item = item;
    out.items.push_back(GresItem{f.name, f.type, n});
  }
  return out;
}

}  // namespace train
