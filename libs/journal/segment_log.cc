#include "libs/journal/segment_log.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "libs/core/status_macros.h"
#include "libs/journal/record_fields.h"
#include "spdlog/spdlog.h"

namespace corral {
namespace {

constexpr size_t kHeader = 8;  // u32 length, u32 crc32 of the bytes, little-endian

uint32_t Crc(absl::string_view bytes) {
  return static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size())));
}

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Errno(absl::StrCat("cannot read journal segment ", path));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseSegment(absl::string_view bytes, const std::string& name) {
  std::vector<std::string> records;
  size_t at = 0;
  while (bytes.size() - at >= kHeader) {
    const uint32_t length = LoadLittleEndian<uint32_t>(bytes.data() + at);
    const uint32_t crc = LoadLittleEndian<uint32_t>(bytes.data() + at + 4);
    if (length == 0) {  // no record is empty: zeros, where a machine crash left blocks unwritten
      spdlog::warn("journal segment {}: no record at offset {}; the last {} bytes are dropped", name, at,
                   bytes.size() - at);
      return records;
    }
    if (bytes.size() - at - kHeader < length) {  // cut short: never acknowledged
      spdlog::warn("journal segment {}: dropped a record cut short at offset {} ({} of {} bytes written)", name, at,
                   bytes.size() - at - kHeader, length);
      return records;
    }
    const absl::string_view record = bytes.substr(at + kHeader, length);
    const bool last = at + kHeader + length == bytes.size();
    if (Crc(record) != crc) {
      if (last) {  // a torn final write
        spdlog::warn("journal segment {}: dropped a torn last record at offset {}", name, at);
        return records;
      }
      return absl::DataLossError(absl::StrCat("journal segment ", name, " is damaged at offset ", at,
                                              " (checksum mismatch); move it aside to start without it"));
    }
    records.emplace_back(record);
    at += kHeader + length;
  }
  if (at != bytes.size()) {
    spdlog::warn("journal segment {}: dropped a record header cut short at offset {}", name, at);
  }
  return records;
}

absl::StatusOr<std::unique_ptr<SegmentLog>> SegmentLog::Open(std::string prefix, int64_t segment_bytes,
                                                             std::vector<Segment>* left_over) {
  std::unique_ptr<SegmentLog> log(new SegmentLog(std::move(prefix), segment_bytes));
  const std::filesystem::path base(log->prefix_);
  const std::filesystem::path dir = base.has_parent_path() ? base.parent_path() : std::filesystem::path(".");
  const std::string stem = base.filename().string() + ".";
  std::vector<int64_t> numbers;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t n = 0;
    if (name.rfind(stem, 0) == 0 && absl::SimpleAtoi(name.substr(stem.size()), &n) && n > 0) numbers.push_back(n);
  }
  if (ec) return absl::UnavailableError(absl::StrCat("cannot list ", dir.string(), ": ", ec.message()));
  std::sort(numbers.begin(), numbers.end());
  for (int64_t n : numbers) {
    Segment segment{n, log->PathOf(n), {}};
    CORRAL_ASSIGN_OR_RETURN(std::string bytes, ReadFile(segment.path));
    CORRAL_ASSIGN_OR_RETURN(segment.records, ParseSegment(bytes, segment.path));
    left_over->push_back(std::move(segment));
  }
  CORRAL_RETURN_IF_ERROR(log->Start(numbers.empty() ? 1 : numbers.back() + 1));
  return log;
}

std::string SegmentLog::PathOf(int64_t number) const { return absl::StrCat(prefix_, ".", number); }

absl::Status SegmentLog::Start(int64_t number) {
  const std::string path = PathOf(number);
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0600));
  if (!fd.valid()) return Errno(absl::StrCat("cannot create journal segment ", path));
  fd_ = std::move(fd);
  number_ = number;
  size_ = 0;
  return absl::OkStatus();
}

absl::Status SegmentLog::Append(absl::string_view record) {
  if (!broken_.ok()) return broken_;
  if (record.empty()) return absl::InvalidArgumentError("a journal record must not be empty");
  frame_.clear();
  PutLittleEndian(frame_, static_cast<uint32_t>(record.size()));
  PutLittleEndian(frame_, Crc(record));
  frame_.append(record.data(), record.size());
  size_t done = 0;
  while (done < frame_.size()) {
    const ssize_t n = ::write(fd_.get(), frame_.data() + done, frame_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status error = Errno(absl::StrCat("writing journal segment ", PathOf(number_)));
      // Cut the partial frame off so later records stay readable; failing that, this segment ends here (a frame
      // cut short ends its segment on replay) and is sealed like a full one.
      if (::ftruncate(fd_.get(), size_) != 0) {
        sealed_.push_back(number_);
        if (absl::Status started = Start(number_ + 1); !started.ok()) {
          broken_ = absl::UnavailableError(absl::StrCat("the journal's log cannot be written: ", started.message()));
        }
      }
      return error;
    }
    done += static_cast<size_t>(n);
  }
  size_ += static_cast<int64_t>(frame_.size());
  if (size_ >= segment_bytes_) {
    const int64_t full = number_;
    // The record is written either way: if no new segment can be made, this one grows and the next append retries.
    if (Start(number_ + 1).ok()) sealed_.push_back(full);
  }
  return absl::OkStatus();
}

void SegmentLog::Remove(int64_t number) const { ::unlink(PathOf(number).c_str()); }

}  // namespace corral
