// The OCI image format's JSON documents, parsed and validated: an index (or a Docker manifest list) to pick the
// linux/amd64 manifest from, a manifest (its config and layers), and an image config (what a sandbox honours:
// Env, WorkingDir, User, Entrypoint, Cmd; the layers' diff ids). Plain C++: no I/O. Thread-safe (functions only).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace corral::sandbox {

// The most an image document (an index, a manifest, a config) may weigh.
inline constexpr uint64_t kMaxImageDocumentBytes = 4 << 20;

// OK for "sha256:" followed by 64 lowercase hex digits (the only algorithm accepted).
absl::Status ValidateDigest(absl::string_view digest);
// "sha256:<hex>" of `bytes`.
std::string Sha256Digest(absl::string_view bytes);

struct Descriptor {
  std::string media_type;
  std::string digest;
  int64_t size = 0;
  std::string platform;  // "os/architecture[/variant]" when the index gave one
  std::string ref_name;  // the org.opencontainers.image.ref.name annotation, when present
};

struct Manifest {
  Descriptor config;
  std::vector<Descriptor> layers;  // bottom first
};

struct ImageConfig {
  std::vector<std::string> env;  // KEY=VALUE
  std::string working_dir;
  std::string user;
  std::vector<std::string> entrypoint;
  std::vector<std::string> cmd;
  std::vector<std::string> diff_ids;  // one per layer: the digest of its uncompressed tar
};

bool IsIndexMediaType(absl::string_view media_type);

// The descriptors of an image index (OCI) or manifest list (Docker). INVALID_ARGUMENT for malformed JSON, a
// missing or malformed digest, or an empty list.
absl::StatusOr<std::vector<Descriptor>> ParseIndex(absl::string_view json);
// The manifest for linux/amd64 among `manifests` (an entry without a platform counts as one, as in a single-image
// OCI layout); NOT_FOUND naming the platforms there are.
absl::StatusOr<Descriptor> SelectPlatform(const std::vector<Descriptor>& manifests);
// INVALID_ARGUMENT for malformed JSON, a missing config, a bad digest, or a layer media type that is not a tar
// (plain, gzip or zstd; foreign/non-distributable layers included).
absl::StatusOr<Manifest> ParseManifest(absl::string_view json);
// INVALID_ARGUMENT for malformed JSON or an OS other than linux.
absl::StatusOr<ImageConfig> ParseImageConfig(absl::string_view json);

}  // namespace corral::sandbox
