// Placement as a pure policy over snapshots of the hosts: which host gets the next sandbox. Healthy hosts that
// are not draining, have free capacity and offer what the episode needs (image sandboxes included) are
// candidates; a host that holds the episode's image wins over one that would pull it, then one that holds its
// template over one that would build it, then the least loaded (by fraction of capacity in use) — spreading load
// so one slow host does not hold a whole group.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "corral/v1/scheduler.pb.h"

namespace corral::scheduler {

// Labels on the sandboxes a scheduler creates: whose they are (a host's sweep of leftovers) and for which episode.
inline constexpr char kSchedulerLabel[] = "corral.scheduler";
inline constexpr char kEpisodeLabel[] = "corral.episode";

struct HostSnapshot {
  std::string address;
  v1::HostState state = v1::HOST_STATE_UNSPECIFIED;
  bool draining = false;      // Drain on this host, or the host says it drains
  bool rejected = false;      // said "full" since its last HostInfo
  uint32_t capacity = 0;      // from HostInfo
  uint32_t in_use = 0;        // sandboxes this scheduler holds or is creating there
  bool has_template = false;  // the episode's template is already built there
  bool has_image = false;     // the episode's image is there (always true for an episode without one)
  bool has_harness = true;    // the episode's agent harness is installed there (always true without one)
  v1::HostFeatures features;
};

struct Requirements {
  bool private_view = false;
  bool network_namespace = false;  // NETWORK_POLICY_NONE
  bool landlock_net = false;       // PROXY_ONLY needs Landlock ABI >= 4
  std::string image;               // EnvironmentSpec.image: a host that runs images (it pulls what it lacks)
  bool forks = false;              // Task.branch: a host that forks sandboxes (HostFeatures.forks)
  std::string harness;             // AgentSpec.harness as NAME@VERSION: a host that has it installed
};

// True when `host` can take one more sandbox with `needs` now.
bool Fits(const HostSnapshot& host, const Requirements& needs);
// Index of the chosen host, or nullopt: nothing fits now (wait).
std::optional<size_t> ChooseHost(const std::vector<HostSnapshot>& hosts, const Requirements& needs);

}  // namespace corral::scheduler
