// A scratch directory for the image tests' layers: below the system's temp directory, or below /var/tmp where that
// one is an overlayfs (a container's /tmp), since layers cannot live on an overlayfs.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

#include "services/sandbox_host/images/layer_unpack.h"

namespace corral::sandbox {

// `name` made (afresh) below the first root that can hold layers; empty when none can.
inline std::filesystem::path LayerScratchDir(const std::string& name) {
  for (const std::filesystem::path& root :
       {std::filesystem::temp_directory_path(), std::filesystem::path("/var/tmp")}) {
    std::error_code ec;
    const std::filesystem::path dir = root / name;
    std::filesystem::remove_all(dir, ec);
    std::filesystem::create_directories(dir, ec);
    if (!ec && CheckLayerFilesystem(dir.string()).ok()) return dir;
    std::filesystem::remove_all(dir, ec);
  }
  return {};
}

}  // namespace corral::sandbox
