// corral-sandbox-host as a real process (root) on loopback, attacked through its own API: tokens, path escapes,
// capacity, process escapes on delete, recycled uids, forks, kills between phases. Its own life (exit when empty,
// restarts, SIGTERM) is in sandbox_host_restart_test.cc.
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

TEST_F(SandboxHostApiTest, CapacityFourOfFourThousandAndTheRestRejected) {
  auto r = Create(4000);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->sandboxes_size(), 4);
  EXPECT_EQ(r->rejected(), 3996u);
  auto more = Create(1);
  ASSERT_THAT(more, IsOk());
  EXPECT_EQ(more->sandboxes_size(), 0);
  EXPECT_EQ(more->rejected(), 1u);
  auto metrics = http::ParsePrometheusText(*http::HttpGet(service_->ready.metrics, "/metrics"));
  ASSERT_THAT(metrics, IsOk());
  EXPECT_THAT(metrics->Value("corral_sandbox_host_creates_total", {{"outcome", "created"}}), IsOkAndHolds(4));
  EXPECT_THAT(metrics->Value("corral_sandbox_host_creates_total", {{"outcome", "rejected"}}), IsOkAndHolds(3997));
  EXPECT_THAT(metrics->Value("corral_sandbox_host_sandboxes"), IsOkAndHolds(4));
  EXPECT_THAT(metrics->Value("corral_sandbox_host_capacity"), IsOkAndHolds(4));
}

TEST_F(SandboxHostApiTest, ExecRunsIsolatedAndReportsProtections) {
  auto r = Create(1);
  ASSERT_THAT(r, IsOk());
  const auto& sb = r->sandboxes(0);
  EXPECT_GE(sb.sandbox().protections().landlock_abi(), 1);
  EXPECT_TRUE(sb.sandbox().protections().no_new_privs());
  ExecResult e = Exec(sb.sandbox().sandbox_id(), sb.capability_token(),
                      "id -u; ls /proc | grep -c '^[0-9]'; cat /etc/shadow 2>&1 | head -1; echo x > /workspace/w");
  ASSERT_THAT(e.status, IsOk());
  EXPECT_THAT(e.out, HasSubstr(std::to_string(sb.sandbox().uid()) + "\n"));
  EXPECT_THAT(e.out, HasSubstr("Permission denied"));
  EXPECT_THAT(ReadFile(sb.sandbox().sandbox_id(), sb.capability_token(), "/workspace/w"), IsOkAndHolds("x\n"));
  // A sandbox on the host's filesystem has one user: root (or any other) is refused, not pretended.
  EXPECT_FALSE(sb.sandbox().protections().user_ids());
  for (const char* user : {"root", "0", "nobody"}) {
    EXPECT_THAT(Exec(sb.sandbox().sandbox_id(), sb.capability_token(), "id -u", user).status,
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("has one user")))
        << user;
  }
}

TEST_F(SandboxHostApiTest, TokensOpenOnlyTheirOwnSandbox) {
  auto r = Create(2);
  ASSERT_THAT(r, IsOk());
  const auto& a = r->sandboxes(0);
  const auto& b = r->sandboxes(1);
  EXPECT_THAT(Exec(b.sandbox().sandbox_id(), a.capability_token(), "true").status,
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(Exec(a.sandbox().sandbox_id(), "", "true").status, StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(ReadFile(b.sandbox().sandbox_id(), a.capability_token(), "x"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // A sandbox token cannot create sandboxes or list the host.
  grpc::ClientContext ctx;
  Prepare(ctx, a.capability_token());
  v1::CreateSandboxesRequest req;
  v1::CreateSandboxesResponse resp;
  EXPECT_THAT(FromGrpcStatus(stub_->CreateSandboxes(&ctx, req, &resp)), StatusIs(absl::StatusCode::kUnauthenticated));
}

TEST_F(SandboxHostApiTest, FileApiNeverEscapesTheHome) {
  auto r = Create(2);
  ASSERT_THAT(r, IsOk());
  const std::string id = r->sandboxes(0).sandbox().sandbox_id();
  const std::string other_home = r->sandboxes(1).sandbox().home();
  ASSERT_THAT(Exec(id, token_, "ln -s /etc/shadow shadow; ln -s " + other_home + " neighbour; mkfifo fifo").status,
              IsOk());
  EXPECT_THAT(ReadFile(id, token_, "shadow"), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("symlink")));
  EXPECT_THAT(ReadFile(id, token_, "neighbour/x"), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(ReadFile(id, token_, "fifo"), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(ReadFile(id, token_, "../" + r->sandboxes(1).sandbox().sandbox_id() + "/x"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ReadFile(id, token_, "/etc/passwd"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ReadFile(id, token_, std::string("a\0b", 3)), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(WriteFile(id, token_, "neighbour/planted", "x"), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_FALSE(fs::exists(other_home + "/planted"));
  ASSERT_THAT(WriteFile(id, token_, "shadow", "replaced the link, not the target"), IsOk());
  EXPECT_THAT(ReadFile(id, token_, "shadow"), IsOkAndHolds("replaced the link, not the target"));
}

TEST_F(SandboxHostApiTest, DeleteKillsSetsidEscapeesAndARecycledUidStartsClean) {
  auto r = Create(4);  // the whole uid range
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ(r->sandboxes_size(), 4);
  const auto& victim = r->sandboxes(0).sandbox();
  ASSERT_THAT(
      Exec(victim.sandbox_id(), token_, "setsid sleep 300 < /dev/null > /dev/null 2>&1 & echo x > secret").status,
      IsOk());
  grpc::ClientContext ctx;
  Prepare(ctx, token_);
  v1::DeleteSandboxRequest del;
  del.set_sandbox_id(victim.sandbox_id());
  v1::DeleteSandboxResponse deleted;
  ASSERT_TRUE(stub_->DeleteSandbox(&ctx, del, &deleted).ok());
  EXPECT_TRUE(deleted.existed());
  EXPECT_FALSE(fs::exists(victim.home()));
  auto again = Create(1);
  ASSERT_THAT(again, IsOk());
  ASSERT_EQ(again->sandboxes_size(), 1);
  const auto& reborn = again->sandboxes(0).sandbox();
  EXPECT_EQ(reborn.uid(), victim.uid());  // the only free uid: it came back after verified teardown
  ExecResult e = Exec(reborn.sandbox_id(), token_, "ps -eo comm= | grep -c sleep; ls -A");
  ASSERT_THAT(e.status, IsOk());
  EXPECT_EQ(e.out, "0\n.tmp\nworkspace\n");
}

TEST_F(SandboxHostApiTest, ASandboxCannotTouchItsNeighbourOrTheHost) {
  v1::SandboxSpec spec;
  spec.set_network_policy(v1::NETWORK_POLICY_OPEN);  // shares the host's network: Landlock alone guards it
  auto r = Create(2, spec);
  ASSERT_THAT(r, IsOk());
  const auto& a = r->sandboxes(0).sandbox();
  const auto& b = r->sandboxes(1).sandbox();
  // B runs a long command; A tries to see and kill it.
  std::atomic<bool> b_done = false;
  ExecResult b_result;
  std::thread b_thread([&] {
    b_result = Exec(b.sandbox_id(), token_, "sleep 5; echo survived");
    b_done = true;
  });
  std::string b_pid;
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        b_pid.clear();
        FILE* ps = popen(absl::StrCat("pgrep -u ", b.uid(), " -x sleep").c_str(), "r");
        char buf[32] = {};
        if (ps != nullptr && fgets(buf, sizeof(buf), ps) != nullptr)
          b_pid = std::string(absl::StripAsciiWhitespace(buf));
        if (ps != nullptr) pclose(ps);
        return !b_pid.empty();
      },
      absl::Seconds(10)));
  const std::string abstract_name = absl::StrCat("corral-host-", getpid());
  int host_socket = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path + 1, abstract_name.data(), abstract_name.size());
  ASSERT_EQ(bind(host_socket, reinterpret_cast<sockaddr*>(&addr),
                 static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + abstract_name.size())),
            0);
  listen(host_socket, 1);
  ExecResult e =
      Exec(a.sandbox_id(), token_,
           absl::StrCat("kill -9 ", b_pid, " 2>/dev/null && echo killed || echo kill-denied; ", "cat /proc/", b_pid,
                        "/environ >/dev/null 2>&1 && echo environ-read || echo environ-hidden; ",
                        "cat /proc/1/environ >/dev/null 2>&1 && echo host-environ-read || echo host-environ-hidden; ",
                        "ls ", b.home(), " >/dev/null 2>&1 && echo home-listed || echo home-denied; ",
                        "echo x > /dev/shm/a 2>/dev/null && echo shm-written || echo shm-denied; ",
                        "python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 0))' 2>/dev/null && echo "
                        "bound || echo bind-denied; ",
                        "python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect(\"\\0", abstract_name,
                        "\")' 2>/dev/null && echo abstract-connected || echo abstract-denied"));
  close(host_socket);
  ASSERT_THAT(e.status, IsOk());
  EXPECT_EQ(e.out,
            "kill-denied\nenviron-hidden\nhost-environ-hidden\nhome-denied\nshm-denied\nbind-denied\n"
            "abstract-denied\n");
  b_thread.join();
  EXPECT_EQ(b_result.out, "survived\n");
}

TEST_F(SandboxHostApiTest, ResourceAbuseIsContainedAndTheNeighbourStaysResponsive) {
  v1::SandboxSpec spec;
  spec.mutable_limits()->set_memory_bytes(64ULL << 20);
  spec.mutable_limits()->set_max_file_size_bytes(1 << 20);
  spec.mutable_limits()->set_max_pids(64);
  auto r = Create(2, spec);
  ASSERT_THAT(r, IsOk());
  const auto& a = r->sandboxes(0).sandbox();
  const auto& b = r->sandboxes(1).sandbox();
  // Held in by the memory cgroup where the host has one, by RLIMIT_DATA where it does not (a container).
  const auto& held = a.protections();
  const bool memory_cgroup = std::find(held.cgroup_controllers().begin(), held.cgroup_controllers().end(), "memory") !=
                             held.cgroup_controllers().end();
  EXPECT_EQ(held.memory_rlimit_bytes(), memory_cgroup ? 0u : 64ULL << 20) << held.containment();
  EXPECT_THAT(held.containment(), HasSubstr(memory_cgroup ? "memory 64 MiB (cgroup)" : "memory 64 MiB per process"));
  ExecResult hog = Exec(a.sandbox_id(), token_,
                        "python3 -c 'x = bytearray(512 << 20); print(len(x))' >/dev/null 2>&1; echo hog=$?; "
                        "head -c 2097152 /dev/zero > big 2>/dev/null; echo fill=$?; wc -c < big; "
                        "for i in $(seq 200); do sleep 5 & done 2>/dev/null; echo forked");
  ASSERT_THAT(hog.status, IsOk());
  EXPECT_THAT(hog.out, ::testing::Not(HasSubstr("hog=0")));  // killed or MemoryError, never 512 MiB
  EXPECT_THAT(hog.out, HasSubstr("fill=153\n1048576\n"));    // SIGXFSZ at the 1 MiB FSIZE limit
  ExecResult neighbour = Exec(b.sandbox_id(), token_, "echo alive");
  EXPECT_EQ(neighbour.out, "alive\n");
  // A 1 MB environment is refused up front.
  v1::SandboxSpec huge;
  (*huge.mutable_env())["BIG"] = std::string(1 << 20, 'x');
  EXPECT_THAT(Create(1, huge), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("env")));
}

TEST_F(SandboxHostApiTest, ASilentLongCommandIsNotCutOffByIdleEvictionButAnIdleSandboxGoes) {
  v1::SandboxSpec spec;
  spec.mutable_idle_timeout()->set_seconds(1);
  auto r = Create(1, spec);
  ASSERT_THAT(r, IsOk());
  const std::string id = r->sandboxes(0).sandbox().sandbox_id();
  ExecResult e = Exec(id, token_, "sleep 3; echo done");  // silent three times longer than the idle timeout
  ASSERT_THAT(e.status, IsOk());
  EXPECT_EQ(e.out, "done\n");
  // Watched through the host-wide list: a call on the sandbox itself would count as activity.
  EXPECT_TRUE(testing::WaitUntil(
      [&] {
        grpc::ClientContext ctx;
        Prepare(ctx, token_);
        v1::ListSandboxesResponse list;
        return stub_->ListSandboxes(&ctx, v1::ListSandboxesRequest(), &list).ok() && list.sandboxes_size() == 0;
      },
      absl::Seconds(15)));
}

TEST_F(SandboxHostApiTest, CliCopiesFilesAndDirectoriesInAndOutAndRefusesEscapes) {
  auto r = Create(1);
  ASSERT_THAT(r, IsOk());
  const std::string id = r->sandboxes(0).sandbox().sandbox_id();
  const std::string local = dir_ + "/payload", back = dir_ + "/back";
  std::string payload(300000, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 31 % 251);
  std::ofstream(local, std::ios::binary) << payload;
  auto cli = [&](const std::string& src, const std::string& dst) {
    auto p = testing::Subprocess::Start(
        {CORRAL_CLI, "sandbox", "cp", "--host", service_->ready.grpc, "--secret-file", dir_ + "/secret", src, dst},
        dir_ + "/cp.log");
    return p.ok() ? p->Wait(absl::Seconds(60)).value_or(-1) : -1;
  };
  EXPECT_EQ(cli(local, id + ":/workspace/payload"), 0);
  EXPECT_EQ(cli(id + ":/workspace/payload", back), 0);
  std::ifstream in(back, std::ios::binary);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), payload);
  EXPECT_NE(cli(id + ":../../etc/shadow", back + "2"), 0);
  EXPECT_FALSE(fs::exists(back + "2"));

  // Directories, both ways: onto an existing directory the tree lands inside it, as with docker cp.
  fs::create_directories(dir_ + "/tree/sub/deeper");
  std::ofstream(dir_ + "/tree/a.txt") << "alpha";
  std::ofstream(dir_ + "/tree/sub/deeper/b.bin", std::ios::binary) << payload;
  EXPECT_EQ(cli(dir_ + "/tree", id + ":/workspace"), 0);
  EXPECT_THAT(ReadFile(id, token_, "/workspace/tree/a.txt"), IsOkAndHolds("alpha"));
  EXPECT_THAT(ReadFile(id, token_, "/workspace/tree/sub/deeper/b.bin"), IsOkAndHolds(payload));
  EXPECT_EQ(cli(id + ":/workspace/tree", dir_ + "/down"), 0);
  std::ifstream a(dir_ + "/down/a.txt"), b(dir_ + "/down/sub/deeper/b.bin", std::ios::binary);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(a)), std::istreambuf_iterator<char>()), "alpha");
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(b)), std::istreambuf_iterator<char>()), payload);
}

TEST_F(SandboxHostApiTest, ForkedChildrenAreIsolatedFromEachOtherAndFromTheirParent) {
  auto r = Create(1);  // network none: each sandbox has a loopback of its own
  ASSERT_THAT(r, IsOk());
  const v1::CreatedSandbox parent = r->sandboxes(0);
  const std::string pid = parent.sandbox().sandbox_id();
  ASSERT_THAT(Exec(pid, parent.capability_token(), "echo mine > note").status, IsOk());
  // Only the host token forks.
  EXPECT_THAT(Fork(pid, 1, parent.capability_token()), StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(Fork("sb-nobody", 1, token_), StatusIs(absl::StatusCode::kNotFound));
  auto forked = Fork(pid, 2, token_);
  ASSERT_THAT(forked, IsOk());
  ASSERT_EQ(forked->sandboxes_size(), 2);
  const v1::CreatedSandbox& a = forked->sandboxes(0);
  const v1::CreatedSandbox& b = forked->sandboxes(1);
  EXPECT_EQ(a.sandbox().forked_from(), pid);
  EXPECT_EQ(a.sandbox().fork_layers(), 1u);
  EXPECT_NE(a.sandbox().uid(), parent.sandbox().uid());
  // Each child's token opens that child only; the parent's still opens the parent.
  EXPECT_THAT(Exec(pid, a.capability_token(), "true").status, StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(Exec(pid, parent.capability_token(), "cat note").out, "mine\n");
  // A listens on 127.0.0.1:8000; B, on its own loopback, finds nobody there, and reaches no home but its own.
  ASSERT_THAT(Exec(a.sandbox().sandbox_id(), a.capability_token(),
                   "setsid python3 -c 'import socket,time; s=socket.socket(); s.bind((\"127.0.0.1\", 8000)); "
                   "s.listen(); time.sleep(60)' < /dev/null > /dev/null 2>&1 &")
                  .status,
              IsOk());
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        return Exec(a.sandbox().sandbox_id(), a.capability_token(),
                    "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8000))' && echo up")
                   .out == "up\n";
      },
      absl::Seconds(10)));
  ExecResult e =
      Exec(b.sandbox().sandbox_id(), b.capability_token(),
           absl::StrCat("cat note; python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8000))' "
                        "2>/dev/null && echo reached || echo refused; ls ",
                        a.sandbox().home(), " >/dev/null 2>&1 && echo a-listed || echo a-denied; ls ",
                        parent.sandbox().home(), " >/dev/null 2>&1 && echo parent-listed || echo parent-denied; ",
                        "ls ", root_, "/forks >/dev/null 2>&1 && echo layers-listed || echo layers-denied"));
  ASSERT_THAT(e.status, IsOk());
  EXPECT_EQ(e.out, "mine\nrefused\na-denied\nparent-denied\nlayers-denied\n");
  // A's listener still runs: a fork of A is refused, naming it. Both calls are counted.
  EXPECT_THAT(Fork(a.sandbox().sandbox_id(), 1, token_),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("process(es) running")));
  auto metrics = http::ParsePrometheusText(*http::HttpGet(service_->ready.metrics, "/metrics"));
  ASSERT_THAT(metrics, IsOk());
  EXPECT_THAT(metrics->Value("corral_sandbox_host_forks_total", {{"outcome", "forked"}}), IsOkAndHolds(1));
  EXPECT_THAT(metrics->Value("corral_sandbox_host_forks_total", {{"outcome", "refused"}}), IsOkAndHolds(1));
  EXPECT_THAT(metrics->Value("corral_sandbox_host_fork_seconds_count"), IsOkAndHolds(1));
}

TEST_F(SandboxHostApiTest, KillAllProcessesEndsEscapeesAndKeepsTheSandboxAndItsFiles) {
  auto r = Create(1);
  ASSERT_THAT(r, IsOk());
  const auto& sb = r->sandboxes(0).sandbox();
  const std::string& token = r->sandboxes(0).capability_token();
  // A setsid loop and a double-forked daemon, both outliving the exec that started them.
  ASSERT_THAT(Exec(sb.sandbox_id(), token,
                   "setsid sh -c 'while :; do echo 1 > planted; sleep 0.05; done' < /dev/null > /dev/null 2>&1 & "
                   "(sh -c 'sleep 300 &' &) ; echo kept > kept")
                  .status,
              IsOk());
  ASSERT_TRUE(testing::WaitUntil([&] { return sandbox::ProcessesOf(sb.uid()).size() >= 2; }, absl::Seconds(10)));
  grpc::ClientContext ctx;
  Prepare(ctx, token);  // the sandbox's own token may do it
  v1::KillAllProcessesRequest req;
  req.set_sandbox_id(sb.sandbox_id());
  v1::KillAllProcessesResponse resp;
  ASSERT_TRUE(stub_->KillAllProcesses(&ctx, req, &resp).ok());
  EXPECT_GE(resp.killed(), 2u);
  EXPECT_THAT(sandbox::ProcessesOf(sb.uid()), ::testing::IsEmpty());
  EXPECT_THAT(ReadFile(sb.sandbox_id(), token_, "kept"), IsOkAndHolds("kept\n"));
  ExecResult after = Exec(sb.sandbox_id(), token_, "rm planted; sleep 0.3; ls planted 2>&1; echo alive");
  ASSERT_THAT(after.status, IsOk());
  EXPECT_THAT(after.out, HasSubstr("No such file"));  // nothing writes it any more
  EXPECT_THAT(after.out, HasSubstr("alive"));

  grpc::ClientContext missing_ctx;
  Prepare(missing_ctx, token_);
  req.set_sandbox_id("sb-0000000000000000");
  EXPECT_EQ(stub_->KillAllProcesses(&missing_ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace corral
