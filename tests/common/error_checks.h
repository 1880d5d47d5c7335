// What the tests of libtrain's errors share: the exception a call throws, as its text, and the checks
// of what a message must say (the file, what was expected and what was found, a hint). Header-only.
#pragma once

#include "train/base/error.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace train::test {

/// The E that `f` throws, as its what(); "" and a test failure when it throws none (an exception
/// of another type goes through to the test).
template <typename E = train::DataError>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

/// A test failure for each of `needles` that `what` doesn't hold, and one when it gives no hint.
inline void expect_hinted(const std::string& what, const std::vector<std::string>& needles) {
  for (const auto& n : needles) EXPECT_NE(what.find(n), std::string::npos) << "missing '" << n << "' in: " << what;
  EXPECT_NE(what.find("Hint:"), std::string::npos) << what;
}

/// A test failure unless `what` reads as the datasets' messages do: it holds every one of `needles`
/// (the file, the sample, ...), says what was expected and what was found, and gives a hint.
inline void expect_message(const std::string& what, const std::vector<std::string>& needles) {
  expect_hinted(what, needles);
  EXPECT_NE(what.find("expected"), std::string::npos) << what;
  EXPECT_NE(what.find("found"), std::string::npos) << what;
}

}  // namespace train::test
