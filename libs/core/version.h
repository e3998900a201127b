// Corral's version: the one place it is written. The build reads it from here too (project(VERSION) in the top
// CMakeLists.txt), so binaries, metrics (`corral_build_info`), HostInfo and `corral version` agree.
#pragma once

namespace corral {

inline constexpr char kVersion[] = "0.1.0";

}  // namespace corral
