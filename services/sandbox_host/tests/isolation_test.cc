// cgroups, their rlimit fallbacks and namespaces for real, as the host will use them (root on this machine;
// skipped elsewhere).
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "services/sandbox_host/linux/cgroup.h"
#include "services/sandbox_host/linux/containment.h"
#include "services/sandbox_host/linux/landlock.h"
#include "services/sandbox_host/linux/namespaces.h"
#include "services/sandbox_host/linux/process_sweep.h"
#include "services/sandbox_host/linux/spawn.h"
#include "services/sandbox_host/tests/test_uid.h"

namespace corral::sandbox {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::pair<int, std::string> RunToEnd(const SpawnSpec& spec) {
  auto spawned = Spawn(spec);
  if (!spawned.ok()) return {-1, std::string(spawned.status().message())};
  std::string out;
  char buf[4096];
  fcntl(spawned->stdout_fd.get(), F_SETFL, 0);
  ssize_t n;
  while ((n = read(spawned->stdout_fd.get(), buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  int status = 0;
  waitpid(spawned->pid, &status, 0);
  return {status, out};
}

class IsolationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root";
    // Not under /tmp: inside the sandbox's view /tmp is its own.
    home_ = fs::path("/var/tmp") / ("corral-iso-" + std::to_string(getpid()));
    fs::create_directories(home_ / ".tmp");
    fs::create_directories(home_ / "workspace");
    for (const auto& p : {home_, home_ / ".tmp", home_ / "workspace"}) chown(p.c_str(), TestUid(), TestUid());
    fs::permissions(home_, fs::perms::owner_all, fs::perm_options::replace);
  }
  void TearDown() override {
    KillAllOf(TestUid());
    KillAllOf(TestUid() + 1);
    fs::remove_all(home_);
  }
  SpawnSpec Spec(const std::string& script) {
    SpawnSpec spec;
    spec.argv = {"/bin/sh", "-c", script};
    spec.env = {"PATH=/usr/bin:/bin", "HOME=" + home_.string()};
    spec.cwd = home_.string();
    spec.uid = TestUid();
    spec.gid = TestUid();
    return spec;
  }
  fs::path home_;
};

TEST_F(IsolationTest, CgroupIsCreatedBeneathTheHostsOwnLimitsAndRemoved) {
  CgroupManager cgroups = CgroupManager::Detect("corral-test");
  auto cg = cgroups.Create("sb-test", {.memory_bytes = 64 << 20, .max_pids = 32, .cpu_weight = 50});
  if (cgroups.mode() == CgroupMode::kNone) {
    // No writable cgroup here (an unprivileged container): nothing is created and the host says what holds
    // sandboxes instead; the rlimit fallbacks themselves are exercised by the tests below.
    ASSERT_THAT(cg, IsOk());
    EXPECT_TRUE(cg->dirs().empty());
    EXPECT_EQ(cgroups.Describe(), "none (rlimits only)");
    EXPECT_THAT(DescribeHostContainment(cgroups), HasSubstr("memory per process by RLIMIT_DATA"));
    return;
  }
  ASSERT_THAT(cg, IsOk());
  for (const std::string& dir : cg->dirs()) {
    EXPECT_TRUE(fs::exists(dir)) << dir;
    if (fs::exists(dir + "/pids.max")) {
      EXPECT_EQ(Slurp(dir + "/pids.max"), "32\n");
    }
    if (fs::exists(dir + "/memory.limit_in_bytes")) {
      EXPECT_EQ(Slurp(dir + "/memory.limit_in_bytes"), "67108864\n");
    }
    if (fs::exists(dir + "/cpu.shares")) {
      EXPECT_EQ(Slurp(dir + "/cpu.shares"), "512\n");
    }
  }
  SpawnSpec spec = Spec("cat /proc/self/cgroup");
  spec.cgroup_procs_fds = cg->procs_fds();
  auto [status, out] = RunToEnd(spec);
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  EXPECT_THAT(out, HasSubstr("/corral-test/sb-test"));
  std::vector<std::string> dirs = cg->dirs();
  ASSERT_THAT(cg->Remove(), IsOk());
  for (const std::string& dir : dirs) EXPECT_FALSE(fs::exists(dir));
}

TEST_F(IsolationTest, PidsLimitContainsAForkBombAndRlimitNprocDoesWithoutIt) {
  CgroupManager cgroups = CgroupManager::Detect("corral-test");
  const bool have_pids =
      std::find(cgroups.controllers().begin(), cgroups.controllers().end(), "pids") != cgroups.controllers().end();
  auto cg = cgroups.Create("sb-bomb", {.max_pids = 16});
  ASSERT_THAT(cg, IsOk());
  SpawnSpec spec = Spec("for i in $(seq 64); do sleep 30 & done 2>/dev/null; echo tried");
  spec.cgroup_procs_fds = cg->procs_fds();
  // Without a pids controller the sandbox host caps the uid's processes instead (containment.h): test that.
  const Containment held = PlanContainment(cgroups.mode(), cgroups.controllers(), {.max_pids = 16}, {});
  EXPECT_EQ(held.process_rlimit, have_pids ? 0 : 16);
  spec.limits = held.rlimits;
  auto spawned = Spawn(spec);
  ASSERT_THAT(spawned, IsOk());
  int status = 0;
  waitpid(spawned->pid, &status, 0);
  const size_t alive = ProcessesOf(TestUid()).size();
  EXPECT_GE(alive, 8u);   // the bomb did fork…
  EXPECT_LE(alive, 16u);  // …but only up to the cgroup's pids limit (or RLIMIT_NPROC)
  EXPECT_TRUE(KillAllOf(TestUid()));
  ASSERT_THAT(cg->Remove(), IsOk());
}

TEST_F(IsolationTest, WithoutAMemoryCgroupRlimitDataStopsAMemoryHog) {
  // The fallback a host without a writable memory cgroup applies (here regardless of what this machine has).
  const Containment held = PlanContainment(CgroupMode::kNone, {}, {.memory_bytes = 64 << 20}, {});
  ASSERT_EQ(held.rlimits.data_bytes, 64 << 20);
  SpawnSpec spec = Spec(
      "python3 -c 'x = bytearray(512 << 20); print(len(x))' 2>/dev/null; echo hog=$?; "
      "python3 -c 'x = bytearray(16 << 20); print(len(x))'");
  spec.limits = held.rlimits;
  auto [status, out] = RunToEnd(spec);
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  EXPECT_THAT(out, HasSubstr("hog=1\n"));       // MemoryError: 512 MiB refused
  EXPECT_THAT(out, HasSubstr("\n16777216\n"));  // while a modest allocation works
}

TEST_F(IsolationTest, PrivateViewHidesOtherProcessesAndBindsTmpAndTaskPaths) {
  if (!CanUseMountNamespaces()) GTEST_SKIP() << "no mount namespaces";
  auto ns = CreateNamespaces(home_.string(), {"/workspace"}, /*private_network=*/true);
  ASSERT_THAT(ns, IsOk());
  EXPECT_TRUE(ns->hidepid);
  fs::remove("/workspace/.probe");
  SpawnSpec spec = Spec(
      "echo hi > /tmp/t && echo w > /workspace/w && ls /proc | grep -c '^[0-9]' && cat /proc/net/dev | grep -c ':'");
  // A uid no other test used: zombies of earlier tests (reaped by init, not us) would be visible as its own.
  spec.uid = spec.gid = TestUid() + 1;
  for (const auto& p : {home_, home_ / ".tmp", home_ / "workspace"}) chown(p.c_str(), TestUid() + 1, TestUid() + 1);
  spec.mountns_fd = ns->mnt.get();
  spec.netns_fd = ns->net.get();
  auto [status, out] = RunToEnd(spec);
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  // Only its own processes (the shell and its pipeline) are visible; only loopback exists.
  std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << out;
  EXPECT_LE(std::stoi(lines[0]), 4);
  EXPECT_EQ(lines[1], "1");
  EXPECT_EQ(Slurp(home_ / ".tmp" / "t"), "hi\n");
  EXPECT_EQ(Slurp(home_ / "workspace" / "w"), "w\n");
  EXPECT_FALSE(fs::exists("/tmp/t"));  // the host's /tmp is untouched
}

TEST_F(IsolationTest, LandlockAllowsTheSandboxsOwnProcInsideItsView) {
  if (!CanUseMountNamespaces() || LandlockAbi() < 1) GTEST_SKIP();
  auto ns = CreateNamespaces(home_.string(), {}, false);
  ASSERT_THAT(ns, IsOk());
  LandlockPolicy policy;
  policy.read_write = {home_.string(), (home_ / ".tmp").string()};
  policy.read_only_fds = {ns->proc_root.get()};
  auto ruleset = BuildRuleset(PlanRuleset(LandlockAbi(), policy), policy);
  ASSERT_THAT(ruleset, IsOk());
  SpawnSpec spec = Spec("cat /proc/self/status | grep -c Uid && echo x > /tmp/y && cat /tmp/y");
  spec.mountns_fd = ns->mnt.get();
  spec.landlock_fd = ruleset->get();
  auto [status, out] = RunToEnd(spec);
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  EXPECT_EQ(out, "1\nx\n");
}

}  // namespace
}  // namespace corral::sandbox
