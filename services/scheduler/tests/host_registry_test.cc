// The host registry's decisions against in-memory hosts: when a host is lost and when it is back, what its sweep
// removes, and where a sandbox goes.
#include "services/scheduler/remote/host_registry.h"

#include <future>
#include <map>

#include "boost/asio/co_spawn.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/use_future.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/async/testing/poll_await.h"
#include "libs/core/testing/fake_clock.h"
#include "libs/core/testing/status_matchers.h"
#include "services/sandbox_host/client/testing/fake_host.h"

namespace corral::scheduler {
namespace {

namespace asio = boost::asio;
using sandbox::FakeHost;
using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

class HostRegistryTest : public ::testing::Test {
 protected:
  void Make(const std::vector<std::string>& addresses, uint32_t capacity = 4) {
    for (const auto& a : addresses) fakes_[a] = std::make_shared<sandbox::FakeHost>(a, &clock_, capacity);
    RegistryOptions options;
    options.scheduler_id = "sched-1";
    options.unreachable_after = 2;
    registry_ = std::make_unique<HostRegistry>(
        options, addresses, &clock_,
        HostRegistry::Events{.lost = [this](const std::string& a) { lost_.push_back(a); },
                             .capacity = [this] { ++capacity_events_; }},
        [this](const std::string& a) -> absl::StatusOr<std::shared_ptr<sandbox::HostApi>> { return fakes_.at(a); });
  }
  template <typename T>
  T Await(asio::awaitable<T> aw) {
    return async::PollAwait(io_, std::move(aw));
  }
  void Poll() { Await(registry_->PollOnce()); }
  // A sandbox on `address` labelled as `scheduler`'s (a leftover of an earlier run when nobody owns it).
  std::string Leftover(const std::string& address, const std::string& scheduler) {
    v1::SandboxSpec spec;
    (*spec.mutable_labels())[kSchedulerLabel] = scheduler;
    auto created = Await(fakes_.at(address)->Create(spec, sandbox::CallOptions{}));
    EXPECT_TRUE(created.ok());
    return created->sandbox().sandbox_id();
  }

  FakeClock clock_;
  asio::io_context io_;
  std::map<std::string, std::shared_ptr<sandbox::FakeHost>> fakes_;
  std::unique_ptr<HostRegistry> registry_;
  std::vector<std::string> lost_;
  int capacity_events_ = 0;
};

TEST_F(HostRegistryTest, AHealthyHostIsSweptOfLeftoversThatAreThisSchedulersAndNobodyOwns) {
  Make({"a"});
  const std::string mine = Leftover("a", "sched-1");
  const std::string other = Leftover("a", "sched-2");
  Poll();
  EXPECT_THAT(fakes_["a"]->deleted(), ElementsAre(mine));
  EXPECT_THAT(fakes_["a"]->live(), ElementsAre(other));
  EXPECT_EQ(capacity_events_, 1);  // a host became healthy: room
  EXPECT_EQ(registry_->FreeSlots(), 4);
}

TEST_F(HostRegistryTest, AHostIsLostOnceAfterUnreachableAfterFailuresAndSweptWhenBack) {
  Make({"a"});
  Poll();
  fakes_["a"]->SetUnreachable(true);
  Poll();
  EXPECT_THAT(lost_, ::testing::IsEmpty());  // one failure is not yet lost
  Poll();
  EXPECT_THAT(lost_, ElementsAre("a"));
  Poll();
  EXPECT_THAT(lost_, ElementsAre("a"));  // reported once
  EXPECT_FALSE(registry_->HasCapacity());
  // It restarts with a sandbox of ours that is owned (a running episode's) and one that is not.
  const std::string owned = Leftover("a", "sched-1");
  const std::string orphan = Leftover("a", "sched-1");
  registry_->Own("a", owned);
  fakes_["a"]->SetUnreachable(false);
  Poll();
  EXPECT_TRUE(registry_->HasCapacity());
  EXPECT_THAT(fakes_["a"]->live(), ElementsAre(owned));
  EXPECT_THAT(fakes_["a"]->deleted(), ElementsAre(orphan));
}

TEST_F(HostRegistryTest, ReservePrefersTheTemplateThenTheLeastLoaded) {
  Make({"a", "b"});
  Poll();
  registry_->MarkTemplate("b", "k");
  auto first = registry_->Reserve(Requirements{}, "k");
  ASSERT_THAT(first, IsOk());
  EXPECT_EQ(first->client->address(), "b");
  auto second = registry_->Reserve(Requirements{}, "");
  ASSERT_THAT(second, IsOk());
  EXPECT_EQ(second->client->address(), "a");  // b holds one already
  EXPECT_EQ(registry_->InUse(""), 2u);
  registry_->Release("b");
  registry_->Release("a");
  EXPECT_EQ(registry_->InUse(""), 0u);
}

TEST_F(HostRegistryTest, AFullOrRefusingHostIsUnavailableAndWhatNoHostOffersIsAPrecondition) {
  Make({"a"}, /*capacity=*/1);
  v1::HostFeatures old_kernel;
  old_kernel.set_landlock_abi(3);
  fakes_["a"]->SetFeatures(old_kernel);
  Poll();
  Requirements proxy_only;
  proxy_only.landlock_net = true;
  EXPECT_THAT(registry_->Reserve(proxy_only, ""),
              StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::HasSubstr("Landlock ABI >= 4")));
  auto slot = registry_->Reserve(Requirements{}, "");
  ASSERT_THAT(slot, IsOk());
  EXPECT_THAT(registry_->Reserve(Requirements{}, ""), StatusIs(absl::StatusCode::kUnavailable));
  registry_->Release("a");
  registry_->MarkRejected("a");  // it said "full" itself: nothing goes there until its next HostInfo
  EXPECT_EQ(registry_->FreeSlots(), 0);
  EXPECT_THAT(registry_->Reserve(Requirements{}, ""), StatusIs(absl::StatusCode::kUnavailable));
  Poll();
  EXPECT_EQ(registry_->FreeSlots(), 1);
}

TEST_F(HostRegistryTest, AHarnessGoesOnlyWhereItIsInstalledAndSubmitKnowsWhenNoHostHasIt) {
  Make({"a", "b"});
  // Before any host answered nothing is known: the episodes may wait for one.
  EXPECT_THAT(registry_->CheckHarness("codex@0.171.0", "codex@0.171.0"), IsOk());
  fakes_["b"]->SetHarnesses({"codex@0.169.0", "codex@0.171.0"});
  fakes_["a"]->SetHarnesses({"claude-code@2.1.332"});
  Poll();
  Requirements codex;
  codex.harness = "codex@0.171.0";
  for (int i = 0; i < 3; ++i) {  // a is the less loaded, and is never chosen
    auto slot = registry_->Reserve(codex, "");
    ASSERT_THAT(slot, IsOk());
    EXPECT_EQ(slot->client->address(), "b");
  }
  EXPECT_THAT(registry_->CheckHarness("codex@0.171.0", "codex@0.171.0"), IsOk());
  Requirements opencode;
  opencode.harness = "opencode@1.18.33";
  EXPECT_THAT(registry_->Reserve(opencode, ""),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::HasSubstr("the harness opencode@1.18.33 installed (corral harness install")));
  EXPECT_THAT(registry_->CheckHarness("opencode@1.18.33", "opencode"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::AllOf(::testing::HasSubstr("run 'corral harness install opencode' on each host"),
                                        ::testing::HasSubstr("id-a: claude-code@2.1.332"))));
  auto listed = registry_->List([](const std::string&) { return 0u; });
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_THAT(listed[1].harnesses(), ElementsAre("codex@0.169.0", "codex@0.171.0"));
}

}  // namespace
}  // namespace corral::scheduler
