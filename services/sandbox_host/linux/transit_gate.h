// The host's side of the fork gate (fork_gate.h): it answers every gated call of fork-ready processes, and
// refuses them all (EPERM) except the steps of a carry it planned.
//
// A carry moves one process — a copy a fork just made, or the parent's own process moving to the parent's next
// generation — into its sandbox:
// 1. it closes every descriptor but 0, 1, 2 (and its control pipe, kCarryControlFd, if it stays fork-ready) and
//    announces itself with unshare(0). The gate parks it there, if the host expects it, until the host has its
//    plan; then it installs the plan's descriptors (the plan's text at kCarryPlanFd, its user, network and mount
//    namespaces, its standard streams at 0, 1, 2), moves it to its cgroup, and returns 0;
// 2. it reads the plan (CarryPlanText) and does its steps, in that order: join the user namespace, and there
//    setgroups(0), setresgid, setresuid to the plan's ids (a copy; the parent's own keeps its ids); join the
//    network namespace; join the mount namespace (the host made it: a process under Landlock may not mount);
//    close the plan's descriptors; chdir; drop every capability (unless it stays fork-ready);
// 3. it calls unshare(0) again. Before that call returns, the gate checks the process as it is
//    (carry_check.h). A process that fails is killed. Each step is let through only when it is that process's
//    next planned one and names the plan's own namespace (checked through a pidfd while the process,
//    single-threaded, is stopped in the call).
// Thread-safe; one thread answers every listener.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "libs/core/unique_fd.h"
#include "services/sandbox_host/linux/carry_plan.h"

namespace corral::sandbox {

class TransitGate {
 public:
  TransitGate();
  ~TransitGate();
  TransitGate(const TransitGate&) = delete;
  TransitGate& operator=(const TransitGate&) = delete;

  // Answers the gated calls of every process under `listener` (one fork-ready process and its descendants).
  int Watch(UniqueFd listener);
  // Stops answering: their gated calls fail from then on.
  void Unwatch(int watch);
  // A carry of `own` (the fork-ready process itself, or 0) and of the next `copies` processes under `watch`
  // that announce themselves running as `uid` (own's: a copy is its parent's until carried): each is parked in
  // its announcement until Release.
  int Expect(int watch, size_t copies, pid_t own, uid_t uid);
  // Waits until `own` and every copy announced themselves: the copies parked, in order. DEADLINE_EXCEEDED when
  // `timeout` passed first.
  absl::StatusOr<std::vector<pid_t>> AwaitParked(int batch, absl::Duration timeout);
  // Gives each parked process its plan (`own_plan` to own, the copies' in order; a copy without one is killed)
  // and lets it go on. INVALID_ARGUMENT for a plan the process could not read (a path with a newline, streams
  // given in part): then nothing is released.
  absl::Status Release(int batch, std::optional<CarryPlan> own_plan, std::vector<CarryPlan> copy_plans);
  // Each carried process's pid (own first, when there is one, then the copies), or why it was not carried,
  // once all are done or `timeout` passes: a process still on its way (or still parked) is then killed — own
  // is refused instead. Ends the batch.
  std::vector<absl::StatusOr<pid_t>> Await(int batch, absl::Duration timeout);

  // Gated calls refused so far.
  size_t refused() const;

 private:
  struct State;
  void Run();
  std::unique_ptr<State> state_;
};

}  // namespace corral::sandbox
