// Pulling an image from a registry into the ImageStore: the manifest by tag or digest (an index or manifest
// list resolved to linux/amd64), then the config and every layer the store lacks, each verified against its
// digest (and size) as it streams in; then the image is added as an import adds one. A digest in the reference
// pins the content: a registry answering anything else is refused. Blocking (an image worker). Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "services/sandbox_host/images/image_store.h"
#include "services/sandbox_host/images/registry_client.h"

namespace corral::sandbox {

struct PullProgress {
  std::string step;          // what is being fetched: "manifest", "config", "layer sha256:…"
  uint64_t done_bytes = 0;   // of the blobs to fetch
  uint64_t total_bytes = 0;  // known once the manifest is in
};

class ImagePuller {
 public:
  ImagePuller(ImageStore* store, RegistryOptions options) : store_(store), client_(std::move(options)) {}

  // The image `ref` names, pulled (the blobs the store already holds are not fetched again) and named `ref`
  // normalized (docker.io/library/debian:latest for "debian"). INVALID_ARGUMENT for a malformed reference or
  // document, or content that is not its digest; the registry's errors as RegistryClient::Get returns them;
  // NOT_FOUND when the image has no linux/amd64 manifest. `progress` is called as bytes come (may be empty).
  // Pulls of one name run one at a time; a pull that waited for another of its name which succeeded meanwhile
  // returns that image (a batch of episodes asking one host for one image fetches it once).
  absl::StatusOr<Image> Pull(const std::string& ref, const std::function<void(const PullProgress&)>& progress);

 private:
  absl::StatusOr<Image> PullLocked(const ImageReference& ref, const std::function<void(const PullProgress&)>& progress);

  ImageStore* const store_;
  RegistryClient client_;
  absl::Mutex mu_;
  struct Name {
    absl::Mutex pulling;              // held for the pull
    std::atomic<uint64_t> successes;  // successful pulls so far
  };
  std::map<std::string, std::shared_ptr<Name>> names_ ABSL_GUARDED_BY(mu_);  // normalized name
};

}  // namespace corral::sandbox
