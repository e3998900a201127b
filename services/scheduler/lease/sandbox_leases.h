// Leased sandboxes (Scheduler.LeaseSandbox and the calls around it): a sandbox placed for a front outside the
// episode path (corral-sandbox-api) through the same SandboxPlacer as an episode's, so it comes from the warm
// pool, lands where placement puts it and holds a slot of the same capacity. A lease lasts until it is released
// or expires; Run deletes the sandbox of an expired lease (the dead-man's switch: a client that vanished leaks
// nothing). Every lease is journaled before it is answered, and a restart restores them: their sandboxes stay
// owned (the host sweep spares them) and their slots held. Thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/awaitable.hpp"
#include "corral/v1/scheduler.pb.h"
#include "libs/core/clock.h"
#include "services/scheduler/episode/sandbox_placer.h"
#include "services/scheduler/remote/host_registry.h"

namespace corral::scheduler {

// Where leases are kept across restarts (the scheduler's journal).
class LeaseLog {
 public:
  virtual ~LeaseLog() = default;
  // Records `lease` (new or changed); `done` once it is durable.
  virtual void SaveLease(const v1::SandboxLease& lease, std::function<void(absl::Status)> done) = 0;
  virtual void DropLease(const std::string& lease_id) = 0;
};

struct LeaseOptions {
  std::string scheduler_id = "scheduler";  // the sandboxes' scheduler label (the host sweep's)
  absl::Duration default_wait = absl::Minutes(5);
  absl::Duration setup_timeout = absl::Minutes(10);
  absl::Duration max_ttl = absl::Hours(24);
  absl::Duration max_wait = absl::Minutes(10);
  uint32_t max_fork = 64;
  // Hears what each leased sandbox cost once it is deleted (its lease's owner, its host's final usage): the
  // per-tenant usage metrics. Optional.
  std::function<void(const std::string& owner, const v1::ResourceUsage& usage)> on_retired;
};

// What a lease's environment may be (LeaseSandbox's INVALID_ARGUMENT, the field named).
absl::Status CheckLeaseEnvironment(const v1::EnvironmentSpec& env);

// The longest owner (a front's API key id) of a lease or template.
inline constexpr size_t kMaxOwnerLength = 128;

// The label every leased sandbox carries, with its lease id.
inline constexpr char kLeaseLabel[] = "corral.lease";

class SandboxLeases {
 public:
  // `log` may be null (nothing survives a restart). `report` (optional) hears the number of leases and of those
  // expired so far after every pass of Run (metrics).
  using Report = std::function<void(size_t leased, int64_t expired)>;
  SandboxLeases(HostRegistry* hosts, SandboxPlacer* placer, Clock* clock, LeaseLog* log, LeaseOptions options,
                Report report = nullptr);

  // Validates (errors change nothing), places the sandbox, journals the lease, answers.
  boost::asio::awaitable<absl::StatusOr<v1::SandboxLease>> Lease(v1::LeaseSandboxRequest request);
  boost::asio::awaitable<absl::StatusOr<v1::SandboxLease>> Renew(v1::RenewLeaseRequest request);
  absl::StatusOr<v1::SandboxLease> Get(const std::string& lease_id, const std::string& owner) const;
  // Ordered by id; every owner's when `owner` is empty.
  std::vector<v1::SandboxLease> List(const std::string& owner) const;
  // Ends the lease at once (no later call finds it) and deletes the sandbox.
  boost::asio::awaitable<absl::Status> Release(std::string lease_id, std::string owner);
  boost::asio::awaitable<absl::StatusOr<v1::ForkLeaseResponse>> Fork(v1::ForkLeaseRequest request);
  // SetLeasePaused: the host freezes or thaws the sandbox, then the lease's clock stops or starts again.
  boost::asio::awaitable<absl::StatusOr<v1::SandboxLease>> SetPaused(v1::SetLeasePausedRequest request);

  // At start, the leases a previous run journaled: their slots held, their sandboxes owned again.
  void Restore(const std::vector<v1::SandboxLease>& leases);
  // Releases expired leases every `interval` until `*stopping`.
  boost::asio::awaitable<void> Run(const std::atomic<bool>* stopping, absl::Duration interval = absl::Seconds(1));
  // Releases every lease whose expiry has passed now; how many.
  boost::asio::awaitable<int> ExpireNow();

  size_t size() const;
  // Leases whose sandbox is on `address`.
  uint32_t OnHost(const std::string& address) const;

 private:
  absl::Status ValidateTtl(const google::protobuf::Duration& ttl, bool required) const;
  // The lease, when it exists and `owner` holds it (NOT_FOUND otherwise).
  absl::StatusOr<v1::SandboxLease> Find(const std::string& lease_id, const std::string& owner) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Journals `lease` and waits until it is durable.
  boost::asio::awaitable<absl::Status> Save(v1::SandboxLease lease);
  // Deletes the sandbox and frees its slot (the lease is gone already).
  boost::asio::awaitable<absl::Status> Retire(v1::SandboxLease lease);

  HostRegistry* const hosts_;
  SandboxPlacer* const placer_;
  Clock* const clock_;
  LeaseLog* const log_;
  const LeaseOptions options_;
  const Report report_;
  mutable absl::Mutex mu_;
  std::map<std::string, v1::SandboxLease> leases_ ABSL_GUARDED_BY(mu_);
  int64_t expired_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace corral::scheduler
