// The ids a sandbox owns outside beyond its pool uid. Pool uid u also owns the block u·65536 … u·65536 + 65535:
// inside an image, every id but the image's own user (which is u itself) is one of these — root, and the users
// `useradd` makes — so they can own files and run processes that are the sandbox's alone. No person has them
// (people's uids are below 65536) and no other sandbox does (each pool uid has its own block). A pool uid of
// 65535 or more has no block. Plain C++. Thread-safe (functions only).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace corral::sandbox {

inline constexpr uint32_t kSubIds = 65536;  // ids a user namespace maps for a sandbox: 0 … 65535 inside

// The first id of `uid`'s block, or nullopt when it has none.
inline std::optional<uid_t> SubIdBase(uid_t uid) {
  if (uid == 0 || uid >= kSubIds - 1) return std::nullopt;
  return static_cast<uid_t>(uid << 16);
}

// The pool uid whose block holds `id`, or `id` itself when it is in no block.
inline uid_t SubIdOwner(uid_t id) { return id >= kSubIds ? static_cast<uid_t>(id >> 16) : id; }

// One line of a user namespace's uid_map or gid_map: `count` ids from `inside` are `outside` onwards outside.
struct IdExtent {
  uint32_t inside = 0;
  uint32_t outside = 0;
  uint32_t count = 1;
};
using IdMap = std::vector<IdExtent>;

// A sandbox's map in an image whose user is `image_id`: that id is the pool id `pool`, every other id k of
// 0 … 65535 is pool's block + k. Without a block, only `image_id` is mapped.
IdMap SandboxIdMap(uint32_t pool, uint32_t image_id);

// The id inside (SandboxIdMap) of `outside`, an id of sandbox `pool` whose image's user is `image_id`;
// `outside` itself when it is none of the sandbox's.
uint32_t InsideId(uint32_t outside, uint32_t pool, uint32_t image_id);

// How ids written by sandbox `from` (its pool id and block, on disk in a layer it froze) are shown to sandbox
// `to`: as `to`'s own. Blocks are mapped only when both have one.
IdMap OwnerIdMap(uint32_t from, uint32_t to);

// `id` through `map` (the outside id of the extent whose inside holds it), or `otherwise` when none does.
uint32_t MapId(const IdMap& map, uint32_t id, uint32_t otherwise);

}  // namespace corral::sandbox
