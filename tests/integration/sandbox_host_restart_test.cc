// corral-sandbox-host's own life as a real process (root) on loopback: it exits once empty for its configured
// time, a host killed with live sandboxes (or mid-fork) leaves nothing once restarted, a second host on the same
// root refuses to start, and SIGTERM wipes every sandbox.
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "corral/v1/sandbox.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "libs/core/token.h"
#include "libs/http/prometheus_text.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/channel.h"
#include "libs/rpc/status_conversion.h"
#include "services/sandbox_host/linux/process_sweep.h"
#include "tests/integration/sandbox_host_fixture.h"
#include "tests/support/subprocess.h"
#include "tests/support/uid_range.h"

namespace corral {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TEST_F(SandboxHostApiTest, HostExitsCleanlyOnceEmptyForItsConfiguredTime) {
  // A second host, started for one job: it exits 0 after holding no sandbox for 1 s.
  testing::UidRange uids(45000, 59999, 4);
  auto host =
      testing::StartService(CORRAL_SANDBOX_HOST,
                            {"--insecure", "--grpc-listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
                             "--root=" + root_ + "-job", "--capacity=2", "--uid-first=" + std::to_string(uids.first()),
                             "--uid-last=" + std::to_string(uids.last()), "--exit-when-empty-for=1s"},
                            dir_, "job-host");
  ASSERT_THAT(host, IsOk());
  auto stub = v1::SandboxHost::NewStub(*MakeChannel(host->ready.grpc));
  grpc::ClientContext ctx;
  SetDeadline(ctx, absl::Seconds(30));
  v1::CreateSandboxesRequest req;
  v1::CreateSandboxesResponse created;
  ASSERT_TRUE(stub->CreateSandboxes(&ctx, req, &created).ok());
  ASSERT_EQ(created.sandboxes_size(), 1);
  EXPECT_THAT(host->process.Wait(absl::Milliseconds(1500)), StatusIs(absl::StatusCode::kDeadlineExceeded));
  grpc::ClientContext del_ctx;
  SetDeadline(del_ctx, absl::Seconds(30));
  v1::DeleteSandboxRequest del;
  del.set_sandbox_id(created.sandboxes(0).sandbox().sandbox_id());
  v1::DeleteSandboxResponse deleted;
  ASSERT_TRUE(stub->DeleteSandbox(&del_ctx, del, &deleted).ok());
  stub.reset();
  auto status = host->process.Wait(absl::Seconds(30));
  ASSERT_THAT(status, IsOk());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << host->process.Log();
  EXPECT_THAT(host->process.Log(), HasSubstr("exit_when_empty_for"));
  fs::remove_all(root_ + "-job");
}

// Every directory named `name` below `dir` (a cgroup hierarchy), a few levels deep.
std::vector<fs::path> DirsNamed(const fs::path& dir, const std::string& name, int depth = 6) {
  std::vector<fs::path> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_directory(ec) || e.is_symlink(ec)) continue;
    if (e.path().filename() == name) found.push_back(e.path());
    if (depth > 0) {
      for (auto& f : DirsNamed(e.path(), name, depth - 1)) found.push_back(std::move(f));
    }
  }
  return found;
}

TEST_F(SandboxHostApiTest, AHostKilledWithLiveSandboxesLeavesNothingOnceRestarted) {
  auto r = Create(2);
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ(r->sandboxes_size(), 2);
  std::vector<std::string> ids;
  for (const auto& sb : r->sandboxes()) ids.push_back(sb.sandbox().sandbox_id());
  const auto& first = r->sandboxes(0).sandbox();
  // An escaped background process, and an exec still running when the host dies.
  ASSERT_THAT(Exec(first.sandbox_id(), token_, "setsid sleep 300 < /dev/null > /dev/null 2>&1 &").status, IsOk());
  std::thread running([&] { (void)Exec(r->sandboxes(1).sandbox().sandbox_id(), token_, "sleep 300"); });
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        size_t n = 0;
        for (uid_t u = uids_->first(); u <= uids_->last(); ++u) n += sandbox::ProcessesOf(u).size();
        return n >= 2;
      },
      absl::Seconds(10)));
  ASSERT_TRUE(service_->process.Signal(SIGKILL));
  ASSERT_THAT(service_->process.Wait(absl::Seconds(10)), IsOk());
  running.join();
  // What the killed host left: its sandboxes' processes, homes and (where the host makes them) cgroups.
  size_t left_running = 0;
  for (uid_t u = uids_->first(); u <= uids_->last(); ++u) left_running += sandbox::ProcessesOf(u).size();
  EXPECT_GE(left_running, 1u);
  EXPECT_TRUE(fs::exists(first.home()));

  StartHost();
  EXPECT_THAT(service_->process.Log(), HasSubstr("removed what a previous run left of 2 sandbox(es)"));
  for (uid_t u = uids_->first(); u <= uids_->last(); ++u) {
    EXPECT_THAT(sandbox::ProcessesOf(u), ::testing::IsEmpty()) << "uid " << u;
  }
  std::error_code ec;
  EXPECT_TRUE(fs::is_empty(root_ + "/homes", ec)) << ec.message();
  for (const fs::path& parent : DirsNamed("/sys/fs/cgroup", "corral-it")) {
    for (const std::string& id : ids) EXPECT_FALSE(fs::exists(parent / id)) << (parent / id);
  }
  // The restarted host works, with the same uids.
  auto again = Create(4);
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->sandboxes_size(), 4);
}

TEST_F(SandboxHostApiTest, AHostKilledWhileForkingLeavesNothingOnceRestarted) {
  auto r = Create(1);
  ASSERT_THAT(r, IsOk());
  const std::string pid = r->sandboxes(0).sandbox().sandbox_id();
  ASSERT_THAT(Exec(pid, r->sandboxes(0).capability_token(), "head -c 100000000 /dev/zero > big").status, IsOk());
  // The host dies as soon as the parent's home has become a layer: while its children are being made.
  std::thread forking([&] { (void)Fork(pid, 3, token_); });
  std::error_code ec;
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while ((!fs::exists(root_ + "/forks", ec) || fs::is_empty(root_ + "/forks", ec)) && absl::Now() < until) {
  }
  ASSERT_FALSE(fs::is_empty(root_ + "/forks", ec)) << "the fork never began";
  ASSERT_TRUE(service_->process.Signal(SIGKILL));
  ASSERT_THAT(service_->process.Wait(absl::Seconds(10)), IsOk());
  forking.join();

  const size_t homes_left = std::distance(fs::directory_iterator(root_ + "/homes"), fs::directory_iterator());
  EXPECT_GE(homes_left, 1u) << "the killed host left the parent's home (and the children it had begun)";

  StartHost();
  for (uid_t u = uids_->first(); u <= uids_->last(); ++u) {
    EXPECT_THAT(sandbox::ProcessesOf(u), ::testing::IsEmpty()) << "uid " << u;
  }
  EXPECT_TRUE(fs::is_empty(root_ + "/homes", ec)) << ec.message();
  EXPECT_TRUE(fs::is_empty(root_ + "/forks", ec)) << ec.message();
  for (const fs::path& parent : DirsNamed("/sys/fs/cgroup", "corral-it")) {
    EXPECT_FALSE(fs::exists(parent / pid)) << (parent / pid);
  }
  // The restarted host forks again.
  auto again = Create(1);
  ASSERT_THAT(again, IsOk());
  auto forked = Fork(again->sandboxes(0).sandbox().sandbox_id(), 3, token_);
  ASSERT_THAT(forked, IsOk());
  EXPECT_EQ(forked->sandboxes_size(), 3);
}

TEST_F(SandboxHostApiTest, ASecondHostOnTheSameRootRefusesToStart) {
  auto second = testing::Subprocess::Start(
      {CORRAL_SANDBOX_HOST, "--secret-file=" + dir_ + "/secret", "--grpc-listen=127.0.0.1:0",
       "--metrics-listen=127.0.0.1:0", "--root=" + root_, "--uid-first=" + std::to_string(uids_->first()),
       "--uid-last=" + std::to_string(uids_->last()), "--host-id=it2"},
      dir_ + "/second-host.log");
  ASSERT_THAT(second, IsOk());
  auto status = second->Wait(absl::Seconds(30));
  ASSERT_THAT(status, IsOk());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1);
  EXPECT_THAT(second->Log(), HasSubstr("another corral-sandbox-host is using the root"));
  EXPECT_THAT(Create(1), IsOk());  // the first one is untouched
}

TEST_F(SandboxHostApiTest, SigtermWipesEverySandbox) {
  auto r = Create(2);
  ASSERT_THAT(r, IsOk());
  std::vector<std::string> homes;
  for (const auto& sb : r->sandboxes()) homes.push_back(sb.sandbox().home());
  ASSERT_TRUE(service_->process.Signal(SIGTERM));
  auto status = service_->process.Wait(absl::Seconds(30));
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(WEXITSTATUS(*status), 0) << service_->process.Log();
  for (const auto& h : homes) EXPECT_FALSE(fs::exists(h));
  service_.reset();
}

}  // namespace
}  // namespace corral
