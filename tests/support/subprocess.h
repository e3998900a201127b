// Starting the real binaries from integration tests: spawn with arguments, capture stderr to a file, wait
// for the ready file the server runner writes, signal, and reap with a timeout. Never sleeps blindly:
// waits poll a condition with a deadline.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace corral::testing {

// What a Corral server writes to --ready-file once it listens.
struct ReadyInfo {
  int pid = 0;
  std::string grpc;     // host:port
  std::string metrics;  // host:port
};

// Not thread-safe. The destructor SIGKILLs a still-running child, so a failing test leaks nothing.
class Subprocess {
 public:
  // Starts `argv[0]` with `argv`; stdout and stderr go to `log_path` (appended).
  static absl::StatusOr<Subprocess> Start(const std::vector<std::string>& argv, const std::string& log_path);
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&&) = delete;
  ~Subprocess();

  pid_t pid() const { return pid_; }
  bool Signal(int sig) const;
  // The exit status as from waitpid, or DEADLINE_EXCEEDED if it is still running after `timeout`.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  // The child's output so far, for failure messages.
  std::string Log() const;

 private:
  Subprocess(pid_t pid, std::string log_path) : pid_(pid), log_path_(std::move(log_path)) {}
  pid_t pid_ = -1;
  std::string log_path_;
};

// Polls `path` until the runner's ready file appears and parses it; DEADLINE_EXCEEDED after `timeout`.
absl::StatusOr<ReadyInfo> WaitForReadyFile(const std::string& path, absl::Duration timeout,
                                           const Subprocess* process = nullptr);

// A fresh, empty directory under the test temp dir, named after the running test.
std::string MakeTestDir();

// Polls `condition` (every few ms) until it holds or `timeout` passes; returns its last value. For waiting on
// state another process changes (a status count, a log line), never for letting time pass.
bool WaitUntil(const std::function<bool()>& condition, absl::Duration timeout);

// A Corral service started as a child process with --ready-file, waited on until it listens.
struct RunningService {
  Subprocess process;
  ReadyInfo ready;
};
// Starts `binary` with `args` plus --ready-file (in `dir`), logging to dir/<name>.log.
absl::StatusOr<RunningService> StartService(const std::string& binary, std::vector<std::string> args,
                                            const std::string& dir, const std::string& name);

// Writes a cluster secret (mode 0600) into `dir` and returns its path.
std::string WriteSecretFile(const std::string& dir);

}  // namespace corral::testing
