// The read-only layers forked sandboxes share. A fork freezes the parent's writes — its whole home the first
// time (one rename), its upper layer after that — into a layer under <root>/forks, which the parent and each
// child then mount below a fresh upper layer of their own: nothing is copied, whatever the home's size. A layer
// lists the layer it was written over, and is removed when the last sandbox using it (directly or below
// another) is gone. Layers live only as long as the host process: a restarted host wipes <root>/forks (no
// sandbox survives a restart). Thread-safe (a layer is immutable; shared_ptr counts its users).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "libs/core/unique_fd.h"

namespace corral::sandbox {

class ForkLayers;

struct ForkLayer {
  std::string dir;  // <root>/forks/<id>
  uid_t owner = 0;  // the pool uid its files belong to
  std::shared_ptr<const ForkLayer> below;
  int depth = 1;  // layers in the stack, this one included
  // An image sandbox's layer: its former tmpfs upper, mounted at `dir` in the holder mount namespace (the files
  // are in `dir`/upper there); null for a directory on disk.
  const ForkLayers* held_by = nullptr;
  // The disk its files take, once measured (LayerBytes; a held layer's when it was frozen); -1 until then.
  mutable std::atomic<int64_t> bytes{-1};
  ~ForkLayer();  // removes `dir` (the last user is gone); a held layer is unmounted first
};
using LayerStack = std::shared_ptr<const ForkLayer>;

// The layers of `top`, top first.
std::vector<const ForkLayer*> LayersOf(const LayerStack& top);

// The disk the layers of `top` take together, each measured once (a walk of its files, the first time; layers
// never change): what the sandboxes using them share. -1 when one cannot be measured.
int64_t SharedLayerBytes(const LayerStack& top);

// The layers of `top`, top first, as the sandbox of `uid` mounts them: each with the user namespace that shows
// its owner's files as `uid`'s (-1: `uid`'s own files), kept open in `userns` (one per owner) until mounted.
struct LayerMount {
  std::string dir;
  int userns_fd = -1;
};
absl::StatusOr<std::vector<LayerMount>> LayerMounts(const LayerStack& top, uid_t uid,
                                                    std::map<uid_t, UniqueFd>& userns);

// Where layers live: <root>/forks, wiped at construction (what a killed host left). The count is for metrics.
class ForkLayers {
 public:
  explicit ForkLayers(std::string root);
  const std::string& dir() const { return dir_; }
  // <root>/mnt: where every layered sandbox attaches its layers (l0, l1, ...) in its own mount namespace before
  // its overlay takes them. Shared: a mount made there in one sandbox's namespace is seen in no other, and the
  // directories (empty on the host) are made once rather than per sandbox.
  const std::string& staging() const { return staging_; }

  // The first fork of a plain sandbox: its home directory becomes the layer, and an empty directory takes its
  // place at the same path, holding `rw/upper` (mode 0700, owned by `owner`) and `rw/work`. One atomic exchange:
  // the home's path always exists.
  // `premade`: that directory (ReserveHomeDir) takes its place rather than a new one.
  absl::StatusOr<LayerStack> FreezeHome(const std::string& home, uid_t owner, const std::string& premade = "");
  // An empty directory (root's, 0700) that a later FreezeHome puts in a home's place: made at the sandbox's
  // creation where processes may be carried, so that their Landlock rules can name it.
  absl::StatusOr<std::string> ReserveHomeDir();
  // A later fork: `rw_dir`/upper (the writes since the last fork, over `below`) becomes the layer, and `rw_dir`
  // gets an empty upper and work directory (the old work directory is set aside until ClearFrozenWork).
  absl::StatusOr<LayerStack> FreezeUpper(const std::string& rw_dir, uid_t owner, LayerStack below);
  // After FreezeUpper, once the sandbox's new generation has taken over: the old work directory goes.
  static void ClearFrozenWork(const std::string& rw_dir);

  // Image sandboxes, whose upper layer is a tmpfs no host path reaches: `rw_tree` (a detached mount of it, see
  // ImageRoot) is attached in the holder mount namespace, where the sandboxes built on it clone it from
  // (ImageRootSpec.held_layers). The host's own mounts never change. FAILED_PRECONDITION without a holder.
  // `rw_tree` is left as it is when the freeze fails (the caller drops it once it succeeds).
  absl::StatusOr<LayerStack> FreezeTree(const UniqueFd& rw_tree, uid_t owner, LayerStack below);
  // The holder mount namespace (made at construction; -1 when mount namespaces are unavailable) and the host's.
  int holder_ns() const { return holder_.get(); }
  int host_ns() const { return host_.get(); }
  // Unmounts a held layer (its destructor's work).
  void Unmount(const std::string& dir) const;

 private:
  std::string NewDir();
  // Undoes a FreezeUpper that could not finish: the layer goes back to be `rw_dir`'s upper directory.
  static absl::Status PutBack(const std::string& rw_dir, const LayerStack& layer);

  const std::string dir_;
  const std::string staging_;
  UniqueFd host_, holder_;
};

// True when the directory `path` below `dirfd` has no entries (false when it cannot be read).
bool IsEmptyDirAt(int dirfd, const char* path);

// Makes `rw_dir`/upper (0700, owned by `owner`) and `rw_dir`/work (0700, root's), creating `rw_dir` if missing.
absl::Status MakeUpper(const std::string& rw_dir, uid_t owner);

}  // namespace corral::sandbox
