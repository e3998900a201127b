#include "services/sandbox_host/harness_inventory.h"

#include <algorithm>
#include <filesystem>

namespace corral::sandbox {

std::vector<std::string> InstalledHarnesses(const std::string& root) {
  namespace fs = std::filesystem;
  std::vector<std::string> found;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const size_t at = name.find('@');
    if (at == 0 || at == std::string::npos || at + 1 == name.size()) continue;  // not NAME@VERSION
    std::error_code bin_error;
    const fs::path bin = it->path() / "node_modules" / ".bin";
    if (fs::is_directory(bin, bin_error) && !fs::is_empty(bin, bin_error) && !bin_error) found.push_back(name);
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace corral::sandbox
