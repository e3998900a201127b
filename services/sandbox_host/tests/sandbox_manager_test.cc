// SandboxManager and ExecManager for real: sandboxes on this machine (root), commands run in them.
#include "services/sandbox_host/sandbox_manager.h"

#include <unistd.h>

#include <filesystem>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/fake_clock.h"
#include "libs/core/testing/status_matchers.h"
#include "services/sandbox_host/exec/exec_manager.h"
#include "services/sandbox_host/linux/process_sweep.h"
#include "services/sandbox_host/tests/manager_fixture.h"
#include "tests/support/uid_range.h"

namespace corral::sandbox {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::SizeIs;

TEST_F(SandboxHostTest, RunsACommandAsTheSandboxUidInItsHome) {
  auto sb = NewSandbox();
  ASSERT_NE(sb, nullptr);
  Collected c = Run(sb, {"sh", "-c", "id -u; pwd; echo $CORRAL_SANDBOX_ID; echo oops >&2; exit 3"});
  EXPECT_EQ(c.out, absl::StrCat(sb->uid, "\n", sb->home, "\n", sb->id, "\n"));
  EXPECT_EQ(c.err, "oops\n");
  EXPECT_EQ(c.exit.exit_code, 3);
  EXPECT_EQ(c.exit.reason, ExitReason::kExited);
  struct stat st {};
  ASSERT_EQ(stat(sb->home.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(st.st_uid, sb->uid);
}

// An agent finds the harnesses where this host installed them, and a task's own value still wins.
TEST_F(SandboxHostTest, TheHostsHarnessRootIsInEverySandboxsEnvironment) {
  manager_.reset();
  options_.harness_root = "/srv/harnesses";
  manager_ = std::make_unique<SandboxManager>(options_, features_, &clock_, &signer_);
  EXPECT_EQ(Run(NewSandbox(), {"sh", "-c", "echo $CORRAL_HARNESS_ROOT"}).out, "/srv/harnesses\n");
  SandboxSpec own;
  own.env["CORRAL_HARNESS_ROOT"] = "/mine";
  EXPECT_EQ(Run(NewSandbox(own), {"sh", "-c", "echo $CORRAL_HARNESS_ROOT"}).out, "/mine\n");
}

TEST_F(SandboxHostTest, MissingCommandExits127WithTheReason) {
  auto sb = NewSandbox();
  Collected c = Run(sb, {"definitely-not-a-command"});
  EXPECT_EQ(c.exit.exit_code, 127);
  EXPECT_THAT(c.err, HasSubstr("No such file or directory"));
}

TEST_F(SandboxHostTest, TimeoutKillsTheProcessAndItsSetsidEscapees) {
  auto sb = NewSandbox();
  ExecOptions o;
  o.timeout = absl::Milliseconds(300);
  Collected c = Run(sb, {"sh", "-c", "setsid sleep 60 < /dev/null > /dev/null 2>&1 & sleep 60"}, o);
  EXPECT_EQ(c.exit.reason, ExitReason::kTimedOut);
  EXPECT_TRUE(c.exit.timed_out);
  EXPECT_EQ(c.exit.signal, SIGKILL);
  EXPECT_TRUE(ProcessesOf(sb->uid).empty());
}

// A sandbox runs several things at once (an E2B background server beside commands, an MCP server beside tool
// calls): killing one, or one timing out, ends that one's tree — setsid escapees included — and nothing else.
TEST_F(SandboxHostTest, KillingOneProcessEndsItsTreeAndLeavesTheSandboxsOtherProcessesRunning) {
  auto sb = NewSandbox();
  ExecOptions server;
  server.argv = {"sleep", "60"};
  auto other = exec_->Start(sb, server);
  ASSERT_THAT(other, IsOk());
  for (bool by_timeout : {false, true}) {
    SCOPED_TRACE(by_timeout ? "timed out" : "killed");
    ExecOptions o;
    // A setsid escapee, a double-forked orphan, then its own sleep; "ready" once all of them are forked.
    o.argv = {"sh", "-c",
              "setsid sleep 60 < /dev/null > /dev/null 2>&1 & sh -c 'sleep 60 < /dev/null > /dev/null 2>&1 &'; "
              "echo ready; sleep 60"};
    if (by_timeout) o.timeout = absl::Milliseconds(500);
    auto victim = exec_->Start(sb, o);
    ASSERT_THAT(victim, IsOk());
    Collected c;
    // The exit is reported once the tree is gone.
    ASSERT_TRUE(DrainEvents(**victim, [&](const OutputEvent& ev) {
      if (ev.kind == OutputEvent::kStdout && (c.out += ev.data) == "ready\n" && !by_timeout) {
        (*victim)->Signal(SIGKILL);
      }
      if (ev.kind == OutputEvent::kExit) c.exit = ev.exit;
    }));
    EXPECT_EQ(c.out, "ready\n");
    EXPECT_EQ(c.exit.reason, by_timeout ? ExitReason::kTimedOut : ExitReason::kKilled);
    EXPECT_THAT(ProcessesOf(sb->uid), ::testing::ElementsAre((*other)->pid()));
    EXPECT_FALSE((*other)->exited());
  }
  EXPECT_EQ(Run(sb, {"echo", "still here"}).out, "still here\n");
  // The marker is the host's to set.
  ExecOptions forged;
  forged.argv = {"true"};
  forged.env["CORRAL_PROCESS_ID"] = (*other)->id();
  EXPECT_THAT(exec_->Start(sb, forged), StatusIs(absl::StatusCode::kInvalidArgument));
}

// A command that arrives while its sandbox is torn down (an expiry beside a client's call) starts nothing: run
// beside the teardown, it escaped the sweep and ran as the deleted sandbox's uid, whose cgroups stayed behind.
TEST_F(SandboxHostTest, ACommandOnASandboxBeingDeletedStartsNothing) {
  auto sb = NewSandbox();
  ASSERT_TRUE(manager_->Delete(sb->id));  // the caller still holds the sandbox, as a call under way does
  ExecOptions o;
  o.argv = {"sleep", "60"};
  EXPECT_THAT(exec_->Start(sb, o), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_TRUE(ProcessesOf(sb->uid).empty());
}

TEST_F(SandboxHostTest, AStalledReaderCostsBoundedMemoryAndNothingIsLost) {
  auto sb = NewSandbox();
  ExecOptions o;
  o.argv = {"head", "-c", "67108864", "/dev/zero"};  // 64 MiB
  o.buffer_limit = 1 << 20;
  auto e = exec_->Start(sb, o);
  ASSERT_THAT(e, IsOk());
  // Nobody reads: the host stops reading at the limit and the writer blocks on its full pipe.
  ASSERT_FALSE((*e)->exited());
  uint64_t total = 0;
  size_t peak_event = 0;
  Collected c;
  const bool done = DrainEvents(**e, [&](const OutputEvent& ev) {
    if (ev.kind == OutputEvent::kExit) c.exit = ev.exit;
    total += ev.data.size();
    peak_event = std::max(peak_event, ev.data.size());
  });
  EXPECT_TRUE(done);
  EXPECT_EQ(total, 64u << 20);
  EXPECT_EQ(c.exit.stdout_bytes, 64u << 20);
  EXPECT_LE(peak_event, 64u * 1024);
  EXPECT_EQ(c.exit.exit_code, 0);
}

TEST_F(SandboxHostTest, MaxOutputBytesDropsTheRestButCountsIt) {
  auto sb = NewSandbox();
  ExecOptions o;
  o.max_output_bytes = 1000;
  Collected c = Run(sb, {"head", "-c", "5000", "/dev/zero"}, o);
  EXPECT_EQ(c.out.size(), 1000u);
  EXPECT_EQ(c.exit.dropped_bytes, 4000u);
  EXPECT_EQ(c.exit.stdout_bytes, 5000u);
}

TEST_F(SandboxHostTest, DeletingASandboxEndsItsExecutionAndFreesEverything) {
  auto sb = NewSandbox();
  auto e = exec_->Start(sb, ExecOptions{.argv = {"sleep", "60"}});
  ASSERT_THAT(e, IsOk());
  const std::string home = sb->home;
  const uid_t uid = sb->uid;
  EXPECT_TRUE(manager_->Delete(sb->id));
  EXPECT_FALSE(manager_->Delete(sb->id));  // idempotent
  Collected c = Collect(**e);
  EXPECT_EQ(c.exit.reason, ExitReason::kSandboxDeleted);
  EXPECT_FALSE(fs::exists(home));
  EXPECT_TRUE(ProcessesOf(uid).empty());
  EXPECT_THAT(manager_->Find(sb->id), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(manager_->live(), 0);
}

TEST_F(SandboxHostTest, SandboxesCannotReachEachOthersHomes) {
  auto a = NewSandbox();
  auto b = NewSandbox();
  Collected c = Run(a, {"sh", "-c", absl::StrCat("ls ", b->home, " 2>&1; echo x > ", b->home, "/y 2>&1; echo $?")});
  EXPECT_THAT(c.out, HasSubstr("Permission denied"))
      << "stderr: " << c.err << " exit " << c.exit.exit_code << " reason " << ExitReasonName(c.exit.reason);
  EXPECT_THAT(c.out, ::testing::Not(::testing::EndsWith("\n0\n")));  // the write failed
  EXPECT_FALSE(fs::exists(b->home + "/y"));
}

TEST_F(SandboxHostTest, CapacityIsReservedAtomicallyUnderConcurrentCreates) {
  std::atomic<int64_t> created = 0, rejected = 0;
  std::vector<std::thread> creators;
  for (int i = 0; i < 8; ++i) {
    creators.emplace_back([&] {
      auto r = manager_->Create(500, {});
      ASSERT_THAT(r, IsOk());
      created += static_cast<int64_t>(r->created.size());
      rejected += r->rejected;
    });
  }
  for (auto& t : creators) t.join();
  EXPECT_EQ(created, options_.capacity);
  EXPECT_EQ(rejected, 8 * 500 - options_.capacity);
  EXPECT_EQ(manager_->live(), options_.capacity);
}

TEST_F(SandboxHostTest, TokensOpenOnlyTheirOwnSandbox) {
  auto r = manager_->Create(2, {});
  ASSERT_THAT(r, IsOkAndHolds(::testing::Field(&SandboxManager::CreateResult::created, SizeIs(2))));
  const auto& a = r->created[0];
  const auto& b = r->created[1];
  EXPECT_THAT(manager_->CheckSandboxToken(a.sandbox->id, a.token), IsOk());
  EXPECT_THAT(manager_->CheckSandboxToken(b.sandbox->id, a.token), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(manager_->CheckSandboxToken(a.sandbox->id, a.token + "x"), StatusIs(absl::StatusCode::kUnauthenticated));
}

TEST_F(SandboxHostTest, IdleSandboxesAreEvictedButNeverWhileAProcessRuns) {
  FakeClock fake;
  SandboxManager manager(options_, features_, &fake, &signer_);
  SandboxSpec spec;
  spec.idle_timeout = absl::Seconds(10);
  auto r = manager.Create(2, spec);
  ASSERT_THAT(r, IsOkAndHolds(::testing::Field(&SandboxManager::CreateResult::created, SizeIs(2))));
  const std::string quiet = r->created[0].sandbox->id;
  const std::string busy = r->created[1].sandbox->id;
  r->created[1].sandbox->running++;  // as ExecManager does while a process runs
  fake.Advance(absl::Seconds(9));
  ASSERT_THAT(manager.Find(quiet), IsOk());  // an API call is activity
  fake.Advance(absl::Seconds(9));
  EXPECT_THAT(manager.Find(quiet), IsOk());
  fake.Advance(absl::Seconds(11));
  EXPECT_THAT(manager.Find(quiet), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(manager.Find(busy), IsOk());  // silent for 29 s, but its process still runs
  r->created[1].sandbox->running--;
  r->created[1].sandbox->Touch(fake.Now());
  r.value().created.clear();
  fake.Advance(absl::Seconds(11));
  EXPECT_THAT(manager.Find(busy), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(manager.live(), 0);
}

TEST_F(SandboxHostTest, BadSpecsAreRejectedWithTheReason) {
  SandboxSpec spec;
  spec.env = {{"HOME", "/root"}};
  EXPECT_THAT(manager_->Create(1, spec), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("HOME")));
  spec = {};
  spec.task_paths = {"/etc/evil"};
  EXPECT_THAT(manager_->Create(1, spec), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("system directory")));
  spec = {};
  spec.rlimits.nofile = 1LL << 40;
  EXPECT_THAT(manager_->Create(1, spec), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ceiling")));
  spec = {};
  spec.env = {{"BIG", std::string(1 << 20, 'x')}};
  EXPECT_THAT(manager_->Create(1, spec), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at most")));
  spec = {};
  spec.allowed_ports = {8080};
  EXPECT_THAT(manager_->Create(1, spec), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("proxy_only")));
  EXPECT_THAT(manager_->Create(0, {}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(manager_->live(), 0);
}

// A container's 0750 state directory above the homes would fail every exec with EACCES; the host refuses to
// start instead, naming the directory.
TEST(CheckSandboxesCanReach, NamesTheFirstDirectoryTheSandboxUidsCannotSearch) {
  const fs::path base = fs::temp_directory_path() / ("corral-reach-" + std::to_string(getpid()));
  fs::create_directories(base / "state" / "sandboxes");
  fs::permissions(base, fs::perms::owner_all | fs::perms::others_exec, fs::perm_options::replace);
  EXPECT_THAT(CheckSandboxesCanReach((base / "state" / "sandboxes").string()), IsOk());
  fs::permissions(base / "state", fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec,
                  fs::perm_options::replace);
  const absl::Status blocked = CheckSandboxesCanReach((base / "state" / "sandboxes").string());
  EXPECT_EQ(blocked.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(blocked.message()), ::testing::HasSubstr((base / "state").string() + " (mode 0750)"));
  EXPECT_EQ(CheckSandboxesCanReach((base / "missing").string()).code(), absl::StatusCode::kFailedPrecondition);
  fs::remove_all(base);
}

}  // namespace
}  // namespace corral::sandbox
