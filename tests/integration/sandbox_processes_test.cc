// corral-sandbox-host's process and template API through a real host: interactive exec with streamed stdin and
// signals, background processes (list, kill, output file), templates (build once, clone, conflicts, failures),
// a stalled reader of 64 MiB, and the proxy_only network policy.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/status_macros.h"
#include "libs/core/unique_fd.h"
#include "libs/http/prometheus_text.h"
#include "tests/integration/sandbox_host_fixture.h"

namespace corral {
namespace {

using ::testing::HasSubstr;

v1::Command Shell(const std::string& script) {
  v1::Command c;
  for (const char* a : {"/bin/sh", "-c"}) c.add_argv(a);
  c.add_argv(script);
  return c;
}

// Host memory in KiB (VmRSS of the host process).
int64_t HostRssKib(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    int64_t kib = 0;
    if (line.rfind("VmRSS:", 0) == 0 && absl::SimpleAtoi(line.substr(6, line.size() - 6 - 3), &kib)) return kib;
  }
  return -1;
}

// A TCP listener on 127.0.0.1 with a kernel-chosen port.
struct Listener {
  UniqueFd fd;
  uint16_t port = 0;
};
Listener Listen() {
  Listener l;
  l.fd.Reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(l.fd.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0 && listen(l.fd.get(), 8) == 0 &&
      getsockname(l.fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    l.port = ntohs(addr.sin_port);
  }
  return l;
}

class SandboxProcessesTest : public SandboxHostApiTest {
 protected:
  absl::StatusOr<v1::Process> StartProcess(const std::string& id, const std::string& script,
                                           const std::string& output_path) {
    grpc::ClientContext ctx;
    Prepare(ctx, token_);
    v1::StartProcessRequest req;
    req.set_sandbox_id(id);
    *req.mutable_command() = Shell(script);
    req.set_output_path(output_path);
    v1::Process p;
    grpc::Status s = stub_->StartProcess(&ctx, req, &p);
    if (!s.ok()) return FromGrpcStatus(s);
    return p;
  }
  absl::StatusOr<v1::ListProcessesResponse> ListProcesses(const std::string& id) {
    grpc::ClientContext ctx;
    Prepare(ctx, token_);
    v1::ListProcessesRequest req;
    req.set_sandbox_id(id);
    req.set_include_exited(true);
    v1::ListProcessesResponse resp;
    grpc::Status s = stub_->ListProcesses(&ctx, req, &resp);
    if (!s.ok()) return FromGrpcStatus(s);
    return resp;
  }
  absl::StatusOr<v1::Process> KillProcess(const std::string& id, const std::string& process_id, int sig = 0) {
    grpc::ClientContext ctx;
    Prepare(ctx, token_);
    v1::KillProcessRequest req;
    req.set_sandbox_id(id);
    req.set_process_id(process_id);
    req.set_signal(sig);
    v1::Process p;
    grpc::Status s = stub_->KillProcess(&ctx, req, &p);
    if (!s.ok()) return FromGrpcStatus(s);
    return p;
  }
  absl::StatusOr<v1::Template> PrepareTemplate(const v1::PrepareTemplateRequest& req) {
    grpc::ClientContext ctx;
    Prepare(ctx, token_);
    v1::Template t;
    grpc::Status s = stub_->PrepareTemplate(&ctx, req, &t);
    if (!s.ok()) return FromGrpcStatus(s);
    return t;
  }
  absl::StatusOr<v1::ListTemplatesResponse> ListTemplates() {
    grpc::ClientContext ctx;
    Prepare(ctx, token_);
    v1::ListTemplatesResponse resp;
    grpc::Status s = stub_->ListTemplates(&ctx, v1::ListTemplatesRequest(), &resp);
    if (!s.ok()) return FromGrpcStatus(s);
    return resp;
  }
  absl::Status DeleteTemplate(const std::string& key) {
    grpc::ClientContext ctx;
    Prepare(ctx, token_);
    v1::DeleteTemplateRequest req;
    req.set_key(key);
    v1::DeleteTemplateResponse resp;
    return FromGrpcStatus(stub_->DeleteTemplate(&ctx, req, &resp));
  }
  absl::StatusOr<double> MetricValue(const std::string& name, const std::map<std::string, std::string>& labels) {
    CORRAL_ASSIGN_OR_RETURN(std::string text, http::HttpGet(service_->ready.metrics, "/metrics"));
    CORRAL_ASSIGN_OR_RETURN(http::Exposition exposition, http::ParsePrometheusText(text));
    return exposition.Value(name, labels);
  }
};

TEST_F(SandboxProcessesTest, InteractiveExecStreamsStdinAndSignals) {
  auto r = Create(1);
  ASSERT_THAT(r, IsOk());
  const std::string id = r->sandboxes(0).sandbox().sandbox_id();
  {
    grpc::ClientContext ctx;
    Prepare(ctx, r->sandboxes(0).capability_token());
    auto stream = stub_->ExecInteractive(&ctx);
    v1::ExecInput start;
    start.mutable_start()->set_sandbox_id(id);
    *start.mutable_start()->mutable_command() = Shell("while read line; do echo \"got $line\"; done; echo eof");
    start.mutable_start()->set_stdin("one\n");
    ASSERT_TRUE(stream->Write(start));
    v1::ExecEvent ev;
    ASSERT_TRUE(stream->Read(&ev));
    ASSERT_TRUE(ev.has_started());
    EXPECT_THAT(ev.started().process_id(), ::testing::StartsWith("p-"));
    std::string out;
    // Each line is answered while stdin stays open: the process really reads a live stream.
    while (out.find("got one\n") == std::string::npos && stream->Read(&ev)) out += ev.stdout();
    EXPECT_EQ(out, "got one\n");
    v1::ExecInput more;
    more.set_stdin("two\n");
    ASSERT_TRUE(stream->Write(more));
    while (out.find("got two\n") == std::string::npos && stream->Read(&ev)) out += ev.stdout();
    v1::ExecInput close;
    close.mutable_close_stdin();
    ASSERT_TRUE(stream->Write(close));
    v1::ExitStatus exit;
    while (stream->Read(&ev)) {
      out += ev.stdout();
      if (ev.has_exited()) exit = ev.exited();
    }
    EXPECT_THAT(FromGrpcStatus(stream->Finish()), IsOk());
    EXPECT_EQ(out, "got one\ngot two\neof\n");
    EXPECT_EQ(exit.exit_code(), 0);
    EXPECT_EQ(exit.reason(), v1::EXIT_REASON_EXITED);
  }
  {  // A signal reaches the process group; the process reports it was killed through the API.
    grpc::ClientContext ctx;
    Prepare(ctx, token_);
    auto stream = stub_->ExecInteractive(&ctx);
    v1::ExecInput start;
    start.mutable_start()->set_sandbox_id(id);
    *start.mutable_start()->mutable_command() = Shell("exec sleep 30");
    ASSERT_TRUE(stream->Write(start));
    v1::ExecEvent ev;
    ASSERT_TRUE(stream->Read(&ev));
    v1::ExecInput sig;
    sig.set_signal(SIGTERM);
    ASSERT_TRUE(stream->Write(sig));
    v1::ExitStatus exit;
    while (stream->Read(&ev)) {
      if (ev.has_exited()) exit = ev.exited();
    }
    EXPECT_THAT(FromGrpcStatus(stream->Finish()), IsOk());
    EXPECT_EQ(exit.signal(), SIGTERM);
    EXPECT_EQ(exit.exit_code(), 128 + SIGTERM);
    EXPECT_EQ(exit.reason(), v1::EXIT_REASON_KILLED);
  }
  {  // The first message must be `start`.
    grpc::ClientContext ctx;
    Prepare(ctx, token_);
    auto stream = stub_->ExecInteractive(&ctx);
    v1::ExecInput in;
    in.set_stdin("x");
    stream->Write(in);
    stream->WritesDone();
    v1::ExecEvent ev;
    EXPECT_FALSE(stream->Read(&ev));
    EXPECT_THAT(FromGrpcStatus(stream->Finish()),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("first message must be `start`")));
  }
}

TEST_F(SandboxProcessesTest, BackgroundProcessesAreListedWriteTheirOutputAndCanBeKilled) {
  auto r = Create(1);
  ASSERT_THAT(r, IsOk());
  const std::string id = r->sandboxes(0).sandbox().sandbox_id();
  auto p = StartProcess(id, "echo started; echo oops >&2; exec sleep 60", "logs/server.log");
  ASSERT_THAT(p, IsOk());
  EXPECT_EQ(p->kind(), v1::PROCESS_KIND_BACKGROUND);
  EXPECT_EQ(p->state(), v1::PROCESS_STATE_RUNNING);
  // Its output lands in the sandbox's file, owned by the sandbox.
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        auto data = ReadFile(id, token_, "logs/server.log");
        return data.ok() && data->find("started\n") != std::string::npos && data->find("oops\n") != std::string::npos;
      },
      absl::Seconds(10)));
  // The call that started it has ended; the process still runs and is listed.
  auto listed = ListProcesses(id);
  ASSERT_THAT(listed, IsOk());
  ASSERT_EQ(listed->processes_size(), 1);
  EXPECT_EQ(listed->processes(0).process_id(), p->process_id());
  EXPECT_EQ(listed->processes(0).state(), v1::PROCESS_STATE_RUNNING);
  EXPECT_EQ(listed->processes(0).output_path(), "logs/server.log");

  auto killed = KillProcess(id, p->process_id());
  ASSERT_THAT(killed, IsOk());
  EXPECT_EQ(killed->state(), v1::PROCESS_STATE_EXITED);
  EXPECT_EQ(killed->exit_status().reason(), v1::EXIT_REASON_KILLED);
  EXPECT_EQ(killed->exit_status().signal(), SIGKILL);
  // Idempotent: killing it again returns it unchanged.
  auto again = KillProcess(id, p->process_id());
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->exit_status().reason(), v1::EXIT_REASON_KILLED);
  // An Exec shows up among the exited ones too, after the background process (by start time).
  ASSERT_THAT(Exec(id, token_, "exit 3").status, IsOk());
  listed = ListProcesses(id);
  ASSERT_THAT(listed, IsOk());
  ASSERT_EQ(listed->processes_size(), 2);
  EXPECT_EQ(listed->processes(1).kind(), v1::PROCESS_KIND_EXEC);
  EXPECT_EQ(listed->processes(1).exit_status().exit_code(), 3);

  EXPECT_THAT(KillProcess(id, "p-999999"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(KillProcess(id, p->process_id(), 99), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(StartProcess(id, "true", "../escape"), StatusIs(absl::StatusCode::kInvalidArgument));
}

// PauseSandbox freezes every process where it stands (a counting loop stops counting, and commands are refused)
// until ResumeSandbox, when it counts on; GetSandbox reports what the cgroup measured; a paused sandbox deletes.
TEST_F(SandboxProcessesTest, APausedSandboxIsFrozenWhereItStandsAndGoesOnWhenResumed) {
  auto r = Create(1);
  ASSERT_THAT(r, IsOk());
  const std::string id = r->sandboxes(0).sandbox().sandbox_id();
  auto p = StartProcess(id, "i=0; while :; do i=$((i+1)); echo $i > count; sleep 0.02; done", "logs/loop.log");
  ASSERT_THAT(p, IsOk());
  auto count = [&] {
    auto text = ReadFile(id, token_, "count");
    int n = -1;
    return text.ok() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &n) ? n : -1;
  };
  ASSERT_TRUE(testing::WaitUntil([&] { return count() >= 3; }, absl::Seconds(10)));
  auto paused = GetSandbox(id, true);
  if (!paused.ok() && absl::StrContains(paused.status().message(), "freezer")) {
    GTEST_SKIP() << paused.status();  // a host without a cgroup freezer cannot pause
  }
  ASSERT_THAT(paused, IsOk());
  EXPECT_EQ(paused->state(), v1::SANDBOX_STATE_PAUSED);
  const int frozen_at = count();
  // Proving that nothing happens takes a window of time: 15 turns of the loop, were it running.
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(count(), frozen_at);
  EXPECT_THAT(Exec(id, token_, "true").status, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("is paused")));
  EXPECT_THAT(GetSandbox(id, true), IsOk());  // again: nothing changes
  auto resumed = GetSandbox(id, false);
  ASSERT_THAT(resumed, IsOk());
  EXPECT_EQ(resumed->state(), v1::SANDBOX_STATE_READY);
  ASSERT_TRUE(testing::WaitUntil([&] { return count() > frozen_at + 2; }, absl::Seconds(10)));
  auto sb = GetSandbox(id);
  ASSERT_THAT(sb, IsOk());
  // Measured where the cgroup counts CPU time and memory: v2 with its memory controller, or v1's cpuacct and
  // memory hierarchies (a container's partial cgroups may have a freezer without them).
  const auto& controllers = sb->protections().cgroup_controllers();
  auto has = [&](const char* c) { return std::find(controllers.begin(), controllers.end(), c) != controllers.end(); };
  const bool counts = has("memory") && (sb->protections().cgroup() == v1::CGROUP_VERSION_V2 || has("cpuacct"));
  EXPECT_EQ(sb->usage().measured(), counts) << sb->protections().DebugString();
  if (sb->usage().measured()) {
    EXPECT_GT(sb->usage().cpu_time().nanos() + sb->usage().cpu_time().seconds(), 0);
    EXPECT_GT(sb->usage().memory_bytes(), 0u);
    EXPECT_GE(sb->usage().pids(), 2u);  // the loop's shell and its sleep
    EXPECT_GE(sb->usage().cpu_count(), 1u);
    EXPECT_GT(sb->usage().memory_limit_bytes(), sb->usage().memory_bytes());
  }
  // Paused, KillAllProcesses still kills (thawing it first: a frozen v1 process dies only once thawed).
  ASSERT_THAT(GetSandbox(id, true), IsOk());
  {
    grpc::ClientContext kill_ctx;
    Prepare(kill_ctx, token_);
    v1::KillAllProcessesRequest kill;
    kill.set_sandbox_id(id);
    v1::KillAllProcessesResponse killed;
    ASSERT_TRUE(stub_->KillAllProcesses(&kill_ctx, kill, &killed).ok());
    EXPECT_GE(killed.killed(), 1u);
    EXPECT_EQ(GetSandbox(id)->state(), v1::SANDBOX_STATE_READY);
    // The loop is gone: its process is listed as ended (killed).
    ASSERT_TRUE(testing::WaitUntil(
        [&] {
          auto listed = ListProcesses(id);
          return listed.ok() && listed->processes_size() >= 1 &&
                 listed->processes(0).state() == v1::PROCESS_STATE_EXITED;
        },
        absl::Seconds(10)));
    EXPECT_EQ(ListProcesses(id)->processes(0).process_id(), p->process_id());
  }
  // Paused again, with a process, it deletes: its frozen processes die with it.
  ASSERT_THAT(StartProcess(id, "exec sleep 60", "logs/sleep.log"), IsOk());
  ASSERT_THAT(GetSandbox(id, true), IsOk());
  grpc::ClientContext ctx;
  Prepare(ctx, token_);
  v1::DeleteSandboxRequest del;
  del.set_sandbox_id(id);
  v1::DeleteSandboxResponse gone;
  ASSERT_TRUE(stub_->DeleteSandbox(&ctx, del, &gone).ok());
  EXPECT_TRUE(gone.existed());
  EXPECT_THAT(GetSandbox(id), StatusIs(absl::StatusCode::kNotFound));
}

v1::PrepareTemplateRequest TemplateRequest(const std::string& key, const std::string& setup) {
  v1::PrepareTemplateRequest req;
  req.set_key(key);
  v1::InlineFile* f = req.add_files();
  f->set_path("/workspace/run.sh");
  f->set_content("#!/bin/sh\necho run\n");
  f->set_permissions(0755);
  req.add_task_paths("/workspace");
  *req.add_setup_commands() = Shell(setup);
  return req;
}

TEST_F(SandboxProcessesTest, TemplatesBuildOnceAndCloneIntoHomesTheSandboxOwns) {
  const v1::PrepareTemplateRequest req =
      TemplateRequest("sha256-t1", "sleep 1; mkdir -p /workspace/lib && echo built > /workspace/lib/marker");
  // Four concurrent prepares of one key: one build, four READY answers.
  std::vector<absl::StatusOr<v1::Template>> results(4, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back([&, i] { results[static_cast<size_t>(i)] = PrepareTemplate(req); });
  for (auto& t : threads) t.join();
  for (const auto& t : results) {
    ASSERT_THAT(t, IsOk());
    EXPECT_EQ(t->state(), v1::TEMPLATE_STATE_READY);
    EXPECT_EQ(t->content_digest(), results[0]->content_digest());
  }
  EXPECT_THAT(MetricValue("corral_sandbox_host_template_build_seconds_count", {{"outcome", "ready"}}), IsOkAndHolds(1));
  EXPECT_GT(results[0]->size_bytes(), 0u);

  v1::SandboxSpec spec;
  spec.set_template_key("sha256-t1");
  auto r = Create(2, spec);
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ(r->sandboxes_size(), 2);
  for (const auto& sb : r->sandboxes()) {
    ExecResult e = Exec(sb.sandbox().sandbox_id(), sb.capability_token(),
                        "cat /workspace/lib/marker; /workspace/run.sh; echo mine >> /workspace/lib/marker; "
                        "stat -c %u /workspace/lib/marker");
    ASSERT_THAT(e.status, IsOk());
    EXPECT_EQ(e.out, absl::StrCat("built\nrun\n", sb.sandbox().uid(), "\n")) << e.err;
  }
  // Clones are independent: one sandbox's write is not in the other's copy.
  EXPECT_THAT(ReadFile(r->sandboxes(1).sandbox().sandbox_id(), token_, "/workspace/lib/marker"),
              IsOkAndHolds("built\nmine\n"));

  auto listed = ListTemplates();
  ASSERT_THAT(listed, IsOk());
  ASSERT_EQ(listed->templates_size(), 1);
  EXPECT_EQ(listed->templates(0).sandboxes(), 2u);

  // The same key with other content is a conflict; deleting makes later creates fail at once.
  EXPECT_THAT(PrepareTemplate(TemplateRequest("sha256-t1", "true")), StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(DeleteTemplate("sha256-t1"), IsOk());
  EXPECT_THAT(Create(1, spec), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(DeleteTemplate("sha256-t1"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(SandboxProcessesTest, AFailedTemplateSetupNamesTheCommandAndKeepsNothing) {
  auto t = PrepareTemplate(TemplateRequest("sha256-bad", "echo compiling; echo 'error: no cc' >&2; exit 7"));
  EXPECT_THAT(t, StatusIs(absl::StatusCode::kFailedPrecondition,
                          ::testing::AllOf(HasSubstr("setup_commands[0]"), HasSubstr("exited with code 7"),
                                           HasSubstr("error: no cc"))));
  auto listed = ListTemplates();
  ASSERT_THAT(listed, IsOk());
  EXPECT_EQ(listed->templates_size(), 0);
  // The build sandbox is gone and its slot is free again.
  auto r = Create(4);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->sandboxes_size(), 4);

  v1::PrepareTemplateRequest bad = TemplateRequest("has/slash", "true");
  EXPECT_THAT(PrepareTemplate(bad), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key")));
  bad = TemplateRequest("sha256-x", "true");
  bad.mutable_files(0)->set_path("../../etc/passwd");
  EXPECT_THAT(PrepareTemplate(bad), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(SandboxProcessesTest, AStalledReaderOf64MiBKeepsTheHostsMemoryBounded) {
  auto r = Create(1);
  ASSERT_THAT(r, IsOk());
  const std::string id = r->sandboxes(0).sandbox().sandbox_id();
  const pid_t host = service_->process.pid();
  const int64_t before = HostRssKib(host);
  grpc::ClientContext ctx;
  Prepare(ctx, token_);
  v1::ExecRequest req;
  req.set_sandbox_id(id);
  *req.mutable_command() = Shell("exec head -c 67108864 /dev/zero");
  auto reader = stub_->Exec(&ctx, req);
  v1::ExecEvent ev;
  ASSERT_TRUE(reader->Read(&ev));  // started
  ASSERT_TRUE(ev.has_started());
  // Stop reading: the process blocks on its pipe once the host's bounded buffer and gRPC's window are full.
  const std::string wchan = absl::StrCat("/proc/", ev.started().pid(), "/wchan");
  std::string where;
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        std::ifstream in(wchan);
        where.clear();
        in >> where;
        return where.find("pipe_write") != std::string::npos;  // "pipe_write", or "anon_pipe_write" (6.x)
      },
      absl::Seconds(20)))
      << "the writer never blocked (wchan '" << where << "'): output is not bounded";
  const int64_t stalled = HostRssKib(host);
  uint64_t bytes = 0;
  v1::ExitStatus exit;
  while (reader->Read(&ev)) {
    bytes += ev.stdout().size();
    if (ev.has_exited()) exit = ev.exited();
  }
  ASSERT_THAT(FromGrpcStatus(reader->Finish()), IsOk());
  EXPECT_EQ(bytes, 64u << 20);  // nothing lost
  EXPECT_EQ(exit.stdout_bytes(), 64u << 20);
  EXPECT_LT(stalled - before, 32 * 1024) << "host RSS grew from " << before << " KiB to " << stalled << " KiB";
}

TEST_F(SandboxProcessesTest, ProxyOnlyAllowsConnectsToItsPortsAndNothingElse) {
  Listener proxy = Listen();
  Listener other = Listen();
  ASSERT_NE(proxy.port, 0);
  ASSERT_NE(other.port, 0);
  v1::SandboxSpec spec;
  spec.set_network_policy(v1::NETWORK_POLICY_PROXY_ONLY);
  spec.add_allowed_ports(proxy.port);
  auto r = Create(1, spec);
  ASSERT_THAT(r, IsOk());
  const auto& sb = r->sandboxes(0);
  ExecResult e = Exec(sb.sandbox().sandbox_id(), sb.capability_token(),
                      absl::StrCat("bash -c 'echo > /dev/tcp/127.0.0.1/", proxy.port, "' && echo proxy-ok; ",
                                   "bash -c 'echo > /dev/tcp/127.0.0.1/", other.port, "' || echo other-refused"));
  ASSERT_THAT(e.status, IsOk());
  EXPECT_THAT(e.out, HasSubstr("proxy-ok"));
  EXPECT_THAT(e.out, HasSubstr("other-refused"));
  EXPECT_THAT(e.err, HasSubstr("Permission denied"));
  // Ports without proxy_only, or none with it, are refused up front.
  v1::SandboxSpec no_ports;
  no_ports.set_network_policy(v1::NETWORK_POLICY_PROXY_ONLY);
  EXPECT_THAT(Create(1, no_ports), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(SandboxProcessesTest, NoneGivesALoopbackOfItsOwnWhereTheSandboxMayListen) {
  Listener host = Listen();  // on the host's loopback
  ASSERT_NE(host.port, 0);
  v1::SandboxSpec spec;
  spec.set_network_policy(v1::NETWORK_POLICY_NONE);
  auto r = Create(1, spec);
  ASSERT_THAT(r, IsOk());
  const auto& sb = r->sandboxes(0);
  EXPECT_TRUE(sb.sandbox().protections().network_namespace());
  EXPECT_FALSE(sb.sandbox().protections().tcp_bind_denied());
  // A server in the sandbox listens on the host's port number and answers the sandbox's own client; the host's
  // listener on that port is not reachable from inside.
  ExecResult e = Exec(sb.sandbox().sandbox_id(), sb.capability_token(),
                      absl::StrCat("python3 -c '\nimport socket\ns=socket.socket(); s.bind((\"127.0.0.1\", ", host.port,
                                   ")); s.listen(1)\nc=socket.create_connection((\"127.0.0.1\", ", host.port,
                                   "))\na,_=s.accept(); a.sendall(b\"own\"); print(c.recv(3).decode())'"));
  ASSERT_THAT(e.status, IsOk());
  EXPECT_EQ(e.out, "own\n") << e.err;
  fcntl(host.fd.get(), F_SETFL, O_NONBLOCK);
  EXPECT_EQ(accept(host.fd.get(), nullptr, nullptr), -1) << "the sandbox reached the host's loopback";
}

}  // namespace
}  // namespace corral
