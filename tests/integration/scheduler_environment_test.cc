// Bring-your-own environments through the scheduler, on a real cluster: the environment runner drives an
// OpenEnv-shaped server (examples/environments/arithmetic_drill) in real sandboxes — by port and by unix socket —
// with per-step rewards and token ids; the server's crash, hang and malformed answers each end the episode with
// the failure class they deserve; and a tool_loop episode calls a real MCP server (the MCP project's filesystem
// server from npm, pinned by tests/mcp's lock file) running in its sandbox. Trainer-driven episodes are in
// scheduler_trainer_test.cc.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "libs/api/proto_time.h"
#include "tests/integration/environment_drill.h"
#include "tests/integration/scheduler_fixture.h"

namespace corral {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using namespace drill_test;  // NOLINT: the drill task

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

}  // namespace
}  // namespace corral
