// ForkSandbox carrying a running process (root): a fork-ready Python process's state reaches every child, where
// its copy runs as the child, in the child's files; the parent's process goes on in the parent's next generation,
// fork-ready still; none of them can reach another.
#include <sys/prctl.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "services/sandbox_host/fork/carrier.h"
#include "services/sandbox_host/tests/fork_fixture.h"
#include "tests/support/carry_repl.h"

namespace corral::sandbox {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class LiveForkTest : public ForkTest {
 protected:
  void SetUp() override {
    ForkTest::SetUp();
    if (IsSkipped()) return;
    auto carrier = Carrier::Create(options_.root + "/views", CORRAL_CARRY_DIR);
    if (!carrier.ok()) GTEST_SKIP() << carrier.status();
    carrier_ = *std::move(carrier);
    prctl(PR_SET_CHILD_SUBREAPER, 1);  // as the host is: carried copies become its children
    exec_.reset();
    manager_.reset();
    manager_ =
        std::make_unique<SandboxManager>(options_, features_, &clock_, &signer_,
                                         SandboxManagerParts{.layers = layers_.get(), .carrier = carrier_.get()});
    exec_ = std::make_unique<ExecManager>(&clock_, nullptr, nullptr, carrier_.get());
  }
  void TearDown() override {
    exec_.reset();
    manager_.reset();
    ForkTest::TearDown();
    carrier_.reset();
  }

  // The REPL, in the sandbox's home; corral_carry comes on its Python path.
  std::shared_ptr<Execution> StartRepl(const std::shared_ptr<const Sandbox>& sb) {
    const std::string script = sb->home + "/repl.py";
    std::ofstream(script) << testing::kCarryRepl;
    chown(script.c_str(), sb->uid, sb->uid);
    ExecOptions o;
    o.kind = ProcessKind::kInteractive;
    o.argv = {"python3", script};
    o.fork_ready = true;
    auto e = exec_->Start(sb, o);
    EXPECT_THAT(e, IsOk());
    return e.ok() ? *e : nullptr;
  }
  // A fork-ready bash reading commands on its stdin: a process the host carries (it does not carry itself).
  absl::StatusOr<std::shared_ptr<Execution>> StartShell(const std::shared_ptr<const Sandbox>& sb) {
    ExecOptions o;
    o.kind = ProcessKind::kInteractive;
    o.argv = {"bash", "--norc", "--noprofile"};
    o.fork_ready = true;
    return exec_->Start(sb, o);
  }
  // Sends one line and returns the line it answers.
  static std::string Ask(Execution& e, const std::string& line) {
    e.SendStdin(line + "\n", [] {});
    std::string out;
    DrainEvents(
        e,
        [&](const OutputEvent& ev) {
          if (ev.kind == OutputEvent::kStdout) out += ev.data;
          if (ev.kind == OutputEvent::kStderr) out += "<stderr> " + ev.data;
        },
        absl::Seconds(10), [&] { return out.find('\n') != std::string::npos; });
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }
  std::shared_ptr<Execution> Adopt(SandboxManager::Created& child) {
    EXPECT_EQ(child.carried.size(), 1u);
    if (child.carried.empty()) return nullptr;
    ExecOptions o;
    o.kind = ProcessKind::kInteractive;
    o.argv = child.carried[0].argv;
    auto e = exec_->Adopt(child.sandbox, std::move(child.carried[0].process), o);
    EXPECT_THAT(e, IsOk());
    return e.ok() ? *e : nullptr;
  }

  // What a carried copy's programs try against its parent, its sibling and the host (each command must fail).
  std::vector<std::pair<std::string, std::string>> Attacks(const std::string& parent_pid,
                                                           const std::string& sibling_pid,
                                                           const std::string& parent_uid) {
    return {
        {"signal the parent's process", "kill -0 " + parent_pid},
        {"signal the sibling's process", "kill -0 " + sibling_pid},
        {"read the parent's memory", "head -c 1 /proc/" + parent_pid + "/mem"},
        {"read the sibling's environment", "cat /proc/" + sibling_pid + "/environ"},
        {"join the parent's namespaces", "nsenter -t " + parent_pid + " -m -n true"},
        {"trace the parent",
         "python3 -c 'import ctypes,sys; sys.exit(ctypes.CDLL(None).ptrace(16, " + parent_pid + ", 0, 0) != 0)'"},
        {"become the parent's uid",
         "python3 -c 'import os; os.setresuid(" + parent_uid + ", " + parent_uid + ", " + parent_uid + ")'"},
        {"become root", "python3 -c 'import os; os.setuid(0)'"},
        {"mount a tmpfs", "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m"},
        {"mount after unsharing namespaces", "unshare -Urm sh -c 'mount -t tmpfs none /tmp'"},
        {"chroot", "chroot / true"},
        {"make a device", "mknod /tmp/mem c 1 1"},
        {"write a sysctl", "echo evil > /proc/sys/kernel/hostname"},
        {"reach the fork's layers", "ls " + options_.root + "/forks"},
        {"reach the host's files", "test -e " + options_.root + "/host-file || test -e /root"},
        {"write the host's system directories", "touch /usr/corral-evil"},
    };
  }

  std::unique_ptr<Carrier> carrier_;
};

TEST_F(LiveForkTest, EachChildGetsTheParentsProcessWithItsStateAsItsOwn) {
  auto parent = NewSandbox();
  ASSERT_NE(parent, nullptr);
  auto repl = StartRepl(parent);
  ASSERT_NE(repl, nullptr);
  ASSERT_EQ(Ask(*repl, "set x 42"), "ok");
  ASSERT_EQ(Ask(*repl, "write note parent-v1"), "ok");
  ASSERT_EQ(Ask(*repl, "write /tmp/scratch tmp-v1"), "ok");
  const std::string id = parent->id;
  const std::string parent_pid = Ask(*repl, "pid");
  const uid_t parent_uid = parent->uid;
  parent.reset();
  std::ofstream(options_.root + "/host-file") << "the host's";  // world-readable, outside every view
  chmod((options_.root + "/host-file").c_str(), 0644);

  auto forked = manager_->Fork(id, 2);
  ASSERT_THAT(forked, IsOk());
  EXPECT_THAT(forked->not_carried, ::testing::IsEmpty());
  ASSERT_EQ(forked->created.size(), 2u);
  std::vector<std::shared_ptr<Execution>> copies;
  for (auto& child : forked->created) copies.push_back(Adopt(child));
  for (size_t k = 0; k < copies.size(); ++k) {
    ASSERT_NE(copies[k], nullptr);
    const std::string uid = std::to_string(forked->created[k].sandbox->uid);
    EXPECT_EQ(Ask(*copies[k], "get x"), "42");  // the parent's memory
    EXPECT_EQ(Ask(*copies[k], "ids"), uid + " " + uid);
    EXPECT_EQ(Ask(*copies[k], "read note"), "parent-v1");  // its files, as they were at the fork
    EXPECT_EQ(Ask(*copies[k], "read /tmp/scratch"), "tmp-v1");
    EXPECT_EQ(Ask(*copies[k], "write note child-" + std::to_string(k)), "ok");
    // Neither its parent's process nor its sibling's can be reached.
    EXPECT_EQ(Ask(*copies[k], "signal " + parent_pid), "refused 1");
    EXPECT_EQ(Ask(*copies[k], "peek " + parent_pid), "refused 2");  // not even visible: its /proc hides others
    // Confined as a sandbox process: the host's files are read-only, or not there.
    EXPECT_EQ(Ask(*copies[k], "write /etc/carried x"), "refused 30");
    EXPECT_EQ(Ask(*copies[k], "read " + options_.root + "/host-file"), "refused 2");
  }
  EXPECT_EQ(Ask(*copies[0], "signal " + Ask(*copies[1], "pid")), "refused 1");
  // The parent's process goes on, in the parent's files, as the parent.
  EXPECT_EQ(Ask(*repl, "get x"), "42");
  EXPECT_EQ(Ask(*repl, "ids"), std::to_string(parent_uid) + " " + std::to_string(parent_uid));
  EXPECT_EQ(Ask(*repl, "read note"), "parent-v1");
  EXPECT_EQ(Ask(*repl, "write note parent-v2"), "ok");
  // What each wrote is its own sandbox's: a command run there sees it.
  for (size_t k = 0; k < copies.size(); ++k) {
    EXPECT_EQ(Sh(forked->created[k].sandbox, "cat note"), "child-" + std::to_string(k));
  }
  EXPECT_EQ(Sh(Current(id), "cat note"), "parent-v2");
  // And the parent's process is fork-ready still: a second fork carries it again.
  auto again = manager_->Fork(id, 1);
  ASSERT_THAT(again, IsOk());
  EXPECT_THAT(again->not_carried, ::testing::IsEmpty());
  ASSERT_EQ(again->created.size(), 1u);
  auto third = Adopt(again->created[0]);
  ASSERT_NE(third, nullptr);
  EXPECT_EQ(Ask(*third, "get x"), "42");
  EXPECT_EQ(Ask(*third, "read note"), "parent-v2");
}

// What a carried copy's programs try against its parent, its sibling and the host: each must fail, where a
// control command works.
TEST_F(LiveForkTest, AttacksFromACarriedCopyFail) {
  auto parent = NewSandbox();
  ASSERT_NE(parent, nullptr);
  auto repl = StartRepl(parent);
  ASSERT_NE(repl, nullptr);
  ASSERT_EQ(Ask(*repl, "write note parent"), "ok");
  const std::string parent_pid = Ask(*repl, "pid"), parent_uid = std::to_string(parent->uid);
  const std::string id = parent->id;
  parent.reset();
  auto forked = manager_->Fork(id, 2);
  ASSERT_THAT(forked, IsOk());
  ASSERT_EQ(forked->created.size(), 2u);
  auto copy = Adopt(forked->created[0]);
  auto sibling = Adopt(forked->created[1]);
  ASSERT_NE(copy, nullptr);
  ASSERT_NE(sibling, nullptr);
  const std::string sibling_pid = Ask(*sibling, "pid");
  const std::string uid = std::to_string(forked->created[0].sandbox->uid);
  EXPECT_EQ(Ask(*copy, "sh echo ok > /tmp/c && cat /tmp/c && id -u"), "exit 0 ok " + uid);  // the control
  std::ofstream(options_.root + "/host-file") << "the host's";
  for (const auto& [what, command] : Attacks(parent_pid, sibling_pid, parent_uid)) {
    EXPECT_THAT(Ask(*copy, "sh " + command), ::testing::Not(::testing::StartsWith("exit 0"))) << what;
  }
  // Nothing reached the parent: its file is as it was, its process answers.
  EXPECT_EQ(Ask(*repl, "read note"), "parent");
  EXPECT_EQ(Ask(*repl, "pid"), parent_pid);
}

// A shell and a sleeping background process, started fork-ready, never answer the carry themselves: the host
// drives them through it. Each child gets both, as its own; the shell's variables and the sleep's timer go on.
TEST_F(LiveForkTest, ProcessesThatDoNotCarryThemselvesAreCarriedByTheHost) {
  auto parent = NewSandbox();
  ASSERT_NE(parent, nullptr);
  auto shell = StartShell(parent);
  ASSERT_THAT(shell, IsOk());
  ExecOptions o;
  o.fork_ready = true;
  o.kind = ProcessKind::kBackground;
  o.argv = {"sleep", "300"};
  auto sleeper = exec_->Start(parent, o);
  ASSERT_THAT(sleeper, IsOk());
  ASSERT_EQ(Ask(**shell, "x=41; echo note > note; echo ok"), "ok");
  const std::string id = parent->id, parent_uid = std::to_string(parent->uid);
  parent.reset();
  auto forked = manager_->Fork(id, 2);
  ASSERT_THAT(forked, IsOk());
  EXPECT_THAT(forked->not_carried, ::testing::IsEmpty());
  ASSERT_EQ(forked->created.size(), 2u);
  std::vector<std::shared_ptr<Execution>> sleeps;
  for (SandboxManager::Created& child : forked->created) {
    ASSERT_EQ(child.carried.size(), 2u);
    const std::string uid = std::to_string(child.sandbox->uid);
    std::shared_ptr<Execution> copy;
    for (CarriedProcess& c : child.carried) {
      ExecOptions a;
      a.argv = c.argv;
      a.kind = static_cast<ProcessKind>(c.kind);
      const pid_t pid = c.process.pid;
      auto adopted = exec_->Adopt(child.sandbox, std::move(c.process), a);
      ASSERT_THAT(adopted, IsOk());
      if (c.argv[0] == "bash") {
        copy = *adopted;
      } else {  // the sleep: alive, as the child, its timer not cut short
        std::ifstream status("/proc/" + std::to_string(pid) + "/status");
        std::string line;
        while (std::getline(status, line) && !line.starts_with("Uid:")) {
        }
        EXPECT_EQ(line, "Uid:\t" + uid + "\t" + uid + "\t" + uid + "\t" + uid);
        EXPECT_EQ(c.copy_of, (*sleeper)->id());
        sleeps.push_back(*adopted);
      }
    }
    ASSERT_NE(copy, nullptr);
    EXPECT_EQ(Ask(*copy, "x=$((x+1)); echo $x $(id -u) $(cat note)"), "42 " + uid + " note");
    EXPECT_EQ(Ask(*copy, "echo mine > note; echo $BASHPID"), std::to_string(copy->pid()));
  }
  // Each sleep was still sleeping: it ends by the signal sent now, not by an error of its own before.
  ASSERT_EQ(sleeps.size(), 2u);
  for (size_t k = 0; k < sleeps.size(); ++k) {
    EXPECT_EQ(Sh(forked->created[k].sandbox, "cat note"), "mine\n");
    kill(sleeps[k]->pid(), SIGTERM);
    ExitInfo exit;
    DrainEvents(*sleeps[k], [&](const OutputEvent& ev) {
      if (ev.kind == OutputEvent::kExit) exit = ev.exit;
    });
    EXPECT_EQ(exit.signal, SIGTERM) << "its sleep ended by itself: " << exit.exit_code;
  }
  // The parent's go on, as they were, fork-ready still.
  EXPECT_EQ(Ask(**shell, "echo $x $(id -u) $(cat note)"), "41 " + parent_uid + " note");
  EXPECT_FALSE((*sleeper)->exited());
  auto again = manager_->Fork(id, 1);
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->created[0].carried.size(), 2u);
}

// The same attacks from a copy the host carried (a shell), against its parent's shell and its sibling.
TEST_F(LiveForkTest, AttacksFromADrivenCopyFail) {
  auto parent = NewSandbox();
  ASSERT_NE(parent, nullptr);
  auto shell = StartShell(parent);
  ASSERT_THAT(shell, IsOk());
  ASSERT_EQ(Ask(**shell, "echo parent > note; echo ok"), "ok");
  const std::string parent_pid = std::to_string((*shell)->pid()), parent_uid = std::to_string(parent->uid);
  const std::string id = parent->id;
  parent.reset();
  auto forked = manager_->Fork(id, 2);
  ASSERT_THAT(forked, IsOk());
  ASSERT_EQ(forked->created.size(), 2u);
  auto copy = Adopt(forked->created[0]);
  auto sibling = Adopt(forked->created[1]);
  ASSERT_NE(copy, nullptr);
  ASSERT_NE(sibling, nullptr);
  const std::string uid = std::to_string(forked->created[0].sandbox->uid);
  EXPECT_EQ(Ask(*copy, "echo ok > /tmp/c; echo $(cat /tmp/c) $(id -u)"), "ok " + uid);  // the control
  std::ofstream(options_.root + "/host-file") << "the host's";
  for (const auto& [what, command] : Attacks(parent_pid, std::to_string(sibling->pid()), parent_uid)) {
    EXPECT_THAT(Ask(*copy, "(" + command + ") >/dev/null 2>&1 </dev/null; echo exit $?"),
                ::testing::Not(::testing::StrEq("exit 0")))
        << what;
  }
  EXPECT_EQ(Ask(**shell, "cat note"), "parent");  // nothing reached the parent
}

// A process the host would carry but cannot (it holds a descriptor of its own) fails the fork, naming it; the
// fork, given up after a process that carries itself was asked for its copies, leaves both as they were: their
// state and their loops go on, and without the descriptor the next fork carries both.
TEST_F(LiveForkTest, AForkGivenUpLeavesEveryProcessAsItWas) {
  auto parent = NewSandbox();
  ASSERT_NE(parent, nullptr);
  auto repl = StartRepl(parent);
  ASSERT_NE(repl, nullptr);
  ASSERT_EQ(Ask(*repl, "set x 42"), "ok");
  auto shell = StartShell(parent);
  ASSERT_THAT(shell, IsOk());
  ASSERT_EQ(Ask(**shell, "exec 7</dev/zero; echo ok"), "ok");
  const std::string id = parent->id;
  parent.reset();
  auto forked = manager_->Fork(id, 2);
  EXPECT_EQ(forked.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(forked.status().message(), HasSubstr("holds descriptor 7"));
  EXPECT_EQ(Ask(*repl, "get x"), "42");
  EXPECT_EQ(Ask(*repl, "pid"), std::to_string(repl->pid()));
  EXPECT_EQ(Ask(**shell, "exec 7<&-; echo $BASHPID"), std::to_string((*shell)->pid()));
  auto again = manager_->Fork(id, 1);
  ASSERT_THAT(again, IsOk());
  EXPECT_THAT(again->not_carried, ::testing::IsEmpty());
  EXPECT_EQ(again->created[0].carried.size(), 2u);
}

TEST_F(LiveForkTest, AProcessThatIsNotForkReadyStillStopsAFork) {
  auto parent = NewSandbox();
  ASSERT_NE(parent, nullptr);
  auto repl = StartRepl(parent);
  ASSERT_NE(repl, nullptr);
  ExecOptions o;
  o.argv = {"sleep", "30"};
  auto sleeper = exec_->Start(parent, o);
  ASSERT_THAT(sleeper, IsOk());
  const std::string id = parent->id;
  parent.reset();
  auto forked = manager_->Fork(id, 1);
  EXPECT_EQ(forked.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(forked.status().message(), HasSubstr("only fork-ready ones are"));
  (*sleeper)->Kill(ExitReason::kKilled);
  EXPECT_EQ(Ask(*repl, "pid"), std::to_string(repl->pid()));  // untouched
}

}  // namespace
}  // namespace corral::sandbox
