// Running commands in sandboxes: one epoll thread moves output from every running process into a bounded
// buffer per execution (a consumer that stops reading stops the reads, so the process blocks on a full pipe —
// backpressure, never host memory), pidfds tell it when a process exits, and it reaps orphans the host
// inherits as a subreaper. Timeouts kill the process group and sweep the sandbox's uid.
#pragma once

#include <sys/types.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "libs/core/clock.h"
#include "libs/core/unique_fd.h"
#include "services/sandbox_host/metrics.h"
#include "services/sandbox_host/sandbox_manager.h"

namespace corral::sandbox {

enum class ExitReason { kExited, kSignaled, kTimedOut, kKilled, kSandboxDeleted, kCallEnded };

struct ExitInfo {
  int exit_code = 0;  // 0..255, or 128 + signal
  int signal = 0;
  bool timed_out = false;
  absl::Duration duration;
  ExitReason reason = ExitReason::kExited;
  uint64_t stdout_bytes = 0;
  uint64_t stderr_bytes = 0;
  uint64_t dropped_bytes = 0;  // beyond max_output_bytes
};

struct OutputEvent {
  enum Kind { kStdout, kStderr, kExit } kind;
  std::string data;
  ExitInfo exit;
};

struct ExecOptions {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string cwd;                                   // host path inside the home; empty = the home
  absl::Duration timeout = absl::ZeroDuration();     // 0 = none
  std::string stdin_data;                            // written, then stdin is closed
  uint64_t max_output_bytes = 0;                     // 0 = unlimited; beyond it output is dropped (counted)
  size_t buffer_limit = 1 << 20;                     // bytes buffered before reads pause
};

class ExecManager;

// One running (or finished) process. Thread-safe.
class Execution {
 public:
  pid_t pid() const { return pid_; }
  absl::Time start_time() const { return start_; }
  // The next event, or nullopt when nothing is ready yet. The exit event comes last, exactly once.
  std::optional<OutputEvent> Next();
  // Called, from the manager's threads, whenever Next() may have something new. Must not block.
  void SetListener(std::function<void()> listener);
  // Kills the process group and sweeps the sandbox's uid; the exit event carries `reason`.
  void Kill(ExitReason reason);
  bool exited() const;

 private:
  friend class ExecManager;
  struct Pipe {
    UniqueFd fd;
    bool eof = false;
    bool paused = false;
  };

  void Notify();
  void CloseOutputs() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ExecManager* manager_ = nullptr;
  uint64_t key_ = 0;
  pid_t pid_ = -1;
  std::shared_ptr<const Sandbox> sandbox_;
  absl::Time start_;
  ExecOptions options_;
  UniqueFd pidfd_;
  Clock::TimerId timeout_timer_ = 0;

  mutable absl::Mutex mu_;
  Pipe out_ ABSL_GUARDED_BY(mu_);
  Pipe err_ ABSL_GUARDED_BY(mu_);
  std::deque<OutputEvent> buffer_ ABSL_GUARDED_BY(mu_);
  size_t buffered_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<ExitInfo> exit_ ABSL_GUARDED_BY(mu_);
  bool exit_delivered_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<ExitReason> kill_reason_ ABSL_GUARDED_BY(mu_);
  bool sweeping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t stdout_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t stderr_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t kept_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<void()> listener_ ABSL_GUARDED_BY(mu_);
};

// Thread-safe. Owns the epoll thread.
class ExecManager {
 public:
  // `metrics` may be null (tests).
  explicit ExecManager(Clock* clock, SandboxHostMetrics* metrics = nullptr);
  ~ExecManager();  // kills whatever still runs

  // Starts `options.argv` in the sandbox. A command that cannot be executed still starts and exits 127/126
  // with the reason on stderr. INVALID_ARGUMENT for an empty argv or reserved env names; INTERNAL when the
  // isolation cannot be set up.
  absl::StatusOr<std::shared_ptr<Execution>> Start(std::shared_ptr<const Sandbox> sandbox, ExecOptions options);
  size_t running() const;

 private:
  friend class Execution;
  void Loop();
  std::shared_ptr<Execution> Find(uint64_t key);
  void OnReadable(uint64_t key, int which);
  void OnProcessExit(uint64_t key);
  void ReapOrphans();
  void Watch(uint64_t key, int which, int fd);
  void Unwatch(int fd);

  Clock* const clock_;
  SandboxHostMetrics* const metrics_;
  UniqueFd epoll_;
  UniqueFd wake_;  // eventfd: stop
  std::thread thread_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Execution>> executions_ ABSL_GUARDED_BY(mu_);
  uint64_t next_key_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace corral::sandbox
