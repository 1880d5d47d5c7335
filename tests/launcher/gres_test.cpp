// Tests for the one gres parser (train/launcher/gres.h): the strict reading of a user's --gres, with
// errors that name the flag and what was found, and the tolerant reading of what sinfo and scontrol
// print, where an odd item is skipped rather than an error.
#include "train/launcher/gres.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "train/base/error.h"

namespace train {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// The message of the ConfigError parse_gres_request(text, flag) throws; "" when it accepts the text.
std::string strict_error(const std::string& text, const std::string& flag = "--gres") {
  try {
    parse_gres_request(text, flag);
  } catch (const ConfigError& e) {
    return std::string(e.what()) + " | " + e.hint();
  }
  return "";
}

TEST(GresRequest, ReadsGpusShardsTypesAndOtherGres) {
  const GresRequest gpus = parse_gres_request("gpu:4");
  EXPECT_EQ(gpus.gpus, 4);
  EXPECT_EQ(gpus.shards, 0);
  EXPECT_EQ(gpus.item, "gpu:4");
  ASSERT_EQ(gpus.items.size(), 1u);
  EXPECT_EQ(gpus.items[0].name, "gpu");
  EXPECT_EQ(gpus.items[0].type, "");
  EXPECT_EQ(gpus.items[0].count, 4);

  const GresRequest typed = parse_gres_request("gpu:a100:2,tmpfs:10G");
  EXPECT_EQ(typed.gpus, 2);
  EXPECT_EQ(typed.item, "gpu:a100:2");
  ASSERT_EQ(typed.items.size(), 2u);
  EXPECT_EQ(typed.items[0].type, "a100");
  EXPECT_EQ(typed.items[1].name, "tmpfs");
  EXPECT_EQ(typed.items[1].count, 10);  // other gres may count in K/M/G/T

  const GresRequest shard = parse_gres_request("shard:16");
  EXPECT_EQ(shard.gpus, 0);
  EXPECT_EQ(shard.shards, 16);
  EXPECT_EQ(shard.item, "shard:16");

  const GresRequest bare = parse_gres_request("gpu");  // NAME alone asks for one
  EXPECT_EQ(bare.gpus, 1);
  const GresRequest type_only = parse_gres_request("gpu:tesla");
  EXPECT_EQ(type_only.gpus, 1);
  EXPECT_EQ(type_only.items[0].type, "tesla");
  EXPECT_EQ(parse_gres_request("mps:100").gpus, 0);  // neither gpu nor shard
}

TEST(GresRequest, BadInputNamesTheFlagWhatWasExpectedAndFound) {
  const std::string zero = strict_error("gpu:0");
  EXPECT_TRUE(contains(zero, "--gres 'gpu:0': expected a positive count in 'gpu:0', found '0'.")) << zero;
  EXPECT_TRUE(contains(zero, "gpu:a100:2")) << zero;  // the hint shows the form

  const std::string words = strict_error("gpu:a100:2:x");
  EXPECT_TRUE(contains(words, "expected items NAME[:TYPE][:COUNT] separated by commas, found 'gpu:a100:2:x'")) << words;
  EXPECT_TRUE(contains(strict_error("gpu:2,"), "found ''")) << strict_error("gpu:2,");
  EXPECT_TRUE(contains(strict_error("g pu:2"), "found 'g pu:2'"));
  EXPECT_TRUE(contains(strict_error("gpu:a100:"), "found ''"));      // a COUNT word left empty
  EXPECT_TRUE(contains(strict_error("gpu:a100:4x"), "found '4x'"));  // gpus count in whole numbers only
  EXPECT_TRUE(contains(strict_error("gpu:99999999999"), "positive count"));
  EXPECT_TRUE(contains(strict_error("gpu:4(S:0-1)"), "positive count"));  // SLURM's output is no request

  const std::string twice = strict_error("gpu:2,gpu:a100:2");
  EXPECT_TRUE(contains(twice, "--gres 'gpu:2,gpu:a100:2': expected gpu once, found it twice.")) << twice;
  EXPECT_TRUE(contains(twice, "give one gpu item")) << twice;

  // The flag named is the one the text came from.
  EXPECT_TRUE(contains(strict_error("gpu:0", "--other"), "--other 'gpu:0'"));
}

TEST(GresItems, ReadsWhatSinfoAndScontrolPrint) {
  const std::vector<GresItem> g = parse_gres_items("gpu:h100:4(S:0-1),shard:h100:16(S:0-1)");
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].name, "gpu");
  EXPECT_EQ(g[0].type, "h100");
  EXPECT_EQ(g[0].count, 4);
  EXPECT_EQ(g[1].name, "shard");
  EXPECT_EQ(g[1].count, 16);

  // GresUsed puts commas inside parentheses: they don't start items.
  const std::vector<GresItem> used = parse_gres_items("gpu:a100:2(IDX:0-1),shard:a100:3(3/4,0/4,0/4,0/4)");
  ASSERT_EQ(used.size(), 2u);
  EXPECT_EQ(used[1].count, 3);

  const std::vector<GresItem> plain = parse_gres_items("gpu:4");
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain[0].type, "");
  EXPECT_EQ(plain[0].count, 4);
  EXPECT_EQ(parse_gres_items("gpu")[0].count, 1);
  EXPECT_EQ(parse_gres_items("gpu:tesla")[0].type, "tesla");
  EXPECT_EQ(parse_gres_items("gpu:tesla")[0].count, 1);
  EXPECT_TRUE(parse_gres_items("(null)").empty());
  EXPECT_TRUE(parse_gres_items("").empty());
}

TEST(GresItems, SkipsOrZeroesWhatItCannotReadInsteadOfFailing) {
  const std::vector<GresItem> odd = parse_gres_items(",gpu:2,,(null),:3,gpu:a100:x");
  ASSERT_EQ(odd.size(), 2u);  // empty items, "(null)" and a nameless ":3" are skipped
  EXPECT_EQ(odd[0].count, 2);
  EXPECT_EQ(odd[1].type, "a100");
  EXPECT_EQ(odd[1].count, 0);  // an unreadable count is none, never a guess
}

TEST(GresItems, TotalsSumAndLargestPicksOneTypesCount) {
  const std::vector<GresItem> g = parse_gres_items("gpu:a100:4(S:0-1),gpu:v100:2,shard:a100:16");
  EXPECT_EQ(gres_total(g, "gpu"), 6);
  EXPECT_EQ(gres_largest(g, "gpu"), 4);
  EXPECT_EQ(gres_total(g, "shard"), 16);
  EXPECT_EQ(gres_largest(g, "shard"), 16);
  EXPECT_EQ(gres_total(g, "mps"), 0);
  EXPECT_EQ(gres_largest(g, "mps"), 0);
}

TEST(GresItems, SplitKeepsParenthesisedCommasInOneItem) {
  EXPECT_EQ(split_gres_items("gpu:a100:2(IDX:0-1),shard:a100:3(3/4,0/4)"),
            (std::vector<std::string>{"gpu:a100:2", "shard:a100:3"}));
  EXPECT_EQ(split_gres_items("gpu:2,"), (std::vector<std::string>{"gpu:2", ""}));
  EXPECT_TRUE(split_gres_items("").empty());
}

}  // namespace
}  // namespace train
