// The episode path (driver, runners, verifier) against in-memory hosts, proxy and limiter on a FakeClock: every
// decision the driver makes on the way from a ticket to a result, in milliseconds.
#include "libs/api/proto_digest.h"
#include "services/scheduler/tests/episode_driver_fixture.h"

namespace corral::scheduler {
namespace {

using namespace driver_test;  // NOLINT: the fixture and its helpers
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using ::testing::UnorderedElementsAre;

TEST_F(EpisodeDriverTest, SingleTurnIsRewardedFromTheReplyWithoutASandbox) {
  proxy_->Reply(ChatCompletion("4"));
  const EpisodeTicket ticket = Start(SingleTurn("4"));
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED);
  EXPECT_EQ(r.reward(), 1.0);
  EXPECT_EQ(r.llm_calls(), 1);
  EXPECT_EQ(r.trajectory().call_count(), 1);
  EXPECT_EQ(host().create_calls(), 0);
  // The session was opened with the episode's ids and token capture, closed, and acknowledged once journaled.
  ASSERT_THAT(proxy_->opened(), SizeIs(1));
  EXPECT_EQ(proxy_->opened()[0].env_id(), ticket.env_id);
  EXPECT_TRUE(proxy_->opened()[0].policy().capture_token_ids());
  // The scheduler's own calls carry the task's sampling: not neutralised.
  ASSERT_TRUE(proxy_->opened()[0].policy().has_neutralize_sampling());
  EXPECT_FALSE(proxy_->opened()[0].policy().neutralize_sampling());
  EXPECT_THAT(proxy_->closed(), ::testing::ElementsAre(ticket.env_id));
  EXPECT_THAT(proxy_->acked(), ::testing::ElementsAre(ticket.env_id));
  EXPECT_EQ(limiter_.granted("llm"), 1);
  EXPECT_EQ(limiter_.held("llm"), 0);
  EXPECT_EQ(driver_->running(), 0);
  EXPECT_EQ(finished_, 1);  // the dispatcher was told there is room again
}

TEST_F(EpisodeDriverTest, AWrongAnswerFinishesWithRewardZero) {
  proxy_->Reply(ChatCompletion("5"));
  Start(SingleTurn("4"));
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED);
  EXPECT_EQ(r.reward(), 0.0);
}

TEST_F(EpisodeDriverTest, AgentRunsInASandboxThenTheVerifierDecidesAndTheSandboxIsDeleted) {
  VerifierWrites("0.75");
  Start(Agent());
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  // The agent never called the model through the proxy: no data, whatever the verifier says.
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_NO_DATA);
  const std::vector<v1::SandboxSpec> created = host().created();
  ASSERT_THAT(created, SizeIs(1));
  const v1::SandboxSpec& spec = created[0];
  EXPECT_EQ(spec.network_policy(), v1::NETWORK_POLICY_PROXY_ONLY);
  EXPECT_THAT(spec.allowed_ports(), ::testing::ElementsAre(4000));  // the session's base URL
  // An agent program's session: its sampling knobs are neutralised by the proxy's default, no rules of a harness.
  ASSERT_THAT(proxy_->opened(), SizeIs(1));
  EXPECT_FALSE(proxy_->opened()[0].policy().has_neutralize_sampling());
  EXPECT_THAT(proxy_->opened()[0].policy().role_rules(), IsEmpty());
  ASSERT_THAT(host().execs(), SizeIs(2));
  EXPECT_EQ(host().execs()[0].command().argv(0), "run-agent");
  EXPECT_EQ(host().execs()[0].command().env().at("OPENAI_BASE_URL"), "http://127.0.0.1:4000/v1");
  EXPECT_EQ(Program(host().execs()[1]), "verify");
  EXPECT_THAT(host().live(), IsEmpty());
  EXPECT_THAT(host().deleted(), SizeIs(2)) << "the agent's sandbox and the verifier's fork of it";
  EXPECT_EQ(hosts_->InUse(""), 0u);
}

TEST_F(EpisodeDriverTest, AgentThatCalledTheModelGetsTheVerifiersReward) {
  VerifierWrites("0.75");
  FakeProxy* proxy = proxy_.get();
  host().OnExec([&, proxy](const std::string& sandbox, const v1::ExecRequest& r) {
    // The agent's own call through the proxy, as a harness makes it, with the key it was given.
    if (r.command().argv(0) == "run-agent") proxy->AgentCalled(r.command().env().at("OPENAI_API_KEY"));
    if (Program(r) == "verify") host().WriteSandboxFile(sandbox, "/logs/verifier/reward.txt", "0.75");
    sandbox::ExecOutcome out;
    out.exited = true;
    return out;
  });
  Start(Agent());
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED);
  EXPECT_EQ(r.reward(), 0.75);
  EXPECT_EQ(r.agent_exit_code(), 0);
}

// The agent calls the model; the verifier (`verify`) exits with `exit_code`, writing `reward` unless it is empty.
void ScriptAgentAndVerifier(sandbox::FakeHost& host, FakeProxy* proxy, int exit_code, const std::string& reward) {
  host.OnExec([&host, proxy, exit_code, reward](const std::string& sandbox, const v1::ExecRequest& r) {
    sandbox::ExecOutcome out;
    out.exited = true;
    if (r.command().argv(0) == "run-agent") proxy->AgentCalled(r.command().env().at("OPENAI_API_KEY"));
    if (Program(r) != "verify") return out;
    if (!reward.empty()) host.WriteSandboxFile(sandbox, "/logs/verifier/reward.txt", reward);
    out.exit.set_exit_code(exit_code);
    out.tail = exit_code == 127 ? "bash: tests/test.sh: No such file or directory" : "ok";
    return out;
  });
}

// The default: the verifier runs in a fork of the agent's sandbox (another uid), made once the agent phase has
// ended and deleted after, in a shell that gives it a fresh HOME with Python, pytest and git kept from what the
// agent left; the result says how the reward was decided.
TEST_F(EpisodeDriverTest, TheVerifierRunsInAForkInACleanEnvironmentAndTheResultSaysHowItsRewardWasDecided) {
  ScriptAgentAndVerifier(host(), proxy_.get(), 0, "0.75");
  v1::Task task = Agent();
  task.mutable_verifier()->mutable_command()->set_cwd("/workspace");
  task.mutable_verifier()->add_files()->set_path("tests/test.sh");
  task.mutable_verifier()->add_files()->set_path("tests/data/input.txt");
  Start(task);
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  ASSERT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED) << r.failure_message();
  EXPECT_EQ(r.reward(), 0.75);
  const std::vector<v1::ExecRequest> execs = host().execs();
  ASSERT_THAT(execs, SizeIs(2));
  const v1::ExecRequest& agent = execs.front();
  const v1::ExecRequest& verifier = execs.back();
  EXPECT_EQ(host().fork_calls(), 1);
  EXPECT_NE(verifier.sandbox_id(), agent.sandbox_id()) << "the verifier runs in the fork";
  EXPECT_THAT(host().deleted(), UnorderedElementsAre(agent.sandbox_id(), verifier.sandbox_id()));
  ASSERT_EQ(Program(verifier), "verify");
  EXPECT_EQ(verifier.command().argv(0), "sh");
  EXPECT_THAT(verifier.command().argv(2), HasSubstr("HOME=\"${CORRAL_VERIFIER_HOME:-$HOME/.corral/verifier-home}\""));
  const auto& env = verifier.command().env();
  EXPECT_EQ(env.at("PYTHONSAFEPATH"), "1");
  EXPECT_EQ(env.at("PYTHONNOUSERSITE"), "1");
  EXPECT_EQ(env.at("PYTEST_ADDOPTS"), "--confcutdir=/workspace/tests") << "where all its files are, in its cwd";
  EXPECT_EQ(env.at("GIT_CONFIG_KEY_0"), "core.fsmonitor");
  EXPECT_EQ(env.at("GIT_CONFIG_VALUE_1"), "/dev/null");
  EXPECT_EQ(r.verifier_evidence().isolation(), v1::VERIFIER_ISOLATION_SEPARATE_UID);
  EXPECT_EQ(r.verifier_evidence().reward_source(), "reward.txt");
  EXPECT_EQ(r.verifier_evidence().reward_file_sha256(), Sha256Hex("0.75"));
}

// Both sandboxes are deleted as the attempt ends, and their deletes say what each used: the agent's sandbox is
// the result's usage.sandbox, the verifier's own fork its verifier CPU (none of the agent's).
TEST_F(EpisodeDriverTest, TheVerifiersCpuIsWhatItsOwnForkUsedAsReadByTheForksDelete) {
  auto used = [](absl::Duration cpu) {
    v1::ResourceUsage u;
    u.set_measured(true);
    ToProto(cpu, u.mutable_cpu_time());
    return u;
  };
  host().OnExec([this, &used](const std::string& sandbox, const v1::ExecRequest& r) {
    if (r.command().argv(0) == "run-agent") proxy_->AgentCalled(r.command().env().at("OPENAI_API_KEY"));
    const bool verifier = Program(r) == "verify";
    if (verifier) host().WriteSandboxFile(sandbox, "/logs/verifier/reward.txt", "1");
    host().SetUsage(sandbox, used(verifier ? absl::Seconds(3) : absl::Seconds(5)));
    sandbox::ExecOutcome out;
    out.exited = true;
    return out;
  });
  Start(Agent());
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  ASSERT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED) << r.failure_message();
  EXPECT_EQ(r.verifier_evidence().isolation(), v1::VERIFIER_ISOLATION_SEPARATE_UID);
  EXPECT_THAT(host().deleted(), SizeIs(2));
  EXPECT_EQ(FromProto(r.usage().sandbox().cpu_time()), absl::Seconds(5));
  EXPECT_EQ(FromProto(r.usage().verifier().cpu_time()), absl::Seconds(3));
  EXPECT_FALSE(r.usage().verifier().in_episode_sandbox());
}

// A host with no room for the fork: the default falls back to the agent's sandbox, in a clean environment, and
// says so; a task that insists on a separate uid fails as infra there.
TEST_F(EpisodeDriverTest, WithoutRoomForAForkTheVerifierRunsInTheAgentsSandboxInACleanEnvironment) {
  UseHosts({"host-a"}, /*capacity=*/1);
  ScriptAgentAndVerifier(host(), proxy_.get(), 0, "1");
  Start(Agent());
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  ASSERT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED) << r.failure_message();
  EXPECT_EQ(r.reward(), 1.0);
  EXPECT_EQ(host().fork_calls(), 1);
  EXPECT_EQ(host().execs().back().sandbox_id(), host().execs().front().sandbox_id());
  EXPECT_EQ(host().execs().back().command().env().at("PYTHONSAFEPATH"), "1");
  EXPECT_EQ(r.verifier_evidence().isolation(), v1::VERIFIER_ISOLATION_CLEAN_ENV);
}

TEST_F(EpisodeDriverTest, AVerifierThatMustHaveItsOwnUidFailsAsInfraWhereNoForkFits) {
  UseHosts({"host-a"}, /*capacity=*/1);
  ScriptAgentAndVerifier(host(), proxy_.get(), 0, "1");
  v1::Task task = Agent();
  task.mutable_verifier()->set_isolation(v1::VERIFIER_ISOLATION_SEPARATE_UID);
  Start(task, "b", /*max_attempts=*/1);
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_INFRA) << r.failure_message();
  EXPECT_FALSE(r.has_reward());
  EXPECT_THAT(r.failure_message(), HasSubstr("forking the sandbox for the verifier"));
  EXPECT_THAT(host().execs(), SizeIs(1)) << "no verifier ran";
}

TEST_F(EpisodeDriverTest, ASharedVerifierRunsAsTheTaskSaysAndTheResultSaysSo) {
  ScriptAgentAndVerifier(host(), proxy_.get(), 1, "");
  v1::Task task = Agent();
  task.mutable_verifier()->set_isolation(v1::VERIFIER_ISOLATION_SHARED);
  Start(task);
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  ASSERT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED) << r.failure_message();
  EXPECT_EQ(r.reward(), 0.0);
  const v1::ExecRequest verifier = host().execs().back();
  EXPECT_EQ(verifier.command().argv(0), "verify");
  EXPECT_FALSE(verifier.command().env().contains("PYTHONSAFEPATH"));
  EXPECT_EQ(host().fork_calls(), 0);
  EXPECT_EQ(r.verifier_evidence().isolation(), v1::VERIFIER_ISOLATION_SHARED);
  EXPECT_EQ(r.verifier_evidence().reward_source(), "exit_code");
  EXPECT_EQ(r.verifier_evidence().reward_file_sha256(), "");
}

// Exit 127 with nothing written: the verifier never ran, and that is a broken task, not a reward of 0.
TEST_F(EpisodeDriverTest, AVerifierThatCouldNotRunFailsTheEpisodeInsteadOfRewardingZero) {
  ScriptAgentAndVerifier(host(), proxy_.get(), 127, "");
  Start(Agent(), "b", /*max_attempts=*/1);
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FAILED);
  EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_VERIFIER);
  EXPECT_FALSE(r.has_reward());
  EXPECT_THAT(r.failure_message(), HasSubstr("the verifier could not run (exit 127"));
  EXPECT_THAT(r.failure_message(), HasSubstr("No such file or directory"));
}

TEST_F(EpisodeDriverTest, AVerifierThatExits127AfterWritingItsRewardIsTakenAtItsWord) {
  ScriptAgentAndVerifier(host(), proxy_.get(), 127, "1");
  Start(Agent());
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED) << r.failure_message();
  EXPECT_EQ(r.reward(), 1.0);
}

TEST_F(EpisodeDriverTest, AFullHostIsSkippedAndTheSandboxCreatedOnAnother) {
  UseHosts({"host-a", "host-b"});
  v1::Task task = Agent();
  task.mutable_environment()->add_setup_commands()->add_argv("make");
  // host-a has the task's template, so placement tries it first; it answers "full".
  hosts_->MarkTemplate("host-a", TemplateKey(task.environment()));
  host("host-a").FailCreates(absl::ResourceExhaustedError("full"), 100);
  VerifierWrites("1");
  Start(task);
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.host_address(), "host-b");
  EXPECT_EQ(host("host-a").create_calls(), 1);  // refused once, then marked full until its next HostInfo
  EXPECT_THAT(host("host-b").created(), SizeIs(1));
  EXPECT_THAT(host("host-b").templates(), SizeIs(1));  // built where the sandbox went
  EXPECT_THAT(host("host-a").templates(), IsEmpty());
  EXPECT_EQ(hosts_->InUse(""), 0u);
}

TEST_F(EpisodeDriverTest, AnUnavailableHostIsTriedThreeTimesThenTheAttemptFailsAsInfraAndIsRetried) {
  host().FailCreates(absl::UnavailableError("connection refused"), 3);
  const EpisodeTicket ticket = Start(Agent());
  RunToEnd();
  EXPECT_EQ(host().create_calls(), 3);
  // An infrastructure failure is not the episode's result: the episode is queued again for another attempt.
  EXPECT_THAT(log_.journaled, IsEmpty());
  EXPECT_EQ(table_.QueuedCount(), 1u);
  EXPECT_THAT(log_.run_ended, ::testing::ElementsAre(::testing::Pair(ticket.ids.episode_id(), 2u)));
  EXPECT_THAT(proxy_->closed(), SizeIs(1));
}

TEST_F(EpisodeDriverTest, AnImageThatDoesNotExistIsTheTasksFaultAndNotRetried) {
  host().FailPulls(absl::NotFoundError("no such image"));
  v1::Task task = Agent();
  task.mutable_environment()->set_image("registry.local/missing:1");
  Start(task);
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FAILED);
  EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_AGENT);
  EXPECT_EQ(r.failed_phase(), v1::EPISODE_PHASE_ACQUIRE);
  EXPECT_THAT(r.failure_message(), HasSubstr("pulling image registry.local/missing:1"));
  EXPECT_THAT(host().pulls(), ::testing::ElementsAre("registry.local/missing:1"));
  EXPECT_EQ(host().create_calls(), 0);
  EXPECT_EQ(hosts_->InUse(""), 0u);
}

TEST_F(EpisodeDriverTest, AFailingSetupCommandIsTheTasksFaultInTheSetupPhase) {
  host().FailTemplates(absl::FailedPreconditionError("setup command exited 1"));
  v1::Task task = Agent();
  task.mutable_environment()->add_setup_commands()->add_argv("false");
  Start(task);
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FAILED);
  EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_AGENT);
  EXPECT_EQ(r.failed_phase(), v1::EPISODE_PHASE_SETUP);
  EXPECT_THAT(host().templates(), SizeIs(1));
}

TEST_F(EpisodeDriverTest, NoRoomOnAnyHostTimesOutTheAcquirePhaseAsInfra) {
  UseHosts({"host-a"}, /*capacity=*/1);
  host().HangExecs(true);
  const EpisodeTicket first = Start(Agent(), "first");  // takes the only slot and keeps it
  v1::Task task = Agent();
  ToProto(absl::Seconds(5), task.mutable_timeouts()->mutable_acquire());
  const absl::Time start = clock_.Now();
  Start(task, "second");
  RunUntil([&] { return !log_.journaled.empty(); });
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.ids().batch_id(), "second");
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_TIMEOUT);
  EXPECT_EQ(r.failed_phase(), v1::EPISODE_PHASE_ACQUIRE);
  EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_INFRA);
  // After the acquire timeout of fake time: not at once, not later.
  EXPECT_GE(clock_.Now() - start, absl::Seconds(5));
  EXPECT_LE(clock_.Now() - start, absl::Seconds(6));
  EXPECT_EQ(host().create_calls(), 1);
  first.control->Stop(StopReason::kCancelled, "done");
  RunToEnd();
}

TEST_F(EpisodeDriverTest, AnAgentThatRunsPastItsTimeoutIsKilledAndTimesOutAsTheAgentsFault) {
  host().HangExecs(true);
  const absl::Time start = clock_.Now();
  Start(Agent(absl::Seconds(30)));
  RunToEnd(absl::Seconds(1));
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_TIMEOUT);
  EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_AGENT);
  EXPECT_EQ(r.failed_phase(), v1::EPISODE_PHASE_AGENT);
  EXPECT_GE(clock_.Now() - start, absl::Seconds(30));
  EXPECT_LE(clock_.Now() - start, absl::Seconds(32));
  EXPECT_THAT(host().live(), IsEmpty());
}

TEST_F(EpisodeDriverTest, PausedGenerationDoesNotCountAgainstTheAgentsTimeout) {
  host().HangExecs(true);
  const absl::Time start = clock_.Now();
  Start(Agent(absl::Seconds(30)));
  Settle();
  clock_.Advance(absl::Seconds(10));
  pauses_.Set(true, clock_.Now());
  clock_.Advance(absl::Seconds(20));  // 20 s paused: the agent has 20 s left when generation resumes
  Settle();
  pauses_.Set(false, clock_.Now());
  RunToEnd(absl::Seconds(1));
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_TIMEOUT);
  EXPECT_EQ(r.failed_phase(), v1::EPISODE_PHASE_AGENT);
  EXPECT_THAT(r.failure_message(), HasSubstr("not counting 20s paused"));
  EXPECT_GE(clock_.Now() - start, absl::Seconds(50));
  EXPECT_LE(clock_.Now() - start, absl::Seconds(52));
}

TEST_F(EpisodeDriverTest, ACancelMidAgentEndsCancelledAndCleansUp) {
  host().HangExecs(true);
  const EpisodeTicket ticket = Start(Agent());
  Settle();
  clock_.Advance(absl::Seconds(3));
  Settle();
  ASSERT_THAT(host().live(), SizeIs(1));
  ticket.control->Stop(StopReason::kCancelled, "the trainer cancelled");
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_CANCELLED);
  EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_UNSPECIFIED);
  EXPECT_EQ(r.failure_message(), "the trainer cancelled");
  EXPECT_THAT(host().live(), IsEmpty());
  EXPECT_THAT(proxy_->closed(), ::testing::ElementsAre(ticket.env_id));
  EXPECT_EQ(clock_.Now() - absl::FromUnixSeconds(1'700'000'000), absl::Seconds(3));  // at once, not at a timeout
}

TEST_F(EpisodeDriverTest, ALostHostEndsTheAttemptAsInfraAndTheEpisodeIsRetried) {
  host().HangExecs(true);
  const EpisodeTicket ticket = Start(Agent());
  Settle();
  ticket.control->Stop(StopReason::kHostLost, "host host-a stopped answering");
  RunToEnd();
  EXPECT_THAT(log_.journaled, IsEmpty());
  EXPECT_EQ(table_.QueuedCount(), 1u);
}

TEST_F(EpisodeDriverTest, AProxyRestartingIsWaitedForWithinTheOpenDeadline) {
  proxy_->FailOpens(absl::UnavailableError("restarting"), 3);
  proxy_->Reply(ChatCompletion("4"));
  Start(SingleTurn("4"));
  RunToEnd();
  EXPECT_EQ(Journaled().status(), v1::EPISODE_STATUS_FINISHED);
  EXPECT_THAT(proxy_->opened(), SizeIs(4));
}

TEST_F(EpisodeDriverTest, AModelNoUpstreamServesIsTheTasksFault) {
  proxy_->FailOpens(absl::InvalidArgumentError("model 'nope' is not served"));
  Start(SingleTurn("4"));
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FAILED);
  EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_AGENT);
  EXPECT_EQ(r.failed_phase(), v1::EPISODE_PHASE_ACQUIRE);
  EXPECT_THAT(r.failure_message(), HasSubstr("not served"));
}

TEST_F(EpisodeDriverTest, AThrowInTheAttemptIsAnInfraFailureThatGivesEverythingBack) {
  proxy_->ThrowOnOpen(true);
  Start(Agent());
  RunToEnd();
  EXPECT_EQ(driver_->running(), 0);
  EXPECT_EQ(driver_->placing(), 0);
  EXPECT_EQ(table_.QueuedCount(), 1u);  // retried, as any infrastructure failure
  EXPECT_EQ(hosts_->InUse(""), 0u);
}

TEST_F(EpisodeDriverTest, ALimiterThatRefusesFailsTheCallAsInfra) {
  limiter_.Refuse(absl::UnavailableError("limiter unreachable"));
  Start(SingleTurn("4"));
  RunToEnd();
  EXPECT_THAT(log_.journaled, IsEmpty());
  EXPECT_EQ(table_.QueuedCount(), 1u);
  EXPECT_EQ(proxy_->calls(), 0);
}

TEST_F(EpisodeDriverTest, AnLlmCallThatNeverAnswersTimesOutAsTheAgentsFault) {
  proxy_->HangCalls(true);
  v1::Task task = SingleTurn("4");
  ToProto(absl::Seconds(20), task.mutable_timeouts()->mutable_agent());
  Start(task);
  RunToEnd(absl::Seconds(1));
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_TIMEOUT);
  EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_AGENT);
  EXPECT_EQ(limiter_.held("llm"), 0);
}

TEST_F(EpisodeDriverTest, AWarmSandboxIsTakenInsteadOfCreated) {
  EnsureHosts();
  std::atomic<bool> stopping{false};
  WarmPool pool(hosts_.get(), &clock_, /*size_per_spec=*/1, "scheduler", [] { return int64_t{8}; });
  MakeDriver(&pool);
  async::Spawn(io_, pool.Run(&stopping, absl::Milliseconds(200)), "the warm pool");
  VerifierWrites("1");
  Start(Agent(), "first");  // a miss: created inline, and the spec is wanted from now on
  RunToEnd();
  clock_.Advance(absl::Milliseconds(200));  // the filler makes one ahead
  Settle();
  clock_.Advance(absl::Milliseconds(200));
  Settle();
  ASSERT_EQ(pool.ready(), 1);
  const int creates = host().create_calls();
  Start(Agent(), "second");
  RunToEnd();
  ASSERT_THAT(log_.journaled, SizeIs(2));
  const v1::EpisodeResult& second = log_.journaled[1].first;
  EXPECT_TRUE(second.warm_sandbox());
  EXPECT_EQ(pool.hits(), 1);
  // The filler may replace the sandbox taken; the episode itself created none.
  EXPECT_LE(host().create_calls(), creates + 1);
  stopping = true;
  clock_.Advance(absl::Seconds(1));
  Settle();
}

}  // namespace
}  // namespace corral::scheduler
