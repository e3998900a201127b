// Sandbox paths and the file walker behind the Files API. A path names something inside one sandbox's home
// and can never leave it: ".." and NUL are refused, absolute paths are accepted only under the sandbox's task
// paths (/workspace → $HOME/workspace) or /tmp (→ $HOME/.tmp), and the walk opens one component at a time with
// openat(O_NOFOLLOW), acting through descriptors — a symlink anywhere, final or intermediate, is refused, never
// followed. Only regular files are opened for reading and writing.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "libs/core/unique_fd.h"

namespace corral::sandbox {

inline constexpr size_t kMaxPathBytes = 4096;

struct SandboxPath {
  std::vector<std::string> components;  // relative to the home; empty = the home itself
  std::string normalized;               // as the API reports it ("src/a.py", "/workspace/a.py", "/tmp/x")
};

// Who owns what the walker creates.
struct Owner {
  uid_t uid = 0;
  gid_t gid = 0;
  // Files on this filesystem may be read whoever owns them (an image sandbox's root, where nothing is the
  // host's); 0: only the owner's.
  dev_t any_owner_dev = 0;
};

// INVALID_ARGUMENT for ".." components, NUL bytes, more than kMaxPathBytes, an absolute path outside
// `task_paths` and /tmp, or (unless `allow_home`) a path naming the home itself.
absl::StatusOr<SandboxPath> ParseSandboxPath(absl::string_view path, const std::vector<std::string>& task_paths,
                                             bool allow_home = false);

// A path in a sandbox made from an image, where the whole root is the sandbox's: absolute, or relative to `base`
// (the home's components). Components are relative to the root; `normalized` is absolute. The same
// refusals as ParseSandboxPath (the root itself takes `allow_root`).
absl::StatusOr<SandboxPath> ParseImagePath(absl::string_view path, const std::vector<std::string>& base,
                                           bool allow_root = false);

// Opens the directory that holds the path's last component (the home itself for a one-component path).
// With `create_missing`, missing directories are created (mode 0755) and chowned to the owner. NOT_FOUND for a
// missing directory, FAILED_PRECONDITION for a symlink or non-directory on the way.
absl::StatusOr<UniqueFd> OpenParentDir(int home_fd, const SandboxPath& path, const Owner* create_missing = nullptr);

// Opens a regular file owned by `owner.uid` for reading. NOT_FOUND, or FAILED_PRECONDITION for a symlink,
// directory, FIFO, socket, device, or a file the sandbox does not own (e.g. a hard link planted to a host file).
absl::StatusOr<UniqueFd> OpenRegularForRead(int home_fd, const SandboxPath& path, const Owner& owner);

enum class WriteMode {
  kReplace,  // atomically replace (or create) the file: temp file + rename on Commit
  kCreate,   // like kReplace, but ALREADY_EXISTS if the path exists
  kAppend,   // append to the file in place (created if missing)
};

// A file being written through the API. Data goes to a temp file in the target's directory (owned by the
// sandbox) and appears at the path only on Commit; an abandoned writer leaves nothing behind. Not thread-safe.
class FileWriter {
 public:
  // FAILED_PRECONDITION if the target is a directory, symlink (append), special file, or not the sandbox's;
  // ALREADY_EXISTS for kCreate on an existing path; NOT_FOUND for a missing parent without make_parents.
  static absl::StatusOr<FileWriter> Open(int home_fd, const SandboxPath& path, WriteMode mode, mode_t file_mode,
                                         const Owner& owner, bool make_parents);
  FileWriter(FileWriter&&) = default;
  FileWriter& operator=(FileWriter&&) = default;
  ~FileWriter();

  absl::Status Write(absl::string_view data);
  // Makes the data visible at the path. The writer is finished afterwards.
  absl::Status Commit();
  int64_t written() const { return written_; }

 private:
  FileWriter() = default;
  UniqueFd dir_;
  UniqueFd file_;
  std::string name_;      // target name in dir_
  std::string tmp_name_;  // empty for append
  WriteMode mode_ = WriteMode::kReplace;
  int64_t written_ = 0;
};

// Removes a file, a symlink (the link itself) or a directory (`recursive` for a non-empty one), acting through
// descriptors and never crossing a symlink. NOT_FOUND, FAILED_PRECONDITION for a non-empty directory without
// `recursive`, INVALID_ARGUMENT for the home itself.
absl::Status RemovePath(int home_fd, const SandboxPath& path, bool recursive);

// Creates a directory owned by the sandbox (with `make_parents`, like mkdir -p: an existing directory is OK).
// ALREADY_EXISTS when the path exists (without make_parents, or as a non-directory); NOT_FOUND for a missing parent.
absl::Status MakeDirectory(int home_fd, const SandboxPath& path, bool make_parents, mode_t mode, const Owner& owner);

// lstat-like information about the path without following a final symlink.
absl::StatusOr<struct stat> StatPath(int home_fd, const SandboxPath& path);

}  // namespace corral::sandbox
