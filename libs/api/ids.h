// Ids as common.proto ("Ids") defines them: [A-Za-z0-9_:-], 1..128 characters, never '.' (which separates an
// id from the MAC in tokens) nor '/' (ids name files and directories).
#pragma once

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace corral {

inline bool IsValidId(absl::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != ':' && c != '-') return false;
  }
  return true;
}

// INVALID_ARGUMENT naming `field` for anything else.
inline absl::Status ValidateId(absl::string_view field, absl::string_view id) {
  if (IsValidId(id)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, " must be 1-128 characters of [A-Za-z0-9_:-]"));
}

// Label keys (sandbox, session and batch labels): 1-63 characters of [a-z0-9_./-].
inline bool IsValidLabelKey(absl::string_view key) {
  if (key.empty() || key.size() > 63) return false;
  for (char c : key) {
    if (!absl::ascii_islower(static_cast<unsigned char>(c)) && !absl::ascii_isdigit(static_cast<unsigned char>(c)) &&
        c != '_' && c != '.' && c != '/' && c != '-') {
      return false;
    }
  }
  return true;
}

// Labels (batch, session and sandbox labels): keys as IsValidLabelKey, values at most 256 bytes. INVALID_ARGUMENT
// naming `field` and the key for anything else. `Map` is any map of strings (std::map, a proto map).
inline constexpr size_t kMaxLabelValue = 256;
template <typename Map>
absl::Status ValidateLabels(absl::string_view field, const Map& labels) {
  for (const auto& [key, value] : labels) {
    if (!IsValidLabelKey(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": key '", key, "' must be 1-63 characters of [a-z0-9_./-]"));
    }
    if (value.size() > kMaxLabelValue) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "['", key, "'] is ", value.size(), " bytes; at most ", kMaxLabelValue));
    }
  }
  return absl::OkStatus();
}

// Environment variable names: [A-Za-z_][A-Za-z0-9_]*.
inline bool IsValidEnvName(absl::string_view name) {
  if (name.empty() || absl::ascii_isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

}  // namespace corral
