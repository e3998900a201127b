// Bring-your-own environments through the scheduler, on a real cluster: the environment runner drives an
// OpenEnv-shaped server (examples/environments/arithmetic_drill) in real sandboxes — by port and by unix socket —
// with per-step rewards and token ids; the server's crash, hang and malformed answers each end the episode with
// the failure class they deserve; and a tool_loop episode calls a real MCP server (the MCP project's filesystem
// server from npm, pinned by tests/mcp's lock file) running in its sandbox. And trainer-driven episodes over gRPC
// (OpenEnvironment, StepEnvironment, CloseEnvironment): the trainer's steps and rewards, bad calls refused, a
// crash heard by the step and never retried, the idle timeout, an Open that goes away, a scheduler killed meanwhile.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "libs/api/proto_time.h"
#include "tests/integration/scheduler_fixture.h"

namespace corral {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string ReadSource(const std::string& relative) {
  std::ifstream in(std::string(CORRAL_SOURCE_DIR) + "/" + relative);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The drill: three questions from the episode's seed, answered by the fake model (right unless its sampling
// seed makes it wrong). `fault`: the drill's fault injection (a JSON object), or empty.
v1::Task Drill(const std::string& id, bool unix_socket, const std::string& fault = "",
               const std::string& sessions = "http") {
  v1::Task t;
  t.set_id(id);
  t.set_runner(v1::RUNNER_ENVIRONMENT);
  t.set_prompt("Answer each question.");
  t.mutable_llm()->set_seed_sampling(true);
  v1::InlineFile* server = t.mutable_environment()->add_files();
  server->set_path("/workspace/env/server.py");
  server->set_content(ReadSource("examples/environments/arithmetic_drill/server.py"));
  v1::EnvServerSpec& env = *t.mutable_env_server();
  for (const char* arg : {"python3", "/workspace/env/server.py"}) env.mutable_command()->add_argv(arg);
  if (unix_socket) {
    // Any network policy: the relay reaches the socket through the filesystem.
    t.mutable_environment()->set_network_policy(v1::NETWORK_POLICY_OPEN);
    for (const char* arg : {"--unix-socket", "env.sock"}) env.mutable_command()->add_argv(arg);
    env.set_unix_socket("/workspace/env.sock");
  } else {
    for (const char* arg : {"--port", "8000"}) env.mutable_command()->add_argv(arg);
    env.set_port(8000);
  }
  if (!fault.empty()) env.set_reset_json(absl::StrCat("{\"fault\": ", fault, "}"));
  for (const std::string& arg : {std::string("--sessions"), sessions}) env.mutable_command()->add_argv(arg);
  return t;
}

TEST_F(SchedulerFixture, EnvironmentRunnerPlaysAnOpenEnvServerWithStepRewards) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  v1::BatchSpec spec;
  spec.set_batch_id("drill");
  spec.set_group_size(3);
  ASSERT_THAT(Submit(spec, {Drill("by-port", false), Drill("by-socket", true)}), IsOk());
  auto results = Results("drill");
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), 6u);
  for (const auto& r : *results) {
    SCOPED_TRACE(r.ids().episode_id() + ": " + r.failure_message());
    ASSERT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED);
    // One step per question; the optimal play (a right model) earns 1 per step.
    const double per_step = ModelIsWrong(r.ids().seed()) ? 0.0 : 1.0;
    ASSERT_EQ(r.step_rewards_size(), 3);
    for (double s : r.step_rewards()) EXPECT_EQ(s, per_step);
    EXPECT_EQ(r.reward(), 3 * per_step);
    EXPECT_EQ(r.llm_calls(), 3u);
    EXPECT_THAT(r.reward_details_json(), HasSubstr("\"done\":true"));
    ASSERT_GE(r.trajectory().branches_size(), 1);
    const v1::Branch& branch = r.trajectory().branches(0);
    EXPECT_FALSE(branch.token_ids().empty());
    // The model read the environment's observations: the first and the last question are in its conversation.
    std::string conversation;
    for (const auto& m : branch.messages()) absl::StrAppend(&conversation, m.message().content(), "\n");
    EXPECT_THAT(conversation, HasSubstr("Question 1 of 3: What is "));
    EXPECT_THAT(conversation, HasSubstr("Question 3 of 3: What is "));
  }
  EXPECT_TRUE(NothingLeaked());
}

// A stock OpenEnv server keeps an episode only in a WebSocket session on /ws; its HTTP /reset and /step each act
// on a fresh environment. With no transport named the runner finds the session and the episode earns the full
// reward; forced to plain HTTP (what the runner did before sessions) the same play earns nothing, which is what
// this test would see if the default went back. A server that keeps its episode by a session cookie earns it too.
TEST_F(SchedulerFixture, AStockOpenEnvServerIsPlayedInItsWebSocketSessionAndACookieServerByItsCookie) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  v1::Task http_only = Drill("openenv-http", false, "", "openenv");
  http_only.mutable_env_server()->set_transport(v1::ENV_TRANSPORT_HTTP);
  v1::BatchSpec spec;
  spec.set_batch_id("sessions");
  spec.set_seed(11);
  ASSERT_THAT(Submit(spec, {Drill("openenv", false, "", "openenv"), Drill("openenv-socket", true, "", "openenv"),
                            http_only, Drill("cookie", false, "", "cookie")}),
              IsOk());
  auto results = Results("sessions");
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), 4u);
  for (const auto& r : *results) {
    SCOPED_TRACE(r.ids().task_id() + ": " + r.failure_message() + "\n" + r.agent_output_tail());
    ASSERT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED);
    const bool ws = absl::StartsWith(r.ids().task_id(), "openenv") && r.ids().task_id() != "openenv-http";
    EXPECT_THAT(r.agent_output_tail(),
                HasSubstr(ws ? "environment transport: websocket session on /ws" : "environment transport: http"));
    if (r.ids().task_id() == "openenv-http") {
      EXPECT_EQ(r.reward(), 0.0) << "every step acted on a drill that was never reset";
    } else {
      EXPECT_EQ(r.reward(), ModelIsWrong(r.ids().seed()) ? 0.0 : 3.0);
    }
  }
  EXPECT_TRUE(NothingLeaked());
}

// In a session, an error frame is the environment's failure, with its message; a dropped connection or a step that
// never answers is infra.
TEST_F(SchedulerFixture, AnErrorFrameIsTheEnvironmentsFailureAndADroppedOrHungSessionIsInfra) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  v1::BatchSpec spec;
  spec.set_batch_id("session-faults");
  spec.set_max_attempts(1);
  v1::Task hung = Drill("hung", false, R"({"hang_at_step": 1})", "openenv");
  hung.mutable_env_server()->mutable_step_timeout()->set_seconds(2);
  ASSERT_THAT(Submit(spec, {Drill("error-frame", false, R"({"error_at_step": 2})", "openenv"),
                            Drill("dropped", true, R"({"drop_at_step": 1})", "openenv"), hung}),
              IsOk());
  auto results = Results("session-faults");
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), 3u);
  for (const auto& r : *results) {
    SCOPED_TRACE(r.ids().task_id() + ": " + r.failure_message());
    EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FAILED);
    EXPECT_FALSE(r.has_reward());
    if (r.ids().task_id() == "error-frame") {
      EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_ENVIRONMENT);
      EXPECT_THAT(r.failure_message(), HasSubstr("the environment answered step over the WebSocket session with an "
                                                 "error [EXECUTION_ERROR]: the drill broke at step 2"));
    } else if (r.ids().task_id() == "dropped") {
      EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_INFRA);
      EXPECT_THAT(r.failure_message(), HasSubstr("step over the WebSocket session: the server closed the connection"));
    } else {
      EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_INFRA);
      EXPECT_THAT(r.failure_message(),
                  HasSubstr("step over the WebSocket session: the environment server did not answer within 2s"));
    }
  }
  EXPECT_TRUE(NothingLeaked());
}

TEST_F(SchedulerFixture, EnvironmentServerCrashIsAnInfraFailureThatIsRetried) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  v1::BatchSpec spec;
  spec.set_batch_id("crash");
  spec.set_max_attempts(2);
  ASSERT_THAT(Submit(spec, {Drill("crash", false, R"({"crash_at_step": 2})")}), IsOk());
  auto results = Results("crash");
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), 1u);
  const auto& r = results->front();
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FAILED);
  EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_INFRA);
  EXPECT_EQ(r.failed_phase(), v1::EPISODE_PHASE_ENVIRONMENT);
  EXPECT_EQ(r.ids().attempt(), 2u) << "an infra failure is retried";
  EXPECT_THAT(r.failure_message(), HasSubstr("POST /step: the server exited with signal 9"));
  EXPECT_FALSE(r.has_reward()) << "a crash is never a reward of 0";
  EXPECT_TRUE(NothingLeaked());
}

TEST_F(SchedulerFixture, HungEnvironmentStepTimesOutAndTheServerIsStopped) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  v1::Task hung = Drill("hung", true, R"({"hang_at_step": 1})");
  hung.mutable_env_server()->mutable_step_timeout()->set_seconds(2);
  v1::BatchSpec spec;
  spec.set_batch_id("hung");
  spec.set_max_attempts(1);
  ASSERT_THAT(Submit(spec, {hung}), IsOk());
  auto results = Results("hung");
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), 1u);
  const auto& r = results->front();
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FAILED);
  EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_INFRA);
  EXPECT_THAT(r.failure_message(), HasSubstr("POST /step: the environment server did not answer within 2s"));
  EXPECT_LT(FromProto(r.timings().total()), absl::Seconds(30));
  EXPECT_TRUE(NothingLeaked());
}

TEST_F(SchedulerFixture, MalformedEnvironmentAnswersAreTheTasksFaultAndNamed) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  v1::BatchSpec spec;
  spec.set_batch_id("bad");
  spec.set_max_attempts(3);
  ASSERT_THAT(Submit(spec, {Drill("bad-done", false, R"({"bad_at_step": 1, "field": "done"})"),
                            Drill("bad-reward", false, R"({"bad_at_step": 2, "field": "reward"})"),
                            Drill("no-observation", true, R"({"bad_at_step": 1, "field": "observation"})")}),
              IsOk());
  auto results = Results("bad");
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), 3u);
  std::map<std::string, std::string> messages;
  for (const auto& r : *results) {
    SCOPED_TRACE(r.ids().task_id());
    EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FAILED);
    EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_ENVIRONMENT);
    EXPECT_EQ(r.ids().attempt(), 1u) << "the task's fault is not retried";
    messages[r.ids().task_id()] = r.failure_message();
  }
  EXPECT_THAT(messages["bad-done"], HasSubstr("POST /step: the field 'done' is not a boolean: yes"));
  EXPECT_THAT(messages["bad-reward"], HasSubstr("POST /step: the field 'reward' is not a number"));
  EXPECT_THAT(messages["no-observation"], HasSubstr("POST /step: the field 'observation' is missing"));
  EXPECT_TRUE(NothingLeaked());
}

// Kept between runs, outside the checkout, under /opt where sandboxes may run programs (as the harnesses are).
constexpr char kMcpRoot[] = "/opt/corral-tests/mcp";

// The MCP project's servers (tests/mcp, pinned) copied where sandboxes may run them: the path of `entry` (under
// tests/mcp) there.
// Tests running at once copy under a lock: a copy that finds a directory another one has just made returns
// without filling it (std::filesystem::copy), and the server would not be there yet.
std::string McpServer(const std::string& entry) {
  const std::string mcp = std::string(CORRAL_SOURCE_DIR) + "/tests/mcp";
  EXPECT_TRUE(std::filesystem::exists(mcp + "/node_modules")) << "run scripts/test (npm ci --prefix tests/mcp) first";
  std::filesystem::create_directories(kMcpRoot);
  const int lock = open((std::string(kMcpRoot) + "/.copy.lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  EXPECT_GE(lock, 0) << strerror(errno);
  EXPECT_EQ(flock(lock, LOCK_EX), 0) << strerror(errno);
  std::filesystem::copy(mcp + "/node_modules", std::string(kMcpRoot) + "/node_modules",
                        std::filesystem::copy_options::recursive | std::filesystem::copy_options::update_existing);
  std::filesystem::copy(mcp + "/everything.mjs", std::string(kMcpRoot) + "/everything.mjs",
                        std::filesystem::copy_options::overwrite_existing);
  close(lock);  // and with it the lock
  const std::string server = absl::StrCat(kMcpRoot, "/", entry);
  EXPECT_TRUE(std::filesystem::exists(server)) << server;
  return server;
}

// What one episode of a tool_loop task did with its tools: the functions the model called and the tool messages.
struct ToolUse {
  std::vector<std::string> called, answers;
};
ToolUse ToolUseOf(const v1::EpisodeResult& r) {
  ToolUse out;
  if (r.trajectory().branches_size() == 0) return out;
  for (const auto& m : r.trajectory().branches(0).messages()) {
    for (const auto& call : m.message().tool_calls()) out.called.push_back(call.function_name());
    if (m.message().role() == "tool") out.answers.push_back(m.message().content());
  }
  return out;
}

TEST_F(SchedulerFixture, ToolLoopCallsARealMcpServerInItsSandbox) {
  const std::string server = McpServer("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
  ASSERT_FALSE(HasFailure());
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));

  v1::Task t;
  t.set_id("mcp-read");
  t.set_runner(v1::RUNNER_TOOL_LOOP);
  t.set_prompt("Read /workspace/note.txt with the filesystem tool.");
  t.set_answer("done: written by the task, read through MCP");
  // The scripted model calls the first offered tool with each entry as its first argument (here: path).
  t.mutable_llm()->set_params_json(R"({"fake": {"tool_script": ["/workspace/note.txt"]}})");
  v1::InlineFile* note = t.mutable_environment()->add_files();
  note->set_path("/workspace/note.txt");
  note->set_content("written by the task, read through MCP");
  v1::McpServerSpec* fs = t.add_mcp_servers();
  fs->set_name("fs");
  for (const std::string& arg : {std::string("node"), server, std::string("/workspace")}) {
    fs->mutable_command()->add_argv(arg);
  }
  fs->add_tools("read_text_file");
  auto r = RunOne(t, /*max_attempts=*/1);
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ(r->status(), v1::EPISODE_STATUS_FINISHED) << r->failure_message();
  EXPECT_EQ(r->reward(), 1.0);
  EXPECT_EQ(r->tool_calls(), 1u);
  EXPECT_THAT(ToolUseOf(*r).called, ElementsAre("fs__read_text_file")) << "called by its offered name";
  EXPECT_THAT(ToolUseOf(*r).answers, ElementsAre("written by the task, read through MCP")) << "its text content";
  EXPECT_TRUE(NothingLeaked());
}

// The MCP project's "everything" server in its streamable HTTP mode (sessions, SSE answers), listening on a port
// of the sandbox's own network: the relay speaks HTTP to it and the episode calls its tools as a stdio server's.
TEST_F(SchedulerFixture, ToolLoopCallsARealMcpServerOverStreamableHttp) {
  const std::string server = McpServer("everything.mjs");  // server-everything, on Debian's Node 18 too
  ASSERT_FALSE(HasFailure());
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));

  v1::Task t;
  t.set_id("mcp-http");
  t.set_runner(v1::RUNNER_TOOL_LOOP);
  t.set_prompt("Echo a greeting with the everything server's tool.");
  t.set_answer("done: Echo: hello over streamable HTTP");
  t.mutable_llm()->set_params_json(R"({"fake": {"tool_script": ["hello over streamable HTTP"]}})");
  v1::McpServerSpec* everything = t.add_mcp_servers();
  everything->set_name("everything");
  for (const std::string& arg : {std::string("node"), server, std::string("streamableHttp")}) {
    everything->mutable_command()->add_argv(arg);
  }
  (*everything->mutable_command()->mutable_env())["PORT"] = "3001";
  everything->set_port(3001);  // on the sandbox's own network (policy NONE, the tool_loop runner's default)
  everything->add_tools("echo");
  auto r = RunOne(t, /*max_attempts=*/1);
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ(r->status(), v1::EPISODE_STATUS_FINISHED) << r->failure_message();
  EXPECT_EQ(r->reward(), 1.0);
  EXPECT_EQ(r->tool_calls(), 1u);
  EXPECT_THAT(ToolUseOf(*r).called, ElementsAre("everything__echo")) << "the listed tool, by its prefixed name";
  EXPECT_THAT(ToolUseOf(*r).answers, ElementsAre("Echo: hello over streamable HTTP")) << "its answer, over SSE";
  EXPECT_TRUE(NothingLeaked());
}

// ---- trainer-driven: the trainer sends the actions (OpenEnvironment, StepEnvironment, CloseEnvironment)

class TrainerDrivenTest : public SchedulerFixture {
 protected:
  absl::StatusOr<v1::OpenEnvironmentResponse> Open(const v1::OpenEnvironmentRequest& request,
                                                   absl::Duration timeout = absl::Seconds(60)) {
    grpc::ClientContext ctx;
    Prepare(ctx, timeout);
    v1::OpenEnvironmentResponse out;
    grpc::Status s = scheduler_stub_->OpenEnvironment(&ctx, request, &out);
    if (!s.ok()) return FromGrpcStatus(s);
    return out;
  }
  absl::StatusOr<v1::EnvironmentStep> Step(const std::string& episode_id, const std::string& action_json) {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::StepEnvironmentRequest req;
    req.set_episode_id(episode_id);
    req.set_action_json(action_json);
    v1::StepEnvironmentResponse out;
    grpc::Status s = scheduler_stub_->StepEnvironment(&ctx, req, &out);
    if (!s.ok()) return FromGrpcStatus(s);
    return out.step();
  }
  absl::StatusOr<v1::EpisodeResult> Close(const std::string& episode_id) {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::CloseEnvironmentRequest req;
    req.set_episode_id(episode_id);
    v1::EpisodeResult out;
    grpc::Status s = scheduler_stub_->CloseEnvironment(&ctx, req, &out);
    if (!s.ok()) return FromGrpcStatus(s);
    return out;
  }
  static v1::OpenEnvironmentRequest Request(const std::string& batch_id, const std::string& fault = "") {
    v1::OpenEnvironmentRequest r;
    *r.mutable_task() = Drill("drill", false, fault);
    r.mutable_task()->clear_runner();
    r.mutable_spec()->set_batch_id(batch_id);
    return r;
  }
};

// The sum the drill asks for in `observation_json` ({"prompt": "Question 1 of 3: What is A + B?", ...}).
int SumAsked(const std::string& observation_json) {
  const size_t at = observation_json.find("What is ");
  EXPECT_NE(at, std::string::npos) << observation_json;
  int a = 0, b = 0;
  EXPECT_EQ(std::sscanf(observation_json.c_str() + at, "What is %d + %d?", &a, &b), 2) << observation_json;
  return a + b;
}

std::string Say(int n) { return absl::StrCat(R"({"message": "The answer is )", n, R"(."})"); }

TEST_F(TrainerDrivenTest, ATrainerDrivesTheDrillStepByStepAndGetsTheJournaledResult) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  v1::OpenEnvironmentRequest request = Request("driven");
  request.set_seed(7);
  auto opened = Open(request);
  ASSERT_THAT(opened, IsOk());
  EXPECT_EQ(opened->ids().episode_id(), "driven:g0:e0");
  EXPECT_EQ(opened->reset().turn(), 0u);
  EXPECT_FALSE(opened->reset().done());
  EXPECT_FALSE(opened->reset().has_reward());
  EXPECT_THAT(opened->base_url(), HasSubstr("http://127.0.0.1:"));
  EXPECT_FALSE(opened->api_key().empty());
  EXPECT_FALSE(opened->sandbox_id().empty());
  // The seed reached the environment: the same seed asks the same first question.
  const int first = SumAsked(opened->reset().observation_json());
  auto again = Open([&] {
    v1::OpenEnvironmentRequest r = request;
    r.mutable_spec()->set_batch_id("driven-again");
    return r;
  }());
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(SumAsked(again->reset().observation_json()), first);

  // A wrong answer, then the optimal play; the environment says done after the third question (a wrong answer
  // moves on too).
  auto step = Step("driven:g0:e0", Say(first + 1));
  ASSERT_THAT(step, IsOk());
  EXPECT_EQ(step->reward(), 0.0);
  EXPECT_EQ(step->turn(), 1u);
  std::vector<double> rewards = {step->reward()};
  while (!step->done()) {
    step = Step("driven:g0:e0", Say(SumAsked(step->observation_json())));
    ASSERT_THAT(step, IsOk());
    rewards.push_back(step->reward());
  }
  EXPECT_EQ(rewards, (std::vector<double>{0, 1, 1}));
  EXPECT_THAT(step->answer_json(), HasSubstr("\"done\":true"));
  // Bad calls change nothing.
  EXPECT_EQ(Step("driven:g0:e0", "{not json").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Step("nobody:g0:e0", "{}").status().code(), absl::StatusCode::kNotFound);
  auto after_done = Step("driven:g0:e0", Say(1));
  EXPECT_EQ(after_done.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(after_done.status().message(), HasSubstr("the environment is done"));

  auto result = Close("driven:g0:e0");
  ASSERT_THAT(result, IsOk());
  EXPECT_EQ(result->status(), v1::EPISODE_STATUS_FINISHED) << result->failure_message();
  EXPECT_EQ(result->reward(), 2.0);
  EXPECT_THAT(result->step_rewards(), ::testing::ElementsAre(0, 1, 1));
  EXPECT_EQ(result->llm_calls(), 0u) << "the scheduler called no model: the trainer drives";
  EXPECT_EQ(Close("driven:g0:e0").status().code(), absl::StatusCode::kNotFound) << "the result was taken";
  // Journaled and delivered like any other result.
  auto streamed = Results("driven");
  ASSERT_THAT(streamed, IsOk());
  ASSERT_EQ(streamed->size(), 1u);
  EXPECT_EQ(streamed->front().reward(), 2.0);
  EXPECT_EQ(streamed->front().ids().attempt(), 1u);

  // The other episode, left alone, is closed without a step: reward 0 from no step.
  auto idle = Close("driven-again:g0:e0");
  ASSERT_THAT(idle, IsOk());
  EXPECT_EQ(idle->status(), v1::EPISODE_STATUS_FINISHED);
  EXPECT_EQ(idle->reward(), 0.0);
  EXPECT_TRUE(NothingLeaked());
}

TEST_F(TrainerDrivenTest, FailuresEndTheEpisodeOnceAndTheTrainerHearsWhy) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  // Submit runs only scheduler-driven environments; a bad request opens nothing.
  v1::Task marked = Drill("marked", false);
  marked.mutable_env_server()->set_trainer_driven(true);
  v1::BatchSpec spec;
  spec.set_batch_id("marked");
  auto refused = Submit(spec, {marked});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("env_server.trainer_driven is for OpenEnvironment"));
  v1::OpenEnvironmentRequest bad = Request("bad");
  bad.mutable_spec()->set_group_size(4);
  EXPECT_EQ(Open(bad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GetBatch("bad").status().code(), absl::StatusCode::kNotFound);

  // The server crashes at step 2: the step hears it, and the episode is not retried (max_attempts 3).
  v1::OpenEnvironmentRequest crash = Request("crash", R"({"crash_at_step": 2})");
  crash.mutable_spec()->set_max_attempts(3);
  auto opened = Open(crash);
  ASSERT_THAT(opened, IsOk());
  ASSERT_THAT(Step("crash:g0:e0", Say(0)), IsOk());
  auto crashed = Step("crash:g0:e0", Say(0));
  EXPECT_EQ(crashed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(crashed.status().message(), HasSubstr("the server exited with signal 9"));
  auto result = Close("crash:g0:e0");
  ASSERT_THAT(result, IsOk());
  EXPECT_EQ(result->status(), v1::EPISODE_STATUS_FAILED);
  EXPECT_EQ(result->failure_class(), v1::FAILURE_CLASS_INFRA);
  EXPECT_EQ(result->ids().attempt(), 1u) << "once opened, the trainer holds the state: no retry";
  auto batch = GetBatch("crash");
  ASSERT_THAT(batch, IsOk());
  EXPECT_EQ(batch->counts().retries(), 0u);

  // A trainer that goes quiet: the idle timeout ends the episode.
  v1::OpenEnvironmentRequest quiet = Request("quiet");
  quiet.mutable_idle_timeout()->set_seconds(1);
  ASSERT_THAT(Open(quiet), IsOk());
  auto quiet_results = Results("quiet");
  ASSERT_THAT(quiet_results, IsOk());
  ASSERT_EQ(quiet_results->size(), 1u);
  EXPECT_EQ(quiet_results->front().status(), v1::EPISODE_STATUS_TIMEOUT);
  EXPECT_THAT(quiet_results->front().failure_message(), HasSubstr("no step or close from the trainer for 1s"));
  EXPECT_EQ(Step("quiet:g0:e0", Say(1)).status().code(), absl::StatusCode::kDeadlineExceeded);
  auto quiet_result = Close("quiet:g0:e0");
  ASSERT_THAT(quiet_result, IsOk());
  EXPECT_EQ(quiet_result->status(), v1::EPISODE_STATUS_TIMEOUT);

  // A trainer that stops waiting before the reset: the episode is cancelled, nothing is left.
  auto gone = Open(Request("gone"), absl::Milliseconds(50));
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kDeadlineExceeded);
  auto gone_results = Results("gone");
  ASSERT_THAT(gone_results, IsOk());
  ASSERT_EQ(gone_results->size(), 1u);
  EXPECT_EQ(gone_results->front().status(), v1::EPISODE_STATUS_CANCELLED);
  EXPECT_TRUE(NothingLeaked());
}

TEST_F(TrainerDrivenTest, AnEpisodeOpenWhenTheSchedulerIsKilledEndsOnceAndLeavesNothing) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  auto opened = Open(Request("orphan"));
  ASSERT_THAT(opened, IsOk());
  ASSERT_THAT(Step("orphan:g0:e0", Say(0)), IsOk());
  scheduler_->process.Signal(SIGKILL);
  ASSERT_THAT(scheduler_->process.Wait(absl::Seconds(10)), IsOk());
  scheduler_.reset();
  ASSERT_NO_FATAL_FAILURE(StartScheduler());
  // The journal had it running: its re-run finds no trainer and ends at once, recorded, never run again.
  auto results = Results("orphan");
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), 1u);
  EXPECT_EQ(results->front().status(), v1::EPISODE_STATUS_FAILED);
  EXPECT_EQ(results->front().failure_class(), v1::FAILURE_CLASS_INFRA);
  EXPECT_THAT(results->front().failure_message(), HasSubstr("no trainer holds this environment episode"));
  EXPECT_EQ(Step("orphan:g0:e0", Say(0)).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(NothingLeaked());
}

}  // namespace
}  // namespace corral
