// The carry of a fork-ready process that does not carry itself (a shell, a server: anything but a Python
// process that called corral_carry.ready()): the host stops it (tracee.h) and has it fork one copy per child,
// then has each copy, and the process itself, take the carry's steps through the gate (transit_gate.h) exactly
// as corral_carry.py has a Python process take them. The gate checks them the same way: a process driven
// through its steps is no more trusted than one taking them itself.
//
// Only a process with one thread and no descriptor but its streams and its control pipe can be carried so: a
// fork copies one thread, and a copy may keep nothing it would share with its parent (a socket or a pipe of
// its parent's is a channel to it). It may be in any call, or in none: a call it was blocked in is made again.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"

namespace corral::sandbox {

class DrivenCarry {
 public:
  // Stops `pid`, has it make `copies` copies, and has them and it announce themselves to the gate (which must
  // expect them), on a thread of its own; returns once they did, or why they could not (nothing was changed
  // then: the process goes on). The gate's Release lets the rest happen.
  static absl::StatusOr<std::unique_ptr<DrivenCarry>> Start(pid_t pid, size_t copies);
  // Waits until each process is carried, killed or refused (Release, then Await, end it).
  ~DrivenCarry();

 private:
  DrivenCarry() = default;
  std::thread thread_;
  absl::Notification announced_;
  absl::Status status_;  // why the announcements failed (set before announced_)
};

// A descriptor of a process's that duplicates one of its standard streams (a shell keeps one of its input): a
// copy gets its own stream there.
struct StreamCopy {
  int fd = -1;
  int stream = 0;  // 0, 1 or 2
  bool cloexec = false;
};
// Why `pid` cannot be driven through a carry (one thread; besides its streams and its control pipe, duplicates
// of its streams only), or those duplicates.
absl::StatusOr<std::vector<StreamCopy>> CheckDrivable(pid_t pid);

}  // namespace corral::sandbox
