// A process the host stops and has run system calls of the host's choosing (ptrace), as a debugger does: what
// carries a fork-ready process that does not carry itself (driven_carry.h). The process must be
// single-threaded; the calls run in it, with its credentials, namespaces, Landlock domain and seccomp filter,
// exactly as if it had made them. Every call on a Tracee must come from the thread that made it (ptrace's
// rule). x86_64 only: elsewhere Seize is UNIMPLEMENTED.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace corral::sandbox {

class Tracee {
 public:
  // Attaches to `pid` and stops it where it is. A call it was blocked in (a read, a sleep) is made again when it
  // goes on. The host's death kills it while attached.
  static absl::StatusOr<std::unique_ptr<Tracee>> Seize(pid_t pid);
  // Lets it go on where it was (Release), unless it was released or is gone.
  ~Tracee();
  Tracee(const Tracee&) = delete;
  Tracee& operator=(const Tracee&) = delete;

  pid_t pid() const { return pid_; }

  // Runs system call `nr` in it: its result (a negative errno when the call failed), or an error when the
  // process ended (it was killed).
  absl::StatusOr<long> Call(long nr, std::initializer_list<uint64_t> args);
  // Call in two halves, for a call that waits on someone else (the gate parks a process in its announcement):
  // Start returns once the call is under way, Finish when it returned.
  absl::Status Start(long nr, std::initializer_list<uint64_t> args);
  absl::StatusOr<long> Finish();
  // A copy of it (clone with CLONE_PARENT: its parent, the host, is the copy's), stopped and traced, which goes
  // on where this one was when released.
  absl::StatusOr<std::unique_ptr<Tracee>> Fork();
  // Writes `bytes` into its stack, below what it uses, and returns their address, for a call's pointers. They
  // stay until it is released.
  absl::StatusOr<uint64_t> Put(absl::string_view bytes);
  // Restores what it was doing and detaches: it goes on (signals that came meanwhile are sent again).
  absl::Status Release();

 private:
  struct Registers;
  Tracee(pid_t pid, std::unique_ptr<Registers> saved, uint64_t syscall_at);
  // Waits until it stops at a system call's entry or exit (other stops are passed through).
  absl::Status AwaitSyscallStop();

  const pid_t pid_;
  std::unique_ptr<Registers> saved_;  // what it goes on from, its interrupted call to be made again
  const uint64_t syscall_at_;         // the address of a syscall instruction in it
  uint64_t scratch_;                  // where Put writes next (downwards)
  bool attached_ = true;
  bool started_ = false;
  pid_t forked_ = 0;          // the last copy's pid (PTRACE_EVENT_FORK)
  std::vector<int> signals_;  // signals it got while stopped, sent again at Release
};

}  // namespace corral::sandbox
