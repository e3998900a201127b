// envd's core over an in-memory scheduler (leases) and host, on a FakeClock polled on the test's thread: each
// call as the e2b SDK makes it (its JSON, read with protobuf's JSON mapping) and each event as the SDK reads it.
#include "services/sandbox_api/e2b/envd.h"

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/sandbox_api/e2b/envd_http.h"
#include "services/sandbox_api/testing/polled_sandbox.h"

namespace corral::sandbox_api {
namespace {

using sandbox::FakeInteractive;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using testing_support::RecordedStream;

class EnvdTest : public testing_support::PolledSandboxTest {
 protected:
  void SetUp() override {
    auto lease = LeaseOne();
    ASSERT_TRUE(lease.ok()) << lease.status();
    lease_ = *lease;
    auto opened = Run(envd_.Open(lease_.lease_id(), "alice"));
    ASSERT_TRUE(opened.ok()) << opened.status();
    sandbox_ = *opened;
  }

  template <typename M>
  static M Parse(const std::string& json) {
    M m;
    EXPECT_TRUE(FromEnvdJson(json, &m).ok()) << json;
    return m;
  }
  // Start as the SDK sends it, running in the background; the host's process it started.
  std::future<absl::Status> StartProcess(const std::string& json, RecordedStream& out) {
    auto done = Spawn(envd_.Start(sandbox_, Parse<envd::StartRequest>(json), absl::Minutes(10), out));
    Poll();
    return done;
  }
  std::shared_ptr<FakeInteractive> Process(size_t i = 0) {
    auto all = host_->interactive();
    return i < all.size() ? all[i] : nullptr;
  }
  static std::string B64(const std::string& s) { return absl::Base64Escape(s); }

  Envd envd_{&leases_, &clock_};
  v1::SandboxLease lease_;
  EnvdSandbox sandbox_;
};

TEST_F(EnvdTest, StartRunsTheCommandAndStreamsStartOutputAndEnd) {
  RecordedStream out;
  auto done = StartProcess(
      R"({"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],"envs":{"A":"1"},"cwd":"work"},"tag":"t1",)"
      R"("newerSdkField":{"x":1}})",
      out);
  ASSERT_NE(Process(), nullptr);
  const v1::Command& command = Process()->start().command();
  EXPECT_THAT(command.argv(), ElementsAre("/bin/bash", "-l", "-c", "echo hi"));
  EXPECT_EQ(Process()->env("A"), "1");
  EXPECT_EQ(command.cwd(), "/home/user/work");  // relative to the E2B user's home
  EXPECT_EQ(Process()->start().sandbox_id(), lease_.sandbox_id());
  EXPECT_TRUE(Process()->stdin_closed());  // stdin was not asked for
  EXPECT_EQ(envd_.processes(), 1u);

  Process()->Emit("hi\n");
  Poll();
  Process()->Exit(0);
  Poll();
  ASSERT_TRUE(Done(done));
  EXPECT_TRUE(done.get().ok());
  EXPECT_THAT(out.events, ElementsAre(R"({"event":{"start":{"pid":1000}}})",
                                      R"({"event":{"data":{"stdout":")" + B64("hi\n") + R"("}}})",
                                      R"({"event":{"end":{"exited":true,"status":"exit status 0"}}})"));
  EXPECT_EQ(envd_.processes(), 0u);  // an exited process is forgotten
}

// A lease this replica just made (or forked, or resumed) is kept: the first command does not ask the scheduler
// for it again. A paused one is not kept (Open must say it is paused).
TEST_F(EnvdTest, ARememberedLeaseOpensWithoutAskingTheScheduler) {
  v1::SandboxLease made = lease_;
  made.set_lease_id("ls-made-here");  // the scheduler (FakeLeases) has no such lease
  EXPECT_EQ(Run(envd_.Open("ls-made-here", "alice")).status().code(), absl::StatusCode::kUnavailable);
  envd_.Remember(made);
  auto opened = Run(envd_.Open("ls-made-here", "alice"));
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(opened->lease.sandbox_id(), lease_.sandbox_id());
  EXPECT_FALSE(Run(envd_.Open("ls-made-here", "bob")).ok());  // another owner's is still not theirs
  made.set_lease_id("ls-paused");
  made.set_paused(true);
  envd_.Remember(made);
  EXPECT_EQ(Run(envd_.Open("ls-paused", "alice")).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(EnvdTest, ANonZeroExitIsAnErrorInTheEndEvent) {
  RecordedStream out;
  auto done = StartProcess(R"({"process":{"cmd":"false"}})", out);
  EXPECT_EQ(Process()->start().command().cwd(), "/home/user");  // no cwd: the home
  Process()->Exit(3);
  Poll();
  ASSERT_TRUE(Done(done));
  EXPECT_EQ(out.events.back(),
            R"({"event":{"end":{"exitCode":3,"exited":true,"status":"exit status 3","error":"exit status 3"}}})");
}

// On a sandbox on the host's filesystem a process starts fork-ready (a fork carries it into the children); a host
// that cannot carry it starts it again as any process; with e2b_fork_ready off, none is.
TEST_F(EnvdTest, ProcessesStartForkReadyWhereTheHostCanCarryThem) {
  RecordedStream out[3];
  auto first = StartProcess(R"({"process":{"cmd":"sleep","args":["60"]}})", out[0]);
  ASSERT_NE(Process(0), nullptr);
  EXPECT_TRUE(Process(0)->start().command().fork_ready());
  host_->FailInteractive(absl::FailedPreconditionError("this host cannot carry processes"));
  auto second = StartProcess(R"({"process":{"cmd":"sleep","args":["60"]}})", out[1]);
  ASSERT_NE(Process(1), nullptr);
  EXPECT_FALSE(Process(1)->start().command().fork_ready());
  Envd plain{&leases_, &clock_, E2bOptions{.fork_ready = false}};
  auto opened = Run(plain.Open(lease_.lease_id(), "alice"));
  ASSERT_TRUE(opened.ok()) << opened.status();
  auto third = Spawn(
      plain.Start(*opened, Parse<envd::StartRequest>(R"({"process":{"cmd":"sleep"}})"), absl::Minutes(10), out[2]));
  Poll();
  ASSERT_NE(Process(2), nullptr);
  EXPECT_FALSE(Process(2)->start().command().fork_ready());
  for (size_t i = 0; i < 3; ++i) Process(i)->Exit(0);
  Poll();
  EXPECT_TRUE(Done(first) && Done(second) && Done(third));
}

TEST_F(EnvdTest, StartRefusesAPtyAnEmptyCommandAndAStoppedSandboxStartsNothing) {
  RecordedStream out;
  EXPECT_EQ(Run(envd_.Start(sandbox_, Parse<envd::StartRequest>(R"({"process":{"cmd":"sh"},"pty":{}})"),
                            absl::Minutes(1), out))
                .code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(
      Run(envd_.Start(sandbox_, Parse<envd::StartRequest>(R"({"process":{"args":["x"]}})"), absl::Minutes(1), out))
          .code(),
      absl::StatusCode::kInvalidArgument);
  host_->FailInteractive(absl::UnavailableError("host gone"));
  EXPECT_EQ(Run(envd_.Start(sandbox_, Parse<envd::StartRequest>(R"({"process":{"cmd":"sh"}})"), absl::Minutes(1), out))
                .code(),
            absl::StatusCode::kUnavailable);
  EXPECT_THAT(host_->interactive(), IsEmpty());
  EXPECT_THAT(out.events, IsEmpty());
  EXPECT_EQ(envd_.processes(), 0u);
}

TEST_F(EnvdTest, AQuietProcessSendsKeepalivesOnTheClock) {
  RecordedStream out;
  auto done = StartProcess(R"({"process":{"cmd":"sleep","args":["100"]}})", out);
  ASSERT_THAT(out.events, SizeIs(1));  // start
  clock_.Advance(Envd::kKeepalive - absl::Seconds(1));
  Poll();
  EXPECT_THAT(out.events, SizeIs(1));
  clock_.Advance(absl::Seconds(1));
  Poll();
  ASSERT_THAT(out.events, SizeIs(2));
  EXPECT_EQ(out.events[1], R"({"event":{"keepalive":{}}})");
  EXPECT_FALSE(Done(done));
  Process()->Exit(0);
  Poll();
  EXPECT_TRUE(Done(done));
}

TEST_F(EnvdTest, ConnectFollowsByPidOrTagFromNowOnUntilItsTimeout) {
  RecordedStream start;
  auto started = StartProcess(R"({"process":{"cmd":"server"},"tag":"srv","stdin":true})", start);
  Process()->Emit("early\n");
  Poll();
  RecordedStream by_tag;
  auto connected = Spawn(
      envd_.Connect(sandbox_, Parse<envd::ConnectRequest>(R"({"process":{"tag":"srv"}})"), absl::Minutes(1), by_tag));
  Poll();
  Process()->Emit("late\n");
  Poll();
  EXPECT_THAT(by_tag.events, ElementsAre(R"({"event":{"start":{"pid":1000}}})",
                                         R"({"event":{"data":{"stdout":")" + B64("late\n") + R"("}}})"));
  // The Connect stream ends at its timeout; the process lives on.
  clock_.Advance(absl::Minutes(1));
  Poll();
  ASSERT_TRUE(Done(connected));
  EXPECT_EQ(connected.get().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(envd_.processes(), 1u);
  EXPECT_FALSE(Done(started));

  RecordedStream by_pid;
  auto again = Spawn(
      envd_.Connect(sandbox_, Parse<envd::ConnectRequest>(R"({"process":{"pid":1000}})"), absl::Minutes(1), by_pid));
  Poll();
  Process()->Exit(0);
  Poll();
  ASSERT_TRUE(Done(again) && Done(started));
  EXPECT_TRUE(again.get().ok());
  EXPECT_THAT(by_pid.events, SizeIs(2));  // start, end
  // Another Connect finds nothing: the process is gone.
  RecordedStream late;
  EXPECT_EQ(
      Run(envd_.Connect(sandbox_, Parse<envd::ConnectRequest>(R"({"process":{"pid":1000}})"), absl::Minutes(1), late))
          .code(),
      absl::StatusCode::kNotFound);
}

TEST_F(EnvdTest, AStreamWhoseReaderLeftEndsAndTheProcessRunsOn) {
  RecordedStream out;
  out.gone = true;
  auto done = StartProcess(R"({"process":{"cmd":"server"}})", out);
  Process()->Emit("x");
  Poll();
  ASSERT_TRUE(Done(done));
  EXPECT_EQ(done.get().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(envd_.processes(), 1u);
  EXPECT_FALSE(Process()->stopped());
}

TEST_F(EnvdTest, SendInputWritesStdinAndCloseStdinClosesIt) {
  RecordedStream out;
  auto done = StartProcess(R"({"process":{"cmd":"cat"},"stdin":true})", out);
  EXPECT_FALSE(Process()->stdin_closed());
  auto sent =
      Run(envd_.SendInput(sandbox_, Parse<envd::SendInputRequest>(R"({"process":{"pid":1000},"input":{"stdin":")" +
                                                                  B64("abc\n") + "\"}}")));
  ASSERT_TRUE(sent.ok()) << sent.status();
  EXPECT_THAT(Process()->writes(), ElementsAre("abc\n"));
  EXPECT_EQ(Run(envd_.SendInput(sandbox_, Parse<envd::SendInputRequest>(R"({"process":{"pid":1000},"input":{}})")))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Run(envd_.SendInput(sandbox_,
                                Parse<envd::SendInputRequest>(R"({"process":{"pid":1000},"input":{"pty":"AA=="}})")))
                .status()
                .code(),
            absl::StatusCode::kUnimplemented);
  ASSERT_TRUE(Run(envd_.CloseStdin(sandbox_, Parse<envd::CloseStdinRequest>(R"({"process":{"pid":1000}})"))).ok());
  EXPECT_TRUE(Process()->stdin_closed());
  Process()->Exit(0);
  Poll();
}

TEST_F(EnvdTest, SendSignalSignalsTheProcessAndItsEndSaysWhich) {
  host_->OnInteractive([](const v1::ExecRequest&) {
    return FakeInteractive::Script{.on_signal = [](FakeInteractive& p, int signal) { p.KillWith(signal); }};
  });
  RecordedStream out;
  auto done = StartProcess(R"({"process":{"cmd":"sleep"}})", out);
  auto unspecified =
      Run(envd_.SendSignal(sandbox_, Parse<envd::SendSignalRequest>(R"({"process":{"pid":1000},"signal":0})")));
  EXPECT_EQ(unspecified.status().code(), absl::StatusCode::kInvalidArgument);
  auto other = Run(
      envd_.SendSignal(sandbox_, Parse<envd::SendSignalRequest>(R"({"process":{"pid":7},"signal":"SIGNAL_SIGKILL"})")));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(other.status().message(), HasSubstr("pid 7"));
  EXPECT_THAT(Process()->signals(), IsEmpty());

  auto sent = Run(envd_.SendSignal(
      sandbox_, Parse<envd::SendSignalRequest>(R"({"process":{"pid":1000},"signal":"SIGNAL_SIGTERM"})")));
  ASSERT_TRUE(sent.ok()) << sent.status();
  EXPECT_THAT(Process()->signals(), ElementsAre(15));
  Poll();
  ASSERT_TRUE(Done(done));
  EXPECT_EQ(out.events.back(),
            R"({"event":{"end":{"exitCode":-1,"status":"signal: terminated","error":"signal: terminated"}}})");
}

TEST_F(EnvdTest, ListShowsTheSandboxsRunningProcessesWithTheirConfigAndTag) {
  RecordedStream a, b;
  auto first = StartProcess(R"({"process":{"cmd":"a","args":["1"],"envs":{"K":"v"}},"tag":"one"})", a);
  auto second = StartProcess(R"({"process":{"cmd":"b","cwd":"/tmp"}})", b);
  auto list = Run(envd_.List(sandbox_, envd::ListRequest()));
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(ToEnvdJson(*list), R"({"processes":[{"config":{"cmd":"a","args":["1"],"envs":{"K":"v"}},"pid":1000,)"
                               R"("tag":"one"},{"config":{"cmd":"b","cwd":"/tmp"},"pid":1001}]})");
  // Another sandbox of the same host lists none of them.
  auto other_lease = LeaseOne();
  ASSERT_TRUE(other_lease.ok());
  auto other = Run(envd_.Open(other_lease->lease_id(), "alice"));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(Run(envd_.List(*other, envd::ListRequest()))->processes_size(), 0);
  Process(0)->Exit(0);
  Process(1)->Exit(0);
  Poll();
}

TEST_F(EnvdTest, StatListDirAndMakeDirAnswerEntriesAtE2bPaths) {
  host_->WriteSandboxFile(lease_.sandbox_id(), "/home/user/notes.txt", "hello");
  host_->WriteSandboxFile(lease_.sandbox_id(), "/home/user/src/a/b.py", "x");
  auto stat = Run(envd_.Stat(sandbox_, Parse<envd::StatRequest>(R"({"path":"notes.txt"})")));
  ASSERT_TRUE(stat.ok()) << stat.status();
  EXPECT_EQ(stat->entry().path(), "/home/user/notes.txt");
  EXPECT_EQ(stat->entry().type(), envd::FILE_TYPE_FILE);
  EXPECT_THAT(ToEnvdJson(*stat), HasSubstr(R"("size":"5")"));  // int64 as the JSON mapping writes it
  EXPECT_EQ(Run(envd_.Stat(sandbox_, Parse<envd::StatRequest>(R"({"path":"nope"})"))).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Run(envd_.Stat(sandbox_, Parse<envd::StatRequest>("{}"))).status().code(),
            absl::StatusCode::kInvalidArgument);

  auto shallow = Run(envd_.ListDir(sandbox_, Parse<envd::ListDirRequest>(R"({"path":"/home/user"})")));
  ASSERT_TRUE(shallow.ok());
  std::vector<std::string> paths;
  for (const auto& e : shallow->entries()) paths.push_back(e.path());
  EXPECT_THAT(paths, ElementsAre("/home/user/notes.txt", "/home/user/src"));
  auto deep = Run(envd_.ListDir(sandbox_, Parse<envd::ListDirRequest>(R"({"path":"/home/user","depth":3})")));
  ASSERT_TRUE(deep.ok());
  EXPECT_EQ(deep->entries_size(), 4);  // notes.txt, src, src/a, src/a/b.py

  auto made = Run(envd_.MakeDir(sandbox_, Parse<envd::MakeDirRequest>(R"({"path":"out"})")));
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(made->entry().type(), envd::FILE_TYPE_DIRECTORY);
  EXPECT_EQ(Run(envd_.MakeDir(sandbox_, Parse<envd::MakeDirRequest>(R"({"path":"out"})"))).status().code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(Run(envd_.Remove(sandbox_, Parse<envd::RemoveRequest>(R"({"path":"src"})"))).ok());
  EXPECT_EQ(Run(envd_.Stat(sandbox_, Parse<envd::StatRequest>(R"({"path":"src/a/b.py"})"))).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(EnvdTest, WatchDirReportsCreatesWritesAndRemovesOnTheClock) {
  host_->WriteSandboxFile(lease_.sandbox_id(), "/home/user/w/old.txt", "1");
  RecordedStream out;
  auto done = Spawn(envd_.WatchDir(sandbox_, Parse<envd::WatchDirRequest>(R"({"path":"w","includeEntry":true})"),
                                   absl::Seconds(10), out));
  Poll();
  ASSERT_THAT(out.events, ElementsAre(R"({"start":{}})"));
  host_->WriteSandboxFile(lease_.sandbox_id(), "/home/user/w/new.txt", "22");
  host_->WriteSandboxFile(lease_.sandbox_id(), "/home/user/w/old.txt", "333");
  clock_.Advance(absl::Milliseconds(200));
  Poll();
  ASSERT_THAT(out.events, SizeIs(3));
  EXPECT_THAT(out.events[1], HasSubstr(R"({"filesystem":{"name":"new.txt","type":"EVENT_TYPE_CREATE","entry":{)"));
  EXPECT_THAT(out.events[2], HasSubstr(R"({"filesystem":{"name":"old.txt","type":"EVENT_TYPE_WRITE")"));
  ASSERT_TRUE(Run(host_->Remove(lease_.sandbox_id(), "/home/user/w/new.txt", false, {})).ok());
  clock_.Advance(absl::Milliseconds(200));
  Poll();
  ASSERT_THAT(out.events, SizeIs(4));
  EXPECT_EQ(out.events[3], R"({"filesystem":{"name":"new.txt","type":"EVENT_TYPE_REMOVE"}})");
  // Quiet for the keepalive period: a keepalive; then the watch ends at its timeout.
  clock_.Advance(Envd::kKeepalive);
  Poll();
  EXPECT_EQ(out.events.back(), R"({"keepalive":{}})");
  clock_.Advance(absl::Seconds(10));
  Poll();
  ASSERT_TRUE(Done(done));
  EXPECT_TRUE(done.get().ok());
}

TEST_F(EnvdTest, WatchingAMissingDirectoryFailsBeforeTheStreamStarts) {
  RecordedStream out;
  auto s =
      Run(envd_.WatchDir(sandbox_, Parse<envd::WatchDirRequest>(R"({"path":"/nowhere"})"), absl::Seconds(10), out));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(out.events, IsEmpty());
}

TEST_F(EnvdTest, UploadWritesEveryFileOrNoneAndDownloadReadsThem) {
  auto refused = Run(envd_.Upload(sandbox_, {{"a.txt", "A"}, {"", "nameless"}}));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  auto twice = Run(envd_.Upload(sandbox_, {{"a.txt", "A"}, {"/home/user/a.txt", "B"}}));
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(twice.status().message(), HasSubstr("given twice"));
  EXPECT_EQ(Run(envd_.Download(sandbox_, "a.txt")).status().code(), absl::StatusCode::kNotFound);  // none written

  auto written = Run(envd_.Upload(sandbox_, {{"a.txt", "A"}, {"/tmp/b.bin", std::string("\0\1", 2)}}));
  ASSERT_TRUE(written.ok()) << written.status();
  ASSERT_THAT(*written, SizeIs(2));
  EXPECT_EQ((*written)[0].path(), "/home/user/a.txt");
  EXPECT_EQ((*written)[1].name(), "b.bin");
  EXPECT_EQ(*Run(envd_.Download(sandbox_, "/home/user/a.txt")), "A");
  EXPECT_EQ(*Run(envd_.Download(sandbox_, "/tmp/b.bin")), std::string("\0\1", 2));
  EXPECT_EQ(Run(envd_.Download(sandbox_, "")).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Run(envd_.Upload(sandbox_, {})).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(EnvdTest, ALostLeaseIsForgottenAndTheSandboxIsNotRunning) {
  // The lease ended (another replica killed the sandbox): this replica's cached lease fails on the host...
  ASSERT_TRUE(Run(leases_.Release(lease_.lease_id(), "alice")).ok());
  auto stat = Run(envd_.Stat(sandbox_, Parse<envd::StatRequest>(R"({"path":"x"})")));
  EXPECT_EQ(stat.status().code(), absl::StatusCode::kNotFound);
  // ...and is dropped, so the next call asks the scheduler, which no longer has it.
  auto reopened = Run(envd_.Open(lease_.lease_id(), "alice"));
  EXPECT_EQ(reopened.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(reopened.status().message(), HasSubstr("is not running"));
}

TEST_F(EnvdTest, OpenCachesALeaseForTenSecondsAndFreshAsksAgain) {
  ASSERT_TRUE(Run(leases_.Release(lease_.lease_id(), "alice")).ok());
  EXPECT_TRUE(Run(envd_.Open(lease_.lease_id(), "alice")).ok());  // from the cache
  EXPECT_EQ(Run(envd_.Open(lease_.lease_id(), "alice", /*fresh=*/true)).status().code(),
            absl::StatusCode::kUnavailable);
  // Another owner never gets it, cached or not.
  EXPECT_EQ(Run(envd_.Open(lease_.lease_id(), "bob")).status().code(), absl::StatusCode::kUnavailable);
}

// A scheduler that cannot be reached (its channel retried already) is not a sandbox that ended: INTERNAL
// ("retry"), never UNAVAILABLE, which the SDK reads as "not running" (SandboxNotFoundError).
TEST_F(EnvdTest, AnUnreachableSchedulerNeverSaysTheSandboxIsNotRunning) {
  for (absl::Status down : {absl::UnavailableError("failed to connect to all addresses"),
                            absl::DeadlineExceededError("Deadline Exceeded")}) {
    envd_.Forget(lease_.lease_id());
    leases_.FailGets(down, 1);
    auto away = Run(envd_.Open(lease_.lease_id(), "alice"));
    EXPECT_EQ(away.status().code(), absl::StatusCode::kInternal);
    EXPECT_THAT(away.status().message(), HasSubstr("may well be running: retry"));
    auto back = Run(envd_.Open(lease_.lease_id(), "alice"));  // once it answers again
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->lease.sandbox_id(), lease_.sandbox_id());
  }
}

TEST_F(EnvdTest, AHostWithoutAChannelOrAClientIsAnErrorNotACrash) {
  envd_.Forget(lease_.lease_id());
  leases_.Unreachable(absl::InvalidArgumentError("host address '' makes no channel"));
  auto unreachable = Run(envd_.Open(lease_.lease_id(), "alice"));
  EXPECT_EQ(unreachable.status().code(), absl::StatusCode::kInvalidArgument);
  leases_.Unreachable(absl::OkStatus());
  leases_.NullHost();
  auto null_host = Run(envd_.Open(lease_.lease_id(), "alice"));
  EXPECT_EQ(null_host.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(null_host.status().message(), HasSubstr("no client for its host"));
}

TEST(EnvdCallerTest, TheAccessTokenNamesTheOwnerAndBasicAuthMustBeWellFormed) {
  api::E2bAuth auth(*TokenSigner::FromKey(std::string(32, 'k')));
  http::Request r;
  r.set("E2b-Sandbox-Id", "ls-1");
  EXPECT_EQ(EnvdCaller(auth, r).status().code(), absl::StatusCode::kUnauthenticated);  // no token
  r.set("X-Access-Token", auth.AccessToken("alice", "ls-2"));
  EXPECT_EQ(EnvdCaller(auth, r).status().code(), absl::StatusCode::kUnauthenticated);  // another sandbox's
  r.set("X-Access-Token", "garbage");
  EXPECT_EQ(EnvdCaller(auth, r).status().code(), absl::StatusCode::kUnauthenticated);
  r.set("X-Access-Token", auth.AccessToken("alice", "ls-1"));
  EXPECT_EQ(*EnvdCaller(auth, r), "alice");
  r.set("Authorization", "Basic " + absl::Base64Escape("user:"));
  EXPECT_EQ(*EnvdCaller(auth, r), "alice");
  r.set("Authorization", "Basic " + absl::Base64Escape("root:"));
  EXPECT_EQ(*EnvdCaller(auth, r), "alice");  // whether root is served depends on the sandbox (CheckEnvdUser)
  r.set("Authorization", "Bearer x");
  EXPECT_EQ(EnvdCaller(auth, r).status().code(), absl::StatusCode::kUnauthenticated);
}

// Root and other users are served in image sandboxes only: commands run as them (the host resolves the name),
// files are the sandbox's user's or root's; a plain sandbox has its one user.
TEST(EnvdUserTest, RootAndOtherUsersAreServedInImageSandboxesOnly) {
  EXPECT_EQ(EnvdUser("user"), "");
  EXPECT_EQ(EnvdUser(""), "");
  EXPECT_EQ(EnvdUser("root"), "root");
  EnvdSandbox plain, image;
  image.lease.set_image("localhost/debian:12");
  for (EnvdSandbox* s : {&plain, &image}) {
    s->user = "";
    EXPECT_TRUE(CheckEnvdUser(*s, false).ok());
    EXPECT_TRUE(CheckEnvdUser(*s, true).ok());
  }
  plain.user = "root";
  absl::Status refused = CheckEnvdUser(plain, false);
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(refused.message(), HasSubstr("served in sandboxes made from an image"));
  EXPECT_EQ(CheckEnvdUser(plain, true).code(), absl::StatusCode::kPermissionDenied);
  image.user = "root";
  EXPECT_TRUE(CheckEnvdUser(image, false).ok());
  EXPECT_TRUE(CheckEnvdUser(image, true).ok());
  image.user = "agent";
  EXPECT_TRUE(CheckEnvdUser(image, false).ok());
  EXPECT_THAT(CheckEnvdUser(image, true).message(), HasSubstr("run a command as 'agent'"));
}

TEST(EnvdJsonTest, MessagesAreReadAndWrittenWithTheJsonMapping) {
  envd::SendSignalRequest signal;
  ASSERT_TRUE(FromEnvdJson(R"({"process":{"tag":"t"},"signal":"SIGNAL_SIGKILL","unknown":[1]})", &signal).ok());
  EXPECT_EQ(signal.signal(), envd::SIGNAL_SIGKILL);
  EXPECT_EQ(signal.process().tag(), "t");
  ASSERT_TRUE(FromEnvdJson("", &signal).ok());  // an empty body is {}
  EXPECT_EQ(signal.signal(), envd::SIGNAL_UNSPECIFIED);
  // Garbage is refused with the message's name, and leaves nothing half-read that matters.
  // An enum name from a newer SDK reads as unspecified (as connect-go reads it), which SendSignal refuses.
  ASSERT_TRUE(FromEnvdJson(R"({"signal":"SIGNAL_SIGHUP"})", &signal).ok());
  EXPECT_EQ(signal.signal(), envd::SIGNAL_UNSPECIFIED);
  for (const char* bad : {"[", R"({"process":"x"})", "null", R"({"process":{"pid":-1}})"}) {
    envd::SendSignalRequest m;
    absl::Status s = FromEnvdJson(bad, &m);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("SendSignalRequest")) << bad;
  }
  envd::SendInputRequest input;
  EXPECT_FALSE(FromEnvdJson(R"({"input":{"stdin":"not base64!"}})", &input).ok());
  envd::ProcessEvent end;
  end.mutable_end()->set_exit_code(-1);
  EXPECT_EQ(ToEnvdJson(end), R"({"end":{"exitCode":-1}})");
}

}  // namespace
}  // namespace corral::sandbox_api
