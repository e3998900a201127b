// Which agent harnesses a host has installed (`corral harness install` puts NAME@VERSION/node_modules/.bin under
// the harness root), for HostInfo: the scheduler places a task naming a harness only where it is installed.
#pragma once

#include <string>
#include <vector>

namespace corral::sandbox {

// The NAME@VERSION directories under `root` whose node_modules/.bin holds at least one entry, sorted; empty when
// `root` is missing or unreadable.
std::vector<std::string> InstalledHarnesses(const std::string& root);

}  // namespace corral::sandbox
