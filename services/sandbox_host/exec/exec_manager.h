// Running commands in sandboxes: one epoll thread moves output from every running process into its
// Execution's bounded buffer (a consumer that stops reading stops the reads, so the process blocks on a full
// pipe — backpressure, never host memory), pidfds tell it when a process exits, and once a second it reaps
// orphans the host inherits as a subreaper. Timeouts kill the process group and sweep the sandbox's uid.
#pragma once

#include <sys/epoll.h>
#include <sys/types.h>

#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "libs/core/clock.h"
#include "libs/core/unique_fd.h"
#include "libs/core/worker_pool.h"
#include "services/sandbox_host/exec/execution.h"
#include "services/sandbox_host/fork/carrier.h"
#include "services/sandbox_host/metrics.h"
#include "services/sandbox_host/sandbox_manager.h"

namespace corral::sandbox {

// Thread-safe. Owns the epoll thread.
class ExecManager : public FdWatcher {
 public:
  // `metrics` may be null (tests). `workers`: where timed-out executions are killed (the sweep can take seconds;
  // null: on the clock's thread).
  // `carrier`: what starts fork-ready processes (null: ExecOptions::fork_ready is refused).
  explicit ExecManager(Clock* clock, SandboxHostMetrics* metrics = nullptr, WorkerPool* workers = nullptr,
                       Carrier* carrier = nullptr);
  ~ExecManager() override;  // kills whatever still runs

  // Starts `options.argv` in the sandbox. A command that cannot be executed still starts and exits 127/126
  // with the reason on stderr. INVALID_ARGUMENT for an empty argv or reserved env names; INTERNAL when the
  // isolation cannot be set up.
  absl::StatusOr<std::shared_ptr<Execution>> Start(std::shared_ptr<const Sandbox> sandbox, ExecOptions options);
  size_t running() const;
  // A process a fork carried into `sandbox` (a copy of a fork-ready process of its parent; its streams are the
  // ends `process` holds): reported and signalled like one started here, as `options` describes it.
  absl::StatusOr<std::shared_ptr<Execution>> Adopt(std::shared_ptr<const Sandbox> sandbox, Spawned process,
                                                   ExecOptions options);
  // An adopted process nobody reads yet, for a reader to take up (once). NOT_FOUND for no such running
  // process; FAILED_PRECONDITION for one already read.
  absl::StatusOr<std::shared_ptr<Execution>> TakeUp(const std::string& sandbox_id, const std::string& process_id);

  // The sandbox's processes started through the API, by start time: running ones, and with `include_exited`
  // the last kMaxExitedKept that exited.
  std::vector<ProcessInfo> List(const std::string& sandbox_id, bool include_exited) const;
  // Signals a process of the sandbox (see Execution::Signal) and returns it as it is afterwards (after SIGKILL,
  // once it has exited); an exited one is returned unchanged. NOT_FOUND for an unknown process.
  absl::StatusOr<ProcessInfo> Signal(const std::string& sandbox_id, const std::string& process_id, int sig);
  static constexpr size_t kMaxExitedKept = 64;

 private:
  // FdWatcher, for the executions.
  bool Watch(uint64_t key, Stream stream, int fd, uint32_t events) override;
  void Unwatch(int fd) override;

  void Loop();
  std::shared_ptr<Execution> Find(uint64_t key);
  void OnProcessExit(const std::shared_ptr<Execution>& e);
  void PruneHistory() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReapUntracked();

  // Registers a spawned or adopted process and watches it; its timeout starts.
  absl::StatusOr<std::shared_ptr<Execution>> Track(std::shared_ptr<const Sandbox> sandbox, uint64_t key,
                                                   Spawned spawned, ExecOptions options);
  // Starts it under the fork gate, registered as the sandbox's (ForkReadyList).
  absl::StatusOr<Spawned> SpawnForkReady(const std::shared_ptr<const Sandbox>& sandbox, SpawnSpec spec,
                                         const ExecOptions& options, uint64_t key);

  Clock* const clock_;
  SandboxHostMetrics* const metrics_;
  WorkerPool* const workers_;
  Carrier* const carrier_;
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
