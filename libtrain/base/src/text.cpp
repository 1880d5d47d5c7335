// String helpers shared by the launcher's parsers.
#include "train/base/text.h"

#include <cstdio>

#include <algorithm>
#include <cctype>

namespace train::text {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t pos = s.find(sep, start);
    parts.push_back(s.substr(start, pos == std::string::npos ? std::string::npos : pos - start));
    if (pos == std::string::npos) return parts;
    start = pos + 1;
  }
}

std::string trim(const std::string& s) {
  const std::size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

std::string format(const char* printf_format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), printf_format, v);
  return buf;
}

namespace {

std::string folded(const std::string& s) {
  std::string out = s;
  for (char& c : out) c = c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::size_t edit_distance(const std::string& a, const std::string& b) {
  // d[i][j]: the distance between a's first i characters and b's first j, three rows at a time.
  std::vector<std::size_t> before(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) cur[j] = std::min(cur[j], before[j - 2] + 1);
    }
    std::swap(before, prev);
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::vector<std::string> closest(const std::string& word, const std::vector<std::string>& candidates) {
  constexpr std::size_t kMax = 3;
  const std::string w = folded(word);
  const std::size_t limit = w.size() <= 7 ? 1 : 2;
  std::size_t best = limit + 1;
  std::vector<std::string> near;
  for (const std::string& c : candidates) {
    const std::size_t d = edit_distance(w, folded(c));
    if (d == 0 || d > best) continue;  // d == 0: the word itself (or its underscore spelling) is no typo
    if (d < best) near.clear();
    best = d;
    if (near.size() < kMax && std::find(near.begin(), near.end(), c) == near.end()) near.push_back(c);
  }
  if (!near.empty() || w.size() < 3) return near;
  for (const std::string& c : candidates) {
    const std::string f = folded(c);
    if (f.size() > w.size() && f.compare(0, w.size(), w) == 0 && near.size() < kMax &&
        std::find(near.begin(), near.end(), c) == near.end()) {
      near.push_back(c);
    }
  }
  return near;
}

std::string or_list(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i == 0 ? "" : i + 1 == items.size() ? " or " : ", ") + items[i];
  return out;
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i == 0 ? "" : sep) + items[i];
  return out;
}

}  // namespace train::text
