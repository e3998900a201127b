#include "services/sandbox_host/images/layer_unpack.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "libs/core/status_macros.h"
#include "libs/core/unique_fd.h"
#include "services/sandbox_host/linux/open_in_root.h"
#include "services/sandbox_host/linux/sandbox_path.h"
#include "services/sandbox_host/linux/sub_ids.h"

namespace corral::sandbox {
namespace {

constexpr absl::string_view kWhiteoutPrefix = ".wh.";
constexpr absl::string_view kOpaqueMarker = ".wh..wh..opq";

using ArchivePtr = std::unique_ptr<struct archive, decltype(&archive_read_free)>;

absl::Status Errno(absl::string_view what, absl::string_view path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", strerror(errno)));
}

// The entry's path as components below the layer's root: a leading "/" or "./" is dropped (as tar does) and "."
// components removed. INVALID_ARGUMENT for "..": a layer that climbs is refused, not silently re-rooted.
absl::StatusOr<std::vector<std::string>> EntryComponents(absl::string_view path) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    if (part == "..") return absl::InvalidArgumentError(absl::StrCat("layer entry '", path, "' climbs out with '..'"));
    out.emplace_back(part);
  }
  return out;
}

// An entry whose directory the layer itself makes unusable (a symlink loop, a file where a directory should be)
// is the layer's fault: INVALID_ARGUMENT; anything else is the host's.
absl::Status OpenError(absl::string_view path) {
  if (errno == ELOOP || errno == ENOTDIR || errno == EXDEV) {
    return absl::InvalidArgumentError(absl::StrCat("layer entry '", path, "': ", strerror(errno), " on its way"));
  }
  return Errno("opening the directory of", path);
}

// The directory that holds the entry's last component, created (0755, root) where missing: layers need not list
// every parent.
absl::StatusOr<UniqueFd> OpenParent(int root, const std::vector<std::string>& parts) {
  const std::vector<std::string> parents(parts.begin(), parts.end() - 1);
  UniqueFd fd(OpenInRoot(root, absl::StrJoin(parents, "/"), O_PATH | O_DIRECTORY));
  if (fd.get() >= 0 || errno != ENOENT) {
    if (fd.get() < 0) return OpenError(absl::StrJoin(parts, "/"));
    return fd;
  }
  UniqueFd cur(OpenInRoot(root, "", O_PATH | O_DIRECTORY));
  for (size_t i = 0; i < parents.size(); ++i) {
    const std::string prefix = absl::StrJoin(parents.begin(), parents.begin() + i + 1, "/");
    UniqueFd next(OpenInRoot(root, prefix, O_PATH | O_DIRECTORY));
    if (next.get() < 0 && errno == ENOENT) {
      if (mkdirat(cur.get(), parents[i].c_str(), 0755) != 0) {
        // EEXIST with ENOENT above: a symlink to a directory that does not exist (yet) in the layer.
        if (errno == EEXIST) {
          return absl::InvalidArgumentError(absl::StrCat("layer entry '", absl::StrJoin(parts, "/"), "' is below '",
                                                         prefix, "', a symlink to a missing directory"));
        }
        return Errno("mkdir", prefix);
      }
      next.Reset(OpenInRoot(root, prefix, O_PATH | O_DIRECTORY));
    }
    if (next.get() < 0) return OpenError(absl::StrJoin(parts, "/"));
    cur = std::move(next);
  }
  return cur;
}

// Removes what the layer has at `name` (a later entry replaces an earlier one), keeping a directory when a
// directory replaces it (its metadata is updated instead, as tar does).
absl::Status Clear(int parent, const std::string& name, bool keep_directory) {
  struct stat st {};
  if (fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return absl::OkStatus();
  if (keep_directory && S_ISDIR(st.st_mode)) return absl::OkStatus();
  return RemovePath(parent, SandboxPath{.components = {name}, .normalized = name}, /*recursive=*/true);
}

// Owner, mode and times, set without following a symlink.
absl::Status ApplyMetadata(int parent, const std::string& name, struct archive_entry* e, bool is_symlink) {
  if (fchownat(parent, name.c_str(), static_cast<uid_t>(archive_entry_uid(e)), static_cast<gid_t>(archive_entry_gid(e)),
               AT_SYMLINK_NOFOLLOW) != 0) {
    return Errno("chown", name);
  }
  if (!is_symlink && fchmodat(parent, name.c_str(), archive_entry_perm(e) & 07777, 0) != 0) return Errno("chmod", name);
  const struct timespec times[2] = {{archive_entry_mtime(e), archive_entry_mtime_nsec(e)},
                                    {archive_entry_mtime(e), archive_entry_mtime_nsec(e)}};
  utimensat(parent, name.c_str(), times, AT_SYMLINK_NOFOLLOW);  // best effort, as tar
  return absl::OkStatus();
}

// user.* xattrs only: trusted.overlay.* would forge overlay metadata, security.capability grant capabilities.
void ApplyXattrs(int fd, struct archive_entry* e) {
  const char* name = nullptr;
  const void* value = nullptr;
  size_t size = 0;
  archive_entry_xattr_reset(e);
  while (archive_entry_xattr_next(e, &name, &value, &size) == ARCHIVE_OK) {
    if (name != nullptr && absl::StartsWith(name, "user.")) fsetxattr(fd, name, value, size, 0);
  }
}

class Unpacker {
 public:
  Unpacker(struct archive* a, int root, const LayerLimits& limits) : a_(a), root_(root), limits_(limits) {}

  absl::Status Entry(struct archive_entry* e) {
    if (++stats_.entries > limits_.max_entries) {
      return absl::ResourceExhaustedError(absl::StrCat("layer has more than ", limits_.max_entries, " entries"));
    }
    const char* raw = archive_entry_pathname(e);
    if (raw == nullptr) return absl::InvalidArgumentError("layer entry without a path");
    CORRAL_ASSIGN_OR_RETURN(std::vector<std::string> parts, EntryComponents(raw));
    if (parts.empty()) return absl::OkStatus();  // the root itself ("./"): its metadata is the store's
    CORRAL_ASSIGN_OR_RETURN(UniqueFd parent, OpenParent(root_, parts));
    const std::string& name = parts.back();
    if (name == kOpaqueMarker) return Opaque(parts);
    if (absl::StartsWith(name, kWhiteoutPrefix)) return Whiteout(parent.get(), name.substr(kWhiteoutPrefix.size()));
    if (const char* target = archive_entry_hardlink(e)) return HardLink(parent.get(), name, target);
    switch (archive_entry_filetype(e)) {
      case AE_IFDIR: {
        CORRAL_RETURN_IF_ERROR(Clear(parent.get(), name, /*keep_directory=*/true));
        if (mkdirat(parent.get(), name.c_str(), 0700) != 0 && errno != EEXIST) return Errno("mkdir", raw);
        UniqueFd dir(openat(parent.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (dir.get() >= 0) ApplyXattrs(dir.get(), e);
        return ApplyMetadata(parent.get(), name, e, false);
      }
      case AE_IFREG: return Regular(parent.get(), name, e, raw);
      case AE_IFLNK: {
        CORRAL_RETURN_IF_ERROR(Clear(parent.get(), name, false));
        const char* target = archive_entry_symlink(e);
        if (symlinkat(target != nullptr ? target : "", parent.get(), name.c_str()) != 0) return Errno("symlink", raw);
        return ApplyMetadata(parent.get(), name, e, true);
      }
      case AE_IFIFO:
        CORRAL_RETURN_IF_ERROR(Clear(parent.get(), name, false));
        if (mkfifoat(parent.get(), name.c_str(), 0600) != 0) return Errno("mkfifo", raw);
        return ApplyMetadata(parent.get(), name, e, false);
      case AE_IFCHR:
      case AE_IFBLK:
        ++stats_.skipped_devices;  // the sandbox's /dev is its own; mounts are nodev anyway
        return absl::OkStatus();
      default: return absl::OkStatus();  // sockets: nothing to create
    }
  }

  const LayerStats& stats() const { return stats_; }

 private:
  absl::Status Regular(int parent, const std::string& name, struct archive_entry* e, const char* raw) {
    CORRAL_RETURN_IF_ERROR(Clear(parent, name, false));
    UniqueFd out(openat(parent, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (out.get() < 0) return Errno("creating", raw);
    const void* block = nullptr;
    size_t size = 0;
    la_int64_t offset = 0;
    for (;;) {
      const int r = archive_read_data_block(a_, &block, &size, &offset);
      if (r == ARCHIVE_EOF) break;
      if (r < ARCHIVE_WARN) {
        return absl::InvalidArgumentError(
            absl::StrCat("reading '", raw, "' from the layer: ", archive_error_string(a_)));
      }
      stats_.bytes += size;
      if (stats_.bytes > limits_.max_bytes) {
        return absl::ResourceExhaustedError(
            absl::StrCat("layer unpacks to more than ", limits_.max_bytes, " bytes (at '", raw, "')"));
      }
      for (size_t done = 0; done < size;) {  // pwrite keeps sparse holes as holes
        const ssize_t n = pwrite(out.get(), static_cast<const char*>(block) + done, size - done,
                                 static_cast<off_t>(offset) + static_cast<off_t>(done));
        if (n <= 0) return Errno("writing", raw);
        done += static_cast<size_t>(n);
      }
    }
    if (ftruncate(out.get(), archive_entry_size(e)) != 0) return Errno("sizing", raw);
    ApplyXattrs(out.get(), e);
    return ApplyMetadata(parent, name, e, false);
  }

  absl::Status HardLink(int parent, const std::string& name, const char* target) {
    CORRAL_ASSIGN_OR_RETURN(std::vector<std::string> parts, EntryComponents(target));
    UniqueFd source(OpenInRoot(root_, absl::StrJoin(parts, "/"), O_PATH | O_NOFOLLOW));
    struct stat st {};
    if (parts.empty() || source.get() < 0 || fstat(source.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer entry '", name, "' links to '", target, "', not a regular file earlier in the layer"));
    }
    CORRAL_RETURN_IF_ERROR(Clear(parent, name, false));
    if (linkat(source.get(), "", parent, name.c_str(), AT_EMPTY_PATH) != 0) return Errno("linking", name);
    return absl::OkStatus();
  }

  // `.wh.NAME`: NAME of the layers below is deleted — a 0:0 character device, overlayfs's whiteout.
  absl::Status Whiteout(int parent, const std::string& name) {
    ++stats_.whiteouts;
    if (name.empty() || name == "." || name == "..") return absl::OkStatus();
    if (absl::StartsWith(name, kWhiteoutPrefix)) return absl::OkStatus();  // other AUFS metadata (.wh..wh.plnk ...)
    CORRAL_RETURN_IF_ERROR(Clear(parent, name, false));
    if (mknodat(parent, name.c_str(), S_IFCHR | 0000, makedev(0, 0)) != 0) return Errno("whiteout", name);
    return absl::OkStatus();
  }

  // `.wh..wh..opq`: the directory hides everything the layers below have in it.
  absl::Status Opaque(const std::vector<std::string>& parts) {
    ++stats_.whiteouts;
    const std::string dir = absl::StrJoin(parts.begin(), parts.end() - 1, "/");
    UniqueFd fd(OpenInRoot(root_, dir, O_RDONLY | O_DIRECTORY));
    if (fd.get() < 0) return Errno("opening", dir);
    if (fsetxattr(fd.get(), "trusted.overlay.opaque", "y", 1, 0) != 0) return Errno("marking opaque", dir);
    return absl::OkStatus();
  }

  struct archive* a_;
  int root_;
  LayerLimits limits_;
  LayerStats stats_;
};

}  // namespace

absl::Status CheckLayerFilesystem(const std::string& dir) {
  constexpr long kOverlayfsMagic = 0x794c7630;  // OVERLAYFS_SUPER_MAGIC
  struct statfs fs {};
  if (statfs(dir.c_str(), &fs) != 0) return Errno("statfs", dir);
  if (fs.f_type == kOverlayfsMagic) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " is on overlayfs, which cannot hold image layers: put the sandbox host's root on a volume"));
  }
  return absl::OkStatus();
}

absl::StatusOr<LayerStats> UnpackLayer(int fd, const std::string& dir, const LayerLimits& limits) {
  UniqueFd root(open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (root.get() < 0) return Errno("opening", dir);
  ArchivePtr a(archive_read_new(), archive_read_free);
  archive_read_support_filter_gzip(a.get());
  archive_read_support_filter_zstd(a.get());
  archive_read_support_filter_xz(a.get());
  archive_read_support_format_tar(a.get());
  archive_read_support_format_gnutar(a.get());
  if (archive_read_open_fd(a.get(), fd, 1 << 16) != ARCHIVE_OK) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a layer (tar, tar+gzip, tar+zstd): ", archive_error_string(a.get())));
  }
  Unpacker unpacker(a.get(), root.get(), limits);
  for (;;) {
    struct archive_entry* e = nullptr;
    const int r = archive_read_next_header(a.get(), &e);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) {
      return absl::InvalidArgumentError(absl::StrCat("malformed layer: ", archive_error_string(a.get())));
    }
    CORRAL_RETURN_IF_ERROR(unpacker.Entry(e));
  }
  return unpacker.stats();
}

}  // namespace corral::sandbox

namespace corral::sandbox {

absl::StatusOr<LayerStats> AdoptUpperAsLayer(const std::string& dir, uid_t pool_uid, gid_t pool_gid, uid_t image_uid,
                                             gid_t image_gid) {
  namespace fs = std::filesystem;
  LayerStats stats;
  auto adopt = [&](const fs::path& p) -> absl::Status {
    struct stat st {};
    if (lstat(p.c_str(), &st) != 0) return Errno("stat of", p.string());
    const uid_t uid = InsideId(st.st_uid, pool_uid, image_uid);
    const gid_t gid = InsideId(st.st_gid, pool_gid, image_gid);
    if ((uid != st.st_uid || gid != st.st_gid) && lchown(p.c_str(), uid, gid) != 0)
      return Errno("chown of", p.string());
    if (S_ISREG(st.st_mode)) {
      if ((st.st_mode & (S_ISUID | S_ISGID)) != 0) chmod(p.c_str(), st.st_mode & 07777);  // chown cleared them
      stats.bytes += static_cast<uint64_t>(st.st_size);
    }
    ++stats.entries;
    char names[65536];
    const ssize_t n = llistxattr(p.c_str(), names, sizeof names);
    for (ssize_t i = 0; i < n; i += static_cast<ssize_t>(strlen(names + i)) + 1) {
      const std::string name = names + i;
      if (absl::StartsWith(name, "trusted.overlay.") && name != "trusted.overlay.opaque" &&
          lremovexattr(p.c_str(), name.c_str()) != 0) {
        return Errno("removing overlay metadata from", p.string());
      }
    }
    return absl::OkStatus();
  };
  CORRAL_RETURN_IF_ERROR(adopt(dir));
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    CORRAL_RETURN_IF_ERROR(adopt(it->path()));
  }
  if (ec) return absl::InternalError(absl::StrCat("walking ", dir, ": ", ec.message()));
  UniqueFd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid() || syncfs(fd.get()) != 0) return Errno("syncing", dir);
  return stats;
}

}  // namespace corral::sandbox
