// TensorBoard's event files without TensorFlow or protobuf: CRC-32C, TFRecord framing, the few
// fields of the Event, Summary and SessionLog protos that scalars need (encoded and decoded by
// hand, docs/design.md says why), and a writer that keeps one run's folder free of stale steps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace train::tensorboard {

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum TFRecord uses.
uint32_t crc32c(const void* data, std::size_t size);

/// TFRecord's masked CRC-32C: ((crc >> 15) | (crc << 17)) + 0xa282ead8, so that a CRC stored
/// inside checksummed data does not checksum to a constant.
uint32_t masked_crc32c(const void* data, std::size_t size);

/// One TFRecord: the payload's length (uint64, little-endian), the masked CRC of those 8 bytes,
/// the payload, the masked CRC of the payload.
std::string frame_record(const std::string& payload);

/// One record of a TFRecord file, as read back.
struct Record {
  std::uint64_t offset = 0;  ///< where its length field starts in the file
  std::uint64_t end = 0;     ///< just past its data CRC
  std::string payload;
};

/// What read_records() found: the records up to the first damage, and the damage if any.
struct RecordScan {
  std::vector<Record> records;
  std::uint64_t valid_bytes = 0;  ///< the length of the undamaged prefix (the end of the last good record)
  std::string error;              ///< "" when every byte belongs to a record whose CRCs match; else what and where
};

/// Splits TFRecord bytes into records, checking both CRCs of each. Stops at the first record that
/// is truncated or whose length or data CRC doesn't match, and says so in `error`.
RecordScan read_records(const std::string& bytes);

/// A scalar: TensorBoard's tag (e.g. "train/loss") and its value (stored as float32, as
/// TensorBoard's simple_value is).
struct Scalar {
  std::string tag;
  double value = 0;
};

/// The file_version every event file begins with ("brain.Event:2": SessionLog.START purges stale steps).
inline constexpr char kFileVersion[] = "brain.Event:2";

/// The fields of an Event proto this module writes (others are skipped when decoding).
struct Event {
  double wall_time = 0;           ///< seconds since the Unix epoch (field 1, double)
  std::int64_t step = 0;          ///< field 2
  std::string file_version;       ///< field 3, the first event of a file
  std::vector<Scalar> scalars;    ///< field 5: Summary.value[] with tag (1) and simple_value (2)
  int session_status = 0;         ///< field 7: SessionLog.status (1 = START), 0 when absent
};

/// Encodes an Event as protobuf bytes (what a TFRecord of an event file holds).
std::string encode_event(const Event& event);

/// Decodes protobuf bytes into the fields above.
/// @throws train::DataError when the bytes are not a well-formed protobuf message.
Event decode_event(const std::string& payload);

/// What a folder's earlier event files held past the step a run starts from, and what was cut.
struct Superseded {
  int files = 0;          ///< event files that were cut short
  int records = 0;        ///< records dropped (steps after the start step, or damaged tails)
  std::int64_t last_step = 0;  ///< the highest step seen in the dropped records
};

/// Writes one event file into a run folder (rank 0 of a run). A run that starts at step S
/// (0, or the step a checkpoint resumes from) owns every step after S: the constructor first cuts
/// the folder's earlier event files back to their records up to S (and drops a torn last record),
/// then opens a new file named events.out.tfevents.<time>.<host>.<pid>.<n> that sorts after them,
/// and writes the file_version event and a SessionLog.START at step S + 1, so that a TensorBoard
/// that already read stale steps purges them. Every write() reaches the file before it returns,
/// so a killed job keeps what it logged.
class EventFileWriter {
 public:
  /// @param dir the run folder (created with its parents when missing).
  /// @param start_step the last step already done (0 for a fresh run).
  /// @param option the flag the folder came from, for messages ("--tensorboard").
  /// @throws train::ConfigError when the folder can't be created or written, naming it.
  EventFileWriter(const std::string& dir, std::int64_t start_step, const std::string& option);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  /// Appends one Summary event with these scalars at `step`.
  /// @throws train::Error (a short write: disk full, folder gone), naming the file.
  void write_scalars(std::int64_t step, double wall_time, const std::vector<Scalar>& scalars);

  /// The file this writer appends to.
  const std::string& path() const { return path_; }
  /// What the constructor cut from the folder's earlier files.
  const Superseded& superseded() const { return superseded_; }

 private:
  void append(const Event& event);

  std::string path_;
  std::string option_;
  int fd_ = -1;
  Superseded superseded_;
};

/// Cuts the event files in `dir` back to their records with step <= `start_step`, dropping from the
/// first later (or damaged) record on. Files that aren't event files are left alone.
/// @throws train::Error when a file that must be cut can't be.
Superseded supersede_after(const std::string& dir, std::int64_t start_step, const std::string& option);

/// Event files of a folder (names containing "tfevents"), sorted as TensorBoard reads them.
std::vector<std::string> event_files(const std::string& dir);

}  // namespace train::tensorboard
