#include "services/scheduler/remote/placement.h"

namespace corral::scheduler {

bool Fits(const HostSnapshot& h, const Requirements& needs) {
  if (h.state != v1::HOST_STATE_HEALTHY || h.draining || h.rejected || h.in_use >= h.capacity) return false;
  if (needs.private_view && !h.features.mount_namespaces()) return false;
  if (needs.network_namespace && !h.features.network_namespaces()) return false;
  if (needs.landlock_net && h.features.landlock_abi() < 4) return false;
  if (!needs.image.empty() && !h.features.images()) return false;  // one lacking the image pulls it
  if (needs.forks && !h.features.forks()) return false;
  if (!h.has_harness) return false;  // a host that lacks the harness cannot run it, unlike an image it can pull
  return true;
}

std::optional<size_t> ChooseHost(const std::vector<HostSnapshot>& hosts, const Requirements& needs) {
  std::optional<size_t> best;
  auto load = [&](size_t i) { return static_cast<double>(hosts[i].in_use) / hosts[i].capacity; };
  for (size_t i = 0; i < hosts.size(); ++i) {
    if (!Fits(hosts[i], needs)) continue;
    if (!best) {
      best = i;
      continue;
    }
    const HostSnapshot& b = hosts[*best];
    if (!needs.image.empty() && hosts[i].has_image != b.has_image) {  // holding the image beats pulling it
      if (hosts[i].has_image) best = i;
      continue;
    }
    if (hosts[i].has_template != b.has_template) {
      if (hosts[i].has_template) best = i;
      continue;
    }
    if (load(i) < load(*best) || (load(i) == load(*best) && hosts[i].address < b.address)) best = i;
  }
  return best;
}

}  // namespace corral::scheduler
