// Content digests of protobuf messages: deterministic bytes (map fields in key order) and their SHA-256, for
// keys that must be equal exactly when the content is (template keys and digests, batch digests).
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace corral {

// The message serialized deterministically.
std::string DeterministicBytes(const google::protobuf::Message& message);
// Lowercase hex of the SHA-256 of `bytes`, its first `digest_bytes` bytes (at most 32).
std::string Sha256Hex(absl::string_view bytes, size_t digest_bytes = 32);

}  // namespace corral
