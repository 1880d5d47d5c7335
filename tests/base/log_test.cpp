// Tests for train::log (rank filtering, prefix, sink) and train::files (POSIX helpers).
#include "train/base/files.h"
#include "train/base/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <vector>

namespace {
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
}  // namespace

TEST(Log, InfoOnlyFromRankZeroWarningsFromEveryRank) {
  std::vector<std::pair<train::log::Level, std::string>> lines;
  train::log::set_sink([&](train::log::Level l, const std::string& m) { lines.emplace_back(l, m); });
  train::log::configure(1, 4, "node7");
  train::log::info("hidden");
  train::log::warn("shown");
  train::log::configure(0, 4, "node1");
  train::log::info("rank zero speaks");
  train::log::configure(2, 4, "node3", /*all_ranks_info=*/true);
  train::log::info("all ranks asked for");
  train::log::set_sink(nullptr);
  train::log::configure(0, 1, train::log::hostname());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].first, train::log::Level::warn);
  EXPECT_TRUE(ends_with(lines[0].second, "[rank 1/4 node7] shown")) << lines[0].second;
  EXPECT_TRUE(ends_with(lines[1].second, "[rank 0/4 node1] rank zero speaks")) << lines[1].second;
  EXPECT_TRUE(ends_with(lines[2].second, "[rank 2/4 node3] all ranks asked for")) << lines[2].second;
}

TEST(Log, SinkGetsTheWholeLineWithTimeLevelAndRankPrefix) {
  std::vector<std::string> lines;
  train::log::set_sink([&](train::log::Level, const std::string& m) { lines.push_back(m); });
  train::log::configure(3, 8, "gpu17");
  train::log::error("data missing");
  train::log::set_sink(nullptr);
  train::log::configure(0, 1, train::log::hostname());
  ASSERT_EQ(lines.size(), 1u);
  // e.g. "2026-11-26T08:01:02.345 error [rank 3/8 gpu17] data missing"
  EXPECT_NE(lines[0].find(" error [rank 3/8 gpu17] data missing"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[0].find('\n'), std::string::npos);
  EXPECT_EQ(lines[0].substr(4, 1), "-");  // starts with the date
}

TEST(Log, ErrorsPrintAtEveryLevelAndFromEveryRank) {
  std::vector<std::string> lines;
  train::log::set_sink([&](train::log::Level, const std::string& m) { lines.push_back(m); });
  train::log::configure(5, 8, "n5");
  train::log::set_level(train::log::Level::error);
  train::log::warn("quiet");
  train::log::info("quiet too");
  train::log::error("the run ends here");
  train::log::set_level(train::log::Level::info);
  train::log::set_sink(nullptr);
  train::log::configure(0, 1, train::log::hostname());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(ends_with(lines[0], "the run ends here"));
}

TEST(Log, ParseLevelKnowsTheNamesAndRejectsTypos) {
  train::log::Level l = train::log::Level::info;
  EXPECT_TRUE(train::log::parse_level("DEBUG", l));
  EXPECT_EQ(l, train::log::Level::debug);
  EXPECT_TRUE(train::log::parse_level("warning", l));
  EXPECT_EQ(l, train::log::Level::warn);
  EXPECT_TRUE(train::log::parse_level("error", l));
  EXPECT_EQ(l, train::log::Level::error);
  EXPECT_FALSE(train::log::parse_level("verbose", l));
  EXPECT_EQ(l, train::log::Level::error);  // unchanged
  EXPECT_FALSE(train::log::parse_level("", l));
}

TEST(Log, HostnameIsShortAndNonEmpty) {
  auto h = train::log::hostname();
  EXPECT_FALSE(h.empty());
  EXPECT_EQ(h.find('.'), std::string::npos);
}

TEST(Files, MakeListRenameRemove) {
  const std::string root = std::string(TRAIN_BINARY_DIR) + "/test-tmp/files-" + std::to_string(::getpid());
  train::files::remove_tree(root);
  EXPECT_EQ(train::files::make_dirs(root + "/a/b/c"), "");
  EXPECT_TRUE(train::files::is_directory(root + "/a/b/c"));
  std::ofstream(root + "/a/b/c/x.txt") << "hello";
  EXPECT_TRUE(train::files::is_regular_file(root + "/a/b/c/x.txt"));
  EXPECT_EQ(train::files::copy_file(root + "/a/b/c/x.txt", root + "/a/y.txt"), "");
  EXPECT_EQ(train::files::rename(root + "/a/y.txt", root + "/a/z.txt"), "");
  auto names = train::files::list_dir(root + "/a");
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"b", "z.txt"}));
  EXPECT_NE(train::files::rename(root + "/missing", root + "/other"), "");
  EXPECT_EQ(train::files::join("a/", "b"), "a/b");
  EXPECT_EQ(train::files::basename("/x/y/ckpt-3.pt"), "ckpt-3.pt");
  // A symbolic link inside the tree is removed, not followed.
  const std::string outside = root + "-outside";
  train::files::make_dirs(outside);
  std::ofstream(outside + "/keep.txt") << "keep";
  ASSERT_EQ(::symlink(outside.c_str(), (root + "/link").c_str()), 0);
  train::files::remove_tree(root);
  EXPECT_FALSE(train::files::exists(root));
  EXPECT_TRUE(train::files::exists(outside + "/keep.txt"));
  train::files::remove_tree(outside);
  EXPECT_NE(train::files::make_dirs("/proc/definitely/not"), "");
}
