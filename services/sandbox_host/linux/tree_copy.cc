#include "services/sandbox_host/linux/tree_copy.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "libs/core/status_macros.h"
#include "libs/core/unique_fd.h"

namespace corral::sandbox {
namespace {

absl::Status Failed(absl::string_view what, absl::string_view name) {
  return absl::InternalError(absl::StrCat("cannot ", what, " '", name, "': ", strerror(errno)));
}

// Up to `max` bytes from `in` to `out` through a buffer: what was copied, -1 with errno on an error.
ssize_t CopyChunk(int in, int out, size_t max) {
  char buffer[65536];
  const ssize_t n = read(in, buffer, std::min(max, sizeof buffer));
  if (n <= 0) return n;
  for (ssize_t done = 0; done < n;) {
    const ssize_t w = write(out, buffer + done, static_cast<size_t>(n - done));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    done += w;
  }
  return n;
}

struct Copier {
  uid_t uid;
  gid_t gid;
  int max_depth;
  OwnerMap map;  // when set: each entry's owner is its source's, mapped
  CopyStats stats;
  uint64_t copied_files = 0;
  uint64_t reflinked_files = 0;

  uid_t Uid(const struct stat& st) const { return map ? map(st.st_uid) : uid; }
  gid_t Gid(const struct stat& st) const { return map ? map(st.st_gid) : gid; }

  absl::Status CopyFile(int src_dir, int dst_dir, const char* name, const struct stat& st) {
    const mode_t mode = st.st_mode & 0777;
    const off_t size = st.st_size;
    UniqueFd in(openat(src_dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!in.valid()) return Failed("open", name);
    UniqueFd out(openat(dst_dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
    if (!out.valid()) return Failed("create", name);
    ++copied_files;
    if (ioctl(out.get(), FICLONE, in.get()) == 0) {
      ++reflinked_files;
    } else {
      off_t left = size;
      bool in_kernel = true;  // copy_file_range, until a pair of filesystems refuses it (two tmpfs: EXDEV)
      while (left > 0) {
        ssize_t n = in_kernel ? copy_file_range(in.get(), nullptr, out.get(), nullptr, static_cast<size_t>(left), 0)
                              : CopyChunk(in.get(), out.get(), static_cast<size_t>(left));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && in_kernel && (errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP || errno == ENOSYS)) {
          in_kernel = false;
          continue;
        }
        if (n < 0) return Failed("copy", name);
        if (n == 0) break;  // the source shrank
        left -= n;
      }
    }
    stats.bytes += static_cast<uint64_t>(size);
    if (fchown(out.get(), Uid(st), Gid(st)) != 0 || fchmod(out.get(), mode) != 0) return Failed("chown", name);
    return absl::OkStatus();
  }

  absl::Status CopyDir(int src_dir, int dst_dir, const std::vector<std::string>& skip, int depth) {
    if (depth > max_depth) return absl::FailedPreconditionError("the template tree is nested too deeply");
    DIR* d = fdopendir(fcntl(src_dir, F_DUPFD_CLOEXEC, 0));
    if (d == nullptr) return Failed("list", ".");
    std::vector<std::string> names;
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != ".." && std::find(skip.begin(), skip.end(), name) == skip.end()) {
        names.push_back(std::move(name));
      }
    }
    closedir(d);
    for (const std::string& name : names) {
      struct stat st {};
      if (fstatat(src_dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return Failed("stat", name);
      const mode_t mode = st.st_mode & 0777;
      if (S_ISREG(st.st_mode)) {
        CORRAL_RETURN_IF_ERROR(CopyFile(src_dir, dst_dir, name.c_str(), st));
      } else if (S_ISDIR(st.st_mode)) {
        if (mkdirat(dst_dir, name.c_str(), mode | 0700) != 0 && errno != EEXIST) return Failed("create", name);
        UniqueFd src(openat(src_dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        UniqueFd dst(openat(dst_dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!src.valid() || !dst.valid()) return Failed("open", name);
        CORRAL_RETURN_IF_ERROR(CopyDir(src.get(), dst.get(), {}, depth + 1));
        if (fchown(dst.get(), Uid(st), Gid(st)) != 0 || fchmod(dst.get(), mode | 0700) != 0) {
          return Failed("chown", name);
        }
      } else if (S_ISLNK(st.st_mode)) {
        char target[4096];
        ssize_t n = readlinkat(src_dir, name.c_str(), target, sizeof(target) - 1);
        if (n < 0) return Failed("read link", name);
        target[n] = '\0';
        if (symlinkat(target, dst_dir, name.c_str()) != 0) return Failed("create link", name);
        if (fchownat(dst_dir, name.c_str(), Uid(st), Gid(st), AT_SYMLINK_NOFOLLOW) != 0) return Failed("chown", name);
      } else {
        continue;  // FIFOs, sockets, devices: not part of a template
      }
      ++stats.files;
    }
    return absl::OkStatus();
  }
};

// Sums allocated blocks below one directory (TreeBytes).
struct Measurer {
  dev_t dev;
  int max_depth;
  uint64_t bytes = 0;
  std::set<std::pair<dev_t, ino_t>> linked;  // files with several links, counted once

  absl::Status Walk(int dir, int depth) {
    if (depth > max_depth) return absl::FailedPreconditionError("the tree is nested too deeply to measure");
    DIR* d = fdopendir(fcntl(dir, F_DUPFD_CLOEXEC, 0));
    if (d == nullptr) return Failed("list", ".");
    std::vector<std::string> subdirs;
    while (dirent* e = readdir(d)) {
      const char* name = e->d_name;
      if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) continue;
      struct stat st {};
      if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_dev != dev) continue;  // gone, or a mount
      if (!S_ISDIR(st.st_mode) && st.st_nlink > 1 && !linked.emplace(st.st_dev, st.st_ino).second) continue;
      bytes += static_cast<uint64_t>(st.st_blocks) * 512;
      if (S_ISDIR(st.st_mode)) subdirs.push_back(name);
    }
    closedir(d);
    for (const std::string& name : subdirs) {
      UniqueFd sub(openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (sub.valid()) CORRAL_RETURN_IF_ERROR(Walk(sub.get(), depth + 1));
    }
    return absl::OkStatus();
  }
};

}  // namespace

absl::StatusOr<uint64_t> TreeBytes(int dir, int max_depth) {
  struct stat st {};
  if (fstat(dir, &st) != 0) return Failed("stat", ".");
  Measurer m{.dev = st.st_dev, .max_depth = max_depth};
  CORRAL_RETURN_IF_ERROR(m.Walk(dir, 0));
  return m.bytes;
}

absl::StatusOr<CopyStats> CopyTree(int src_dir, int dst_dir, uid_t uid, gid_t gid, const std::vector<std::string>& skip,
                                   int max_depth) {
  Copier copier{.uid = uid, .gid = gid, .max_depth = max_depth};
  CORRAL_RETURN_IF_ERROR(copier.CopyDir(src_dir, dst_dir, skip, 0));
  copier.stats.reflinked = copier.copied_files > 0 && copier.reflinked_files == copier.copied_files;
  return copier.stats;
}

absl::StatusOr<CopyStats> CopyTreeMapped(int src_dir, int dst_dir, const OwnerMap& owner, int max_depth) {
  Copier copier{.uid = 0, .gid = 0, .max_depth = max_depth, .map = owner};
  CORRAL_RETURN_IF_ERROR(copier.CopyDir(src_dir, dst_dir, {}, 0));
  copier.stats.reflinked = copier.copied_files > 0 && copier.reflinked_files == copier.copied_files;
  return copier.stats;
}

}  // namespace corral::sandbox
