// Runs one episode attempt from dequeue to result, as a coroutine: opens the proxy session (on the replica chosen
// by rendezvous hashing of the env id), acquires a sandbox when the runner needs one (placement, template build
// once per host and key, create, uploads), runs the runner, closes the session (taking the trajectory), and
// hands the result to the EpisodeTable. Every phase runs under its deadline; a stop (cancel, drain, lost host,
// batch deadline) interrupts whatever the attempt waits on. The sandbox is deleted in the background once the
// result is in. Thread-safe (attempts run concurrently on the event loop's threads).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "boost/asio/any_io_executor.hpp"
#include "boost/asio/awaitable.hpp"
#include "services/scheduler/attempt.h"

namespace corral::scheduler {

class SchedulerMetrics;
class WarmPool;

class EpisodeDriver {
 public:
  // `limiter`, `metrics` and `pool` may be null (no limits, no metrics, every sandbox created inline).
  EpisodeDriver(boost::asio::any_io_executor executor, Clock* clock, RunnerOptions options, EpisodeTable* table,
                HostRegistry* hosts, std::vector<std::shared_ptr<ProxyApi>> proxies, LimiterApi* limiter,
                SchedulerMetrics* metrics, WarmPool* pool = nullptr);

  // Spawns the attempt on `executor` (counted in running() and, when it needs a sandbox, in placing() until
  // its sandbox slot is reserved).
  void Start(EpisodeTicket ticket);
  int64_t running() const { return running_.load(); }
  // Called when an attempt has ended (room for the next one): the dispatcher's wake-up.
  void set_on_finished(std::function<void()> fn) { on_finished_ = std::move(fn); }
  // Generation pauses, not counted against episode and agent timeouts (set before the first episode runs).
  void set_pauses(const PauseLedger* pauses) { pauses_ = pauses; }
  int64_t placing() const { return placing_.load(); }
  // The proxy replica that serves `env_id` (rendezvous hashing: stable while the replica set is).
  const std::shared_ptr<ProxyApi>& ProxyFor(const std::string& env_id) const;

 private:
  boost::asio::awaitable<void> Run(EpisodeTicket ticket);
  // The session, the sandbox and the runner, in turn; what failed, or nullopt.
  boost::asio::awaitable<std::optional<Failure>> RunPhases(Attempt& a);
  boost::asio::awaitable<std::optional<Failure>> OpenSession(Attempt& a);
  boost::asio::awaitable<std::optional<Failure>> AcquireSandbox(Attempt& a);
  boost::asio::awaitable<void> Conclude(Attempt& a, std::optional<Failure> failure);
  boost::asio::awaitable<void> Cleanup(std::optional<Slot> slot, std::string sandbox_id);
  // Retries closing a session whose proxy did not answer (for up to two minutes).
  boost::asio::awaitable<void> CloseLater(std::shared_ptr<ProxyApi> proxy, std::string env_id);

  const boost::asio::any_io_executor executor_;
  Clock* const clock_;
  const RunnerOptions options_;
  EpisodeTable* const table_;
  HostRegistry* const hosts_;
  const std::vector<std::shared_ptr<ProxyApi>> proxies_;
  LimiterApi* const limiter_;
  SchedulerMetrics* const metrics_;
  WarmPool* const pool_;  // null: every sandbox is created inline
  std::atomic<int64_t> running_{0};
  std::atomic<int64_t> placing_{0};
  std::function<void()> on_finished_;
  const PauseLedger* pauses_ = nullptr;
};

}  // namespace corral::scheduler
