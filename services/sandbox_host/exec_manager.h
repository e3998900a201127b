// Running commands in sandboxes: one epoll thread moves output from every running process into a bounded
// buffer per execution (a consumer that stops reading stops the reads, so the process blocks on a full pipe —
// backpressure, never host memory), pidfds tell it when a process exits, and it reaps orphans the host
// inherits as a subreaper. Timeouts kill the process group and sweep the sandbox's uid.
#pragma once

#include <sys/epoll.h>
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
#include "libs/core/worker_pool.h"
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

enum class ProcessKind { kExec, kInteractive, kBackground };

struct ExecOptions {
  ProcessKind kind = ProcessKind::kExec;
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string cwd;                                   // host path inside the home; empty = the home
  absl::Duration timeout = absl::ZeroDuration();     // 0 = none
  std::string stdin_data;                            // written first; then stdin is closed unless kInteractive
  uint64_t max_output_bytes = 0;                     // 0 = unlimited; beyond it output is dropped (counted)
  size_t buffer_limit = 1 << 20;                     // bytes buffered before reads pause
  std::string output_path;                           // kBackground: where its output goes (for ListProcesses)
};

// What ListProcesses reports of a process started through the API.
struct ProcessInfo {
  std::string id;  // "p-<n>", unique on this host
  pid_t pid = -1;
  ProcessKind kind = ProcessKind::kExec;
  std::vector<std::string> argv;
  absl::Time start_time;
  std::optional<ExitInfo> exit;  // set once it exited
  std::string output_path;       // background processes
};

class ExecManager;

// One running (or finished) process. Thread-safe.
class Execution {
 public:
  pid_t pid() const { return pid_; }
  const std::string& id() const { return id_; }
  absl::Time start_time() const { return start_; }
  // The next event, or nullopt when nothing is ready yet. The exit event comes last, exactly once.
  std::optional<OutputEvent> Next();
  // Called, from the manager's threads, whenever Next() may have something new. Must not block.
  void SetListener(std::function<void()> listener);
  // Kills the process group and sweeps the sandbox's uid; the exit event carries `reason`.
  void Kill(ExitReason reason);
  // Sends `sig` to the process group (SIGKILL: Kill(kKilled)). A process that dies of it reports KILLED.
  void Signal(int sig);
  bool exited() const;
  // Waits up to `timeout` for the process to exit; returns whether it has.
  bool WaitExited(absl::Duration timeout) const;
  ProcessInfo Info() const;

  // Interactive stdin (kInteractive). Queues `data` for the process's stdin; `written` runs (on a manager
  // thread) once all of it is in the pipe, or dropped because the process closed its stdin or exited. One
  // write at a time: call again only after `written`.
  void SendStdin(std::string data, std::function<void()> written);
  // EOF on stdin once what was sent is written.
  void CloseStdin();

 private:
  friend class ExecManager;
  struct Pipe {
    UniqueFd fd;
    bool eof = false;
    bool paused = false;
  };

  void Notify();
  void CloseOutputs() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes what it can of the pending stdin; returns the callback to run (outside the lock) when done.
  std::function<void()> WriteStdin() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::function<void()> DropStdin() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ExecManager* manager_ = nullptr;
  uint64_t key_ = 0;
  std::string id_;
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
  bool signaled_by_api_ ABSL_GUARDED_BY(mu_) = false;
  // Stdin: a non-blocking pipe written by the manager's thread (never blocks a caller).
  UniqueFd stdin_ ABSL_GUARDED_BY(mu_);
  std::string stdin_pending_ ABSL_GUARDED_BY(mu_);
  size_t stdin_offset_ ABSL_GUARDED_BY(mu_) = 0;
  bool stdin_watched_ ABSL_GUARDED_BY(mu_) = false;
  bool stdin_close_after_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> stdin_written_ ABSL_GUARDED_BY(mu_);
};

// Thread-safe. Owns the epoll thread.
class ExecManager {
 public:
  // `metrics` may be null (tests).
  explicit ExecManager(Clock* clock, SandboxHostMetrics* metrics = nullptr);
  ~ExecManager();  // kills whatever still runs
  // Where timed-out executions are killed (the sweep can take seconds; unset: on the clock's thread). Call
  // before serving.
  void SetWorkers(WorkerPool* workers) { workers_ = workers; }

  // Starts `options.argv` in the sandbox. A command that cannot be executed still starts and exits 127/126
  // with the reason on stderr. INVALID_ARGUMENT for an empty argv or reserved env names; INTERNAL when the
  // isolation cannot be set up.
  absl::StatusOr<std::shared_ptr<Execution>> Start(std::shared_ptr<const Sandbox> sandbox, ExecOptions options);
  size_t running() const;

  // The sandbox's processes started through the API, by start time: running ones, and with `include_exited`
  // the last kMaxExitedKept that exited.
  std::vector<ProcessInfo> List(const std::string& sandbox_id, bool include_exited) const;
  // Signals a process of the sandbox (see Execution::Signal) and returns it as it is afterwards (after SIGKILL,
  // once it has exited); an exited one is returned unchanged. NOT_FOUND for an unknown process.
  absl::StatusOr<ProcessInfo> Signal(const std::string& sandbox_id, const std::string& process_id, int sig);
  static constexpr size_t kMaxExitedKept = 64;

 private:
  friend class Execution;
  void Loop();
  std::shared_ptr<Execution> Find(uint64_t key);
  void OnReadable(uint64_t key, int which);
  void OnProcessExit(uint64_t key);
  void OnWritable(uint64_t key);
  void PruneHistory() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReapOrphans();
  // False (and logged) when epoll refuses the descriptor.
  bool Watch(uint64_t key, int which, int fd, uint32_t events = EPOLLIN);
  void Unwatch(int fd);

  Clock* const clock_;
  SandboxHostMetrics* const metrics_;
  WorkerPool* workers_ = nullptr;
  UniqueFd epoll_;
  UniqueFd wake_;  // eventfd: stop
  std::thread thread_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Execution>> executions_ ABSL_GUARDED_BY(mu_);
  uint64_t next_key_ ABSL_GUARDED_BY(mu_) = 1;
  // Exited processes per sandbox (newest last), dropped once the sandbox is gone.
  struct History {
    std::weak_ptr<const Sandbox> sandbox;
    std::deque<ProcessInfo> exited;
  };
  absl::flat_hash_map<std::string, History> history_ ABSL_GUARDED_BY(mu_);
};

}  // namespace corral::sandbox
