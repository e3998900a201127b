// What makes a sandbox live inside an OCI image: a user namespace in which it is the image's user (root by
// default) while it stays its pool uid outside, with the other ids of 0 … 65535 mapped to its own block (it
// gains no real privilege: every id it can be is its alone), and a mount namespace whose root is an overlay of the
// image's layers — each layer an idmapped mount, so files the image gives to root are the sandbox's own — over a
// private upper layer, with a fresh /proc, a minimal /dev and a private /tmp. The host's own mounts never change:
// the work happens in a short-lived helper. Needs Linux 5.19+ (idmapped overlay layers) and
// root. Thread-safe (functions only).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "libs/core/unique_fd.h"
#include "services/sandbox_host/linux/sub_ids.h"
#include "services/sandbox_host/linux/user_namespaces.h"

namespace corral::sandbox {

// The user namespace of a sandbox in an image: its image's user is its pool uid, and every other id of 0 … 65535
// one of its block (sub_ids.h), so that root and the users it adds are its own. `sub_ids` is false where the
// kernel refused the block (a host in a container with a narrow id map, a pool uid above 65534): then only the
// image's user is mapped.
struct SandboxUserNamespace {
  UniqueFd fd;
  bool sub_ids = false;
};
absl::StatusOr<SandboxUserNamespace> CreateSandboxUserNamespace(uid_t pool, uid_t image_uid, gid_t image_gid);

// True when this host can make image roots in `dir`'s filesystem: user namespaces and idmapped mounts work (a
// container without CAP_SYS_ADMIN, or an old kernel, cannot). Probed once at start-up.
bool CanUseImages(const std::string& dir);

struct ImageRootSpec {
  std::vector<std::string> lower_dirs;  // the image's layers, top first
  std::string rw_dir;                   // an empty directory: the sandbox's writes go to rw_dir/upper (overlayfs's
                                        // scratch directory is rw_dir/work)
  int64_t rw_tmpfs_bytes = 0;           // > 0: rw_dir is first a tmpfs of this size in the sandbox's mount namespace
                                        // (its writes live in memory, capped, gone with it); 0: on rw_dir's disk
  std::string mount_point;              // an empty directory where the root is assembled before pivot_root
  int64_t root_owner = -1;              // who "/" (the upper directory) belongs to outside: root inside's id (the
                                        // pool uid when the image's user is root, else the block's first, as gid
                                        // too); -1: the host's root (unmapped inside)
  int userns_fd = -1;                   // from CreateUserNamespace
  uid_t uid = 0;                        // the sandbox's pool uid/gid (owner of /tmp, /dev/shm)
  gid_t gid = 0;
  bool private_network = false;  // a network namespace of its own, with loopback up (network policy none)

  // A fork's layers (ForkLayers): frozen upper layers attached in the holder mount namespace, top first, above
  // `lower_dirs`. Each is `dir`/upper there, idmapped through `userns_fd` (-1: the sandbox's own files, not
  // idmapped).
  struct HeldLayer {
    std::string dir;
    int userns_fd = -1;
  };
  std::vector<HeldLayer> held_layers;
  int holder_ns_fd = -1;  // with held_layers or carry_ns_fd: the holder's mount namespace, and the host's own
  int host_ns_fd = -1;
  // The parent's new generation at a fork: /tmp and /dev/shm are carried over from this mount namespace (the
  // previous generation's) instead of made empty.
  int carry_ns_fd = -1;
};

struct ImageRoot {
  UniqueFd mnt;   // the mount namespace
  UniqueFd net;   // the network namespace, when a private one was asked for
  UniqueFd root;  // the overlay root ("/" inside), O_RDONLY: how the host reaches the sandbox's files
  // With a tmpfs upper: a detached mount of that tmpfs (upper/ and work/ in it), what a fork freezes.
  UniqueFd rw_tree;
};

// The mount namespace of a sandbox in an image: the overlay as "/" (nosuid, nodev, volatile: its upper layer dies
// with the sandbox, so it is never synced — unmounting a synced overlay cost a journal commit per delete),
// /proc (hidepid=invisible),
// /dev (null zero full random urandom tty, shm, pts-less), /tmp (tmpfs, rw_tmpfs_bytes when set, as /dev/shm). INTERNAL
// naming the step that failed.
absl::StatusOr<ImageRoot> CreateImageRoot(const ImageRootSpec& spec);

}  // namespace corral::sandbox
