// Supervising Corral services as child processes: spawn with arguments and a log file, wait for the ready
// file the server runner writes (the ports it bound), signal, and reap with a timeout. Used by `corral up`
// and by integration tests.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace corral {

// What a Corral server writes to --ready-file once it listens.
struct ReadyInfo {
  int pid = 0;
  std::string grpc;     // host:port
  std::string metrics;  // host:port
  std::string http;     // host:port of an HTTP listener (proxy, fake backend); empty if none
};

// Not thread-safe. The destructor SIGKILLs a still-running child, so nothing outlives its owner.
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

// A Corral service started as a child process with --ready-file, waited on until it listens.
struct RunningService {
  Subprocess process;
  ReadyInfo ready;
};
// Starts `binary` with `args` plus --ready-file (in `dir`), logging to dir/<name>.log.
absl::StatusOr<RunningService> StartService(const std::string& binary, std::vector<std::string> args,
                                            const std::string& dir, const std::string& name);

// Writes `info` (plus the service name) as one JSON line to `path`, via a temp file and rename.
absl::Status WriteReadyFile(const std::string& path, const std::string& service, const ReadyInfo& info);

}  // namespace corral
