// A sandbox's persistent private filesystem view (and, for network policy `none`, its own network namespace):
// a short-lived helper (sharing the host's memory and descriptors) unshares, sets the view up and opens the
// namespaces; the host keeps them alive by those descriptors after the helper exits;
// every exec joins them with setns. Inside: a fresh procfs mounted hidepid=invisible, /tmp bound to
// $HOME/.tmp, each task path /P bound to $HOME/P. The host's own /proc and mounts are never changed.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "libs/core/unique_fd.h"

namespace corral::sandbox {

struct SandboxNamespaces {
  UniqueFd mnt;        // the mount namespace (always set on success)
  UniqueFd net;        // the network namespace, when a private one was asked for
  UniqueFd proc_root;  // O_PATH of the sandbox's own /proc, for Landlock rules (its inodes differ from the host's)
  bool hidepid = false;
  // A layered home only: the overlay's root (O_RDONLY: how the host reaches the files), and the directories the
  // sandbox may write as its processes see them (O_PATH: the home, .tmp and the task paths), for Landlock.
  UniqueFd home;
  std::vector<UniqueFd> write_roots;
};

// A home made of layers (a forked sandbox's): read-only layers, top first, under a writable upper directory, as
// an overlay mounted on the home inside the sandbox's mount namespace only. Each layer's files are shown as the
// sandbox's own through an idmapped mount when another uid wrote them.
struct LayeredHome {
  struct Layer {
    std::string dir;
    int userns_fd = -1;  // maps the layer's owner to the sandbox's uid (CreateUserNamespace); -1: its own files
  };
  std::vector<Layer> layers;
  std::string upper, work;  // empty directories on one filesystem; the upper's root is the home's root
  std::string staging;      // its l0, l1, ... (made when missing): where the layers are attached in the new mount
                            // namespace before the overlay takes them
};

// Runs `fn(arg)` in a helper that shares this process's memory and descriptor table (clone CLONE_VM |
// CLONE_VFORK | CLONE_FILES, the caller suspended until it exits) and waits for it. `fn` may make system calls
// only (no allocation) and reports through `arg`. INTERNAL when the helper cannot start.
absl::Status RunVforkHelper(int (*fn)(void*), void* arg);

// Mount trees, for such helpers (system calls only):
// a detached clone of the mount tree at `path` (of the caller's mount namespace), or -1;
int CloneTree(const char* path);
// attaches detached `tree` at `target` read-only, nosuid and nodev, idmapped through `userns_fd` when it is not
// -1; closes `tree` (false when it is -1 or a step fails);
bool AttachTree(int tree, int userns_fd, const char* target);
// attaches detached `tree` at `target` as it is (writable); closes `tree`.
bool MoveTree(int tree, const char* target);

// True when this process may create mount namespaces and join them (CAP_SYS_ADMIN, CAP_SYS_CHROOT, and no
// seccomp/LSM denial).
bool CanUseMountNamespaces();

// Detached clones of the mount trees at `paths` as mount namespace `mnt_fd` has them (open_tree with
// OPEN_TREE_CLONE, recursive). INTERNAL naming the path that failed.
absl::StatusOr<std::vector<UniqueFd>> CloneTreesIn(int mnt_fd, const std::vector<std::string>& paths);

// A mount namespace for a carried process (linux/transit_gate.h): a copy of `base_mnt_fd` (the namespace the
// process is in) owned by user namespace `userns_fd` (where the process can join it), with each of `trees`
// (detached) mounted at its path over what was there. A process under Landlock may not mount; it may join a
// namespace made for it.
absl::StatusOr<UniqueFd> CarryMountNamespace(int base_mnt_fd, int userns_fd, const std::vector<int>& trees,
                                             const std::vector<std::string>& paths);

// Sets the loopback interface of the calling process's network namespace up. System calls only
// (async-signal-safe): for helpers between clone and exit.
bool BringUpLoopback();

// `home` must contain `.tmp` and one directory per task path (with `layered`: the overlay must); task path mount
// points are created (empty, root-owned) on the host if missing. With `layered`, the overlay is mounted on
// `home` first. INTERNAL naming the step that failed.
absl::StatusOr<SandboxNamespaces> CreateNamespaces(const std::string& home, const std::vector<std::string>& task_paths,
                                                   bool private_network, const LayeredHome* layered = nullptr);

}  // namespace corral::sandbox
