// The scheduler's lease calls (LeaseApi) for the sandbox API's unit tests, over one in-memory host: leases kept
// in a map with the scheduler's rules that the fronts rely on (another owner's lease is NOT_FOUND, a renewal
// moves the expiry, a fork copies the parent's labels and metadata). A refusal, when set, answers every lease.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "libs/api/proto_time.h"
#include "services/sandbox_api/lease_client.h"
#include "services/sandbox_host/client/testing/fake_host.h"

namespace corral::sandbox_api::testing_support {

class FakeLeases final : public LeaseApi {
 public:
  explicit FakeLeases(std::shared_ptr<sandbox::FakeHost> host) : host_(std::move(host)) {}

  boost::asio::awaitable<absl::StatusOr<v1::SandboxLease>> Lease(v1::LeaseSandboxRequest request,
                                                                 absl::Time deadline) override {
    {
      absl::MutexLock lock(&mu_);
      requests_.push_back(request);
      deadlines_.push_back(deadline);
      if (!refusal_.ok()) co_return refusal_;
    }
    v1::SandboxSpec spec;
    spec.set_image(request.environment().image());
    auto created = co_await host_->Create(spec, {});
    if (!created.ok()) co_return created.status();
    v1::SandboxLease lease;
    lease.set_lease_id("ls-" + created->sandbox().sandbox_id());
    lease.set_owner(request.owner());
    lease.set_sandbox_id(created->sandbox().sandbox_id());
    lease.set_host_address(host_->address());
    *lease.mutable_labels() = request.labels();
    *lease.mutable_metadata() = request.metadata();
    ToProto(absl::UnixEpoch() + absl::Hours(1), lease.mutable_create_time());
    ToProto(absl::UnixEpoch() + absl::Hours(1) + FromProto(request.ttl()), lease.mutable_expire_time());
    absl::MutexLock lock(&mu_);
    leases_[lease.lease_id()] = lease;
    co_return lease;
  }
  boost::asio::awaitable<absl::Status> Release(std::string lease_id, std::string owner) override {
    {
      absl::MutexLock lock(&mu_);
      released_.push_back(lease_id + "/" + owner);
      auto it = leases_.find(lease_id);
      if (it != leases_.end() && it->second.owner() != owner) co_return NotFound(lease_id);
      leases_.erase(lease_id);
    }
    co_return co_await host_->Delete(lease_id.substr(3), absl::Seconds(1));
  }
  boost::asio::awaitable<absl::StatusOr<v1::SandboxLease>> Get(std::string lease_id, std::string owner) override {
    absl::MutexLock lock(&mu_);
    if (failed_gets_ > 0) {
      --failed_gets_;
      co_return get_failure_;
    }
    auto it = leases_.find(lease_id);
    if (it == leases_.end() || it->second.owner() != owner) co_return NotFound(lease_id);
    co_return it->second;
  }
  boost::asio::awaitable<absl::StatusOr<v1::SandboxLease>> Renew(std::string lease_id, std::string owner,
                                                                 absl::Duration ttl) override {
    absl::MutexLock lock(&mu_);
    auto it = leases_.find(lease_id);
    if (it == leases_.end() || it->second.owner() != owner) co_return NotFound(lease_id);
    ToProto(FromProto(it->second.create_time()) + ttl, it->second.mutable_expire_time());
    co_return it->second;
  }
  boost::asio::awaitable<absl::StatusOr<std::vector<v1::SandboxLease>>> List(std::string owner) override {
    absl::MutexLock lock(&mu_);
    std::vector<v1::SandboxLease> out;
    for (const auto& [id, lease] : leases_) {
      if (lease.owner() == owner) out.push_back(lease);
    }
    co_return out;
  }
  boost::asio::awaitable<absl::StatusOr<v1::ForkLeaseResponse>> Fork(v1::ForkLeaseRequest request) override {
    auto parent = co_await Get(request.lease_id(), request.owner());
    if (!parent.ok()) co_return parent.status();
    v1::ForkLeaseResponse out;
    for (uint32_t i = 0; i < request.count(); ++i) {
      auto created = co_await host_->Create(v1::SandboxSpec(), {});
      if (!created.ok()) co_return created.status();
      v1::SandboxLease child = *parent;
      child.set_lease_id("ls-" + created->sandbox().sandbox_id());
      child.set_sandbox_id(created->sandbox().sandbox_id());
      child.set_parent_lease_id(parent->lease_id());
      absl::MutexLock lock(&mu_);
      leases_[child.lease_id()] = child;
      *out.add_leases() = std::move(child);
    }
    co_return out;
  }
  // As the scheduler does: the host pauses the sandbox, the lease notes it (its clock is not modelled).
  boost::asio::awaitable<absl::StatusOr<v1::SandboxLease>> SetPaused(std::string lease_id, std::string owner,
                                                                     bool paused, absl::Duration ttl) override {
    auto lease = co_await Get(lease_id, owner);
    if (!lease.ok()) co_return lease.status();
    auto done = co_await host_->SetPaused(lease->sandbox_id(), paused, {});
    if (!done.ok()) co_return done.status();
    absl::MutexLock lock(&mu_);
    v1::SandboxLease& l = leases_.at(lease_id);
    l.set_paused(paused);
    if (!paused && ttl > absl::ZeroDuration()) ToProto(FromProto(l.create_time()) + ttl, l.mutable_expire_time());
    co_return l;
  }
  absl::StatusOr<std::shared_ptr<sandbox::HostApi>> Host(const v1::SandboxLease&) override {
    absl::MutexLock lock(&mu_);
    if (!unreachable_.ok()) return unreachable_;
    if (null_host_) return std::shared_ptr<sandbox::HostApi>();
    return host_;
  }

  void Refuse(absl::Status s) {
    absl::MutexLock lock(&mu_);
    refusal_ = std::move(s);
  }
  // Host() fails with `s` (a lease whose host address makes no channel); OkStatus() undoes it.
  void Unreachable(absl::Status s) {
    absl::MutexLock lock(&mu_);
    unreachable_ = std::move(s);
  }
  // The next `times` Get calls fail with `s` (a scheduler that cannot be reached).
  void FailGets(absl::Status s, int times) {
    absl::MutexLock lock(&mu_);
    get_failure_ = std::move(s);
    failed_gets_ = times;
  }
  // Host() breaks its contract: OK with no client (callers must not crash on it).
  void NullHost() {
    absl::MutexLock lock(&mu_);
    null_host_ = true;
  }
  std::vector<v1::LeaseSandboxRequest> requests() const {
    absl::MutexLock lock(&mu_);
    return requests_;
  }
  std::vector<absl::Time> deadlines() const {  // each Lease call's, in order
    absl::MutexLock lock(&mu_);
    return deadlines_;
  }
  std::vector<std::string> released() const {
    absl::MutexLock lock(&mu_);
    return released_;
  }

 private:
  static absl::Status NotFound(const std::string& id) { return absl::NotFoundError(absl::StrCat("no lease ", id)); }

  const std::shared_ptr<sandbox::FakeHost> host_;
  mutable absl::Mutex mu_;
  absl::Status refusal_ ABSL_GUARDED_BY(mu_);
  absl::Status unreachable_ ABSL_GUARDED_BY(mu_);
  bool null_host_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status get_failure_ ABSL_GUARDED_BY(mu_);
  int failed_gets_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<v1::LeaseSandboxRequest> requests_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Time> deadlines_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> released_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, v1::SandboxLease> leases_ ABSL_GUARDED_BY(mu_);
};

}  // namespace corral::sandbox_api::testing_support
