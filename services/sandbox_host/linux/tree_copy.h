// Copying a directory tree between descriptors (template homes into new sandbox homes), and measuring one. A copy
// never follows a symlink (links are recreated as links), skips special files, strips setuid/setgid/sticky bits, and
// gives everything to one owner. Regular files are reflinked where the filesystem can (FICLONE), copied otherwise.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace corral::sandbox {

struct CopyStats {
  uint64_t bytes = 0;      // regular file contents
  uint64_t files = 0;      // entries created (files, directories, links)
  bool reflinked = false;  // every regular file was a reflink (and there was at least one)
};

// Copies the contents of directory `src_dir` into the existing directory `dst_dir`, chowning what it creates
// to `uid`:`gid`. Top-level entries named in `skip` are left out. FAILED_PRECONDITION past `max_depth` levels;
// INTERNAL (naming the entry) when something cannot be created.
absl::StatusOr<CopyStats> CopyTree(int src_dir, int dst_dir, uid_t uid, gid_t gid,
                                   const std::vector<std::string>& skip = {}, int max_depth = 128);

// The same, giving each entry the owner `owner` maps its source's owner to (an id for its uid, one for its gid):
// a sandbox's files copied into another sandbox's, each id of the one shown as the other's.
using OwnerMap = std::function<uint32_t(uint32_t)>;
absl::StatusOr<CopyStats> CopyTreeMapped(int src_dir, int dst_dir, const OwnerMap& owner, int max_depth = 128);

// The disk the tree of directory `dir` takes: its entries' allocated blocks, a file with several links once,
// nothing of another filesystem mounted below it. Entries that vanish while it walks are skipped; INTERNAL when
// a directory cannot be read, FAILED_PRECONDITION past `max_depth` levels.
absl::StatusOr<uint64_t> TreeBytes(int dir, int max_depth = 128);

}  // namespace corral::sandbox
