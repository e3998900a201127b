#include "services/sandbox_host/linux/landlock.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"

namespace corral::sandbox {
namespace {

namespace fs = std::filesystem;
using namespace landlock;  // NOLINT

TEST(PlanRuleset, HandlesEveryRightEachAbiKnows) {
  LandlockPolicy open;
  EXPECT_EQ(PlanRuleset(0, open).handled_fs, 0u);
  RulesetPlan abi1 = PlanRuleset(1, open);
  EXPECT_TRUE(abi1.handled_fs & kMakeSym);
  EXPECT_FALSE(abi1.handled_fs & kRefer);
  EXPECT_FALSE(abi1.network_enforced);
  EXPECT_TRUE(PlanRuleset(2, open).handled_fs & kRefer);
  EXPECT_TRUE(PlanRuleset(3, open).handled_fs & kTruncate);
  EXPECT_FALSE(PlanRuleset(3, open).handled_fs & kIoctlDev);
  RulesetPlan abi4 = PlanRuleset(4, open);
  EXPECT_EQ(abi4.handled_net, kNetBindTcp);  // open: connect allowed, bind denied
  EXPECT_TRUE(abi4.network_enforced);
  EXPECT_EQ(abi4.scoped, 0u);
  EXPECT_TRUE(PlanRuleset(5, open).handled_fs & kIoctlDev);
  EXPECT_EQ(PlanRuleset(6, open).scoped, kScopeAbstractUnix | kScopeSignal);
  LandlockPolicy proxy_only{.network = NetworkPolicy::kProxyOnly, .connect_ports = {8080}};
  EXPECT_EQ(PlanRuleset(4, proxy_only).handled_net, kNetBindTcp | kNetConnectTcp);
  EXPECT_EQ(PlanRuleset(7, proxy_only).handled_net, kNetBindTcp | kNetConnectTcp);
  // none: its own network namespace with only loopback, where it may listen and connect (an environment server).
  LandlockPolicy none{.network = NetworkPolicy::kNone};
  EXPECT_EQ(PlanRuleset(4, none).handled_net, 0u);
  EXPECT_TRUE(PlanRuleset(4, none).network_enforced);
}

// Runs `body` in a forked child restricted by `policy`; returns the child's exit code.
int RunRestricted(const LandlockPolicy& policy, const std::function<int()>& body) {
  RulesetPlan plan = PlanRuleset(LandlockAbi(), policy);
  auto ruleset = BuildRuleset(plan, policy);
  if (!ruleset.ok()) return 100;
  pid_t pid = fork();
  if (pid == 0) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || RestrictSelf(ruleset->get()) != 0) _exit(101);
    _exit(body());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 102;
}

class LandlockEnforcement : public ::testing::Test {
 protected:
  void SetUp() override {
    if (LandlockAbi() < 1) GTEST_SKIP() << "Landlock unavailable";
    root_ = fs::path(::testing::TempDir()) / ("landlock-" + std::to_string(getpid()));
    fs::create_directories(root_ / "home");
    fs::create_directories(root_ / "neighbour");
    std::ofstream(root_ / "home" / "mine") << "x";
    std::ofstream(root_ / "neighbour" / "theirs") << "y";
    policy_.read_write = {(root_ / "home").string()};
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
  LandlockPolicy policy_;
};

TEST_F(LandlockEnforcement, HomeIsWritableAndANeighboursHomeIsNot) {
  const std::string mine = (root_ / "home" / "mine").string();
  const std::string created = (root_ / "home" / "new").string();
  const std::string theirs = (root_ / "neighbour" / "theirs").string();
  EXPECT_EQ(RunRestricted(policy_,
                          [&] {
                            if (open(mine.c_str(), O_RDWR) < 0) return 1;
                            if (open(created.c_str(), O_CREAT | O_WRONLY, 0644) < 0) return 2;
                            if (open(theirs.c_str(), O_RDONLY) >= 0 || errno != EACCES) return 3;
                            if (open("/etc/hostname", O_RDONLY) < 0 && open("/etc/passwd", O_RDONLY) < 0) return 4;
                            if (open("/etc/passwd", O_WRONLY) >= 0) return 5;
                            return 0;
                          }),
            0);
}

TEST_F(LandlockEnforcement, TcpBindIsDeniedFromAbi4) {
  if (LandlockAbi() < 4) GTEST_SKIP() << "network rules need ABI 4";
  EXPECT_EQ(
      RunRestricted(policy_,
                    [] {
                      int s = socket(AF_INET, SOCK_STREAM, 0);
                      sockaddr_in addr{};
                      addr.sin_family = AF_INET;
                      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                      return bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 && errno == EACCES ? 0 : 1;
                    }),
      0);
}

TEST_F(LandlockEnforcement, ProxyOnlyAllowsConnectToTheListedPortOnly) {
  if (LandlockAbi() < 4) GTEST_SKIP() << "network rules need ABI 4";
  // A listener outside the sandbox on two ports; the sandbox may reach only the first.
  auto listen_on = [](int* port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    listen(s, 4);
    socklen_t len = sizeof(addr);
    getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len);
    *port = ntohs(addr.sin_port);
    return s;
  };
  int allowed = 0, other = 0;
  int l1 = listen_on(&allowed), l2 = listen_on(&other);
  policy_.network = NetworkPolicy::kProxyOnly;
  policy_.connect_ports = {static_cast<uint16_t>(allowed)};
  auto connect_to = [](int port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 ? 0 : errno;
  };
  EXPECT_EQ(RunRestricted(policy_,
                          [&] {
                            if (connect_to(allowed) != 0) return 1;
                            return connect_to(other) == EACCES ? 0 : 2;
                          }),
            0);
  close(l1);
  close(l2);
}

}  // namespace
}  // namespace corral::sandbox
