// Tests for train::log (rank filtering, prefix, sink) and train::files (POSIX helpers).
#include "train/files.h"
#include "train/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <vector>

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
  EXPECT_EQ(lines[0].second, "shown");
  EXPECT_EQ(lines[0].first, train::log::Level::warn);
  EXPECT_EQ(lines[1].second, "rank zero speaks");
  EXPECT_EQ(lines[2].second, "all ranks asked for");
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
