// Finding, killing and reaping processes by owner: the uid sweep that teardown and exec timeouts rely on, and
// the reaping of orphans the host inherits as a child subreaper.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"

namespace corral::sandbox {

// Calls `visit` with every live (non-zombie) process and its real, effective and saved uids. With `may_be`, only
// processes that may run as an id it accepts: each process's /proc directory is owned by its effective uid
// (dumpable or not; a kernel thread's by root), so only those whose owner is root or an accepted id have their
// status read, and kernel threads none. A process cannot hold a real or saved uid its effective one could not
// switch to without privilege, which no sandbox process has outside its own block of ids.
void ForEachLiveProcess(const std::function<void(pid_t, const std::vector<uid_t>&)>& visit,
                        const std::function<bool(uid_t)>& may_be = nullptr);

// pids of every live (non-zombie) process whose real, effective or saved uid is `uid` or in its block of sub
// ids (sub_ids.h).
std::vector<pid_t> ProcessesOf(uid_t uid);

// SIGKILLs every process running as `uid` or an id of its block — including ones that left the process group
// with setsid — from a helper per id that switches to it and calls kill(-1), repeated until none is left or
// `rounds` pass, a moment apart (about 1.4 s in all: a killed process is listed until its exit is done). Returns
// true when no process of the uid or its block remains. `found`, if given: how many there were at first.
bool KillAllOf(uid_t uid, int rounds = 20, size_t* found = nullptr);

// The variables `pid` was exec'd with ("K=V", as /proc's environ keeps them); empty when it is gone.
std::vector<std::string> EnvironOf(pid_t pid);

// SIGKILLs one process's tree in a sandbox and leaves the sandbox's other processes alone: every process of
// `uid` or its block that is in process group `group` or carries `marker` ("CORRAL_PROCESS_ID=p-7") in its
// environment (escapees that called setsid or double-forked), each signalled through a pidfd checked after it is
// opened (a pid reused meanwhile is never hit), repeated until none is left or `rounds` pass. Returns true when
// none remains. A process that dropped the marker from its environment survives it (KillAllOf ends those).
bool KillProcessTree(uid_t uid, pid_t group, const std::string& marker, int rounds = 20);

// Reaps zombie children of this process that nobody else waits for: processes the host inherited as a
// subreaper when their parents exited. Skips `tracked` (children someone waits for) and zombies younger than a
// few seconds (one may be a child whose starter has not registered it yet).
void ReapOrphans(const absl::flat_hash_set<pid_t>& tracked);

}  // namespace corral::sandbox
