// TensorBoard event files (train/base/event_file.h): CRC-32C against published vectors, TFRecord
// framing that catches every flipped byte, the Event encoding read back, and a run folder cut back
// to the step a resumed run starts from. tests/libtrain/tensorboard_test.cpp reads real runs'
// files with TensorBoard itself.
#include "train/base/error.h"
#include "train/base/event_file.h"
#include "train/base/files.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace tb = train::tensorboard;

namespace {

// A fresh folder, removed at the end.
class TempFolder {
 public:
  TempFolder() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/event_file_test.XXXXXX";
    path_ = ::mkdtemp(pattern.data()) ? pattern : "";
  }
  ~TempFolder() {
    if (!path_.empty()) train::files::remove_tree(path_);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string bytes_of(const std::string& path) { return train::files::read_text(path); }

// Every event of a folder's files, in TensorBoard's reading order.
std::vector<tb::Event> events_in(const std::string& dir) {
  std::vector<tb::Event> out;
  for (const std::string& f : tb::event_files(dir)) {
    const tb::RecordScan scan = tb::read_records(bytes_of(f));
    EXPECT_EQ(scan.error, "") << f;
    for (const tb::Record& r : scan.records) out.push_back(tb::decode_event(r.payload));
  }
  return out;
}

std::vector<int64_t> scalar_steps(const std::vector<tb::Event>& events) {
  std::vector<int64_t> steps;
  for (const tb::Event& e : events) {
    if (!e.scalars.empty()) steps.push_back(e.step);
  }
  return steps;
}

}  // namespace

TEST(Crc32c, PublishedVectors) {
  // The check value of CRC-32C, and RFC 3720 (iSCSI) appendix B.4.
  EXPECT_EQ(tb::crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  std::string ascending(32, '\0');
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<char>(i);
  EXPECT_EQ(tb::crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(tb::crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(tb::crc32c(ascending.data(), ascending.size()), 0x46DD794Eu);
  EXPECT_EQ(tb::crc32c("", 0), 0u);
}

TEST(Crc32c, MaskIsTensorFlows) {
  // TensorFlow's crc32c::Mask: rotate right by 15, add 0xa282ead8 (mod 2^32).
  const uint32_t c = tb::crc32c("123456789", 9);
  EXPECT_EQ(tb::masked_crc32c("123456789", 9), static_cast<uint32_t>(((c >> 15) | (c << 17)) + 0xa282ead8u));
  EXPECT_NE(tb::masked_crc32c("123456789", 9), c);
}

TEST(TfRecord, FramesAndReadsBack) {
  const std::string a = "first payload", b(300, 'x'), empty;
  const std::string file = tb::frame_record(a) + tb::frame_record(b) + tb::frame_record(empty);
  EXPECT_EQ(file.size(), a.size() + b.size() + 3 * 16);
  const tb::RecordScan scan = tb::read_records(file);
  EXPECT_EQ(scan.error, "");
  ASSERT_EQ(scan.records.size(), 3u);
  EXPECT_EQ(scan.records[0].payload, a);
  EXPECT_EQ(scan.records[1].payload, b);
  EXPECT_EQ(scan.records[2].payload, empty);
  EXPECT_EQ(scan.records[1].offset, a.size() + 16);
  EXPECT_EQ(scan.valid_bytes, file.size());
}

TEST(TfRecord, EveryFlippedByteIsCaught) {
  const std::string file = tb::frame_record("loss 0.25") + tb::frame_record("accuracy 0.75");
  for (std::size_t i = 0; i < file.size(); ++i) {
    for (const unsigned char mask : {0x01, 0x80}) {
      std::string bad = file;
      bad[i] = static_cast<char>(static_cast<unsigned char>(bad[i]) ^ mask);
      const tb::RecordScan scan = tb::read_records(bad);
      EXPECT_NE(scan.error, "") << "byte " << i << " flipped with mask " << int(mask) << " went unnoticed";
      EXPECT_LE(scan.valid_bytes, i) << "the damaged record must not count as valid";
    }
  }
}

TEST(TfRecord, TornTailIsReported) {
  const std::string file = tb::frame_record("one") + tb::frame_record("two");
  for (std::size_t cut = 1; cut < 19; ++cut) {
    const tb::RecordScan scan = tb::read_records(file.substr(0, file.size() - cut));
    EXPECT_NE(scan.error, "") << "cut " << cut;
    ASSERT_EQ(scan.records.size(), 1u);
    EXPECT_EQ(scan.valid_bytes, 19u);
  }
}

TEST(EventProto, EncodesAndDecodes) {
  tb::Event e;
  e.wall_time = 1767225600.125;
  e.step = 300000000000;  // beyond 32 bits
  e.scalars = {{"train/loss", 0.1}, {"epoch/test_accuracy", 0.875}};
  const tb::Event d = tb::decode_event(tb::encode_event(e));
  EXPECT_EQ(d.wall_time, e.wall_time);
  EXPECT_EQ(d.step, e.step);
  ASSERT_EQ(d.scalars.size(), 2u);
  EXPECT_EQ(d.scalars[0].tag, "train/loss");
  EXPECT_EQ(d.scalars[0].value, static_cast<double>(0.1f)) << "simple_value is a float";
  EXPECT_EQ(d.scalars[1].value, 0.875);
  EXPECT_EQ(d.session_status, 0);

  tb::Event start;
  start.step = 7;
  start.session_status = 1;
  EXPECT_EQ(tb::decode_event(tb::encode_event(start)).session_status, 1);
  // Known bytes: wall_time 0 (field 1, fixed64), step 7 (field 2), session_log {status: START}.
  EXPECT_EQ(tb::encode_event(start), std::string("\x09\0\0\0\0\0\0\0\0\x10\x07\x3a\x02\x08\x01", 15));

  EXPECT_THROW(tb::decode_event(std::string("\x2a\x05\x0a", 3)), train::DataError) << "a field past the end";
}

TEST(EventFileWriter, WritesVersionStartAndScalars) {
  TempFolder dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string run = dir.path() + "/runs/a";  // parents are created
  {
    tb::EventFileWriter w(run, 0, "--tensorboard");
    w.write_scalars(1, 100.0, {{"train/loss", 2.5}});
    w.write_scalars(2, 101.0, {{"train/loss", 2.0}, {"train/lr", 1.0}});
    EXPECT_NE(train::files::basename(w.path()).find("events.out.tfevents."), std::string::npos);
  }
  const std::vector<tb::Event> events = events_in(run);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].file_version, tb::kFileVersion);
  EXPECT_EQ(events[1].session_status, 1);
  EXPECT_EQ(events[1].step, 1);
  EXPECT_EQ(events[3].step, 2);
  ASSERT_EQ(events[3].scalars.size(), 2u);
  EXPECT_EQ(events[3].scalars[1].tag, "train/lr");
  EXPECT_EQ(events[3].wall_time, 101.0);
}

TEST(EventFileWriter, ResumeCutsStaleStepsAndTornTail) {
  TempFolder dir;
  ASSERT_FALSE(dir.path().empty());
  std::string first;
  {
    // An attempt that logged steps 1..10, then was killed mid-record after its checkpoint at 6.
    tb::EventFileWriter w(dir.path(), 0, "--tensorboard");
    for (int s = 1; s <= 10; ++s) w.write_scalars(s, s, {{"train/loss", 1.0 / s}});
    first = w.path();
  }
  {
    std::ofstream torn(first, std::ios::app | std::ios::binary);
    torn << tb::frame_record(tb::encode_event(tb::Event{11, 11, "", {{"train/loss", 0.09}}, 0})).substr(0, 20);
  }
  std::string second;
  {
    tb::EventFileWriter w(dir.path(), 6, "--tensorboard");
    EXPECT_EQ(w.superseded().files, 1);
    EXPECT_EQ(w.superseded().records, 5) << "steps 7..10 and the torn record";
    EXPECT_EQ(w.superseded().last_step, 10);
    for (int s = 7; s <= 12; ++s) w.write_scalars(s, 100 + s, {{"train/loss", 1.0 / s}});
    second = w.path();
  }
  EXPECT_LT(first, second) << "the resumed attempt's file sorts after the first";
  const std::vector<tb::Event> events = events_in(dir.path());
  const std::vector<int64_t> want = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  EXPECT_EQ(scalar_steps(events), want) << "one line: no step twice, none missing";
  // The resumed file announces the restart at step 7, for a TensorBoard that read the stale steps.
  bool start_at_7 = false;
  for (const tb::Event& e : events) start_at_7 = start_at_7 || (e.session_status == 1 && e.step == 7);
  EXPECT_TRUE(start_at_7);
}

TEST(EventFileWriter, BadFolderNamesItAndHints) {
  TempFolder dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string file = dir.path() + "/plain";
  std::ofstream(file) << "x";
  try {
    tb::EventFileWriter w(file, 0, "--tensorboard");
    FAIL() << "a file is not a folder";
  } catch (const train::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--tensorboard " + file + ": expected a folder"), std::string::npos) << e.what();
    EXPECT_NE(e.hint(), "");
  }
  try {
    tb::EventFileWriter w(file + "/sub", 0, "--tensorboard");
    FAIL() << "a folder under a file can't be made";
  } catch (const train::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--tensorboard " + file + "/sub: expected a folder that can be created"),
              std::string::npos)
        << e.what();
    EXPECT_NE(e.hint(), "");
  }
}
