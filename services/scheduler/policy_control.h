// Asynchronous RL on the scheduler's side (Scheduler.UpdatePolicy, PauseGeneration, ResumeGeneration): the
// policy version the trainer's inference servers serve and whether generation is paused, journaled, then
// applied by every proxy replica in parallel. Each change takes the next sequence number, and Run pushes the
// state to every replica again and again, since a restarted replica starts unpaused at version 0; a replica
// ignores a push older than one it has applied, so a late re-push never undoes a newer change. Thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/any_io_executor.hpp"
#include "boost/asio/awaitable.hpp"
#include "libs/core/clock.h"
#include "services/scheduler/episode/pause_ledger.h"
#include "services/scheduler/remote/proxy_api.h"
#include "services/scheduler/scheduler_journal.h"

namespace corral::scheduler {

class PolicyControl {
 public:
  // `pauses` (optional) learns when generation is paused and resumed, from the restored state on.
  // `on_version` (optional) is called with the version once an update or resume was journaled and pushed to the
  // replicas (answered or not): the episode table's staleness and admission, so episodes it admits record the
  // new version.
  PolicyControl(boost::asio::any_io_executor executor, Clock* clock, SchedulerJournal* journal,
                std::vector<std::shared_ptr<ProxyApi>> proxies, PolicyState restored, PauseLedger* pauses = nullptr,
                std::function<void(int64_t)> on_version = nullptr)
      : executor_(std::move(executor)),
        clock_(clock),
        journal_(journal),
        proxies_(std::move(proxies)),
        pauses_(pauses),
        on_version_(std::move(on_version)),
        state_(restored) {
    if (pauses_ != nullptr) pauses_->Set(restored.paused, clock_->Now());
  }

  template <class R>
  using Done = std::function<void(absl::StatusOr<R>)>;
  // Each validates (errors change nothing), journals, then answers once every replica has applied the change:
  // UNAVAILABLE naming those that could not be reached (the change stands and reaches them later).
  void UpdatePolicy(const v1::UpdatePolicyRequest& request, absl::Time deadline, Done<v1::UpdatePolicyResponse> done);
  // Answers once no call is upstream on any replica.
  void Pause(const v1::PauseGenerationRequest& request, absl::Time deadline, Done<v1::PauseGenerationResponse> done);
  void Resume(const v1::ResumeGenerationRequest& request, absl::Time deadline, Done<v1::ResumeGenerationResponse> done);

  // Pushes the state to every replica every `interval` until `stopping`.
  boost::asio::awaitable<void> Run(const std::atomic<bool>* stopping, absl::Duration interval);
  PolicyState state() const;

 private:
  // Validates and applies `change` to a copy of the state, which then takes the next sequence number; journals
  // it and calls `push` once the journal has it (which spawns one of the Push coroutines below).
  void Change(const std::function<absl::Status(PolicyState&)>& change, std::function<void(PolicyState)> push,
              std::function<void(absl::Status)> fail);
  void Spawn(boost::asio::awaitable<void> push);
  // The change on every replica; then `done`. (Coroutines with parameters, never capturing lambdas: a
  // lambda coroutine's captures die with the lambda.)
  boost::asio::awaitable<void> PushUpdate(PolicyState s, int64_t previous, absl::Time deadline,
                                          Done<v1::UpdatePolicyResponse> done);
  boost::asio::awaitable<void> PushPause(PolicyState s, v1::PauseGenerationRequest request, absl::Time deadline,
                                         Done<v1::PauseGenerationResponse> done);
  boost::asio::awaitable<void> PushResume(PolicyState s, absl::Time deadline, Done<v1::ResumeGenerationResponse> done);
  // Runs `call` on every replica at once; returns each one's status, in replica order.
  template <class R>
  boost::asio::awaitable<std::vector<absl::StatusOr<R>>> OnEveryReplica(
      std::function<boost::asio::awaitable<absl::StatusOr<R>>(ProxyApi&)> call);
  // OK, or the replicas' failures in one status (UNAVAILABLE unless a replica refused the change itself).
  template <class R>
  absl::Status Outcome(const std::vector<absl::StatusOr<R>>& results) const;

  const boost::asio::any_io_executor executor_;
  Clock* const clock_;
  SchedulerJournal* const journal_;
  const std::vector<std::shared_ptr<ProxyApi>> proxies_;
  PauseLedger* const pauses_;
  const std::function<void(int64_t)> on_version_;
  mutable absl::Mutex mu_;
  PolicyState state_ ABSL_GUARDED_BY(mu_);
};

}  // namespace corral::scheduler
