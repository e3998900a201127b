// Integration-test helpers around libs/process/supervise.h: a per-test directory, condition polling with a
// deadline (never sleeping for time to pass), and a cluster secret file.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "libs/process/supervise.h"

namespace corral::testing {

using ::corral::ReadyInfo;
using ::corral::RunningService;
using ::corral::StartService;
using ::corral::Subprocess;
using ::corral::WaitForReadyFile;

// A fresh, empty directory under the test temp dir, named after the running test.
std::string MakeTestDir();

// Polls `condition` (every few ms) until it holds or `timeout` passes; returns its last value. For waiting on
// state another process changes (a status count, a log line), never for letting time pass.
bool WaitUntil(const std::function<bool()>& condition, absl::Duration timeout);

// Writes a cluster secret (mode 0600) into `dir` and returns its path.
std::string WriteSecretFile(const std::string& dir);

}  // namespace corral::testing
