// The fork gate for real (root): a fork-ready Python process forks itself, and its copy is carried into a child's
// identity, namespaces and files by the steps the host planned (scripts/corral_carry.py), with the parent's
// memory and nothing else of the parent's. What a cheating copy or parent tries is refused, or kills the copy.
#include <fcntl.h>
#include <linux/mount.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "services/sandbox_host/linux/fork_gate.h"
#include "services/sandbox_host/linux/namespaces.h"
#include "services/sandbox_host/linux/process_sweep.h"
#include "services/sandbox_host/linux/spawn.h"
#include "services/sandbox_host/linux/transit_gate.h"
#include "services/sandbox_host/tests/test_uid.h"

namespace corral::sandbox {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Holds a secret; forks on request (each copy carried, or gone when no carry was planned for it); answers what
// it is and tries what a cheating process would.
constexpr char kProbe[] = R"(
import mmap, os, sys
sys.path.insert(0, sys.argv[1])
import corral_carry
secret, shared, kept, buf = sys.argv[2], None, None, b""
def say(*words): os.write(1, (" ".join(str(w) for w in words) + "\n").encode())
def attempt(call):
    try:
        call()
        say("ok")
    except OSError as e:
        say("refused", e.errno)
say("ready" if corral_carry.ready() else "not fork-ready")
while True:
    while b"\n" not in buf:
        try:
            chunk = os.read(0, 4096)
        except InterruptedError:
            continue
        if not chunk: sys.exit(0)
        buf += chunk
    line, _, buf = buf.partition(b"\n")
    cmd, _, arg = line.decode().partition(" ")
    if cmd == "lone":  # a copy that announces itself when nothing was planned for it
        if os.fork() == 0:
            os._exit(0 if corral_carry.carry() else 3)
        say("exit", os.waitstatus_to_exitcode(os.wait()[1]))
    elif cmd == "secret": say(secret)
    elif cmd == "ids": say(os.getuid(), os.getgid())
    elif cmd == "pid": say(os.getpid())
    elif cmd == "cwd": say(os.getcwd())
    elif cmd == "ls": say(*sorted(os.listdir(arg)))
    elif cmd == "setuid": attempt(lambda: os.setresuid(int(arg), int(arg), int(arg)))
    elif cmd == "signal": attempt(lambda: os.kill(int(arg), 0))
    elif cmd == "unshare": attempt(lambda: corral_carry._ok(corral_carry._libc.unshare(int(arg)), "unshare"))
    elif cmd == "share":
        shared = mmap.mmap(-1, 4096)  # anonymous and shared: what a fork would share with its copies
        say("ok")
    elif cmd == "keep":
        kept = os.open("/", os.O_RDONLY)
        os.closerange = lambda a, b: None  # the carry's own close is skipped: the copy keeps it
        say("ok")
)";

struct Streams {
  UniqueFd in_w, out_r;  // ours
  UniqueFd in_r, out_w;  // the process's
};

Streams MakeStreams() {
  int in[2], out[2];
  EXPECT_EQ(pipe2(in, O_CLOEXEC), 0);
  EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
  return Streams{UniqueFd(in[1]), UniqueFd(out[0]), UniqueFd(in[0]), UniqueFd(out[1])};
}

void Send(int fd, const std::string& line) {
  const std::string text = line + "\n";
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
}

std::string ReadLine(int fd) {
  std::string line;
  char c;
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 5000) <= 0) return line + "<timeout>";
    const ssize_t n = read(fd, &c, 1);
    if (n == 0) return line + "<eof>";
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return line + "<error>";
    }
    if (c == '\n') return line;
    line.push_back(c);
  }
}

class CarryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "switching uids needs root";
    auto family = CreateFamilyUserNamespace();
    if (!family.ok()) GTEST_SKIP() << "no user namespaces here: " << family.status();
    family_ = *std::move(family);
    dir_ = fs::path(::testing::TempDir()) / ("carry-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    fs::permissions(dir_, fs::perms::all, fs::perm_options::replace);
    std::ofstream(dir_ / "probe.py") << kProbe;
  }
  void TearDown() override {
    if (parent_.stderr_fd.valid()) {  // what the probe said of its failures, for the log
      char buf[4096];
      const ssize_t n = read(parent_.stderr_fd.get(), buf, sizeof(buf));
      if (n > 0) std::cerr << "probe's stderr: " << std::string(buf, static_cast<size_t>(n)) << "\n";
    }
    if (parent_.pid > 0) {
      kill(parent_.pid, SIGKILL);
      waitpid(parent_.pid, nullptr, 0);
    }
    KillAllOf(TestUid());
    KillAllOf(TestUid() + 1);
    fs::remove_all(dir_);
  }

  void Start() {
    int control[2];
    ASSERT_EQ(pipe2(control, O_CLOEXEC), 0);
    UniqueFd control_r(control[0]);
    control_w_.Reset(control[1]);
    SpawnSpec spec;
    spec.argv = {"python3", (dir_ / "probe.py").string(), CORRAL_CARRY_DIR, "s3cret"};
    spec.env = {"PATH=/usr/bin:/bin", "HOME=" + dir_.string(), "CORRAL_CARRY_SIGNAL=" + std::to_string(SIGRTMIN)};
    spec.cwd = dir_.string();
    spec.uid = TestUid();
    spec.gid = TestUid();
    spec.family_userns_fd = family_.get();
    spec.control_fd = control_r.get();
    spec.pipe_stdin = true;
    auto spawned = Spawn(spec);
    ASSERT_THAT(spawned, IsOk());
    parent_ = *std::move(spawned);
    ASSERT_TRUE(parent_.gate.valid());
    fcntl(parent_.stdout_fd.get(), F_SETFL, 0);
    watch_ = gate_.Watch(std::move(parent_.gate));
    ASSERT_EQ(ReadLine(parent_.stdout_fd.get()), "ready");
  }
  std::string Parent(const std::string& line) {
    Send(parent_.stdin_fd.get(), line);
    return ReadLine(parent_.stdout_fd.get());
  }
  // A plan that makes a copy TestUid() + 1; `ours` keeps the ends of its streams.
  CarryPlan PlanFor(Streams& ours) {
    CarryPlan plan;
    plan.uid = plan.gid = TestUid() + 1;
    auto userns = CreateCopyUserNamespace(family_.get(), plan.uid, plan.gid);
    EXPECT_THAT(userns, IsOk());
    if (userns.ok()) plan.userns = *std::move(userns);
    ours = MakeStreams();
    plan.stdin_fd = std::move(ours.in_r);
    plan.stdout_fd.Reset(dup(ours.out_w.get()));
    plan.stderr_fd = std::move(ours.out_w);
    return plan;
  }
  // The parent's own move: it stays where it is, fork-ready.
  CarryPlan OwnPlan() {
    CarryPlan plan;
    plan.uid = plan.gid = TestUid();
    plan.fork_ready = true;
    plan.control.Reset(dup(control_w_.get()));
    return plan;
  }
  // Asks the parent for one copy, as a fork does, and carries it under `plan`: the copy's result, then own's.
  std::vector<absl::StatusOr<pid_t>> ForkOne(CarryPlan plan) {
    const int batch = gate_.Expect(watch_, 1, parent_.pid, TestUid());
    EXPECT_EQ(write(control_w_.get(), "fork 1\n", 7), 7);
    EXPECT_EQ(kill(parent_.pid, SIGRTMIN), 0);
    EXPECT_THAT(gate_.AwaitParked(batch, absl::Seconds(5)), IsOkAndHolds(::testing::SizeIs(1)));
    std::vector<CarryPlan> plans;
    plans.push_back(std::move(plan));
    EXPECT_THAT(gate_.Release(batch, OwnPlan(), std::move(plans)), IsOk());
    auto results = gate_.Await(batch, absl::Seconds(5));
    std::reverse(results.begin(), results.end());
    return results;
  }

  UniqueFd family_;
  UniqueFd control_w_;
  fs::path dir_;
  Spawned parent_;
  TransitGate gate_;
  int watch_ = 0;
};

TEST_F(CarryTest, ACopyBecomesTheChildWithTheParentsMemoryAndNoHoldOnTheParent) {
  Start();
  Streams copy;
  auto results = ForkOne(PlanFor(copy));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_THAT(results[1], IsOkAndHolds(parent_.pid));  // the parent moved too, and stays fork-ready
  auto pid = results[0];
  ASSERT_THAT(pid, IsOk());
  auto ask = [&](const std::string& line) {
    Send(copy.in_w.get(), line);
    return ReadLine(copy.out_r.get());
  };
  const std::string child = std::to_string(TestUid() + 1), parent = std::to_string(TestUid());
  EXPECT_EQ(ask("ids"), child + " " + child);
  EXPECT_EQ(ask("secret"), "s3cret");
  EXPECT_EQ(ask("pid"), std::to_string(*pid));
  // Neither side may become the other, or reach it.
  EXPECT_EQ(ask("setuid " + parent), "refused 1");
  EXPECT_EQ(ask("signal " + std::to_string(parent_.pid)), "refused 1");
  EXPECT_EQ(Parent("setuid " + child), "refused 1");
  EXPECT_EQ(Parent("signal " + std::to_string(*pid)), "refused 1");
  EXPECT_EQ(Parent("unshare 0"), "refused 1");  // announcing itself with nothing planned gets nothing
  EXPECT_EQ(Parent("ids"), parent + " " + parent);
  std::ifstream status("/proc/" + std::to_string(*pid) + "/status");
  std::string line, caps;
  while (std::getline(status, line)) {
    if (line.rfind("Cap", 0) == 0 && line.rfind("CapBnd", 0) != 0) caps += line + ";";
  }
  EXPECT_EQ(caps,
            "CapInh:\t0000000000000000;CapPrm:\t0000000000000000;CapEff:\t0000000000000000;"
            "CapAmb:\t0000000000000000;");
  EXPECT_GE(gate_.refused(), 3u);
}

TEST_F(CarryTest, ACopyNothingWasPlannedForGetsNothing) {
  Start();
  EXPECT_EQ(Parent("lone"), "exit 3");  // its copy announces itself, is refused and exits
  EXPECT_EQ(Parent("setuid " + std::to_string(TestUid())), "refused 1");
  EXPECT_GE(gate_.refused(), 2u);
  EXPECT_EQ(ProcessesOf(TestUid() + 1).size(), 0u);
}

TEST_F(CarryTest, ACopyThatSharesMemoryWithItsParentIsKilled) {
  Start();
  EXPECT_EQ(Parent("share"), "ok");
  Streams copy;
  auto pid = ForkOne(PlanFor(copy))[0];
  EXPECT_THAT(pid.status().message(), HasSubstr("shares memory"));
  EXPECT_EQ(ReadLine(copy.out_r.get()), "<eof>");  // killed before it could say anything
}

TEST_F(CarryTest, ACopyThatKeepsADescriptorOfTheParentsIsKilled) {
  Start();
  EXPECT_EQ(Parent("keep"), "ok");
  Streams copy;
  auto pid = ForkOne(PlanFor(copy))[0];
  EXPECT_THAT(pid.status().message(), HasSubstr("kept descriptor"));
}

TEST_F(CarryTest, ACopyWorksInItsOwnFilesAndNetwork) {
  Start();
  // The child's files: a tmpfs holding one file, mounted where the copy's home is (an empty directory here).
  const fs::path home = dir_ / "home";
  fs::create_directories(home);
  const int fsfd = static_cast<int>(syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC));
  ASSERT_GE(fsfd, 0);
  ASSERT_EQ(syscall(SYS_fsconfig, fsfd, FSCONFIG_SET_STRING, "mode", "0755", 0), 0);
  ASSERT_EQ(syscall(SYS_fsconfig, fsfd, FSCONFIG_CMD_CREATE, nullptr, nullptr, 0), 0);
  UniqueFd tree(static_cast<int>(syscall(SYS_fsmount, fsfd, FSMOUNT_CLOEXEC, 0)));
  close(fsfd);
  ASSERT_TRUE(tree.valid());
  close(openat(tree.get(), "child-file", O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
  Streams copy;
  CarryPlan plan = PlanFor(copy);
  auto netns = CreateCopyNetworkNamespace(plan.userns.get());
  ASSERT_THAT(netns, IsOk());
  struct stat want_net {};
  fstat(netns->get(), &want_net);
  plan.netns = *std::move(netns);
  UniqueFd base(open(("/proc/" + std::to_string(parent_.pid) + "/ns/mnt").c_str(), O_RDONLY | O_CLOEXEC));
  auto mntns = CarryMountNamespace(base.get(), plan.userns.get(), {tree.get()}, {home.string()});
  ASSERT_THAT(mntns, IsOk());
  plan.mntns = *std::move(mntns);
  plan.mounts.push_back({std::move(tree), home.string()});
  plan.cwd = home.string();
  auto pid = ForkOne(std::move(plan))[0];
  ASSERT_THAT(pid, IsOk());
  Send(copy.in_w.get(), "cwd");
  EXPECT_EQ(ReadLine(copy.out_r.get()), home.string());
  Send(copy.in_w.get(), "ls .");
  EXPECT_EQ(ReadLine(copy.out_r.get()), "child-file");
  Send(copy.in_w.get(), "secret");
  EXPECT_EQ(ReadLine(copy.out_r.get()), "s3cret");
  EXPECT_EQ(Parent("ls " + home.string()), "");  // the parent's home is as it was
  struct stat net {};
  ASSERT_EQ(stat(("/proc/" + std::to_string(*pid) + "/ns/net").c_str(), &net), 0);
  EXPECT_EQ(net.st_ino, want_net.st_ino);
}

}  // namespace
}  // namespace corral::sandbox
