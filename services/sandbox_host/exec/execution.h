// One process started through the API, and its state machine: running → (being killed) → exited → exit
// delivered. Consumers read its output as events (Next) and signal it; the exec loop (ExecManager) feeds it
// through the second half of the interface — readable pipes, a writable stdin, the exit — via an FdWatcher,
// the one thing an execution needs from the loop.
#pragma once

#include <sys/epoll.h>
#include <sys/types.h>

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "libs/core/clock.h"
#include "libs/core/unique_fd.h"
#include "services/sandbox_host/linux/spawn.h"
#include "services/sandbox_host/sandbox_manager.h"

namespace corral::sandbox {

enum class ExitReason { kExited, kSignaled, kTimedOut, kKilled, kSandboxDeleted, kCallEnded };
const char* ExitReasonName(ExitReason reason);

struct ExitInfo {
  int exit_code = 0;  // 0..255, or 128 + signal
  int signal = 0;
  bool timed_out = false;
  absl::Duration duration;
  absl::Time end_time;  // when the exit was seen, on the host's clock
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
  std::string cwd;                                // host path inside the home; empty = the home
  absl::Duration timeout = absl::ZeroDuration();  // 0 = none
  std::string stdin_data;                         // written first; then stdin is closed unless kInteractive
  uint64_t max_output_bytes = 0;                  // 0 = unlimited; beyond it output is dropped (counted)
  size_t buffer_limit = 1 << 20;                  // bytes buffered before reads pause
  std::string output_path;                        // kBackground: where its output goes (for ListProcesses)
  std::optional<InsideUser> user;                 // an image sandbox: who runs it; unset = the image's user
  // Its memory and state can be carried into the sandbox's fork's children (fork/carrier.h): it runs under the
  // fork gate, with a control pipe. A sandbox on the host's filesystem only.
  bool fork_ready = false;
  std::string copy_of;  // adopted: the parent's process it is a copy of
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
  std::string copy_of;           // a carried copy: the parent's process
};

// The descriptors of an execution a loop watches, as tagged in its events.
enum class Stream : int { kStdout = 0, kStderr = 1, kExit = 2, kStdin = 3 };

// What an execution needs from the loop that watches its descriptors.
class FdWatcher {
 public:
  virtual ~FdWatcher() = default;
  // False (and logged) when the descriptor cannot be watched.
  virtual bool Watch(uint64_t key, Stream stream, int fd, uint32_t events = EPOLLIN) = 0;
  virtual void Unwatch(int fd) = 0;
};

// A process's API id ("p-7"), which its tree also carries as kProcessIdVar (sandbox.h).
inline std::string ProcessIdOf(uint64_t key) { return "p-" + std::to_string(key); }

// Thread-safe.
class Execution {
 public:
  // The process `pid` just spawned in `sandbox`. `key` tags its descriptors in `watcher`; its id is "p-<key>".
  Execution(FdWatcher* watcher, uint64_t key, pid_t pid, std::shared_ptr<const Sandbox> sandbox, ExecOptions options,
            absl::Time start);

  pid_t pid() const { return pid_; }
  const std::string& id() const { return id_; }
  uint64_t key() const { return key_; }
  absl::Time start_time() const { return start_; }
  const std::shared_ptr<const Sandbox>& sandbox() const { return sandbox_; }

  // ---- For consumers
  // The next event, or nullopt when nothing is ready yet. The exit event comes last, exactly once.
  std::optional<OutputEvent> Next();
  // Called, from the loop's thread, whenever Next() may have something new. Must not block. A call already
  // under way may still run after SetListener returns: capture shared state, never references to locals.
  void SetListener(std::function<void()> listener);
  // Kills the process group and sweeps the sandbox's uid; the exit event carries `reason`.
  void Kill(ExitReason reason);
  // Sends `sig` to the process group (SIGKILL: Kill(kKilled)). A process that dies of it reports KILLED.
  void Signal(int sig);
  bool exited() const;
  // Exited, and both output pipes read to their end: nothing more can come of it.
  bool finished() const;
  // Waits up to `timeout` for the process to exit; returns whether it has.
  bool WaitExited(absl::Duration timeout) const;
  ProcessInfo Info() const;
  // Interactive stdin (kInteractive). Queues `data` for the process's stdin; `written` runs (on the loop's
  // thread) once all of it is in the pipe, or dropped because the process closed its stdin or exited. One
  // write at a time: call again only after `written`.
  void SendStdin(std::string data, std::function<void()> written);
  // EOF on stdin once what was sent is written.
  void CloseStdin();

  // ---- For the exec loop
  // Takes the spawned process's descriptors: watches its output pipes and its exit (a pidfd), then writes `stdin_data`
  // and closes stdin unless interactive. INTERNAL when any descriptor cannot be watched: the process is then killed and
  // reaped, since its exit or output would go unnoticed.
  absl::Status Attach(Spawned spawned);
  // One read from a readable stdout/stderr pipe; pauses the pipe when the buffer is full.
  void OnReadable(Stream stream);
  // Stdin's pipe has room: writes what is pending.
  void OnWritable();
  // The process exited (its pidfd fired): collects its status and records the exit, returned for the caller's
  // bookkeeping; the caller then calls Notify. Output still in the pipes keeps coming until CloseOutputs.
  ExitInfo OnExited(absl::Time now);
  // Tells the listener that Next() may have something new.
  void Notify();
  // Stops waiting for output (a background child may hold the pipes open after the exit).
  void CloseOutputs();
  // The timer that kills it on timeout (0: none); cancelled once it exited.
  std::atomic<Clock::TimerId> timeout_timer{0};
  // Adopted, and nobody reads its events yet (ExecManager::TakeUp).
  std::atomic<bool> unread{false};

 private:
  struct Pipe {
    UniqueFd fd;
    bool eof = false;
    bool paused = false;
  };

  Pipe& PipeOf(Stream stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stream == Stream::kStdout ? out_ : err_; }
  void CloseOutputsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes what it can of the pending stdin; returns the callback to run (outside the lock) when done.
  std::function<void()> WriteStdin() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::function<void()> DropStdin() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  FdWatcher* const watcher_;
  const uint64_t key_;
  const std::string id_;
  const pid_t pid_;
  const std::shared_ptr<const Sandbox> sandbox_;
  const absl::Time start_;
  ExecOptions options_;
  UniqueFd pidfd_;  // Attach, then the loop's thread only

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
  // Stdin: a non-blocking pipe written by the loop's thread (never blocks a caller).
  UniqueFd stdin_ ABSL_GUARDED_BY(mu_);
  std::string stdin_pending_ ABSL_GUARDED_BY(mu_);
  size_t stdin_offset_ ABSL_GUARDED_BY(mu_) = 0;
  bool stdin_watched_ ABSL_GUARDED_BY(mu_) = false;
  bool stdin_close_after_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> stdin_written_ ABSL_GUARDED_BY(mu_);
};

}  // namespace corral::sandbox
