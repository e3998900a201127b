// The sandbox host's OCI images: blobs and unpacked layers in a content-addressed store under one directory,
// shared by every sandbox made from them and kept across restarts. An import verifies every blob against its
// digest while it streams in, picks the linux/amd64 manifest, and unpacks each layer once (a layer two images
// share is unpacked once). Plain C++, no gRPC. Thread-safe; imports may run concurrently.
//
//   DIR/blobs/sha256/HEX   manifests, configs and compressed layers, named by their digest
//   DIR/layers/HEX/        a layer unpacked (HEX: its blob's digest); overlayfs lower directories
//   DIR/images/HEX.json    an image (HEX: its manifest's digest): the names it goes by, when it came, its size
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "libs/core/clock.h"
#include "libs/core/unique_fd.h"
#include "services/sandbox_host/images/layer_unpack.h"
#include "services/sandbox_host/images/oci_image.h"

namespace corral::sandbox {

struct Image {
  std::string digest;               // the manifest's: sha256:…
  std::vector<std::string> refs;    // names it was imported as (registry/name:tag)
  std::vector<std::string> layers;  // layer blob digests, bottom first
  ImageConfig config;
  uint64_t size_bytes = 0;  // its layers unpacked (a layer shared with another image counts in both)
  absl::Time imported;
  absl::Time last_used;  // imported, or a sandbox made from it (not kept across restarts)
};

// A blob arriving in pieces (a registry download): hashed as it is written to a temporary file in the store,
// and stored under its digest by Commit only when the content is that digest. Dropped uncommitted, it leaves
// nothing behind. Not thread-safe.
class BlobWriter {
 public:
  ~BlobWriter();
  BlobWriter(const BlobWriter&) = delete;
  BlobWriter& operator=(const BlobWriter&) = delete;

  // RESOURCE_EXHAUSTED past the size the writer was opened with (or out of disk).
  absl::Status Write(absl::string_view piece);
  // INVALID_ARGUMENT when the content is not the digest, or not the announced size.
  absl::Status Commit();
  uint64_t bytes() const { return bytes_; }

 private:
  friend class ImageStore;
  BlobWriter(std::string digest, std::string path, std::string tmp, UniqueFd fd, int64_t size);

  const std::string digest_, path_, tmp_;
  UniqueFd fd_;
  const int64_t size_;  // < 0: unknown
  uint64_t bytes_ = 0;
  void* sha_;  // EVP_MD_CTX
  bool committed_ = false;
};

class ImageStore {
 public:
  // Loads the images `dir` holds from an earlier run; removes what a crash left half-written. `max_bytes` (0: no
  // limit) budgets the unpacked layers: past it, after an import, the least recently used images that no sandbox
  // uses are removed (never the one just imported).
  ImageStore(std::string dir, LayerLimits layer_limits, Clock* clock, uint64_t max_bytes = 0);

  // Imports an `oci-archive` (a tar of an OCI image layout, as `podman save --format oci-archive` or
  // `skopeo copy … oci-archive:` write it) read from `fd` to its end, naming it `ref` (empty: the layout's
  // org.opencontainers.image.ref.name annotation, else the digest only). A name moves from whatever image had it.
  // INVALID_ARGUMENT for a malformed archive or document, a blob whose content does not match its digest, or a
  // missing blob; NOT_FOUND when it holds no linux/amd64 image; RESOURCE_EXHAUSTED from the layer limits.
  absl::StatusOr<Image> ImportArchive(int fd, const std::string& ref);

  // OK when layers can be unpacked where the store lives (not on overlayfs): checked before a download.
  absl::Status CheckUsable() const;
  // Whether the blob is stored (content-addressed: it was verified when it came).
  bool HasBlob(const std::string& digest) const;
  // A stored manifest, index or config (at most 4 MiB). INVALID_ARGUMENT when the store lacks it.
  absl::StatusOr<std::string> ReadDocument(const std::string& digest) const;
  // A writer for the blob `digest` of `size` bytes (-1: unknown). INVALID_ARGUMENT for a malformed digest.
  absl::StatusOr<std::unique_ptr<BlobWriter>> NewBlob(const std::string& digest, int64_t size) const;
  // Adds the image an index (OCI index or Docker manifest list JSON, its descriptors pointing at stored blobs)
  // names, as ImportArchive does once the archive's blobs are stored: layers unpacked, `ref` given to it.
  absl::StatusOr<Image> AddImage(const std::string& index_json, const std::string& ref);

  // An anonymous file in the store's directory (O_TMPFILE: nothing is left of it if the host dies) to receive an
  // archive before ImportArchive reads it.
  absl::StatusOr<UniqueFd> NewImportFile() const;

  // By name or by manifest digest. NOT_FOUND otherwise.
  absl::StatusOr<Image> Find(const std::string& ref_or_digest) const;
  std::vector<Image> List() const;  // by digest
  uint64_t used_bytes() const;      // the unpacked layers, each counted once
  // Removes the image and every layer no other image uses. NOT_FOUND for an unknown name or digest;
  // FAILED_PRECONDITION while a sandbox uses it (Pin).
  absl::Status Remove(const std::string& ref_or_digest);
  // Marks the image (by digest) as used by one more sandbox, which Remove and the budget respect until the
  // matching Unpin; counts as a use for the LRU order.
  // NOT_FOUND for an unknown digest.
  absl::Status Pin(const std::string& digest);
  void Unpin(const std::string& digest);

  // The image's unpacked layers as overlayfs lowerdir wants them: top first.
  absl::StatusOr<std::vector<std::string>> LowerDirs(const std::string& digest) const;

 private:
  std::string BlobPath(const std::string& digest) const;
  std::string LayerDir(const std::string& digest) const;
  absl::StatusOr<std::string> ReadBlob(const std::string& digest, size_t max_bytes) const;
  absl::Status ReadArchiveBlobs(int fd, std::string* index_json);
  absl::StatusOr<Image> Resolve(const std::string& index_json, std::string ref);
  absl::StatusOr<uint64_t> EnsureLayer(const std::string& digest);
  absl::Status SaveRecord(const Image& image) const;
  void Load();
  const Image* FindLocked(const std::string& ref_or_digest) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void RemoveLocked(const Image& image) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t UsedBytesLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Removes least recently used, unpinned images other than `keep` until the layers fit the budget.
  void EnforceBudgetLocked(const std::string& keep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string dir_;
  const LayerLimits layer_limits_;
  const uint64_t max_bytes_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  std::map<std::string, Image> images_ ABSL_GUARDED_BY(mu_);          // by manifest digest
  std::map<std::string, int> pins_ ABSL_GUARDED_BY(mu_);              // sandboxes using an image, by digest
  std::map<std::string, uint64_t> layer_bytes_ ABSL_GUARDED_BY(mu_);  // unpacked size by layer digest
};

}  // namespace corral::sandbox
