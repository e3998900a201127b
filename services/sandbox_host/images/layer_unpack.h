// Unpacks one OCI image layer (a tar changeset, gzip/zstd/uncompressed) into a directory the way overlayfs wants a
// lower layer: `.wh.NAME` entries become whiteouts (character device 0:0), `.wh..wh..opq` marks its directory
// opaque (trusted.overlay.opaque=y). Nothing in a layer can write outside its directory: every path is resolved by
// the kernel with openat2(RESOLVE_IN_ROOT) — `..`, absolute paths and symlinks (final or intermediate, absolute or
// relative) all stay inside, as if the directory were the root — and `..` components are refused outright.
// Device nodes are skipped (a sandbox gets its own minimal /dev); `trusted.*` and `security.*` xattrs are dropped
// (a layer must not forge overlay metadata or file capabilities). Plain C++, no gRPC. Thread-safe (no shared state).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace corral::sandbox {

struct LayerLimits {
  uint64_t max_bytes = 16ULL << 30;  // file contents written, in total (a decompression bomb stops here)
  uint64_t max_entries = 2'000'000;
};

struct LayerStats {
  uint64_t entries = 0;
  uint64_t bytes = 0;            // file contents written
  uint64_t whiteouts = 0;        // `.wh.` entries, opaque markers included
  uint64_t skipped_devices = 0;  // character and block devices not created
};

// OK when `dir` may hold unpacked layers; FAILED_PRECONDITION when it is on overlayfs (a container's own root,
// say), which neither keeps whiteouts and trusted.overlay.* xattrs nor serves as an overlay's layer.
absl::Status CheckLayerFilesystem(const std::string& dir);

// Reads the layer from `fd` (a tar stream, optionally compressed; read to its end) into `dir`, an existing
// directory that should be empty. Files keep the layer's owners, modes (set-id bits included: sandboxes mount
// layers nosuid) and times. INVALID_ARGUMENT naming the entry for a `..` component, a hard link to a missing or
// non-regular file, or a malformed archive; RESOURCE_EXHAUSTED when `limits` would be passed. On an error the
// directory holds a partial layer: the caller discards it.
absl::StatusOr<LayerStats> UnpackLayer(int fd, const std::string& dir, const LayerLimits& limits = {});

// Turns a sandbox's overlay upper directory (the sandbox gone) into a lower layer like the unpacked ones: what
// belongs to the sandbox's pool uid/gid or its block outside goes back to the ids it stood for inside
// (linux/sub_ids.h: layers hold image ids; each sandbox idmaps them anew), overlayfs's own bookkeeping xattrs go (the
// opaque marker stays), and the directory is synced (the sandbox's overlay was volatile). Whiteouts are already in a
// lower layer's format. Counts entries and file bytes. INTERNAL naming the entry that could not be changed.
absl::StatusOr<LayerStats> AdoptUpperAsLayer(const std::string& dir, uid_t pool_uid, gid_t pool_gid, uid_t image_uid,
                                             gid_t image_gid);

}  // namespace corral::sandbox
