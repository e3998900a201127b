// Templates kept by this host: a home built once (by a caller-supplied build step) and cloned into new
// sandbox homes. Keyed by the client's content hash; the host's own digest of the request tells a repeat
// (same content: returns the template) from a conflict (ALREADY_EXISTS). Concurrent prepares of one key build
// it once and all get that build's outcome; a failed build keeps nothing. Plain C++: no gRPC.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "libs/core/clock.h"
#include "services/sandbox_host/linux/tree_copy.h"
#include "services/sandbox_host/metrics.h"

namespace corral::sandbox {

enum class TemplateState { kBuilding, kReady };
enum class CloneMethod { kCopy, kReflink };

// A ready template's files. Its directory is removed with it: once the template is deleted (or failed to
// build) and no clone in progress holds it any more.
struct TemplateImage {
  std::string key;
  std::string dir;           // a home to clone, or (image_digest set) a layer to mount above the image's
  std::string image_digest;  // the image it was built on, for templates on images
  CloneMethod method = CloneMethod::kCopy;
  mutable std::atomic<int> sandboxes{0};  // live sandboxes cloned from it
  ~TemplateImage();
};

struct TemplateInfo {
  std::string key;
  std::string digest;
  TemplateState state = TemplateState::kBuilding;
  uint64_t size_bytes = 0;
  CloneMethod method = CloneMethod::kCopy;
  int sandboxes = 0;
  absl::Time create_time;
  absl::Duration build_duration;
  absl::Time last_used;
  std::string image_digest;  // built on this image (a layer), else empty (a home)
};

struct TemplateLimits {
  int64_t max_templates = 64;
  uint64_t max_bytes = 20ULL << 30;
};

// Thread-safe. Builds run on their own threads; the destructor cancels them and waits for them to end.
class TemplateStore {
 public:
  // `dir` is emptied: templates do not survive a restart (nor do sandboxes). `metrics` may be null.
  TemplateStore(std::string dir, TemplateLimits limits, Clock* clock, SandboxHostMetrics* metrics = nullptr);
  ~TemplateStore();  // Stop()
  // Cancels the builds in progress (their setup commands killed) and waits for them to end. Idempotent.
  void Stop();

  // Fills the (new, empty) directory it is given and says what it copied; kept when it returns OK. Should
  // return soon (CANCELLED) once `cancelled` turns true (notified: a build may block in cancelled.wait(false)):
  // the store is shutting down.
  using BuildFn = std::function<absl::StatusOr<CopyStats>(const std::string& dir, const std::atomic<bool>& cancelled)>;
  using Done = std::function<void(absl::StatusOr<TemplateInfo>)>;
  // Calls `done` (perhaps at once, perhaps on a build thread) with the READY template, or: ALREADY_EXISTS for
  // the key with another digest, RESOURCE_EXHAUSTED when max_templates / max_bytes would be passed, or the
  // build's own error (nothing is kept, so a later prepare retries).
  // `image_digest`: the image a template on an image is built on (its build fills the directory with a layer).
  void Prepare(const std::string& key, const std::string& digest, BuildFn build, Done done,
               const std::string& image_digest = "");

  using ReadyFn = std::function<void(absl::StatusOr<std::shared_ptr<const TemplateImage>>)>;
  // Calls `ready` once `key` is not building any more: with its image, or NOT_FOUND.
  void WhenReady(const std::string& key, ReadyFn ready);
  // The READY template's image (and marks it used). NOT_FOUND for unknown or still building keys.
  absl::StatusOr<std::shared_ptr<const TemplateImage>> Acquire(const std::string& key);

  std::vector<TemplateInfo> List() const;  // by key
  // NOT_FOUND for an unknown key; FAILED_PRECONDITION while it builds. New creates naming it fail at once.
  absl::Status Delete(const std::string& key);

 private:
  struct Entry {
    TemplateInfo info;
    std::shared_ptr<TemplateImage> image;  // when READY
    std::vector<Done> waiters;
    std::vector<ReadyFn> ready_waiters;
  };
  void Build(std::string key, BuildFn build);
  TemplateInfo Snapshot(const Entry& entry) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string dir_;
  const TemplateLimits limits_;
  Clock* const clock_;
  SandboxHostMetrics* const metrics_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t next_build_ ABSL_GUARDED_BY(mu_) = 0;
  int active_builds_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> cancelled_{false};
};

}  // namespace corral::sandbox
