// corral-scheduler's composition root: every part of the service, as members declared in the order they depend
// on each other — journal (read back) → event loop → episode table (restored) → host registry, proxy and
// limiter clients → warm pool → sandbox leases → episode driver → scheduler (dispatcher, drains) → policy control →
// gRPC adapter → the inspector. Cycles are broken by what is made first, never by setters: whatever makes room rings
// the Doorbell the dispatcher waits on; what is in flight is counted in an Occupancy the driver keeps.
//
// Threads: gRPC's callback threads (adapters only: nothing blocks on them), `io_threads` event-loop threads
// (every episode is a coroutine there; host polling, the dispatcher and the ticker too), the clock's timer
// thread, the journal's writer thread, the retention sweep's thread, the ratelimiter client's connection
// thread, and `http_threads` serving the inspector (docs/threading.md).
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "libs/core/clock.h"
#include "libs/http/server.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/server_runner.h"
#include "services/ratelimiter/client/limiter_client.h"
#include "services/ratelimiter/client/ratelimit_client.h"
#include "services/scheduler/config.h"
#include "services/scheduler/doorbell.h"
#include "services/scheduler/episode/episode_driver.h"
#include "services/scheduler/episode/pause_ledger.h"
#include "services/scheduler/inspector.h"
#include "services/scheduler/metrics.h"
#include "services/scheduler/policy_control.h"
#include "services/scheduler/remote/host_registry.h"
#include "services/scheduler/remote/warm_pool.h"
#include "services/scheduler/result_stream.h"
#include "services/scheduler/scheduler.h"
#include "services/scheduler/scheduler_journal.h"
#include "services/scheduler/scheduler_service.h"
#include "services/scheduler/table/episode_table.h"

namespace corral::scheduler {

class SchedulerRoot {
 public:
  // Everything that can fail before serving (the cluster secret, the journal, the clients), then the service.
  static absl::StatusOr<std::unique_ptr<SchedulerRoot>> Build(Config config);
  ~SchedulerRoot();
  SchedulerRoot(const SchedulerRoot&) = delete;
  SchedulerRoot& operator=(const SchedulerRoot&) = delete;

  // Serves until SIGTERM/SIGINT, then shuts down: running episodes go back to the queue (journaled) for the next
  // start. Returns the process's exit code.
  int Run();

 private:
  struct Prepared;  // what Build made that could fail
  SchedulerRoot(Config config, Prepared prepared);
  // At start, after the journal was read: the proxy sessions of attempts a previous run left running.
  void CloseLeftoverSessions(const Snapshot& snapshot);
  // Once a minute on its own thread: acknowledged results past the retention leave the journal.
  void RetentionLoop();
  void Shutdown();

  const Config config_;
  const CallAuthenticator auth_;
  const std::string peer_token_;  // what this scheduler presents to hosts, proxies and the limiter
  ServerRunner runner_;
  SchedulerMetrics metrics_;
  std::unique_ptr<SchedulerJournal> journal_;  // reset at shutdown, before the table its callbacks reach
  RealClock clock_;
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  Doorbell doorbell_;
  ResultHub hub_;
  EpisodeTable table_;
  HostRegistry hosts_;
  const std::vector<std::shared_ptr<ProxyApi>> proxies_;
  const std::unique_ptr<ratelimiter::RateLimitClient> limiter_session_;
  const std::unique_ptr<ratelimiter::LimiterClient> limiter_;  // null without a ratelimiter: no limits
  PauseLedger pauses_;  // generation pauses (PolicyControl): not counted against episode and agent timeouts
  EnvBoard envs_;       // trainer-driven environment episodes (OpenEnvironment, StepEnvironment, CloseEnvironment)
  Occupancy occupancy_;
  const std::unique_ptr<WarmPool> pool_;  // null without warm_pool_size
  SandboxPlacer placer_;                  // for leases (the driver has its own: the same rules)
  SandboxLeases leases_;
  SandboxTemplates templates_;
  EpisodeDriver driver_;
  Scheduler scheduler_;
  PolicyControl policy_;
  SchedulerService service_;
  Inspector inspector_;
  std::unique_ptr<http::HttpServer> http_;  // the inspector's, with http_listen
  absl::Notification retention_stop_;
  std::thread retention_;
  std::vector<std::thread> io_threads_;
  std::atomic<bool> policy_stopping_{false};  // the policy push and the lease expiry loops
};

}  // namespace corral::scheduler
