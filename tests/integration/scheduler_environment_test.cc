// Bring-your-own environments through the scheduler, on a real cluster: the environment runner drives an
// OpenEnv-shaped server (examples/environments/arithmetic_drill) in real sandboxes — by port and by unix socket —
// with per-step rewards and token ids; the server's crash, hang and malformed answers each end the episode with
// the failure class they deserve; and a tool_loop episode calls a real MCP server (the MCP project's filesystem
// server from npm, pinned by tests/mcp's lock file) running in its sandbox.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "libs/api/proto_time.h"
#include "tests/integration/scheduler_fixture.h"

namespace corral {
namespace {

using ::testing::HasSubstr;

std::string ReadSource(const std::string& relative) {
  std::ifstream in(std::string(CORRAL_SOURCE_DIR) + "/" + relative);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The drill: three questions from the episode's seed, answered by the fake model (right unless its sampling
// seed makes it wrong). `fault`: the drill's fault injection (a JSON object), or empty.
v1::Task Drill(const std::string& id, bool unix_socket, const std::string& fault = "") {
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

TEST_F(SchedulerFixture, ToolLoopCallsARealMcpServerInItsSandbox) {
  const std::string modules = std::string(CORRAL_SOURCE_DIR) + "/tests/mcp/node_modules";
  const std::string server =
      std::string(kMcpRoot) + "/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js";
  ASSERT_TRUE(std::filesystem::exists(modules)) << "run scripts/test (npm ci --prefix tests/mcp) first";
  std::filesystem::create_directories(kMcpRoot);
  std::filesystem::copy(modules, std::string(kMcpRoot) + "/node_modules",
                        std::filesystem::copy_options::recursive | std::filesystem::copy_options::update_existing);
  ASSERT_TRUE(std::filesystem::exists(server));
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
  v1::BatchSpec spec;
  spec.set_batch_id("mcp");
  spec.set_max_attempts(1);
  ASSERT_THAT(Submit(spec, {t}), IsOk());
  auto results = Results("mcp");
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), 1u);
  const auto& r = results->front();
  ASSERT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED) << r.failure_message();
  EXPECT_EQ(r.reward(), 1.0);
  EXPECT_EQ(r.tool_calls(), 1u);
  ASSERT_GE(r.trajectory().branches_size(), 1);
  bool offered = false, answered = false;
  for (const auto& m : r.trajectory().branches(0).messages()) {
    for (const auto& call : m.message().tool_calls()) offered = offered || call.function_name() == "fs__read_text_file";
    answered =
        answered || (m.message().role() == "tool" && m.message().content() == "written by the task, read through MCP");
  }
  EXPECT_TRUE(offered) << "the model called the MCP tool by its offered name";
  EXPECT_TRUE(answered) << "the tool message is the server's text content";
  EXPECT_TRUE(NothingLeaked());
}

}  // namespace
}  // namespace corral
