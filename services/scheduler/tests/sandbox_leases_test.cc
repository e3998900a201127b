// Leased sandboxes against in-memory hosts: placed like an episode's and counted in the same capacity, kept
// from other owners, deleted when released or expired (and not before a renewal says so), forked into leases of
// their own, and restored after a restart so the host sweep spares them.
#include "services/scheduler/lease/sandbox_leases.h"

#include <future>
#include <map>

#include "boost/asio/co_spawn.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/use_future.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/api/proto_time.h"
#include "libs/async/testing/poll_await.h"
#include "libs/core/testing/fake_clock.h"
#include "libs/core/testing/status_matchers.h"
#include "services/sandbox_host/client/testing/fake_host.h"

namespace corral::scheduler {
namespace {

namespace asio = boost::asio;
using sandbox::FakeHost;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

class MemoryLeaseLog final : public LeaseLog {
 public:
  void SaveLease(const v1::SandboxLease& lease, std::function<void(absl::Status)> done) override {
    rows[lease.lease_id()] = lease;
    done(absl::OkStatus());
  }
  void DropLease(const std::string& lease_id) override { rows.erase(lease_id); }
  std::vector<v1::SandboxLease> Rows() const {
    std::vector<v1::SandboxLease> out;
    for (const auto& [id, lease] : rows) out.push_back(lease);
    return out;
  }
  std::map<std::string, v1::SandboxLease> rows;
};

class SandboxLeasesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    host_ = std::make_shared<sandbox::FakeHost>("h1", &clock_, /*capacity=*/4);
    Start();
  }
  // A scheduler (registry, placer, leases) over the same host and journal: called again, a restart.
  void Start() {
    RegistryOptions options;
    options.scheduler_id = "sched-1";
    registry_ = std::make_unique<HostRegistry>(
        options, std::vector<std::string>{"h1"}, &clock_, HostRegistry::Events{},
        [this](const std::string&) -> absl::StatusOr<std::shared_ptr<sandbox::HostApi>> { return host_; });
    placer_ = std::make_unique<SandboxPlacer>(registry_.get(), nullptr, &clock_);
    LeaseOptions lease_options;
    lease_options.scheduler_id = "sched-1";
    lease_options.on_retired = [this](const std::string& owner, const v1::ResourceUsage& usage) {
      retired_.emplace_back(owner, usage);
    };
    leases_ = std::make_unique<SandboxLeases>(registry_.get(), placer_.get(), &clock_, &log_, lease_options);
    leases_->Restore(log_.Rows());
    Await(registry_->PollOnce());
  }
  template <typename T>
  T Await(asio::awaitable<T> aw) {
    return async::PollAwait(io_, std::move(aw), [this] { clock_.RunDue(); });
  }
  static v1::LeaseSandboxRequest Request(const std::string& owner, absl::Duration ttl) {
    v1::LeaseSandboxRequest r;
    r.set_owner(owner);
    ToProto(ttl, r.mutable_ttl());
    (*r.mutable_labels())["purpose"] = "test";
    return r;
  }
  absl::StatusOr<v1::SandboxLease> Lease(const std::string& owner, absl::Duration ttl = absl::Minutes(5)) {
    return Await(leases_->Lease(Request(owner, ttl)));
  }

  FakeClock clock_;
  asio::io_context io_;
  std::shared_ptr<sandbox::FakeHost> host_;
  MemoryLeaseLog log_;
  std::unique_ptr<HostRegistry> registry_;
  std::unique_ptr<SandboxPlacer> placer_;
  std::unique_ptr<SandboxLeases> leases_;
  std::vector<std::pair<std::string, v1::ResourceUsage>> retired_;  // what on_retired heard
};

TEST_F(SandboxLeasesTest, ALeaseIsAPlacedSandboxHoldingASlotAndOnlyItsOwnerSeesIt) {
  auto lease = Lease("key-a");
  ASSERT_THAT(lease, IsOk());
  EXPECT_EQ(lease->host_address(), "h1");
  EXPECT_EQ(lease->owner(), "key-a");
  EXPECT_EQ(lease->labels().at("purpose"), "test");
  EXPECT_EQ(FromProto(lease->expire_time()), clock_.Now() + absl::Minutes(5));
  EXPECT_THAT(host_->live(), ElementsAre(lease->sandbox_id()));
  ASSERT_EQ(host_->created().size(), 1u);
  EXPECT_EQ(host_->created()[0].labels().at(kSchedulerLabel), "sched-1");
  EXPECT_EQ(host_->created()[0].network_policy(), v1::NETWORK_POLICY_NONE);
  EXPECT_EQ(registry_->InUse("h1"), 1u);
  EXPECT_EQ(leases_->OnHost("h1"), 1u);
  EXPECT_THAT(log_.rows, ::testing::SizeIs(1));

  EXPECT_THAT(leases_->Get(lease->lease_id(), "key-a"), IsOk());
  EXPECT_THAT(leases_->Get(lease->lease_id(), "key-b"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(Await(leases_->Release(lease->lease_id(), "key-b")), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(leases_->List("key-b"), IsEmpty());
  EXPECT_THAT(leases_->List("key-a"), ::testing::SizeIs(1));
  EXPECT_THAT(host_->live(), ElementsAre(lease->sandbox_id()));
}

TEST_F(SandboxLeasesTest, BadRequestsAreRefusedAndCreateNothing) {
  v1::LeaseSandboxRequest no_ttl = Request("k", absl::ZeroDuration());
  EXPECT_THAT(Await(leases_->Lease(no_ttl)), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ttl")));
  v1::LeaseSandboxRequest too_long = Request("k", absl::Hours(25));
  EXPECT_THAT(Await(leases_->Lease(too_long)), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ttl")));
  v1::LeaseSandboxRequest files = Request("k", absl::Minutes(1));
  files.mutable_environment()->add_files()->set_path("a.txt");
  EXPECT_THAT(Await(leases_->Lease(files)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("environment.files")));
  v1::LeaseSandboxRequest proxy_only = Request("k", absl::Minutes(1));
  proxy_only.mutable_environment()->set_network_policy(v1::NETWORK_POLICY_PROXY_ONLY);
  EXPECT_THAT(Await(leases_->Lease(proxy_only)), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("PROXY_ONLY")));
  v1::LeaseSandboxRequest bad_env = Request("k", absl::Minutes(1));
  (*bad_env.mutable_environment()->mutable_env())["1X"] = "y";
  EXPECT_THAT(Await(leases_->Lease(bad_env)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("environment.env: '1X'")));
  v1::LeaseSandboxRequest bad_label = Request("k", absl::Minutes(1));
  (*bad_label.mutable_labels())["Bad Key"] = "v";
  EXPECT_THAT(Await(leases_->Lease(bad_label)), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("labels")));
  EXPECT_EQ(host_->create_calls(), 0);
  EXPECT_EQ(registry_->InUse("h1"), 0u);
  EXPECT_THAT(log_.rows, IsEmpty());
}

TEST_F(SandboxLeasesTest, AnExpiredLeaseIsDeletedAndARenewedOneIsNot) {
  auto kept = Lease("k", absl::Minutes(1));
  auto dropped = Lease("k", absl::Minutes(1));
  ASSERT_THAT(kept, IsOk());
  ASSERT_THAT(dropped, IsOk());
  clock_.Advance(absl::Seconds(50));
  v1::RenewLeaseRequest renew;
  renew.set_lease_id(kept->lease_id());
  renew.set_owner("k");
  ToProto(absl::Minutes(2), renew.mutable_ttl());
  auto renewed = Await(leases_->Renew(renew));
  ASSERT_THAT(renewed, IsOk());
  EXPECT_EQ(FromProto(renewed->expire_time()), clock_.Now() + absl::Minutes(2));
  EXPECT_EQ(FromProto(log_.rows.at(kept->lease_id()).expire_time()), clock_.Now() + absl::Minutes(2));
  EXPECT_EQ(Await(leases_->ExpireNow()), 0);

  clock_.Advance(absl::Seconds(10));
  EXPECT_EQ(Await(leases_->ExpireNow()), 1);
  EXPECT_THAT(host_->deleted(), ElementsAre(dropped->sandbox_id()));
  EXPECT_THAT(host_->live(), ElementsAre(kept->sandbox_id()));
  ASSERT_EQ(retired_.size(), 1u);  // an expired lease's sandbox is counted for its owner as a released one is
  EXPECT_EQ(retired_[0].first, "k");
  EXPECT_EQ(registry_->InUse("h1"), 1u);
  EXPECT_THAT(leases_->Get(dropped->lease_id(), "k"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(log_.rows.count(dropped->lease_id()), 0u);
  EXPECT_THAT(Await(leases_->Renew([&] {
                v1::RenewLeaseRequest r = renew;
                r.set_lease_id(dropped->lease_id());
                return r;
              }())),
              StatusIs(absl::StatusCode::kNotFound));
}

// A paused lease's clock stops: it outlives its ttl (its sandbox frozen on the host), and a resume gives it back
// what was left, or a new ttl.
TEST_F(SandboxLeasesTest, APausedLeaseKeepsItsRemainingTimeUntilItIsResumed) {
  auto lease = Lease("k", absl::Minutes(1));
  ASSERT_THAT(lease, IsOk());
  clock_.Advance(absl::Seconds(20));
  v1::SetLeasePausedRequest pause;
  pause.set_lease_id(lease->lease_id());
  pause.set_owner("k");
  pause.set_paused(true);
  auto paused = Await(leases_->SetPaused(pause));
  ASSERT_THAT(paused, IsOk());
  EXPECT_TRUE(paused->paused());
  EXPECT_EQ(FromProto(paused->paused_remaining()), absl::Seconds(40));
  EXPECT_TRUE(log_.rows.at(lease->lease_id()).paused());  // journaled
  EXPECT_EQ((*Await(host_->Get(lease->sandbox_id(), absl::Seconds(1)))).state(), v1::SANDBOX_STATE_PAUSED);
  clock_.Advance(absl::Hours(1));  // far past its ttl: a paused lease does not expire
  EXPECT_EQ(Await(leases_->ExpireNow()), 0);
  EXPECT_THAT(Await(leases_->SetPaused(pause)), IsOk());  // again: nothing changes
  EXPECT_EQ(FromProto(leases_->Get(lease->lease_id(), "k")->paused_remaining()), absl::Seconds(40));

  v1::SetLeasePausedRequest resume = pause;
  resume.set_paused(false);
  auto resumed = Await(leases_->SetPaused(resume));
  ASSERT_THAT(resumed, IsOk());
  EXPECT_FALSE(resumed->paused());
  EXPECT_EQ(FromProto(resumed->expire_time()), clock_.Now() + absl::Seconds(40));
  EXPECT_EQ((*Await(host_->Get(lease->sandbox_id(), absl::Seconds(1)))).state(), v1::SANDBOX_STATE_READY);
  ToProto(absl::Minutes(3), resume.mutable_ttl());  // a resume of a running lease with a ttl renews it
  EXPECT_EQ(FromProto((*Await(leases_->SetPaused(resume))).expire_time()), clock_.Now() + absl::Minutes(3));
  resume.set_owner("other");
  EXPECT_THAT(Await(leases_->SetPaused(resume)), StatusIs(absl::StatusCode::kNotFound));
  ToProto(absl::Hours(48), pause.mutable_ttl());
  EXPECT_THAT(Await(leases_->SetPaused(pause)), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(SandboxLeasesTest, ReleaseDeletesTheSandboxAndFreesItsSlotOnce) {
  auto lease = Lease("k");
  ASSERT_THAT(lease, IsOk());
  v1::ResourceUsage usage;
  usage.mutable_cpu_time()->set_seconds(7);
  host_->SetUsage(lease->sandbox_id(), usage);
  EXPECT_THAT(Await(leases_->Release(lease->lease_id(), "k")), IsOk());
  // What the sandbox cost, for its owner's usage metrics: the host's final answer.
  ASSERT_EQ(retired_.size(), 1u);
  EXPECT_EQ(retired_[0].first, "k");
  EXPECT_EQ(retired_[0].second.cpu_time().seconds(), 7);
  EXPECT_THAT(host_->live(), IsEmpty());
  EXPECT_EQ(registry_->InUse("h1"), 0u);
  EXPECT_THAT(log_.rows, IsEmpty());
  EXPECT_THAT(Await(leases_->Release(lease->lease_id(), "k")), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(SandboxLeasesTest, NoRoomWithinTheWaitIsDeadlineExceededAndLeasesCountAgainstCapacity) {
  for (int i = 0; i < 4; ++i) ASSERT_THAT(Lease("k"), IsOk());
  EXPECT_FALSE(registry_->HasCapacity());
  v1::LeaseSandboxRequest r = Request("k", absl::Minutes(1));
  ToProto(absl::ZeroDuration(), r.mutable_wait());
  EXPECT_THAT(Await(leases_->Lease(r)), StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_EQ(host_->live().size(), 4u);
}

TEST_F(SandboxLeasesTest, AForkGivesEachChildALeaseOfItsOwnOnTheParentsHost) {
  auto parent = Lease("k", absl::Minutes(3));
  ASSERT_THAT(parent, IsOk());
  v1::ForkLeaseRequest fork;
  fork.set_lease_id(parent->lease_id());
  fork.set_owner("k");
  fork.set_count(3);
  (*fork.mutable_labels())["child"] = "yes";
  auto children = Await(leases_->Fork(fork));
  ASSERT_THAT(children, IsOk());
  ASSERT_EQ(children->leases_size(), 3);
  for (const auto& child : children->leases()) {
    EXPECT_EQ(child.parent_lease_id(), parent->lease_id());
    EXPECT_EQ(child.owner(), "k");
    EXPECT_EQ(child.labels().at("purpose"), "test");
    EXPECT_EQ(child.labels().at("child"), "yes");
    EXPECT_EQ(FromProto(child.expire_time()), FromProto(parent->expire_time()));
  }
  EXPECT_EQ(registry_->InUse("h1"), 4u);
  EXPECT_EQ(leases_->size(), 4u);
  fork.set_owner("other");
  EXPECT_THAT(Await(leases_->Fork(fork)), StatusIs(absl::StatusCode::kNotFound));
  fork.set_owner("k");
  fork.set_count(0);
  EXPECT_THAT(Await(leases_->Fork(fork)), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(host_->fork_calls(), 1);
}

TEST_F(SandboxLeasesTest, ARestartKeepsTheLeasesAndTheSweepSparesTheirSandboxes) {
  auto lease = Lease("k", absl::Minutes(10));
  ASSERT_THAT(lease, IsOk());
  // A sandbox of this scheduler that nobody owns: the sweep of the restarted scheduler removes it.
  v1::SandboxSpec orphan_spec;
  (*orphan_spec.mutable_labels())[kSchedulerLabel] = "sched-1";
  auto orphan = Await(host_->Create(orphan_spec, sandbox::CallOptions{}));
  ASSERT_THAT(orphan, IsOk());

  Start();  // the restart
  EXPECT_THAT(host_->live(), ElementsAre(lease->sandbox_id()));
  EXPECT_EQ(registry_->InUse("h1"), 1u);
  auto restored = leases_->Get(lease->lease_id(), "k");
  ASSERT_THAT(restored, IsOk());
  EXPECT_EQ(FromProto(restored->expire_time()), FromProto(lease->expire_time()));
  clock_.Advance(absl::Minutes(11));
  EXPECT_EQ(Await(leases_->ExpireNow()), 1);
  EXPECT_THAT(host_->live(), IsEmpty());
  EXPECT_EQ(registry_->InUse("h1"), 0u);
}

}  // namespace
}  // namespace corral::scheduler
