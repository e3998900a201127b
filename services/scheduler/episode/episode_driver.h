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

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "boost/asio/any_io_executor.hpp"
#include "boost/asio/awaitable.hpp"
#include "services/scheduler/episode/attempt.h"
#include "services/scheduler/episode/sandbox_placer.h"

namespace corral::scheduler {

// What the driver reports as attempts end, for metrics (SchedulerMetrics).
class EpisodeObserver {
 public:
  virtual ~EpisodeObserver() = default;
  // An attempt ended (every attempt, retried ones included).
  virtual void EpisodeEnded(v1::Runner runner, const v1::EpisodeResult& result, const std::string& tenant) = 0;
  // An attempt's infrastructure failure sent its episode back to the queue for another attempt.
  virtual void Retried() = 0;
};
class WarmPool;

// Attempts in flight, as the dispatcher and the warm pool count them: started and not ended (running), and among
// them those still waiting for a sandbox slot (placing). The driver keeps them; others read. Thread-safe.
struct Occupancy {
  std::atomic<int64_t> running{0};
  std::atomic<int64_t> placing{0};

  // An attempt ended (the driver's last word on it).
  void Ended() {
    absl::MutexLock lock(&ended_mu);
    --running;
  }
  // Blocks until no attempt runs; false when `timeout` passed first. It wakes when an attempt ends, not on a timer.
  bool AwaitIdle(absl::Duration timeout) {
    absl::MutexLock lock(&ended_mu);
    auto idle = [this] { return running.load() <= 0; };
    return ended_mu.AwaitWithTimeout(absl::Condition(&idle), timeout);
  }
  absl::Mutex ended_mu;
};

// What the driver works with. The pointers outlive the driver; those marked optional may be null.
struct DriverParts {
  boost::asio::any_io_executor executor;
  Clock* clock = nullptr;
  EpisodeTable* table = nullptr;
  HostRegistry* hosts = nullptr;
  std::vector<std::shared_ptr<ProxyApi>> proxies;  // at least one
  Occupancy* occupancy = nullptr;
  ratelimiter::LimiterApi* limiter = nullptr;  // optional: no limits
  EpisodeObserver* metrics = nullptr;          // optional
  WarmPool* pool = nullptr;                    // optional: every sandbox is created inline
  const PauseLedger* pauses = nullptr;         // optional: generation pauses, not counted against timeouts
  EnvBoard* envs = nullptr;                    // optional: trainer-driven environment episodes (none can open without)
  std::function<void()> on_finished;  // optional: an attempt ended (room for the next: the dispatcher's wake-up)
};

class EpisodeDriver : public ChildStarter {
 public:
  EpisodeDriver(DriverParts parts, RunnerOptions options);

  // Spawns the attempt on the executor (counted in running() and, when it needs a sandbox, in placing() until
  // its sandbox slot is reserved).
  void Start(EpisodeTicket ticket);
  int64_t running() const { return parts_.occupancy->running.load(); }
  int64_t placing() const { return parts_.occupancy->placing.load(); }
  // Branching (episode/branching.cc splits through these).
  std::vector<EpisodeTicket> Branch(const EpisodeTicket& parent, size_t level) override;
  void StartChild(EpisodeTicket ticket, std::shared_ptr<const BranchStart> start) override;
  // The proxy replica that serves `env_id` (rendezvous hashing: stable while the replica set is).
  const std::shared_ptr<ProxyApi>& ProxyFor(const std::string& env_id) const;

 private:
  boost::asio::awaitable<void> Run(EpisodeTicket ticket, std::shared_ptr<const BranchStart> resume);
  // The session, the sandbox and the runner, in turn; what failed, or nullopt.
  boost::asio::awaitable<std::optional<Failure>> RunPhases(Attempt& a);
  boost::asio::awaitable<std::optional<Failure>> OpenSession(Attempt& a);
  boost::asio::awaitable<std::optional<Failure>> AcquireSandbox(Attempt& a);
  // A child's sandbox is its fork: taken over (deleted with the attempt, whatever happens), then given its own
  // .corral/task.json once the session is open.
  void AdoptFork(Attempt& a);
  boost::asio::awaitable<std::optional<Failure>> SetUpFork(Attempt& a);
  boost::asio::awaitable<void> Conclude(Attempt& a, std::optional<Failure> failure);
  // The attempt's sandboxes (the agent's, and the verifier's own fork) are deleted as it ends (episode_end.cc):
  // with measure_usage at once and side by side, their usage read by the deletes (EpisodeUsage.sandbox, the
  // agent's files walked before the wipe; the verifier's CPU); whatever is left, in the background. The slot is
  // the attempt's no more.
  boost::asio::awaitable<void> EndSandboxes(Attempt& a);
  // Deletes what is not empty of `sandbox_id` and `verifier_sandbox_id`, then gives back the slot's capacity when
  // `release` (the background part of EndSandboxes).
  boost::asio::awaitable<void> Cleanup(Slot slot, std::string sandbox_id, std::string verifier_sandbox_id,
                                       bool release);
  // The host's capacity a deleted sandbox held goes back.
  void Released(const Slot& slot, const std::string& sandbox_id);
  // The rest of EpisodeResult.usage (and llm_calls): its calls from the trajectory, its tools, its cost by the
  // price table.
  void MeasureUsage(Attempt& a);
  // Retries closing a session whose proxy did not answer (for up to two minutes).
  boost::asio::awaitable<void> CloseLater(std::shared_ptr<ProxyApi> proxy, std::string env_id);

  const DriverParts parts_;
  const RunnerOptions options_;
  Clock* const clock_;
  EpisodeTable* const table_;
  HostRegistry* const hosts_;
  SandboxPlacer placer_;
};

}  // namespace corral::scheduler
