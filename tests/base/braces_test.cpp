// Tests for libtrain/base/src/braces.cpp: a table of shard patterns with what webdataset's
// expand_urls (braceexpand 0.1.7) gives for each (recorded from Python), the errors, and the same
// table against the Python package itself when it is installed (the repository's .venv).
#include "train/base/braces.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "test_process.h"
#include "train/base/error.h"

namespace train {
namespace {

using Names = std::vector<std::string>;

struct BraceCase {
  std::string pattern;
  Names names;
};

// Each row was printed by webdataset.shardlists.expand_urls (webdataset 1.0.2, braceexpand 0.1.7).
const std::vector<BraceCase>& brace_cases() {
  static const std::vector<BraceCase> cases = {
      // What WebDataset writes and reads: zero-padded ranges keep their width.
      {"/data/train-{000000..000003}.tar",
       {"/data/train-000000.tar", "/data/train-000001.tar", "/data/train-000002.tar", "/data/train-000003.tar"}},
      {"shard-{0..3}.tar", {"shard-0.tar", "shard-1.tar", "shard-2.tar", "shard-3.tar"}},
      {"{001..003}", {"001", "002", "003"}},
      {"{07..10}", {"07", "08", "09", "10"}},
      {"{01..1}", {"01"}},
      {"{1..1}", {"1"}},
      // Down, steps (a step's sign is ignored, 0 counts as 1), negatives and their padding.
      {"{3..1}", {"3", "2", "1"}},
      {"{0..10..3}", {"0", "3", "6", "9"}},
      {"{10..0..-4}", {"10", "6", "2"}},
      {"x{1..3..0}", {"x1", "x2", "x3"}},
      {"{-2..1}", {"-2", "-1", "0", "1"}},
      {"{-02..1}", {"-02", "-01", "000", "001"}},
      {"{-0..2}", {"0", "1", "2"}},
      {"{-5..-3}", {"-5", "-4", "-3"}},
      {"{-05..5..5}", {"-05", "000", "005"}},
      // Letters: A-Z then a-z.
      {"{a..e}", {"a", "b", "c", "d", "e"}},
      {"{a..e..2}", {"a", "c", "e"}},
      {"{e..a}", {"e", "d", "c", "b", "a"}},
      {"{Y..b}", {"Y", "Z", "a", "b"}},
      {"{c..c}", {"c"}},
      {"{A..A}", {"A"}},
      // Lists, nested and multiplied (the last brace varies fastest).
      {"{a,b}", {"a", "b"}},
      {"{x,}", {"x", ""}},
      {"{,x}", {"", "x"}},
      {"{a,b{1..2}}", {"a", "b1", "b2"}},
      {"{a,{b,c}}", {"a", "b", "c"}},
      {"{{a,b}}", {"{a}", "{b}"}},
      {"{a,b}{1..2}", {"a1", "a2", "b1", "b2"}},
      {"{1,2}{3,4}{5,6}", {"135", "136", "145", "146", "235", "236", "245", "246"}},
      {"pre-{1..2}-mid-{a,b}-post", {"pre-1-mid-a-post", "pre-1-mid-b-post", "pre-2-mid-a-post", "pre-2-mid-b-post"}},
      {"d/{a,b}/s-{0..1}.tar", {"d/a/s-0.tar", "d/a/s-1.tar", "d/b/s-0.tar", "d/b/s-1.tar"}},
      // Braces that are neither a range nor a list stay as written.
      {"{a}", {"{a}"}},
      {"{}", {"{}"}},
      {"}{", {"}{"}},
      {"{1..2..}", {"{1..2..}"}},
      {"{ab..cd}", {"{ab..cd}"}},
      {"{a..9}", {"{a..9}"}},
      {"{1...3}", {"{1...3}"}},
      // Escapes: removed once expanded; a trailing backslash stays.
      {"a\\{b\\}", {"a{b}"}},
      {"a\\,b", {"a,b"}},
      {"{a\\,b,c}", {"a,b", "c"}},
      {"\\\\x", {"\\x"}},
      {"a\\", {"a\\"}},
      {"{a,b}\\", {"a\\", "b\\"}},
      // "::" joins patterns, as webdataset's expand_urls splits them.
      {"a::b-{0..1}", {"a", "b-0", "b-1"}},
      {"plain.tar", {"plain.tar"}},
      {"", {""}},
  };
  return cases;
}

TEST(Braces, ExpandsAsWebDatasetDoes) {
  for (const BraceCase& c : brace_cases()) {
    EXPECT_EQ(expand_braces(c.pattern), c.names) << c.pattern;
  }
}

TEST(Braces, SplitsPatternListsAtDoubleColons) {
  EXPECT_EQ(split_pattern_list("a.tar"), Names({"a.tar"}));
  EXPECT_EQ(split_pattern_list("a.tar::b-{0..1}.tar"), Names({"a.tar", "b-{0..1}.tar"}));
  EXPECT_EQ(split_pattern_list("a::::b"), Names({"a", "", "b"}));
  EXPECT_EQ(split_pattern_list("{a::b}"), Names({"{a", "b}"}));
}

TEST(Braces, ErrorsNameThePatternWhatWasExpectedAndAHint) {
  struct Bad {
    std::string pattern;
    std::string says;
  };
  for (const Bad& b : std::vector<Bad>{
           {"train-{000000..000127.tar", "a '{' without its '}'"},
           {"{1{2,3}", "a '{' without its '}'"},
           {"a}b", "a '}' without its '{'"},
           {"{a::b}", "expected balanced braces"},  // webdataset splits at "::" first, as here
           {"{0..99999999}", "expected at most 10000000 names"},
           {"{0..9999}{0..9999}", "expected at most 10000000 names"},
           {"{0..99999999999999999999}", "expected range bounds that fit 64 bits"},
       }) {
    try {
      expand_braces(b.pattern);
      ADD_FAILURE() << b.pattern << ": expected a ConfigError";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("shard pattern '" + b.pattern + "'"), std::string::npos) << what;
      EXPECT_NE(what.find(b.says), std::string::npos) << what;
      EXPECT_FALSE(e.hint().empty()) << what;
    }
  }
}

/// A Python that has webdataset (its expand_urls), or "" when there is none.
std::string python_with_webdataset() {
  for (const std::string& python : {std::string(TRAIN_SOURCE_DIR) + "/.venv/bin/python3", test::find_on_path("python3")}) {
    if (python.empty() || access(python.c_str(), X_OK) != 0) continue;
    const auto p = test::run_process({python, "-c", "import webdataset.shardlists"}, test::hermetic_env(), 60);
    if (p->exit_code() == 0) return python;
  }
  return "";
}

TEST(Braces, AgreesWithWebDatasetItself) {
  const std::string python = python_with_webdataset();
  if (python.empty()) GTEST_SKIP() << "no Python with webdataset (scripts/bench/peers-setup.sh installs it in .venv)";
  // One pattern per line in, its names out, one per line, each case ended by an empty line.
  std::string patterns;
  for (const BraceCase& c : brace_cases()) patterns += c.pattern + "\n";
  const std::string program =
      "import sys\n"
      "from webdataset.shardlists import expand_urls\n"
      "for line in sys.argv[1].split('\\n')[:-1]:\n"
      "    print('\\n'.join('=' + n for n in expand_urls(line)))\n"
      "    print('-')\n";
  const auto p = test::run_process({python, "-c", program, patterns}, test::hermetic_env(), 60);
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  std::vector<Names> theirs(1);
  for (const std::string& line : test::lines_of(p->out())) {
    if (line == "-") {
      theirs.emplace_back();
    } else {
      theirs.back().push_back(line.substr(1));
    }
  }
  ASSERT_EQ(theirs.size(), brace_cases().size() + 1) << p->out();
  for (std::size_t i = 0; i < brace_cases().size(); ++i) {
    EXPECT_EQ(expand_braces(brace_cases()[i].pattern), theirs[i]) << brace_cases()[i].pattern;
  }
}

}  // namespace
}  // namespace train
