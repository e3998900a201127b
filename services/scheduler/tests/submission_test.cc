#include "services/scheduler/table/submission.h"

#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/api/proto_time.h"
#include "libs/core/testing/status_matchers.h"
#include "services/scheduler/tests/tool_spec.h"

namespace corral::scheduler {
namespace {

using ::testing::HasSubstr;

const absl::Time kNow = absl::FromUnixSeconds(1'700'000'000);

v1::Task PromptTask(const std::string& id = "t1") {
  v1::Task t;
  t.set_id(id);
  t.set_prompt("What is 2+2?");
  t.set_answer("4");
  return t;
}

using testing_support::Tool;

// ------------------------------------------------------------------------------------------- ValidateSpec

TEST(ValidateSpec, AcceptsAPlainSpec) {
  v1::BatchSpec spec;
  spec.set_batch_id("run-7:step_3");
  spec.set_group_size(8);
  (*spec.mutable_labels())["team/run.id-1"] = "x";
  ToProto(kNow + absl::Minutes(5), spec.mutable_deadline());
  EXPECT_THAT(ValidateSpec(spec, kNow, SubmitLimits{}), IsOk());
}

TEST(ValidateSpec, BatchIdWithCharactersOutsideTheIdCharsetIsInvalid) {
  for (const char* bad : {"a/b", "a.b", "a b", "é"}) {
    v1::BatchSpec spec;
    spec.set_batch_id(bad);
    EXPECT_THAT(ValidateSpec(spec, kNow, SubmitLimits{}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("spec.batch_id")))
        << bad;
  }
}

TEST(ValidateSpec, BatchIdLongerThan64IsInvalid) {
  v1::BatchSpec spec;
  spec.set_batch_id(std::string(kMaxBatchIdLength, 'a'));
  EXPECT_THAT(ValidateSpec(spec, kNow, SubmitLimits{}), IsOk());
  spec.set_batch_id(std::string(kMaxBatchIdLength + 1, 'a'));
  EXPECT_THAT(ValidateSpec(spec, kNow, SubmitLimits{}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("spec.batch_id")));
}

TEST(ValidateSpec, GroupSizePlusRedundancyAboveMaxGroupSizeIsInvalid) {
  SubmitLimits limits;
  limits.max_group_size = 8;
  v1::BatchSpec spec;
  spec.set_group_size(6);
  spec.set_redundancy(2);
  EXPECT_THAT(ValidateSpec(spec, kNow, limits), IsOk());
  spec.set_redundancy(3);
  EXPECT_THAT(ValidateSpec(spec, kNow, limits),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("spec.group_size + spec.redundancy is 9")));
  // An unset group size counts as 1.
  spec.set_group_size(0);
  spec.set_redundancy(8);
  EXPECT_THAT(ValidateSpec(spec, kNow, limits), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ValidateSpec, BadLabelKeyIsInvalid) {
  for (const char* bad : {"Upper", "", "has space", "x:y"}) {
    v1::BatchSpec spec;
    (*spec.mutable_labels())[bad] = "v";
    EXPECT_THAT(ValidateSpec(spec, kNow, SubmitLimits{}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("spec.labels")))
        << bad;
  }
}

TEST(ValidateSpec, DeadlineNotAfterNowIsInvalid) {
  v1::BatchSpec spec;
  ToProto(kNow - absl::Seconds(1), spec.mutable_deadline());
  EXPECT_THAT(ValidateSpec(spec, kNow, SubmitLimits{}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("spec.deadline")));
  ToProto(kNow, spec.mutable_deadline());
  EXPECT_THAT(ValidateSpec(spec, kNow, SubmitLimits{}), StatusIs(absl::StatusCode::kInvalidArgument));
}

// ------------------------------------------------------------------------------------------- WithDefaults

TEST(WithDefaults, FillsGroupSizeMaxAttemptsAndSeed) {
  SubmitLimits limits;
  limits.default_max_attempts = 5;
  const v1::BatchSpec out = WithDefaults(v1::BatchSpec(), limits, 1234);
  EXPECT_EQ(out.group_size(), 1u);
  EXPECT_EQ(out.max_attempts(), 5u);
  ASSERT_TRUE(out.has_seed());
  EXPECT_EQ(out.seed(), 1234u);
}

TEST(WithDefaults, KeepsWhatIsSetIncludingAZeroSeed) {
  v1::BatchSpec spec;
  spec.set_group_size(4);
  spec.set_max_attempts(2);
  spec.set_seed(0);
  const v1::BatchSpec out = WithDefaults(spec, SubmitLimits{}, 1234);
  EXPECT_EQ(out.group_size(), 4u);
  EXPECT_EQ(out.max_attempts(), 2u);
  EXPECT_EQ(out.seed(), 0u);
}

// ------------------------------------------------------------------------------------------ EffectiveTask

TEST(EffectiveTask, DefaultsTheRunner) {
  auto task = EffectiveTask(PromptTask(), v1::TaskOverrides(), v1::RUNNER_SINGLE_TURN);
  ASSERT_THAT(task, IsOk());
  EXPECT_EQ(task->runner(), v1::RUNNER_SINGLE_TURN);
}

TEST(EffectiveTask, OverridesReplaceScalarsAndMergeMessagesFieldByField) {
  v1::Task task = PromptTask();
  task.set_runner(v1::RUNNER_SINGLE_TURN);
  task.mutable_llm()->set_model("task-model");
  task.mutable_llm()->set_params_json(R"({"temperature": 0.5})");
  task.mutable_reward()->set_function(v1::REWARD_FUNCTION_NUMERIC);
  task.mutable_reward()->set_tolerance(0.1);
  *task.mutable_tool_loop()->add_tools() = Tool("py", v1::TOOL_KIND_CODE_INTERPRETER);
  task.mutable_tool_loop()->set_max_turns(7);
  v1::TaskOverrides o;
  o.set_runner(v1::RUNNER_TOOL_LOOP);
  o.mutable_llm()->set_model("batch-model");
  o.mutable_reward()->set_function(v1::REWARD_FUNCTION_GSM8K);
  auto out = EffectiveTask(task, o, v1::RUNNER_SINGLE_TURN);
  ASSERT_THAT(out, IsOk());
  EXPECT_EQ(out->runner(), v1::RUNNER_TOOL_LOOP);
  EXPECT_EQ(out->llm().model(), "batch-model");
  EXPECT_EQ(out->llm().params_json(), R"({"temperature": 0.5})");  // merged, not replaced
  EXPECT_EQ(out->reward().function(), v1::REWARD_FUNCTION_GSM8K);
  EXPECT_DOUBLE_EQ(out->reward().tolerance(), 0.1);
  ASSERT_EQ(out->tool_loop().tools_size(), 1);  // empty repeated field in the overrides: the task's stay
  EXPECT_EQ(out->tool_loop().tools(0).name(), "py");
  EXPECT_EQ(out->tool_loop().max_turns(), 7u);
}

TEST(EffectiveTask, NonEmptyRepeatedAndMapOverridesReplaceTheTasks) {
  v1::Task task = PromptTask();
  task.set_runner(v1::RUNNER_TOOL_LOOP);
  *task.mutable_tool_loop()->add_tools() = Tool("py", v1::TOOL_KIND_CODE_INTERPRETER);
  *task.mutable_tool_loop()->add_tools() = Tool("sh", v1::TOOL_KIND_BASH);
  (*task.mutable_environment()->mutable_env())["A"] = "task";
  (*task.mutable_environment()->mutable_env())["B"] = "task";
  v1::TaskOverrides o;
  *o.mutable_tool_loop()->add_tools() = Tool("read", v1::TOOL_KIND_READ_FILE);
  (*o.mutable_environment()->mutable_env())["A"] = "batch";
  auto out = EffectiveTask(task, o, v1::RUNNER_SINGLE_TURN);
  ASSERT_THAT(out, IsOk());
  ASSERT_EQ(out->tool_loop().tools_size(), 1);
  EXPECT_EQ(out->tool_loop().tools(0).name(), "read");
  ASSERT_EQ(out->environment().env_size(), 1);
  EXPECT_EQ(out->environment().env().at("A"), "batch");
}

struct BadTaskCase {
  const char* name;
  std::function<void(v1::Task&)> mutate;
  const char* message;  // after "task 't1': "
};

TEST(EffectiveTask, ErrorsNameTheTaskAndTheField) {
  const std::vector<BadTaskCase> cases = {
      {"no prompt or messages", [](v1::Task& t) { t.clear_prompt(); }, "exactly one of prompt and messages"},
      {"prompt and messages",
       [](v1::Task& t) {
         auto* m = t.add_messages();
         m->set_role("user");
         m->set_content("hi");
       },
       "exactly one of prompt and messages"},
      {"tool_loop without tools", [](v1::Task& t) { t.set_runner(v1::RUNNER_TOOL_LOOP); },
       "tool_loop.tools (or mcp_servers) must not be empty"},
      {"environment without env_server", [](v1::Task& t) { t.set_runner(v1::RUNNER_ENVIRONMENT); },
       "env_server is required for the environment runner"},
      {"env_server without a listener",
       [](v1::Task& t) {
         t.set_runner(v1::RUNNER_ENVIRONMENT);
         t.mutable_env_server()->mutable_command()->add_argv("serve");
       },
       "env_server.port or unix_socket: exactly one is required"},
      {"env_server port outside its own network",
       [](v1::Task& t) {
         t.set_runner(v1::RUNNER_ENVIRONMENT);
         t.mutable_env_server()->mutable_command()->add_argv("serve");
         t.mutable_env_server()->set_port(8000);
         t.mutable_environment()->set_network_policy(v1::NETWORK_POLICY_OPEN);
       },
       "env_server.port needs environment.network_policy NONE"},
      {"env_server tool calls without tools",
       [](v1::Task& t) {
         t.set_runner(v1::RUNNER_ENVIRONMENT);
         t.mutable_env_server()->mutable_command()->add_argv("serve");
         t.mutable_env_server()->set_unix_socket("env.sock");
         t.mutable_env_server()->set_action_format(v1::ACTION_FORMAT_TOOL_CALL);
       },
       "env_server.tools_json is required with action_format TOOL_CALL"},
      {"env_server action template not JSON",
       [](v1::Task& t) {
         t.set_runner(v1::RUNNER_ENVIRONMENT);
         t.mutable_env_server()->mutable_command()->add_argv("serve");
         t.mutable_env_server()->set_unix_socket("env.sock");
         t.mutable_env_server()->set_action_template("{text}");
       },
       "env_server.action_template must be JSON"},
      {"env_server ws_path that would inject a header",
       [](v1::Task& t) {
         t.set_runner(v1::RUNNER_ENVIRONMENT);
         t.mutable_env_server()->mutable_command()->add_argv("serve");
         t.mutable_env_server()->set_unix_socket("env.sock");
         t.mutable_env_server()->set_ws_path("/ws HTTP/1.1\r\nX-Evil: 1");
       },
       "env_server.ws_path must begin with '/' and hold printable ASCII without spaces"},
      {"env_server transport unknown",
       [](v1::Task& t) {
         t.set_runner(v1::RUNNER_ENVIRONMENT);
         t.mutable_env_server()->mutable_command()->add_argv("serve");
         t.mutable_env_server()->set_unix_socket("env.sock");
         t.mutable_env_server()->set_transport(static_cast<v1::EnvTransport>(9));
       },
       "env_server.transport is not a known value"},
      {"mcp server on single_turn", [](v1::Task& t) { t.add_mcp_servers()->set_name("fs"); },
       "mcp_servers are for the tool_loop and agent runners"},
      {"mcp server without a command",
       [](v1::Task& t) {
         t.set_runner(v1::RUNNER_TOOL_LOOP);
         t.add_mcp_servers()->set_name("fs");
       },
       "mcp_servers[0].command.argv is required"},
      {"mcp server name with a dot",
       [](v1::Task& t) {
         t.set_runner(v1::RUNNER_TOOL_LOOP);
         t.add_mcp_servers()->set_name("f.s");
       },
       "mcp_servers[0].name must be 1-24 characters"},
      {"mcp server on a port and a socket",
       [](v1::Task& t) {
         t.set_runner(v1::RUNNER_TOOL_LOOP);
         v1::McpServerSpec* m = t.add_mcp_servers();
         m->set_name("web");
         m->mutable_command()->add_argv("serve");
         m->set_port(3001);
         m->set_unix_socket("mcp.sock");
       },
       "mcp_servers[0].port or unix_socket: not both"},
      {"mcp server on a port of the agent's default network",
       [](v1::Task& t) {
         t.set_runner(v1::RUNNER_AGENT);
         t.mutable_agent()->mutable_command()->add_argv("agent");
         t.mutable_verifier();
         v1::McpServerSpec* m = t.add_mcp_servers();
         m->set_name("web");
         m->mutable_command()->add_argv("serve");
         m->set_port(3001);
       },
       "mcp_servers[0].port needs environment.network_policy NONE"},
      {"mcp endpoint path that would inject a header",
       [](v1::Task& t) {
         t.set_runner(v1::RUNNER_TOOL_LOOP);
         v1::McpServerSpec* m = t.add_mcp_servers();
         m->set_name("web");
         m->mutable_command()->add_argv("serve");
         m->set_unix_socket("mcp.sock");
         m->set_path("/mcp HTTP/1.1\r\nX-Evil: 1");
       },
       "mcp_servers[0].path must begin with '/'"},
      {"mcp endpoint path of a stdio server",
       [](v1::Task& t) {
         t.set_runner(v1::RUNNER_TOOL_LOOP);
         v1::McpServerSpec* m = t.add_mcp_servers();
         m->set_name("web");
         m->mutable_command()->add_argv("serve");
         m->set_path("/mcp");
       },
       "mcp_servers[0].path is the endpoint of a server over HTTP"},
      {"duplicate tool names",
       [](v1::Task& t) {
         t.set_runner(v1::RUNNER_TOOL_LOOP);
         *t.mutable_tool_loop()->add_tools() = Tool("run", v1::TOOL_KIND_BASH);
         *t.mutable_tool_loop()->add_tools() = Tool("run", v1::TOOL_KIND_CODE_INTERPRETER);
       },
       "tool_loop.tools[1].name 'run' is used twice"},
      {"COMMAND tool without command",
       [](v1::Task& t) {
         t.set_runner(v1::RUNNER_TOOL_LOOP);
         v1::ToolSpec tool = Tool("grade", v1::TOOL_KIND_COMMAND);
         tool.set_description("grades");
         tool.set_parameters_json(R"({"type": "object"})");
         *t.mutable_tool_loop()->add_tools() = tool;
       },
       "tool_loop.tools[0].command is required for kind COMMAND"},
      {"REGEX pattern that does not compile",
       [](v1::Task& t) {
         t.mutable_reward()->set_function(v1::REWARD_FUNCTION_REGEX);
         t.mutable_reward()->set_pattern("(unclosed");
       },
       "reward.pattern does not compile"},
      {"NUMERIC with a non-numeric answer",
       [](v1::Task& t) {
         t.mutable_reward()->set_function(v1::REWARD_FUNCTION_NUMERIC);
         t.set_answer("four");
       },
       "answer must be a number"},
      {"agent without agent.command",
       [](v1::Task& t) {
         t.set_runner(v1::RUNNER_AGENT);
         t.mutable_verifier();
       },
       "the agent runner needs agent.command.argv or agent.harness"},
      {"agent naming an unknown harness",
       [](v1::Task& t) {
         t.set_runner(v1::RUNNER_AGENT);
         t.mutable_agent()->set_harness("aider");
         t.mutable_verifier();
       },
       "agent.harness 'aider' is not a known harness (claude-code, codex, opencode"},
      {"agent naming a harness at a malformed version",
       [](v1::Task& t) {
         t.set_runner(v1::RUNNER_AGENT);
         t.mutable_agent()->set_harness("codex@0.1; rm -rf /");
         t.mutable_verifier();
       },
       "agent.harness 'codex@0.1; rm -rf /': a version is an npm version or dist-tag"},
      {"agent with both a harness and a command",
       [](v1::Task& t) {
         t.set_runner(v1::RUNNER_AGENT);
         t.mutable_agent()->set_harness("codex");
         t.mutable_agent()->mutable_command()->add_argv("agent");
         t.mutable_verifier();
       },
       "agent.harness and agent.command.argv exclude each other"},
      {"agent without verifier",
       [](v1::Task& t) {
         t.set_runner(v1::RUNNER_AGENT);
         t.mutable_agent()->mutable_command()->add_argv("agent");
       },
       "verifier is required for the agent runner"},
      {"params_json not an object", [](v1::Task& t) { t.mutable_llm()->set_params_json("[1, 2]"); },
       "llm.params_json must be a JSON object"},
      {"params_json not JSON", [](v1::Task& t) { t.mutable_llm()->set_params_json("{temperature"); },
       "llm.params_json must be a JSON object"},
      {"params_json setting messages", [](v1::Task& t) { t.mutable_llm()->set_params_json(R"({"messages": []})"); },
       "llm.params_json must not set 'messages'"},
  };
  for (const auto& c : cases) {
    v1::Task task = PromptTask("t1");
    c.mutate(task);
    EXPECT_THAT(EffectiveTask(task, v1::TaskOverrides(), v1::RUNNER_SINGLE_TURN),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(std::string("task 't1': ") + c.message)))
        << c.name;
  }
}

TEST(EffectiveTask, AnAgentMayBeAHarnessByNameWithVariablesOfItsOwn) {
  v1::Task task = PromptTask();
  task.set_runner(v1::RUNNER_AGENT);
  task.mutable_verifier();
  task.mutable_agent()->set_harness("claude-code@2.1.332");
  (*task.mutable_agent()->mutable_command()->mutable_env())["MAX_THINKING_TOKENS"] = "0";
  EXPECT_THAT(EffectiveTask(task, v1::TaskOverrides(), v1::RUNNER_SINGLE_TURN), IsOk());
  (*task.mutable_agent()->mutable_command()->mutable_env())["NOT A NAME"] = "x";
  EXPECT_THAT(EffectiveTask(task, v1::TaskOverrides(), v1::RUNNER_SINGLE_TURN),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("agent.command.env: 'NOT A NAME'")));
}

TEST(EffectiveTask, NumericAnswerMayHaveCommas) {
  v1::Task task = PromptTask();
  task.mutable_reward()->set_function(v1::REWARD_FUNCTION_NUMERIC);
  task.set_answer(" 1,234.5 ");
  EXPECT_THAT(EffectiveTask(task, v1::TaskOverrides(), v1::RUNNER_SINGLE_TURN), IsOk());
}

// ------------------------------------------------------------------------------------------- BatchDigest

TEST(BatchDigest, EqualContentEqualDigestAnyChangeChangesIt) {
  v1::BatchSpec spec;
  spec.set_batch_id("b");
  spec.set_group_size(4);
  const std::vector<v1::Task> tasks = {PromptTask("t1"), PromptTask("t2")};
  const std::string digest = BatchDigest(spec, tasks);
  EXPECT_EQ(digest.size(), 64u);
  EXPECT_EQ(BatchDigest(spec, tasks), digest);

  v1::BatchSpec other_spec = spec;
  other_spec.set_group_size(5);
  EXPECT_NE(BatchDigest(other_spec, tasks), digest);
  std::vector<v1::Task> edited = tasks;
  edited[1].set_prompt("What is 3+3?");
  EXPECT_NE(BatchDigest(spec, edited), digest);
  EXPECT_NE(BatchDigest(spec, {tasks[1], tasks[0]}), digest);
  EXPECT_NE(BatchDigest(spec, {tasks[0]}), digest);
}

// -------------------------------------------------------------------------------------------- EpisodeSeed

TEST(EpisodeSeed, DeterministicAndDistinctPerPositionAndBatchSeed) {
  EXPECT_EQ(EpisodeSeed(42, 3, 1), EpisodeSeed(42, 3, 1));
  EXPECT_NE(EpisodeSeed(42, 3, 1), EpisodeSeed(42, 3, 2));
  EXPECT_NE(EpisodeSeed(42, 3, 1), EpisodeSeed(42, 4, 1));
  EXPECT_NE(EpisodeSeed(42, 0, 1), EpisodeSeed(42, 1, 0));
  EXPECT_NE(EpisodeSeed(42, 3, 1), EpisodeSeed(43, 3, 1));
}

// ------------------------------------------------------------------------------------------------- ids

TEST(EpisodeIds, EpisodeAndGroupIdsRoundTrip) {
  EXPECT_EQ(GroupId("b", 3), "b:g3");
  EXPECT_EQ(EpisodeId("b", 3, 7), "b:g3:e7");
  for (const std::string batch : {"b", "team:run:1", "x:g2:e5"}) {
    auto ep = ParseEpisodeId(EpisodeId(batch, 12, 4));
    ASSERT_THAT(ep, IsOk()) << batch;
    EXPECT_EQ(ep->batch_id, batch);
    EXPECT_EQ(ep->group_index, 12u);
    EXPECT_EQ(ep->index_in_group, 4u);
    auto group = ParseGroupId(GroupId(batch, 9));
    ASSERT_THAT(group, IsOk()) << batch;
    EXPECT_EQ(group->batch_id, batch);
    EXPECT_EQ(group->group_index, 9u);
  }
}

TEST(EpisodeIds, MalformedIdsAreInvalidAndNameTheField) {
  for (const char* bad : {"b", "b:g1", "b:g1:x2", ":g1:e2", "b:gx:e2", "b:g1:e"}) {
    EXPECT_THAT(ParseEpisodeId(bad, "episode_ids"),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("episode_ids")))
        << bad;
  }
  EXPECT_THAT(ParseGroupId("b:g1:e2"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("group_id")));
  EXPECT_THAT(ParseGroupId(":g1"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(EpisodeIds, OnlyCanonicalIdsParse) {
  for (const char* bad : {"b:g0:e01", "b:g0:e+1", "b:g0:e 1", "b:g00:e1"}) {
    EXPECT_THAT(ParseEpisodeId(bad), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
  EXPECT_THAT(ParseGroupId("b:g+1"), StatusIs(absl::StatusCode::kInvalidArgument));
}

// -------------------------------------------------------------------------------------------- TemplateKey

TEST(TemplateKey, EmptyWithoutSetup) {
  v1::EnvironmentSpec env;
  EXPECT_EQ(TemplateKey(env), "");
  env.add_files()->set_path("data.txt");
  EXPECT_EQ(TemplateKey(env), "");
}

TEST(TemplateKey, KeyedBySetupOnly) {
  v1::EnvironmentSpec env;
  env.add_setup_commands()->add_argv("pip");
  env.mutable_setup_commands(0)->add_argv("install");
  env.mutable_setup_commands(0)->add_argv("numpy");
  const std::string key = TemplateKey(env);
  EXPECT_THAT(key, ::testing::StartsWith("sha256-"));
  EXPECT_EQ(TemplateKey(env), key);

  v1::EnvironmentSpec with_task_files = env;
  auto* f = with_task_files.add_files();
  f->set_path("task/input.txt");
  f->set_content("per-task data");
  with_task_files.set_workdir("/workspace");
  EXPECT_EQ(TemplateKey(with_task_files), key);

  v1::EnvironmentSpec other_command = env;
  other_command.mutable_setup_commands(0)->set_argv(2, "pandas");
  EXPECT_NE(TemplateKey(other_command), key);

  v1::EnvironmentSpec other_setup_file = env;
  other_setup_file.add_setup_files()->set_path("setup.sh");
  EXPECT_NE(TemplateKey(other_setup_file), key);

  v1::EnvironmentSpec other_network = env;
  other_network.set_setup_network_policy(v1::NETWORK_POLICY_NONE);
  EXPECT_NE(TemplateKey(other_network), key);
}

}  // namespace
}  // namespace corral::scheduler
