// The host's side of the fork gate (fork_gate.h): it answers every gated call of fork-ready processes, and
// refuses them all (EPERM) except the steps of a carry it planned.
//
// A carry moves one process — a copy a fork just made, or the parent's own process moving to the parent's next
// generation — into its sandbox:
// 1. it closes every descriptor but 0, 1 and 2 and announces itself with unshare(0). The gate gives the next
//    waiting plan to it: installs its descriptors (the plan's text at kCarryPlanFd, its user and network
//    namespaces, its mount trees, its standard streams at 0, 1, 2), moves it to its cgroup, and returns 0;
// 2. it reads the plan (CarryPlanText) and does its steps, in that order: join the user namespace; setgroups(0),
//    setresgid, setresuid to the plan's ids; join the network namespace; unshare(CLONE_NEWNS) and move_mount
//    each tree to its path; close the plan's descriptors; chdir; drop every capability;
// 3. it calls unshare(0) again. Before that call returns, the gate checks the process as it is: its ids, no
//    capability, no tracer, one thread, no_new_privs, its namespaces, no descriptor but the ones it was given,
//    no memory shared with any other process, its trees mounted at their paths, its working directory on one of
//    them. A process that fails is killed. Each step is let through only when it is that process's next planned
//    one and names the plan's own namespace or tree (checked through a pidfd while the process, single-threaded,
//    is stopped in the call).
// Thread-safe; one thread answers every listener.
#pragma once

#include <sys/types.h>

#include <memory>
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
  // The next plans.size() processes under `watch` that announce themselves take one plan each, in order.
  // INVALID_ARGUMENT for a plan the process could not read (a path with a newline, streams given in part).
  absl::StatusOr<int> Expect(int watch, std::vector<CarryPlan> plans);
  // Each plan's carried process (its pid), or why it was not carried, once all are done or `deadline` passes;
  // a process still on its way then is killed. Ends the batch.
  std::vector<absl::StatusOr<pid_t>> Await(int batch, absl::Time deadline);

  // Gated calls refused so far.
  size_t refused() const;

 private:
  struct State;
  void Run();
  std::unique_ptr<State> state_;
};

}  // namespace corral::sandbox
