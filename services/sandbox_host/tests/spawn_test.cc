#include "services/sandbox_host/linux/spawn.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "services/sandbox_host/linux/landlock.h"
#include "services/sandbox_host/linux/process_sweep.h"
#include "services/sandbox_host/tests/test_uid.h"

namespace corral::sandbox {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Reads a pipe until EOF.
std::string Drain(int fd) {
  std::string out;
  char buf[4096];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    poll(&p, 1, 10000);
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EAGAIN) {
      return out;
    }
  }
}

class SpawnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "switching uids needs root";
    home_ = fs::path(::testing::TempDir()) / ("spawn-" + std::to_string(getpid()));
    fs::create_directories(home_);
    chown(home_.c_str(), TestUid(), TestUid());
    fs::permissions(home_, fs::perms::owner_all, fs::perm_options::replace);
  }
  void TearDown() override {
    KillAllOf(TestUid());
    fs::remove_all(home_);
  }

  SpawnSpec Spec(std::vector<std::string> argv) {
    SpawnSpec spec;
    spec.argv = std::move(argv);
    spec.env = {"PATH=/usr/bin:/bin", "HOME=" + home_.string(), "USER=sandbox"};
    spec.cwd = home_.string();
    spec.uid = TestUid();
    spec.gid = TestUid();
    return spec;
  }

  // Runs to completion; returns {exit status, stdout}.
  std::pair<int, std::string> Run(const SpawnSpec& spec) {
    auto spawned = Spawn(spec);
    EXPECT_THAT(spawned, IsOk());
    if (!spawned.ok()) return {-1, ""};
    std::string out = Drain(spawned->stdout_fd.get());
    int status = 0;
    waitpid(spawned->pid, &status, 0);
    return {status, out};
  }

  fs::path home_;
};

TEST_F(SpawnTest, RunsAsTheSandboxUidWithNoGroupsAndAScrubbedEnvironment) {
  auto [status, out] = Run(Spec({"sh", "-c", "id -u; id -G; env | sort | tr '\\n' ' '"}));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(out.substr(0, out.find('\n')), std::to_string(TestUid()));
  EXPECT_THAT(out, HasSubstr("\n" + std::to_string(TestUid()) + "\n"));  // the only group is its own gid
  EXPECT_THAT(out, ::testing::Not(HasSubstr("CORRAL_")));
  EXPECT_THAT(out, HasSubstr("HOME=" + home_.string()));
}

TEST_F(SpawnTest, NoNewPrivsAndRlimitsAreInForce) {
  SpawnSpec spec = Spec({"sh", "-c", "ulimit -n; ulimit -c; grep NoNewPrivs /proc/self/status"});
  spec.limits.nofile = 64;
  auto [status, out] = Run(spec);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_THAT(out, HasSubstr("64\n0\n"));
  EXPECT_THAT(out, HasSubstr("NoNewPrivs:\t1"));
}

TEST_F(SpawnTest, SignalDispositionsAndMaskOfTheHostAreNotInherited) {
  signal(SIGPIPE, SIG_IGN);  // as the host does
  auto [status, out] = Run(Spec({"sh", "-c", "grep -E 'SigIgn|SigBlk' /proc/self/status"}));
  signal(SIGPIPE, SIG_DFL);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_THAT(out, HasSubstr("SigBlk:\t0000000000000000"));
  // sh itself may ignore a few signals, but never SIGPIPE (bit 13).
  size_t at = out.find("SigIgn:\t");
  ASSERT_NE(at, std::string::npos);
  uint64_t ignored = std::stoull(out.substr(at + 8, 16), nullptr, 16);
  EXPECT_EQ(ignored & (1ULL << (SIGPIPE - 1)), 0u);
}

// A descriptor the host inherited from whoever started it, without close-on-exec, never reaches the program.
TEST_F(SpawnTest, DescriptorsTheHostInheritedAreNotPassedOn) {
  int leak[2];
  ASSERT_EQ(pipe(leak), 0);                                 // no O_CLOEXEC, as a supervisor's pipe would come
  auto [status, out] = Run(Spec({"ls", "/proc/self/fd"}));  // ls reads it as its descriptor 3
  close(leak[0]);
  close(leak[1]);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(out, "0\n1\n2\n3\n");
}

TEST_F(SpawnTest, MissingCommandExitsLikeAShell) {
  auto spawned = Spawn(Spec({"no-such-command-xyz"}));
  ASSERT_THAT(spawned, IsOk());
  EXPECT_EQ(spawned->exec_errno, ENOENT);
  int status = 0;
  waitpid(spawned->pid, &status, 0);
  EXPECT_EQ(WEXITSTATUS(status), 127);
}

TEST_F(SpawnTest, LandlockKeepsTheProcessOutOfOtherDirectories) {
  if (LandlockAbi() < 1) GTEST_SKIP() << "no Landlock";
  LandlockPolicy policy;
  policy.read_write = {home_.string()};
  auto ruleset = BuildRuleset(PlanRuleset(LandlockAbi(), policy), policy);
  ASSERT_THAT(ruleset, IsOk());
  SpawnSpec spec = Spec({"sh", "-c", "touch ok && ls /root >/dev/null 2>&1; echo $?"});
  spec.landlock_fd = ruleset->get();
  auto [status, out] = Run(spec);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(out, "2\n");  // ls fails: permission denied
  EXPECT_TRUE(fs::exists(home_ / "ok"));
}

TEST_F(SpawnTest, KillAllOfReachesSetsidEscapees) {
  // The shell starts a grandchild in a new session (out of the process group) and exits.
  auto [status, out] = Run(Spec({"sh", "-c", "setsid sleep 300 > /dev/null 2>&1 < /dev/null & echo started"}));
  EXPECT_EQ(out, "started\n");
  EXPECT_FALSE(ProcessesOf(TestUid()).empty());
  EXPECT_TRUE(KillAllOf(TestUid()));
  EXPECT_TRUE(ProcessesOf(TestUid()).empty());
}

// The sweep's first, cheap test of whose a process is reads the owner of its /proc directory, which is its
// effective uid even when it made itself non-dumpable (its other /proc files then turn root's): it is found.
TEST_F(SpawnTest, KillAllOfReachesAProcessThatMadeItselfNonDumpable) {
  const std::string ready = (home_ / "ready").string();
  // The shell returns once the process is non-dumpable (it made the file after its prctl).
  const std::string script =
      "python3 -c 'import ctypes, os, time; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0); os.setsid(); open(\"" + ready +
      "\", \"w\").close(); time.sleep(300)' > /dev/null 2>&1 < /dev/null & until [ -e " + ready +
      " ]; do sleep 0.01; done; echo started";
  auto [status, out] = Run(Spec({"sh", "-c", script}));
  EXPECT_EQ(out, "started\n");
  ASSERT_TRUE(fs::exists(ready));
  const std::vector<pid_t> found = ProcessesOf(TestUid());
  ASSERT_EQ(found.size(), 1u);
  struct stat st {};
  ASSERT_EQ(stat(("/proc/" + std::to_string(found[0])).c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, TestUid());
  ASSERT_EQ(stat(("/proc/" + std::to_string(found[0]) + "/status").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u) << "the process is dumpable: this test tests nothing";
  size_t counted = 0;
  EXPECT_TRUE(KillAllOf(TestUid(), 20, &counted));
  EXPECT_EQ(counted, 1u);
  EXPECT_TRUE(ProcessesOf(TestUid()).empty());
}

// A scan remembers the kernel threads it saw (by their /proc entry's inode) and skips them in the next one: the
// next scans still read every root process (one may be a sandbox's setuid program), the new ones too.
TEST(ProcessSweep, LaterScansSkipKernelThreadsAndStillReadEveryRootProcess) {
  if (geteuid() != 0) GTEST_SKIP() << "the scan reads other processes' status";
  auto scan = [] {
    std::set<pid_t> seen;
    ForEachLiveProcess([&](pid_t pid, const std::vector<uid_t>&) { seen.insert(pid); },
                       [](uid_t) { return false; });  // no sandbox's ids: root's processes only
    return seen;
  };
  const std::set<pid_t> first = scan();
  EXPECT_TRUE(first.contains(getpid()));
  EXPECT_FALSE(first.contains(2)) << "kthreadd, a kernel thread, was read";
  const pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  ASSERT_GT(child, 0);
  for (int i = 0; i < 3; ++i) {
    const std::set<pid_t> later = scan();
    EXPECT_TRUE(later.contains(getpid()));
    EXPECT_TRUE(later.contains(child));
    EXPECT_FALSE(later.contains(2));
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_FALSE(scan().contains(child));
}

TEST(ValidateRlimits, RejectsNegativeAndAboveCeiling) {
  Rlimits ceiling{.nproc = 256, .address_space_bytes = 1LL << 33, .nofile = 1024};
  EXPECT_THAT(ValidateRlimits({.nproc = 100}, ceiling), IsOk());
  EXPECT_THAT(ValidateRlimits({.nproc = -1}, ceiling),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nproc")));
  EXPECT_THAT(ValidateRlimits({.address_space_bytes = INT64_MAX}, ceiling),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ceiling")));
}

}  // namespace
}  // namespace corral::sandbox
