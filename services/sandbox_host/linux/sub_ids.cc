#include "services/sandbox_host/linux/sub_ids.h"

namespace corral::sandbox {

IdMap SandboxIdMap(uint32_t pool, uint32_t image_id) {
  const std::optional<uid_t> base = SubIdBase(pool);
  if (!base || image_id >= kSubIds) return {{image_id, pool, 1}};
  IdMap map;
  if (image_id > 0) map.push_back({0, *base, image_id});
  map.push_back({image_id, pool, 1});
  if (image_id + 1 < kSubIds) map.push_back({image_id + 1, *base + image_id + 1, kSubIds - image_id - 1});
  return map;
}

uint32_t InsideId(uint32_t outside, uint32_t pool, uint32_t image_id) {
  if (outside == pool) return image_id;
  const std::optional<uid_t> base = SubIdBase(pool);
  if (base && outside >= *base && outside - *base < kSubIds) return outside - *base;
  return outside;
}

IdMap OwnerIdMap(uint32_t from, uint32_t to) {
  IdMap map = {{from, to, 1}};
  const std::optional<uid_t> from_base = SubIdBase(from), to_base = SubIdBase(to);
  if (from_base && to_base) map.push_back({*from_base, *to_base, kSubIds});
  return map;
}

uint32_t MapId(const IdMap& map, uint32_t id, uint32_t otherwise) {
  for (const IdExtent& e : map) {
    if (id >= e.inside && id - e.inside < e.count) return e.outside + (id - e.inside);
  }
  return otherwise;
}

}  // namespace corral::sandbox
