// The fields of a journal record (the unit Journal::Append logs and its Applier applies): fixed 64-bit
// little-endian integers and length-prefixed byte strings, written in order and read back in the same order.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace corral {

inline void PutRecordU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

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
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(rest_[i])) << (8 * i);
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
