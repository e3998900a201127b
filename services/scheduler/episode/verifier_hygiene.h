// What the verifier is given under CLEAN_ENV and SEPARATE_UID (docs/reward-integrity.md): where its files go, the
// environment its tools start in, and what a verifier that could not start means. Pure functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "corral/v1/scheduler.pb.h"
#include "services/scheduler/episode/attempt.h"
#include "services/scheduler/episode/reward.h"

namespace corral::scheduler {

// The verifier's files, a relative path made relative to the verifier's working directory (its command's cwd,
// else `workdir`; the home when both are empty), so that files given as tests/test.sh and the default command
// `bash tests/test.sh` agree.
std::vector<v1::InlineFile> VerifierFiles(const v1::VerifierSpec& verifier, const std::string& workdir);

// The deepest directory holding all of `files` (for pytest's --confcutdir); empty when they share none below /.
std::string OwnDirectory(const std::vector<v1::InlineFile>& files);

// CLEAN_ENV: nothing the agent left shapes how the verifier's tools start. Its HOME is a fresh directory
// (~/.corral/verifier-home, or the HOME its env names: a shell sets it, as an exec may not); Python searches the
// working and script directories last, after every installed module (PYTHONSAFEPATH, and the sitecustomize.py of
// ~/.corral/verifier-python on PYTHONPATH appends them); pytest loads conftest.py files only from `own_dir` down
// (--confcutdir); git runs no hook and no fsmonitor (command-line configuration). What the command's env already
// sets wins.
void MakeEnvClean(v1::Command& command, const std::string& own_dir);

// A verifier that could not start — a missing script or program, one that may not be executed — exits 126 or
// 127 having left no reward (`reward` came from its exit code): a verifier failure quoting `tail`, never a reward.
std::optional<Failure> CouldNotRun(const RewardOutcome& reward, std::optional<int> exit_code, const std::string& tail);

}  // namespace corral::scheduler
