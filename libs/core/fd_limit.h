// Raises the soft limit on open files to the hard one: services holding many sockets or descriptors per unit of
// work (two per relayed call, a few per sandbox) call it once at start.
#pragma once

#include <sys/resource.h>

namespace corral {

inline void RaiseOpenFileLimit() {
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
}

}  // namespace corral
