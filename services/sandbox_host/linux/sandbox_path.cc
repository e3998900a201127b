#include "services/sandbox_host/linux/sandbox_path.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "openssl/rand.h"

namespace corral::sandbox {
namespace {

constexpr char kTmpDir[] = ".tmp";  // where /tmp is bound in the home

absl::Status Errno(int err, absl::string_view what, absl::string_view name) {
  std::string msg = absl::StrCat(what, " '", name, "': ", strerror(err));
  switch (err) {
    case ENOENT: return absl::NotFoundError(msg);
    case EEXIST: return absl::AlreadyExistsError(msg);
    case ELOOP:
      return absl::FailedPreconditionError(absl::StrCat("'", name, "' is a symlink; symlinks are never followed"));
    case ENOTDIR: return absl::FailedPreconditionError(absl::StrCat("'", name, "' is not a directory"));
    case EISDIR: return absl::FailedPreconditionError(absl::StrCat("'", name, "' is a directory"));
    case ENOSPC:
    case EDQUOT:
    case EFBIG: return absl::ResourceExhaustedError(msg);
    case ENAMETOOLONG: return absl::InvalidArgumentError(msg);
    default: return absl::FailedPreconditionError(msg);
  }
}

// Checks that `fd` is a regular file the sandbox owns.
absl::Status CheckRegularOwned(int fd, absl::string_view name, const Owner& owner) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return Errno(errno, "cannot stat", name);
  if (S_ISDIR(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat("'", name, "' is a directory"));
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("'", name, "' is not a regular file (FIFO, socket or device)"));
  }
  if (st.st_uid != owner.uid && (owner.any_owner_dev == 0 || st.st_dev != owner.any_owner_dev)) {
    return absl::FailedPreconditionError(absl::StrCat("'", name, "' does not belong to the sandbox"));
  }
  return absl::OkStatus();
}

absl::Status CheckPathBytes(absl::string_view path) {
  if (path.size() > kMaxPathBytes) {
    return absl::InvalidArgumentError(absl::StrCat("path is longer than ", kMaxPathBytes, " bytes"));
  }
  if (path.find('\0') != absl::string_view::npos) return absl::InvalidArgumentError("path contains a NUL byte");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SandboxPath> ParseImagePath(absl::string_view path, const std::vector<std::string>& base,
                                           bool allow_root) {
  if (auto s = CheckPathBytes(path); !s.ok()) return s;
  SandboxPath out;
  if (!absl::StartsWith(path, "/")) out.components = base;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    if (part == "..") return absl::InvalidArgumentError("'..' is not allowed in sandbox paths");
    out.components.emplace_back(part);
  }
  if (out.components.empty() && !allow_root) {
    return absl::InvalidArgumentError("the path names the sandbox's root; name a file or directory in it");
  }
  out.normalized = "/" + absl::StrJoin(out.components, "/");
  return out;
}

absl::StatusOr<SandboxPath> ParseSandboxPath(absl::string_view path, const std::vector<std::string>& task_paths,
                                             bool allow_home) {
  if (auto s = CheckPathBytes(path); !s.ok()) return s;
  SandboxPath out;
  absl::string_view rest = path;
  std::string prefix;  // how an absolute path is reported
  if (absl::StartsWith(path, "/")) {
    bool mapped = false;
    std::vector<std::string> roots = task_paths;
    roots.push_back("/tmp");
    for (const std::string& root : roots) {
      if (path == root || absl::StartsWith(path, root + "/")) {
        rest = path.substr(root.size());
        prefix = root;
        out.components.push_back(root == "/tmp" ? kTmpDir : root.substr(1));
        mapped = true;
        break;
      }
    }
    if (!mapped) {
      return absl::InvalidArgumentError(absl::StrCat("absolute path '", path,
                                                     "' is outside the sandbox; use a path "
                                                     "relative to the home, under /tmp or under a task path (",
                                                     absl::StrJoin(task_paths, ", "), ")"));
    }
  }
  std::vector<std::string> relative;
  for (absl::string_view part : absl::StrSplit(rest, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    if (part == "..") return absl::InvalidArgumentError("'..' is not allowed in sandbox paths");
    relative.emplace_back(part);
    out.components.emplace_back(part);
  }
  if (out.components.empty() && !allow_home) {
    return absl::InvalidArgumentError("the path names the sandbox's home; name a file or directory in it");
  }
  std::string joined = absl::StrJoin(relative, "/");
  out.normalized = prefix.empty() ? joined : (joined.empty() ? prefix : absl::StrCat(prefix, "/", joined));
  return out;
}

absl::StatusOr<UniqueFd> OpenParentDir(int home_fd, const SandboxPath& path, const Owner* create_missing) {
  UniqueFd dir(fcntl(home_fd, F_DUPFD_CLOEXEC, 0));
  if (!dir.valid()) return Errno(errno, "cannot open", "home");
  const size_t parents = path.components.empty() ? 0 : path.components.size() - 1;
  for (size_t i = 0; i < parents; ++i) {
    const std::string& name = path.components[i];
    int fd = openat(dir.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && create_missing != nullptr) {
      if (mkdirat(dir.get(), name.c_str(), 0755) != 0 && errno != EEXIST) return Errno(errno, "cannot create", name);
      fd = openat(dir.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd >= 0 && fchown(fd, create_missing->uid, create_missing->gid) != 0) {
        int err = errno;
        close(fd);
        return Errno(err, "cannot chown", name);
      }
    }
    if (fd < 0) {
      int err = errno;
      struct stat st {};
      // O_DIRECTORY|O_NOFOLLOW reports a symlink as "not a directory"; say what it really is.
      if (err == ENOTDIR && fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
        err = ELOOP;
      }
      return Errno(err, "cannot open directory", name);
    }
    dir.Reset(fd);
  }
  return dir;
}

absl::StatusOr<UniqueFd> OpenRegularForRead(int home_fd, const SandboxPath& path, const Owner& owner) {
  if (path.components.empty()) return absl::FailedPreconditionError("the home is a directory");
  auto dir = OpenParentDir(home_fd, path);
  if (!dir.ok()) return dir.status();
  const std::string& name = path.components.back();
  // O_NONBLOCK: opening a FIFO must not hang the host; O_NOFOLLOW: a final symlink fails with ELOOP.
  UniqueFd fd(openat(dir->get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd.valid()) return Errno(errno, "cannot open", path.normalized);
  if (absl::Status s = CheckRegularOwned(fd.get(), path.normalized, owner); !s.ok()) return s;
  fcntl(fd.get(), F_SETFL, fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  return fd;
}

namespace {

// Empties the directory `dir` (an open descriptor), never following symlinks.
absl::Status RemoveContents(int dir) {
  int copy = fcntl(dir, F_DUPFD_CLOEXEC, 0);
  DIR* d = copy < 0 ? nullptr : fdopendir(copy);
  if (d == nullptr) return Errno(errno, "cannot list", "directory");
  std::vector<std::pair<std::string, bool>> entries;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st {};
    if (fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) entries.emplace_back(name, S_ISDIR(st.st_mode));
  }
  closedir(d);
  for (const auto& [name, is_dir] : entries) {
    if (is_dir) {
      UniqueFd child(openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!child.valid()) return Errno(errno, "cannot open", name);
      if (absl::Status s = RemoveContents(child.get()); !s.ok()) return s;
    }
    if (unlinkat(dir, name.c_str(), is_dir ? AT_REMOVEDIR : 0) != 0) return Errno(errno, "cannot remove", name);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RemovePath(int home_fd, const SandboxPath& path, bool recursive) {
  if (path.components.empty()) return absl::InvalidArgumentError("the home itself cannot be removed");
  auto dir = OpenParentDir(home_fd, path);
  if (!dir.ok()) return dir.status();
  const std::string& name = path.components.back();
  struct stat st {};
  if (fstatat(dir->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
    return Errno(errno, "cannot remove", path.normalized);
  if (S_ISDIR(st.st_mode)) {
    if (recursive) {
      UniqueFd target(openat(dir->get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!target.valid()) return Errno(errno, "cannot open", path.normalized);
      if (absl::Status s = RemoveContents(target.get()); !s.ok()) return s;
    }
    if (unlinkat(dir->get(), name.c_str(), AT_REMOVEDIR) != 0) {
      if (errno == ENOTEMPTY || errno == EEXIST) {
        return absl::FailedPreconditionError(absl::StrCat("'", path.normalized, "' is not empty; use recursive"));
      }
      return Errno(errno, "cannot remove", path.normalized);
    }
    return absl::OkStatus();
  }
  if (unlinkat(dir->get(), name.c_str(), 0) != 0) return Errno(errno, "cannot remove", path.normalized);
  return absl::OkStatus();
}

absl::Status MakeDirectory(int home_fd, const SandboxPath& path, bool make_parents, mode_t mode, const Owner& owner) {
  if (path.components.empty()) return make_parents ? absl::OkStatus() : absl::AlreadyExistsError("the home exists");
  auto dir = OpenParentDir(home_fd, path, make_parents ? &owner : nullptr);
  if (!dir.ok()) return dir.status();
  const std::string& name = path.components.back();
  if (mkdirat(dir->get(), name.c_str(), mode & 0777) != 0) {
    struct stat st {};
    if (errno == EEXIST && make_parents && fstatat(dir->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISDIR(st.st_mode)) {
      return absl::OkStatus();
    }
    return Errno(errno, "cannot create", path.normalized);
  }
  UniqueFd created(openat(dir->get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!created.valid() || fchown(created.get(), owner.uid, owner.gid) != 0)
    return Errno(errno, "cannot chown", path.normalized);
  fchmod(created.get(), mode & 0777);
  return absl::OkStatus();
}

absl::StatusOr<struct stat> StatPath(int home_fd, const SandboxPath& path) {
  auto dir = OpenParentDir(home_fd, path);
  if (!dir.ok()) return dir.status();
  struct stat st {};
  const char* name = path.components.empty() ? "" : path.components.back().c_str();
  int flags = AT_SYMLINK_NOFOLLOW | (path.components.empty() ? AT_EMPTY_PATH : 0);
  if (fstatat(dir->get(), name, &st, flags) != 0) return Errno(errno, "cannot stat", path.normalized);
  return st;
}

absl::StatusOr<FileWriter> FileWriter::Open(int home_fd, const SandboxPath& path, WriteMode mode, mode_t file_mode,
                                            const Owner& owner, bool make_parents) {
  if (path.components.empty()) return absl::FailedPreconditionError("the home is a directory");
  auto dir = OpenParentDir(home_fd, path, make_parents ? &owner : nullptr);
  if (!dir.ok()) return dir.status();
  FileWriter w;
  w.dir_ = *std::move(dir);
  w.name_ = path.components.back();
  w.mode_ = mode;
  struct stat st {};
  const bool exists = fstatat(w.dir_.get(), w.name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
  if (exists && mode == WriteMode::kCreate)
    return absl::AlreadyExistsError(absl::StrCat("'", path.normalized, "' exists"));
  if (exists && S_ISDIR(st.st_mode))
    return absl::FailedPreconditionError(absl::StrCat("'", path.normalized, "' is a directory"));
  if (mode == WriteMode::kAppend) {
    int fd = openat(w.dir_.get(), w.name_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                    file_mode & 0777);
    if (fd < 0) return Errno(errno, "cannot open", path.normalized);
    w.file_.Reset(fd);
    if (!exists && fchown(fd, owner.uid, owner.gid) != 0) return Errno(errno, "cannot chown", path.normalized);
    if (absl::Status s = CheckRegularOwned(fd, path.normalized, owner); !s.ok()) return s;
    return w;
  }
  if (exists && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("'", path.normalized, "' is not a regular file"));
  }
  unsigned char nonce[8];
  RAND_bytes(nonce, sizeof(nonce));
  w.tmp_name_ = absl::StrCat(
      ".corral-write-", absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(nonce), sizeof(nonce))));
  int fd =
      openat(w.dir_.get(), w.tmp_name_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, file_mode & 0777);
  if (fd < 0) return Errno(errno, "cannot create a temp file for", path.normalized);
  w.file_.Reset(fd);
  if (fchown(fd, owner.uid, owner.gid) != 0) return Errno(errno, "cannot chown", path.normalized);
  fchmod(fd, file_mode & 0777);  // not subject to the host's umask
  return w;
}

FileWriter::~FileWriter() {
  if (!tmp_name_.empty() && dir_.valid()) unlinkat(dir_.get(), tmp_name_.c_str(), 0);
}

absl::Status FileWriter::Write(absl::string_view data) {
  if (!file_.valid()) return absl::FailedPreconditionError("the file is already committed");
  while (!data.empty()) {
    ssize_t n = write(file_.get(), data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno(errno, "cannot write", name_);
    }
    data.remove_prefix(static_cast<size_t>(n));
    written_ += n;
  }
  return absl::OkStatus();
}

absl::Status FileWriter::Commit() {
  if (!file_.valid()) return absl::FailedPreconditionError("the file is already committed");
  file_.Reset();
  if (tmp_name_.empty()) return absl::OkStatus();  // append: written in place
  // renameat replaces a symlink at the target itself (never what it points to).
  int flags = mode_ == WriteMode::kCreate ? RENAME_NOREPLACE : 0;
  if (renameat2(dir_.get(), tmp_name_.c_str(), dir_.get(), name_.c_str(), static_cast<unsigned>(flags)) != 0) {
    return Errno(errno, "cannot replace", name_);
  }
  tmp_name_.clear();
  return absl::OkStatus();
}

}  // namespace corral::sandbox
