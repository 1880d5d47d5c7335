// Tests for the small train::base helpers: the signal table and SHA-256.
#include "train/base/sha256.h"
#include "train/base/signals.h"

#include <gtest/gtest.h>

#include <csignal>
#include <string>

TEST(Signals, NamesAndNumbersBothWays) {
  EXPECT_EQ(train::signal_number("USR2"), SIGUSR2);
  EXPECT_EQ(train::signal_number("SIGUSR2"), SIGUSR2);
  EXPECT_EQ(train::signal_number("sigterm"), SIGTERM);
  EXPECT_EQ(train::signal_number("15"), SIGTERM);
  EXPECT_EQ(train::signal_number("USR9"), 0);
  EXPECT_EQ(train::signal_number(""), 0);
  EXPECT_EQ(train::signal_number("999"), 0);
  EXPECT_EQ(train::signal_name(SIGUSR2), "SIGUSR2");
  EXPECT_EQ(train::signal_short_name(SIGXCPU), "XCPU");
  EXPECT_EQ(train::signal_name(63), "signal 63");
}

TEST(Sha256, KnownDigests) {
  // FIPS 180-2 test vectors.
  train::Sha256 empty;
  EXPECT_EQ(empty.hex(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  train::Sha256 abc;
  abc.update("ab", 2);
  abc.update("c", 1);  // incremental
  EXPECT_EQ(abc.hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const auto d = train::sha256("abc", 3);
  EXPECT_EQ(d[0], 0xba);
  EXPECT_EQ(d[31], 0xad);
}
