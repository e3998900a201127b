// The fields of a journal record (the unit Journal::Append logs and its Applier applies): fixed 64-bit
// little-endian integers and length-prefixed byte strings, written in order and read back in the same order.
// The log's frames (segment_log.cc) use the same little-endian integers, 32 bits wide.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace corral {

// An unsigned integer, least significant byte first.
template <typename T>
void PutLittleEndian(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
template <typename T>
T LoadLittleEndian(const char* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

inline void PutRecordU64(std::string& out, uint64_t v) { PutLittleEndian(out, v); }

inline void PutRecordField(std::string& out, absl::string_view bytes) {
  PutRecordU64(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}

// Reads a record's fields; any read past its end leaves it !ok() (and reads as 0 / empty from then on).
class RecordReader {
 public:
  explicit RecordReader(absl::string_view bytes) : rest_(bytes) {}
  uint64_t U64() {
    if (rest_.size() < 8) return Fail();
    const uint64_t v = LoadLittleEndian<uint64_t>(rest_.data());
    rest_.remove_prefix(8);
    return v;
  }
  absl::string_view Field() {
    const uint64_t size = U64();
    if (!ok_ || rest_.size() < size) return Fail(), absl::string_view();
    absl::string_view field = rest_.substr(0, size);
    rest_.remove_prefix(size);
    return field;
  }
  bool ok() const { return ok_; }
  bool empty() const { return rest_.empty(); }

 private:
  uint64_t Fail() {
    ok_ = false;
    rest_ = {};
    return 0;
  }
  absl::string_view rest_;
  bool ok_ = true;
};

}  // namespace corral
