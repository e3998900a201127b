// A sandbox made from an image: the image's layers (a template's above them, then a fork's) under its own upper
// layer, as "/" in its own mount and user namespaces (images/image_root.h). Its processes are the image's user
// inside, its pool uid outside; root and the other users inside are ids of its block (linux/sub_ids.h).
#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "libs/core/logging.h"
#include "libs/core/status_macros.h"
#include "services/sandbox_host/images/image_root.h"
#include "services/sandbox_host/images/image_user.h"
#include "services/sandbox_host/linux/sub_ids.h"
#include "services/sandbox_host/linux/tree_copy.h"
#include "services/sandbox_host/storage/storage.h"
#include "spdlog/spdlog.h"

namespace corral::sandbox {
namespace {

// Root inside's id outside (-1: root is not mapped).
int64_t RootOwner(uid_t pool, uid_t image_uid, bool sub_ids) {
  if (image_uid == 0) return pool;
  return sub_ids ? static_cast<int64_t>(*SubIdBase(pool)) : -1;
}

class ImageRootStorage final : public Storage {
 public:
  explicit ImageRootStorage(const StorageParts& parts) : parts_(parts) {}

  absl::Status Build(Sandbox& sb, const Origin& origin) override {
    const Image& image = *origin.image;
    const std::string rw = sb.dir + "/rw", mnt = sb.dir + "/mnt";
    // A parent's new generation reuses its directories (its new tmpfs and mounts are in a new namespace).
    for (const std::string& d : {sb.dir, rw, mnt}) {
      if (mkdir(d.c_str(), 0700) != 0 && (origin.previous == nullptr || errno != EEXIST)) {
        return absl::InternalError(absl::StrCat("cannot create ", d, ": ", strerror(errno)));
      }
    }
    CORRAL_RETURN_IF_ERROR(parts_.images->Pin(image.digest));
    ImageParts& parts = sb.image.emplace();
    parts.digest = image.digest;
    CORRAL_ASSIGN_OR_RETURN(std::vector<std::string> lower, parts_.images->LowerDirs(image.digest));
    if (origin.tmpl != nullptr) {  // a template built on the image: its layer above the image's
      lower.insert(lower.begin(), origin.tmpl->dir);
      sb.template_image = origin.tmpl;
      origin.tmpl->sandboxes++;
    }
    CORRAL_ASSIGN_OR_RETURN(ImageUser user, ResolveImageUser(lower, image.config.user));
    parts.inside_uid = user.uid;
    parts.inside_gid = user.gid;
    sb.home = user.home;
    parts.workdir = image.config.working_dir.empty() ? user.home : image.config.working_dir;
    CORRAL_ASSIGN_OR_RETURN(SandboxUserNamespace userns, CreateSandboxUserNamespace(sb.uid, user.uid, user.gid));
    parts.userns = std::move(userns.fd);
    parts.sub_ids = userns.sub_ids;
    ImageRootSpec root_spec{.lower_dirs = lower,
                            .rw_dir = rw,
                            .rw_tmpfs_bytes = sb.spec.upper_on_disk ? 0 : sb.spec.disk_bytes,
                            .mount_point = mnt,
                            // "/" is the upper directory: root's inside, as the image's is
                            .root_owner = RootOwner(sb.uid, user.uid, parts.sub_ids),
                            .userns_fd = parts.userns.get(),
                            .uid = sb.uid,
                            .gid = sb.uid,
                            .private_network = *sb.spec.network == NetworkPolicy::kNone};
    std::map<uid_t, UniqueFd> layer_userns;
    CORRAL_ASSIGN_OR_RETURN(std::vector<LayerMount> mounts, LayerMounts(origin.layers, sb.uid, layer_userns));
    for (const LayerMount& m : mounts) root_spec.held_layers.push_back({m.dir, m.userns_fd});
    if (parts_.layers != nullptr) {
      root_spec.holder_ns_fd = parts_.layers->holder_ns();
      root_spec.host_ns_fd = parts_.layers->host_ns();
    }
    if (origin.previous != nullptr) root_spec.carry_ns_fd = origin.previous->namespaces.mnt.get();
    CORRAL_ASSIGN_OR_RETURN(ImageRoot root, CreateImageRoot(root_spec));
    parts.rw_tree = std::move(root.rw_tree);
    sb.layers = origin.layers;
    sb.namespaces.mnt = std::move(root.mnt);
    sb.namespaces.net = std::move(root.net);
    sb.namespaces.hidepid = true;
    sb.home_fd = std::move(root.root);
    struct stat st {};
    if (fstat(sb.home_fd.get(), &st) != 0) {
      return absl::InternalError(absl::StrCat("stat of the image root: ", strerror(errno)));
    }
    parts.root_dev = st.st_dev;
    Protections& p = sb.protections;
    p.mount_namespace = p.hidepid = p.user_namespace = true;
    p.user_ids = parts.sub_ids;
    p.network_namespace = sb.namespaces.net.valid();
    p.disk_quota_bytes = root_spec.rw_tmpfs_bytes;
    CORRAL_RETURN_IF_ERROR(MakeDirectories(sb));
    // As Docker does: the image's Env, then HOME from its /etc/passwd and a default PATH.
    sb.base_env.insert(sb.base_env.end(), image.config.env.begin(), image.config.env.end());
    for (std::string kv :
         {"HOME=" + sb.home, std::string("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
          std::string("TMPDIR=/tmp")}) {
      sb.base_env.push_back(std::move(kv));
    }
    return absl::OkStatus();
  }

  // The image root is all it sees, and all of it is the sandbox's.
  void Confine(const Sandbox& sb, LandlockPolicy& policy) const override {
    policy.read_write_fds = {sb.home_fd.get()};
    policy.read_write.clear();
    policy.read_exec.clear();
    policy.read_only.clear();
    policy.devices.clear();
  }

  // Its children are made from its image and template, with its layers above them.
  absl::StatusOr<Origin> ForkOrigin(const Sandbox& sb) const override {
    CORRAL_ASSIGN_OR_RETURN(Image image, parts_.images->Find(sb.image->digest));
    return Origin{.tmpl = sb.template_image, .image = std::move(image)};
  }

  // Its /tmp is a tmpfs of its own, in no layer: the child gets a copy, each file owned by the child's id for the
  // parent's (its pool uid, and its block's: root and the users it added).
  absl::Status CarryTmp(const Sandbox& from, const Sandbox& to) const override {
    UniqueFd src(openat(from.home_fd.get(), "tmp", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    UniqueFd dst(openat(to.home_fd.get(), "tmp", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!src.valid() || !dst.valid()) {
      return absl::InternalError(
          absl::StrCat("cannot open the /tmp of sandbox ", src.valid() ? to.id : from.id, ": ", strerror(errno)));
    }
    const IdMap map = OwnerIdMap(from.uid, to.uid);
    absl::StatusOr<CopyStats> copied =
        CopyTreeMapped(src.get(), dst.get(), [&](uint32_t id) { return MapId(map, id, to.uid); });
    if (!copied.ok()) {
      return absl::Status(copied.status().code(),
                          absl::StrCat("copying /tmp into sandbox ", to.id, ": ", copied.status().message()));
    }
    return absl::OkStatus();
  }

  // Its tmpfs upper becomes the layer, held in the holder mount namespace.
  absl::StatusOr<Frozen> Freeze(Sandbox& sb) override {
    if (IsEmptyDirAt(sb.image->rw_tree.get(), "upper")) return Frozen{sb.layers, false};
    CORRAL_ASSIGN_OR_RETURN(LayerStack layer, parts_.layers->FreezeTree(sb.image->rw_tree, sb.uid, sb.layers));
    sb.image->rw_tree.Reset();  // the layer holds its tmpfs now
    return Frozen{std::move(layer), true};
  }

  // The new generation pinned the image and counted the template again: the old one lets go.
  void Retire(Sandbox& sb) override {
    Teardown(sb);
    if (sb.template_image) sb.template_image->sandboxes--;
    sb.template_image.reset();
  }

  // Once per sandbox: its parts stay (calls still holding it may read them), the image's pin goes.
  void Teardown(Sandbox& sb) override {
    if (!sb.image) return;  // the pin failed
    sb.image->userns.Reset();
    parts_.images->Unpin(sb.image->digest);
  }

  // Its upper layer (a tmpfs, or a directory on disk for a template's build) and its /tmp (a tmpfs of its own).
  absl::StatusOr<uint64_t> OwnBytes(const Sandbox& sb) const override {
    const bool tmpfs = sb.image->rw_tree.valid();
    uint64_t upper = 0;  // none: frozen into a layer at a fork, and not used since (renewal_due)
    if (tmpfs) {
      CORRAL_ASSIGN_OR_RETURN(upper, DirBytes(sb.image->rw_tree.get(), "upper"));
    } else if (sb.spec.upper_on_disk) {
      CORRAL_ASSIGN_OR_RETURN(upper, DirBytes(-1, sb.dir + "/rw/upper"));
    }
    CORRAL_ASSIGN_OR_RETURN(uint64_t tmp, DirBytes(sb.home_fd.get(), "tmp"));
    return upper + tmp;
  }

 private:
  // Task paths, the working directory and the home exist in the root (made, the sandbox's, where the image
  // lacks them).
  static absl::Status MakeDirectories(const Sandbox& sb) {
    std::vector<std::string> made = sb.spec.task_paths;
    made.push_back(sb.image->workdir);
    made.push_back(sb.home);
    for (const std::string& path : made) {
      if (path == "/") continue;
      CORRAL_ASSIGN_OR_RETURN(SandboxPath parsed, ParseImagePath(path, {}));
      absl::Status s = MakeDirectory(sb.home_fd.get(), parsed, /*make_parents=*/true, 0755, sb.FileOwner());
      if (!s.ok() && !absl::IsAlreadyExists(s)) {
        return absl::Status(s.code(), absl::StrCat("directory ", path, " in the image: ", s.message()));
      }
    }
    return absl::OkStatus();
  }

  const StorageParts parts_;
};

}  // namespace

std::unique_ptr<Storage> NewImageRootStorage(const StorageParts& parts) {
  return std::make_unique<ImageRootStorage>(parts);
}

}  // namespace corral::sandbox
