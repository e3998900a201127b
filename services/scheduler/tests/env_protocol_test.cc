// OpenEnv's HTTP shape as pure functions: answers checked field by field, observations turned into messages,
// replies turned into actions, rewards summed or taken last; and MCP tool names.
#include "services/scheduler/episode/env_protocol.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "services/scheduler/episode/mcp_tools.h"

namespace corral::scheduler {
namespace {

namespace json = boost::json;
using ::testing::HasSubstr;

ChatReply Text(const std::string& text) {
  ChatReply r;
  r.content = text;
  return r;
}

ChatReply Call(const std::string& name, const std::string& arguments) {
  ChatReply r;
  r.tool_calls.push_back(ToolCallRequest{"call_1", name, arguments});
  return r;
}

TEST(ParseEnvAnswer, ReadsObservationRewardAndDone) {
  auto a = ParseEnvAnswer("POST /step", R"({"observation": {"prompt": "hi"}, "reward": 0.5, "done": true})");
  ASSERT_THAT(a, IsOk());
  EXPECT_EQ(a->observation.as_object().at("prompt"), "hi");
  EXPECT_EQ(a->reward, 0.5);
  EXPECT_TRUE(a->done);
}

TEST(ParseEnvAnswer, NullOrAbsentRewardAndDoneAreNoneAndFalse) {
  auto a = ParseEnvAnswer("POST /reset", R"({"observation": "start", "reward": null})");
  ASSERT_THAT(a, IsOk());
  EXPECT_FALSE(a->reward.has_value());
  EXPECT_FALSE(a->done);
}

TEST(ParseEnvAnswer, EachMalformedFieldIsNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {"not json", "is not JSON"},
      {"[1, 2]", "is not a JSON object"},
      {R"({"reward": 1})", "the field 'observation' is missing"},
      {R"({"observation": 1, "reward": "high"})", "the field 'reward' is not a number: high"},
      {R"({"observation": 1, "done": "yes"})", "the field 'done' is not a boolean: yes"},
      {R"({"observation": 1, "done": 1})", "the field 'done' is not a boolean: 1"},
  };
  for (const auto& [body, what] : cases) {
    auto a = ParseEnvAnswer("POST /step", body);
    EXPECT_THAT(a, StatusIs(absl::StatusCode::kInvalidArgument)) << body;
    EXPECT_THAT(std::string(a.status().message()), HasSubstr(absl::StrCat("to POST /step: ", what))) << body;
  }
}

TEST(ResetBody, CarriesSeedEpisodeAndTheTasksArguments) {
  json::value body = json::parse(ResetBody(42, "b:g0:e1", R"({"difficulty": "hard", "seed": 7})"));
  EXPECT_EQ(body.at("seed"), 7) << "the task's reset_json is merged over the defaults";
  EXPECT_EQ(body.at("episode_id"), "b:g0:e1");
  EXPECT_EQ(body.at("difficulty"), "hard");
  EXPECT_EQ(json::parse(ResetBody(42, "e", "")).at("seed"), 42);
}

TEST(ObservationText, PicksTheTextOfAnObservation) {
  v1::EnvServerSpec spec;
  auto text = [&](const std::string& answer) { return ObservationText(spec, *ParseEnvAnswer("x", answer)); };
  EXPECT_EQ(text(R"({"observation": "plain"})"), "plain");
  EXPECT_EQ(text(R"({"observation": {"board": "x", "prompt": "your move"}})"), "your move");
  EXPECT_EQ(text(R"({"observation": {"board": [1, 2]}})"), R"({"board":[1,2]})");
  spec.set_observation_format(v1::OBSERVATION_FORMAT_JSON);
  EXPECT_EQ(text(R"({"observation": {"prompt": "p"}})"), R"({"prompt":"p"})");
  spec.set_observation_template("Board: {{observation.board}} (reward {{ reward }}, {{missing.path}}done {{done}})");
  EXPECT_EQ(text(R"({"observation": {"board": "X.O"}, "reward": 1, "done": false})"),
            "Board: X.O (reward 1, done false)");
}

TEST(ActionOf, MessageJsonAndToolCallFormats) {
  v1::EnvServerSpec spec;
  EXPECT_EQ(json::serialize(*ActionOf(spec, Text("e2e4"))), R"({"message":"e2e4"})");
  spec.set_action_field("move");
  EXPECT_EQ(json::serialize(*ActionOf(spec, Text("e2e4"))), R"({"move":"e2e4"})");
  spec.set_action_format(v1::ACTION_FORMAT_JSON);
  EXPECT_EQ(json::serialize(*ActionOf(spec, Text("```json\n{\"x\": 1}\n```"))), R"({"x":1})");
  EXPECT_THAT(ActionOf(spec, Text("move x")), StatusIs(absl::StatusCode::kInvalidArgument));
  spec.set_action_format(v1::ACTION_FORMAT_TOOL_CALL);
  EXPECT_EQ(json::serialize(*ActionOf(spec, Call("move", R"({"to": "e4"})"))), R"({"to":"e4"})");
  auto none = ActionOf(spec, Text("I move to e4"));
  EXPECT_THAT(none, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("call one of the tools"));
  EXPECT_THAT(ActionOf(spec, Call("move", "{broken")), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ActionOf, TemplateFillsTextToolAndArguments) {
  v1::EnvServerSpec spec;
  spec.set_action_template(R"({"type": "{{tool}}", "args": "{{arguments}}", "say": ["{{text}}"]})");
  ChatReply r = Call("play", R"({"card": 3})");
  r.content = "thinking";
  EXPECT_EQ(json::serialize(*ActionOf(spec, r)), R"({"type":"play","args":{"card":3},"say":["thinking"]})");
  EXPECT_THAT(ActionOf(spec, Text("no call")), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(EnvReward, SumsOrTakesTheLast) {
  v1::EnvServerSpec spec;
  EXPECT_EQ(EnvReward(spec, {}), 0);
  EXPECT_EQ(EnvReward(spec, {1, 0, 0.5}), 1.5);
  spec.set_reward_mode(v1::ENV_REWARD_MODE_LAST);
  EXPECT_EQ(EnvReward(spec, {1, 0, 0.5}), 0.5);
}

TEST(McpToolName, PrefixesTheServerAndKeepsToTheFunctionNameCharset) {
  EXPECT_EQ(McpToolName("fs", "read_text_file"), "fs__read_text_file");
  EXPECT_EQ(McpToolName("web", "search.v2/query"), "web__search_v2_query");
  EXPECT_EQ(McpToolName("s", std::string(100, 'a')).size(), 64u);
}

TEST(McpConfigJson, IsTheMcpServersShapeAgentsRead) {
  v1::Task t;
  v1::McpServerSpec* m = t.add_mcp_servers();
  m->set_name("fs");
  for (const char* arg : {"node", "server.js", "/workspace"}) m->mutable_command()->add_argv(arg);
  (*m->mutable_command()->mutable_env())["DEBUG"] = "1";
  EXPECT_EQ(McpConfigJson(t, "/h"),
            R"({"mcpServers":{"fs":{"command":"node","args":["server.js","/workspace"],"env":{"DEBUG":"1"}}}})");
}

TEST(McpConfigJson, GivesAServerOverHttpAsItsRelayAStdioServerThatStartsIt) {
  v1::Task t;
  v1::McpServerSpec* m = t.add_mcp_servers();
  m->set_name("web");
  for (const char* arg : {"node", "server.js", "streamableHttp"}) m->mutable_command()->add_argv(arg);
  (*m->mutable_command()->mutable_env())["PORT"] = "3001";
  m->set_unix_socket("run/mcp.sock");
  const boost::json::value config = boost::json::parse(McpConfigJson(t, "/h"));
  const boost::json::object& web = config.at("mcpServers").at("web").as_object();
  EXPECT_EQ(web.at("command"), "python3");
  ASSERT_EQ(web.at("args").as_array().size(), 3u);
  EXPECT_EQ(web.at("args").as_array()[1], "-c");
  EXPECT_NE(std::string(web.at("args").as_array()[2].as_string()).find("server/discover"), std::string::npos)
      << "the relay program speaks MCP over HTTP";
  const boost::json::value relay = boost::json::parse(std::string(web.at("env").at("__CORRAL_RELAY").as_string()));
  EXPECT_EQ(relay.at("argv"), boost::json::parse(R"(["node", "server.js", "streamableHttp"])"));
  EXPECT_EQ(relay.at("env").at("PORT"), "3001");
  EXPECT_EQ(relay.at("socket"), "/h/run/mcp.sock");
  EXPECT_EQ(relay.at("port"), 0);
  EXPECT_EQ(relay.at("path"), "/mcp");
  EXPECT_EQ(relay.at("log"), "/h/.corral/mcp-web.log");
}

}  // namespace
}  // namespace corral::scheduler
