// Append-only segment files (`<prefix>.1`, `<prefix>.2`, ...) of framed records: [length][crc32][bytes]. A
// Journal with a record log (journal.h) writes each record here before queueing its SQLite write, so the record is
// durable against the process being killed as soon as Append returns (it is in the kernel's page cache), without
// waiting for a commit or a checkpoint; the segments are deleted once SQLite has committed what they hold.
// Append is not thread-safe (the Journal calls it under its lock); Remove and PathOf read only what Open fixed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "libs/core/unique_fd.h"

namespace corral {

class SegmentLog {
 public:
  struct Segment {
    int64_t number = 0;
    std::string path;
    std::vector<std::string> records;
  };

  // Reads the segments left from before (oldest first), then starts a new one after them. A record cut short at
  // the end of a segment, or the last one failing its checksum (the process died while writing it, so it was
  // never acknowledged), ends that segment with a warning; a record failing its checksum with more after it is
  // DATA_LOSS naming the file and offset. `segment_bytes`: a segment is sealed
  // and the next one started once it holds at least this much.
  static absl::StatusOr<std::unique_ptr<SegmentLog>> Open(std::string prefix, int64_t segment_bytes,
                                                          std::vector<Segment>* left_over);

  // Writes one record (not empty: a zero length marks the end of the data, as in a zero-filled tail after a
  // machine crash). On failure (disk full) the segment is cut back to where it was and the error returned; if it
  // cannot be, the segment ends there (replay stops at the frame cut short) and the next record starts a new one.
  // When no new segment can be made either, every later Append fails.
  absl::Status Append(absl::string_view record);
  // The segments closed since the last call (full, or ended by a failed write), oldest first: none takes another
  // record, and each can go once what it holds is committed.
  std::vector<int64_t> TakeSealed() { return std::exchange(sealed_, {}); }
  // Deletes segment `number` (its records are committed elsewhere).
  void Remove(int64_t number) const;
  std::string PathOf(int64_t number) const;
  int64_t current() const { return number_; }

 private:
  SegmentLog(std::string prefix, int64_t segment_bytes) : prefix_(std::move(prefix)), segment_bytes_(segment_bytes) {}
  absl::Status Start(int64_t number);

  const std::string prefix_;
  const int64_t segment_bytes_;
  int64_t number_ = 0;
  int64_t size_ = 0;
  UniqueFd fd_;
  std::string frame_;  // reused: one write() per record
  std::vector<int64_t> sealed_;
  absl::Status broken_;  // set when a failed write could neither be cut off nor continued in a new segment
};

// The records of one segment file's bytes (exposed for tests): see Open for how damage is treated.
absl::StatusOr<std::vector<std::string>> ParseSegment(absl::string_view bytes, const std::string& name);

}  // namespace corral
