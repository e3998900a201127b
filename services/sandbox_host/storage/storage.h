// A sandbox's files, by storage kind (sandbox.h: StorageKind). Each kind builds them for a new sandbox (its
// directories, home, mount namespace, what Landlock lets it write, the environment that goes with them), and at
// a fork freezes what the sandbox wrote since its last fork into a layer (the sandbox's new generation is built
// on it at its next use), and retires the old generation once the new one has taken over; at a delete it gives
// back what it took. The manager does the rest the same way for every kind (uid, cgroup, rlimits, Landlock,
// tokens), and never asks which kind it holds.
//   kHome        a directory of the host: <root>/homes/<id>, a template copied in, task paths made empty.
//   kLayeredHome a forked home: the fork's layers under an upper layer of its own, an overlay in its own mount
//                namespace (fork/fork_layers.h); what a plain home becomes at its first fork.
//   kImageRoot   an image's layers (a template's above them, then a fork's) under a tmpfs upper, as "/".
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "libs/core/clock.h"
#include "services/sandbox_host/fork/fork_layers.h"
#include "services/sandbox_host/images/image_store.h"
#include "services/sandbox_host/linux/landlock.h"
#include "services/sandbox_host/metrics.h"
#include "services/sandbox_host/sandbox.h"

namespace corral::sandbox {

// What a new sandbox's files are made from.
struct Origin {
  std::shared_ptr<const TemplateImage> tmpl;  // a home to copy in, or a layer above `image`; null: none
  std::optional<Image> image;                 // its image: a kImageRoot
  LayerStack layers;                          // a fork's layers: a kLayeredHome, or above the image
  std::string forked_from;                    // a fork's child: its parent's id
  bool empty_tmp = false;                     // a fork's child: its /tmp starts empty
  // A parent's new generation at a fork: the generation it replaces (same id, uid, directory and cgroup).
  const Sandbox* previous = nullptr;

  StorageKind kind() const {
    return image ? StorageKind::kImageRoot : layers ? StorageKind::kLayeredHome : StorageKind::kHome;
  }
};

// A fork's freeze: the sandbox's layers with what it wrote since its last fork on top (`changed`), or as they
// were when it wrote nothing (the sandbox is then left as it is).
struct Frozen {
  LayerStack layers;
  bool changed = false;
};

// What the storage kinds work with; `images` and `layers` may be null when the host has no images or forks.
struct StorageParts {
  bool mount_namespaces = false;  // HostFeatures.mount_namespaces: a plain home gets a mount namespace
  ImageStore* images = nullptr;
  ForkLayers* layers = nullptr;
  SandboxHostMetrics* metrics = nullptr;
  Clock* clock = nullptr;
  bool carry = false;  // processes can be carried into forks (a plain home reserves its next directory)
};

// One storage kind. Thread-safe (it keeps no state of its own: the sandbox holds it).
class Storage {
 public:
  virtual ~Storage() = default;

  // Makes the files of `sb` (its id, uid, dir and spec set) from `origin`: home, home_fd, mount namespace (its
  // protections filled in) and the environment they imply, appended to base_env. On failure `sb` may hold part
  // of it: Teardown gives that back.
  virtual absl::Status Build(Sandbox& sb, const Origin& origin) = 0;
  // What Landlock lets the processes of `sb` write (and read) beyond the host's defaults.
  virtual void Confine(const Sandbox& sb, LandlockPolicy& policy) const = 0;
  // What the children (and the parent's new generation) of a fork of `sb` are made from, their layers aside.
  virtual absl::StatusOr<Origin> ForkOrigin(const Sandbox& sb) const = 0;
  // Freezes what `sb` wrote since its last fork into a layer, once nothing of it runs.
  virtual absl::StatusOr<Frozen> Freeze(Sandbox& sb) = 0;
  // A fork's child `to` of `from`: gives it what of `from`'s /tmp the layers it shares do not (by default, the
  // layers hold all of it).
  virtual absl::Status CarryTmp(const Sandbox& from, const Sandbox& to) const {
    (void)from;
    (void)to;
    return absl::OkStatus();
  }
  // The new generation built on the frozen layer has taken the place of `sb`: what only `sb` held goes.
  virtual void Retire(Sandbox& sb) = 0;
  // Gives back what Build took from the host's stores (its directory is removed by the caller, with it).
  virtual void Teardown(Sandbox& sb) = 0;
  // The disk what `sb` wrote takes: its home, or the writable layer above its fork layers, or an image
  // sandbox's upper layer and /tmp (the fork layers below it are measured apart: LayerBytes). Walks the files.
  virtual absl::StatusOr<uint64_t> OwnBytes(const Sandbox& sb) const = 0;
};

// The disk the tree of `dir` takes (TreeBytes), opened through `parent` when it is not -1. INTERNAL naming the
// directory when it cannot be opened.
absl::StatusOr<uint64_t> DirBytes(int parent, const std::string& dir);

std::unique_ptr<Storage> NewHomeStorage(const StorageParts& parts);
std::unique_ptr<Storage> NewLayeredHomeStorage(const StorageParts& parts);
std::unique_ptr<Storage> NewImageRootStorage(const StorageParts& parts);

}  // namespace corral::sandbox
