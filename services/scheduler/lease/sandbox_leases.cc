#include "services/scheduler/lease/sandbox_leases.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <variant>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "libs/api/ids.h"
#include "libs/api/proto_time.h"
#include "libs/async/callback.h"
#include "libs/async/sleep.h"
#include "libs/core/logging.h"
#include "openssl/rand.h"
#include "services/scheduler/table/submission.h"
#include "spdlog/spdlog.h"

namespace corral::scheduler {

namespace asio = boost::asio;

namespace {

constexpr int kMaxLabels = 64;

std::string NewLeaseId() {
  unsigned char raw[10];
  RAND_bytes(raw, sizeof raw);
  return "ls-" + absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(raw), sizeof raw));
}

absl::Status NotFound(const std::string& lease_id) {
  return absl::NotFoundError(absl::StrCat("lease '", lease_id, "' not found (unknown, expired or released)"));
}

// The lease of a sandbox just made (placed or forked), expiring `ttl` from `now`.
v1::SandboxLease NewLease(const v1::CreatedSandbox& created, const Slot& slot, const std::string& owner, absl::Time now,
                          absl::Duration ttl) {
  v1::SandboxLease lease;
  lease.set_lease_id(NewLeaseId());
  lease.set_owner(owner);
  lease.set_host_address(slot.client->address());
  lease.set_host_id(slot.host_id);
  lease.set_sandbox_id(created.sandbox().sandbox_id());
  lease.set_home(created.sandbox().home());
  lease.set_capability_token(created.capability_token());
  ToProto(now, lease.mutable_create_time());
  ToProto(now + ttl, lease.mutable_expire_time());
  return lease;
}

}  // namespace

absl::Status CheckLeaseEnvironment(const v1::EnvironmentSpec& env) {
  if (absl::Status s = CheckEnvironment(env); !s.ok()) return s;
  if (!env.files().empty()) {
    return absl::InvalidArgumentError(
        "environment.files: a leased sandbox starts from its template (setup_files); write files into it after");
  }
  if (env.network_policy() == v1::NETWORK_POLICY_PROXY_ONLY) {
    return absl::InvalidArgumentError(
        "environment.network_policy PROXY_ONLY is for episodes (their proxy session); use NONE or OPEN");
  }
  return absl::OkStatus();
}

SandboxLeases::SandboxLeases(HostRegistry* hosts, SandboxPlacer* placer, Clock* clock, LeaseLog* log,
                             LeaseOptions options, Report report)
    : hosts_(hosts),
      placer_(placer),
      clock_(clock),
      log_(log),
      options_(std::move(options)),
      report_(std::move(report)) {}

absl::Status SandboxLeases::ValidateTtl(const google::protobuf::Duration& ttl, bool required) const {
  const absl::Duration d = FromProto(ttl);
  if (!required && d == absl::ZeroDuration()) return absl::OkStatus();
  if (d <= absl::ZeroDuration() || d > options_.max_ttl) {
    return absl::InvalidArgumentError(
        absl::StrCat("ttl must be above 0 and at most ", absl::FormatDuration(options_.max_ttl)));
  }
  return absl::OkStatus();
}

asio::awaitable<absl::StatusOr<v1::SandboxLease>> SandboxLeases::Lease(v1::LeaseSandboxRequest request) {
  const v1::EnvironmentSpec& env = request.environment();
  if (absl::Status s = CheckLeaseEnvironment(env); !s.ok()) co_return s;
  if (absl::Status s = ValidateTtl(request.ttl(), true); !s.ok()) co_return s;
  if (request.owner().size() > kMaxOwnerLength) co_return absl::InvalidArgumentError("owner: at most 128 characters");
  if (request.labels_size() > kMaxLabels) co_return absl::InvalidArgumentError("labels: at most 64");
  if (absl::Status s = ValidateLabels("labels", request.labels()); !s.ok()) co_return s;
  for (const auto& [name, value] : request.env()) {
    if (!IsValidEnvName(name))
      co_return absl::InvalidArgumentError(absl::StrCat("env: '", name, "' is not a variable name"));
  }
  if (request.metadata_size() > kMaxLabels) co_return absl::InvalidArgumentError("metadata: at most 64 entries");
  for (const auto& [k, v] : request.metadata()) {
    if (k.empty() || k.size() > 256 || v.size() > 1024) {
      co_return absl::InvalidArgumentError("metadata: keys of 1-256 bytes, values of at most 1024");
    }
  }
  absl::Duration wait = options_.default_wait;
  if (request.has_wait()) {
    wait = FromProto(request.wait());
    if (wait < absl::ZeroDuration() || wait > options_.max_wait) {
      co_return absl::InvalidArgumentError(
          absl::StrCat("wait must be between 0 and ", absl::FormatDuration(options_.max_wait)));
    }
  }

  v1::Task task;
  *task.mutable_environment() = env;
  v1::EpisodeIds ids;
  ids.set_episode_id("lease");
  SandboxRequest sandbox = SandboxRequestFor(task, ids, /*proxy_port=*/0, options_.scheduler_id);
  sandbox.spec.mutable_labels()->erase(kEpisodeLabel);
  for (const auto& [name, value] : request.env()) (*sandbox.spec.mutable_env())[name] = value;
  const absl::Time now = clock_->Now();
  PlaceRequest place{std::move(sandbox), env, now + wait, options_.setup_timeout, absl::InfiniteFuture(), nullptr, {}};
  std::variant<Placement, PlaceFailure> placed = co_await placer_->Place(std::move(place));
  if (auto* failed = std::get_if<PlaceFailure>(&placed)) {
    co_return absl::Status(failed->status.code(), absl::StrCat(failed->what, ": ", failed->status.message()));
  }
  Placement& placement = std::get<Placement>(placed);
  v1::SandboxLease lease =
      NewLease(placement.created, placement.slot, request.owner(), clock_->Now(), FromProto(request.ttl()));
  *lease.mutable_labels() = request.labels();
  *lease.mutable_metadata() = request.metadata();
  lease.set_warm(placement.warm);
  lease.set_template_key(placement.created.sandbox().spec().template_key());
  lease.set_image(env.image());
  if (absl::Status s = co_await Save(lease); !s.ok()) {
    (void)co_await Retire(lease);
    co_return s;
  }
  {
    absl::MutexLock lock(&mu_);
    leases_[lease.lease_id()] = lease;
  }
  spdlog::info("lease {}: sandbox {} on {} for {} ({}), until {}", lease.lease_id(), lease.sandbox_id(),
               lease.host_address(), lease.owner().empty() ? "-" : lease.owner(), lease.warm() ? "warm" : "created",
               absl::FormatTime(FromProto(lease.expire_time())));
  co_return lease;
}

absl::StatusOr<v1::SandboxLease> SandboxLeases::Find(const std::string& lease_id, const std::string& owner) const {
  auto it = leases_.find(lease_id);
  if (it == leases_.end() || it->second.owner() != owner) return NotFound(lease_id);
  return it->second;
}

absl::StatusOr<v1::SandboxLease> SandboxLeases::Get(const std::string& lease_id, const std::string& owner) const {
  absl::MutexLock lock(&mu_);
  return Find(lease_id, owner);
}

std::vector<v1::SandboxLease> SandboxLeases::List(const std::string& owner) const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::SandboxLease> out;
  for (const auto& [id, lease] : leases_) {
    if (owner.empty() || lease.owner() == owner) out.push_back(lease);
  }
  return out;
}

asio::awaitable<absl::StatusOr<v1::SandboxLease>> SandboxLeases::Renew(v1::RenewLeaseRequest request) {
  if (absl::Status s = ValidateTtl(request.ttl(), true); !s.ok()) co_return s;
  v1::SandboxLease lease;
  {
    absl::MutexLock lock(&mu_);
    auto it = leases_.find(request.lease_id());
    if (it == leases_.end() || it->second.owner() != request.owner()) co_return NotFound(request.lease_id());
    ToProto(clock_->Now() + FromProto(request.ttl()), it->second.mutable_expire_time());
    lease = it->second;
  }
  if (absl::Status s = co_await Save(lease); !s.ok()) co_return s;
  co_return lease;
}

asio::awaitable<absl::StatusOr<v1::SandboxLease>> SandboxLeases::SetPaused(v1::SetLeasePausedRequest request) {
  if (absl::Status s = ValidateTtl(request.ttl(), false); !s.ok()) co_return s;
  v1::SandboxLease lease;
  {
    absl::MutexLock lock(&mu_);
    auto found = Find(request.lease_id(), request.owner());
    if (!found.ok()) co_return found.status();
    lease = *std::move(found);
  }
  if (lease.paused() != request.paused()) {
    std::shared_ptr<sandbox::HostApi> client = hosts_->Client(lease.host_address());
    if (client == nullptr) {
      co_return absl::UnavailableError(absl::StrCat("host ", lease.host_address(), " is not known (yet)"));
    }
    const sandbox::CallOptions call{nullptr, clock_->Now() + absl::Seconds(30)};
    auto done = co_await client->SetPaused(lease.sandbox_id(), request.paused(), call);
    if (!done.ok()) {
      co_return absl::Status(done.status().code(), absl::StrCat(request.paused() ? "pausing" : "resuming", " sandbox ",
                                                                lease.sandbox_id(), ": ", done.status().message()));
    }
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = leases_.find(request.lease_id());
    if (it == leases_.end()) co_return NotFound(request.lease_id());  // released meanwhile
    v1::SandboxLease& l = it->second;
    const absl::Time now = clock_->Now();
    if (request.paused() && !l.paused()) {
      ToProto(std::max(FromProto(l.expire_time()) - now, absl::ZeroDuration()), l.mutable_paused_remaining());
      ToProto(now + options_.max_ttl, l.mutable_expire_time());
    } else if (!request.paused() && (l.paused() || request.has_ttl())) {
      const absl::Duration ttl =
          request.has_ttl() ? FromProto(request.ttl()) : std::max(FromProto(l.paused_remaining()), absl::Seconds(1));
      ToProto(now + ttl, l.mutable_expire_time());
      l.clear_paused_remaining();
    }
    l.set_paused(request.paused());
    lease = l;
  }
  if (absl::Status s = co_await Save(lease); !s.ok()) co_return s;
  co_return lease;
}

asio::awaitable<absl::Status> SandboxLeases::Release(std::string lease_id, std::string owner) {
  v1::SandboxLease lease;
  {
    absl::MutexLock lock(&mu_);
    auto found = Find(lease_id, owner);
    if (!found.ok()) co_return found.status();
    lease = *std::move(found);
    leases_.erase(lease_id);
  }
  if (log_ != nullptr) log_->DropLease(lease_id);
  co_return co_await Retire(std::move(lease));
}

asio::awaitable<absl::StatusOr<v1::ForkLeaseResponse>> SandboxLeases::Fork(v1::ForkLeaseRequest request) {
  if (request.count() < 1 || request.count() > options_.max_fork) {
    co_return absl::InvalidArgumentError(absl::StrCat("count must be 1-", options_.max_fork));
  }
  if (absl::Status s = ValidateTtl(request.ttl(), false); !s.ok()) co_return s;
  if (absl::Status s = ValidateLabels("labels", request.labels()); !s.ok()) co_return s;
  v1::SandboxLease parent;
  {
    absl::MutexLock lock(&mu_);
    auto found = Find(request.lease_id(), request.owner());
    if (!found.ok()) co_return found.status();
    parent = *std::move(found);
  }
  std::shared_ptr<sandbox::HostApi> client = hosts_->Client(parent.host_address());
  if (client == nullptr) {
    co_return absl::UnavailableError(absl::StrCat("host ", parent.host_address(), " is not known (yet)"));
  }
  v1::ForkSandboxRequest fork;
  fork.set_sandbox_id(parent.sandbox_id());
  fork.set_count(request.count());
  const sandbox::CallOptions call{nullptr, clock_->Now() + absl::Seconds(60)};
  auto forked = co_await client->Fork(std::move(fork), call);
  if (!forked.ok()) {
    co_return absl::Status(forked.status().code(),
                           absl::StrCat("forking sandbox ", parent.sandbox_id(), ": ", forked.status().message()));
  }
  if (forked->sandboxes().empty()) {
    co_return absl::ResourceExhaustedError(
        absl::StrCat("host ", parent.host_address(), " took no child: ", forked->rejected_reason()));
  }
  const absl::Time now = clock_->Now();
  const absl::Duration ttl =
      request.has_ttl() ? FromProto(request.ttl()) : std::max(FromProto(parent.expire_time()) - now, absl::Seconds(1));
  Slot slot{client, parent.host_id()};
  v1::ForkLeaseResponse response;
  for (const v1::CreatedSandbox& child : forked->sandboxes()) {
    hosts_->Hold(parent.host_address());
    hosts_->Own(parent.host_address(), child.sandbox().sandbox_id());
    v1::SandboxLease lease = NewLease(child, slot, parent.owner(), now, ttl);
    *lease.mutable_labels() = parent.labels();
    *lease.mutable_metadata() = parent.metadata();
    for (const auto& [k, v] : request.labels()) (*lease.mutable_labels())[k] = v;
    lease.set_parent_lease_id(parent.lease_id());
    lease.set_template_key(parent.template_key());
    lease.set_image(parent.image());
    *response.add_leases() = std::move(lease);
  }
  for (const v1::SandboxLease& lease : response.leases()) {
    if (absl::Status s = co_await Save(lease); !s.ok()) {
      for (const v1::SandboxLease& l : response.leases()) (void)co_await Retire(l);
      co_return s;
    }
  }
  {
    absl::MutexLock lock(&mu_);
    for (const v1::SandboxLease& lease : response.leases()) leases_[lease.lease_id()] = lease;
  }
  for (int k = 0; k < response.leases_size(); ++k) {
    for (const v1::Process& copy : forked->sandboxes(k).carried_processes()) {
      (*response.mutable_leases(k)->mutable_carried_processes())[copy.process_id()] = copy.copy_of();
    }
  }
  spdlog::info("lease {}: forked into {} ({} rejected)", parent.lease_id(), response.leases_size(), forked->rejected());
  co_return response;
}

void SandboxLeases::Restore(const std::vector<v1::SandboxLease>& leases) {
  for (const v1::SandboxLease& lease : leases) {
    hosts_->Hold(lease.host_address());
    hosts_->Own(lease.host_address(), lease.sandbox_id());
  }
  absl::MutexLock lock(&mu_);
  for (const v1::SandboxLease& lease : leases) leases_[lease.lease_id()] = lease;
  if (!leases.empty()) spdlog::info("restored {} sandbox lease(s)", leases.size());
}

asio::awaitable<int> SandboxLeases::ExpireNow() {
  std::vector<v1::SandboxLease> expired;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    for (auto it = leases_.begin(); it != leases_.end();) {
      if (FromProto(it->second.expire_time()) <= now) {
        expired.push_back(std::move(it->second));
        it = leases_.erase(it);
        ++expired_;
      } else {
        ++it;
      }
    }
  }
  for (v1::SandboxLease& lease : expired) {
    spdlog::info("lease {}: expired; deleting sandbox {} on {}", lease.lease_id(), lease.sandbox_id(),
                 lease.host_address());
    if (log_ != nullptr) log_->DropLease(lease.lease_id());
    (void)co_await Retire(std::move(lease));
  }
  co_return static_cast<int>(expired.size());
}

asio::awaitable<void> SandboxLeases::Run(const std::atomic<bool>* stopping, absl::Duration interval) {
  while (!stopping->load()) {
    (void)co_await ExpireNow();
    if (report_) {
      absl::MutexLock lock(&mu_);
      report_(leases_.size(), expired_);
    }
    co_await async::SleepFor(*clock_, interval);
  }
}

size_t SandboxLeases::size() const {
  absl::MutexLock lock(&mu_);
  return leases_.size();
}

uint32_t SandboxLeases::OnHost(const std::string& address) const {
  absl::MutexLock lock(&mu_);
  return static_cast<uint32_t>(std::count_if(
      leases_.begin(), leases_.end(), [&](const auto& entry) { return entry.second.host_address() == address; }));
}

asio::awaitable<absl::Status> SandboxLeases::Save(v1::SandboxLease lease) {
  if (log_ == nullptr) co_return absl::OkStatus();
  LeaseLog* log = log_;
  auto save = [log, lease = std::move(lease)](std::function<void(absl::Status)> done) {
    log->SaveLease(lease, std::move(done));
  };
  co_return co_await async::AwaitCallback<absl::Status>(std::move(save));
}

asio::awaitable<absl::Status> SandboxLeases::Retire(v1::SandboxLease lease) {
  const std::string& address = lease.host_address();
  absl::Status s = absl::OkStatus();
  if (std::shared_ptr<sandbox::HostApi> client = hosts_->Client(address)) {
    auto deleted = co_await client->DeleteSandbox(lease.sandbox_id(), absl::Seconds(60));
    s = deleted.status();
    if (deleted.ok() && deleted->existed() && options_.on_retired) options_.on_retired(lease.owner(), deleted->usage());
    if (s.code() == absl::StatusCode::kNotFound) s = absl::OkStatus();
    if (!s.ok()) {
      spdlog::warn("host {}: deleting leased sandbox {}: {} (the host's next sweep removes it)", address,
                   lease.sandbox_id(), s);
    }
  }
  hosts_->Disown(address, lease.sandbox_id());
  hosts_->Release(address);
  co_return s;
}

}  // namespace corral::scheduler
