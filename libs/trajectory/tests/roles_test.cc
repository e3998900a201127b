// Roles of recorded calls (roles.h): rules as data, and what the session as a whole shows — side calls without
// tools, retries, compaction and subagents — with the agent's conversation kept in one branch throughout.
#include "libs/trajectory/roles.h"

#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/trajectory/tests/chat_message.h"
#include "libs/trajectory/trajectory.h"

namespace corral {
namespace {

using ::testing::ElementsAre;

using testing::Msg;

v1::ChatMessage ToolCall(const std::string& name, const std::string& arguments) {
  v1::ChatMessage m = Msg("assistant", "");
  v1::ToolCall* tc = m.add_tool_calls();
  tc->set_id("call_" + name);
  tc->set_type("function");
  tc->set_function_name(name);
  tc->set_arguments(arguments);
  return m;
}

constexpr char kTools[] = R"([{"type":"function","function":{"name":"bash"}}])";

RecordedCall Call(std::vector<v1::ChatMessage> prompt, v1::ChatMessage reply, bool tools = true,
                  const std::string& model = "m") {
  RecordedCall c;
  for (v1::ChatMessage& m : prompt) *c.add_prompt() = std::move(m);
  *c.mutable_response() = std::move(reply);
  if (tools) c.mutable_call()->set_tools_json(kTools);
  c.mutable_call()->set_requested_model(model);
  return c;
}

v1::Trajectory Calls(const TrajectoryStore& store) {
  v1::Trajectory t;
  store.Export(v1::TRAJECTORY_FORMAT_CALLS, &t);
  return t;
}

std::vector<v1::CallRole> CallRoles(const v1::Trajectory& t) {
  std::vector<v1::CallRole> roles;
  for (const v1::LlmCall& c : t.calls()) roles.push_back(c.role());
  return roles;
}

std::vector<v1::CallRole> BranchRoles(const v1::Trajectory& t) {
  std::vector<v1::CallRole> roles;
  for (const v1::Branch& b : t.branches()) roles.push_back(b.role());
  return roles;
}

// The calls of a CALLS export recorded again into a store without rules, as the scheduler does with a proxy's
// trajectory: the roles must come out the same.
v1::Trajectory Replayed(const v1::Trajectory& calls) {
  TrajectoryStore store(calls.env_id());
  for (const v1::LlmCall& call : calls.calls()) {
    RecordedCall r;
    *r.mutable_call() = call;
    std::vector<v1::ChatMessage> chain;
    for (std::optional<uint32_t> at = call.prompt_last_message(); at;) {
      const v1::MessageNode& n = calls.messages(static_cast<int>(*at));
      chain.insert(chain.begin(), n.message());
      at = n.has_parent() ? std::optional(n.parent()) : std::nullopt;
    }
    for (v1::ChatMessage& m : chain) *r.add_prompt() = std::move(m);
    *r.mutable_response() = calls.messages(static_cast<int>(call.response_message())).message();
    r.mutable_call()->clear_prompt_last_message();
    r.mutable_call()->clear_response_message();
    store.Record(std::move(r));
  }
  return Calls(store);
}

RoleRules OpenCodeLikeRules() {
  RoleRules rules;
  v1::CallRoleRule& title = *rules.Add();
  title.set_role(v1::CALL_ROLE_AUXILIARY);
  title.set_reason("title generator");
  title.set_system_prefix("You are a title generator");
  v1::CallRoleRule& summary = *rules.Add();
  summary.set_role(v1::CALL_ROLE_AUXILIARY);
  summary.set_reason("summary request");
  summary.set_user_contains("create a detailed summary");
  return rules;
}

TEST(CallRolesTest, SideCallsGetTheirOwnBranchesAndTheAgentKeepsOne) {
  TrajectoryStore store("env", OpenCodeLikeRules());
  // The title call comes first (harnesses make it beside the first turn), with the user's words and no tools.
  store.Record(
      Call({Msg("system", "You are a title generator. You output ONLY a thread title."), Msg("user", "fix the bug")},
           Msg("assistant", "Fixing the bug"), /*tools=*/false));
  std::vector<v1::ChatMessage> agent = {Msg("system", "You are an agent."), Msg("user", "fix the bug")};
  store.Record(Call(agent, ToolCall("bash", R"({"command":"make"})")));
  agent.push_back(ToolCall("bash", R"({"command":"make"})"));
  agent.push_back(Msg("tool", "ok"));
  // A summary request that extends the agent's conversation, tools and all: a side call all the same.
  std::vector<v1::ChatMessage> summary = agent;
  summary.push_back(Msg("user", "Your task is to create a detailed summary of the conversation so far."));
  store.Record(Call(summary, Msg("assistant", "We ran make.")));
  store.Record(Call(agent, Msg("assistant", "Fixed.")));
  const v1::Trajectory t = Calls(store);
  EXPECT_THAT(CallRoles(t),
              ElementsAre(v1::CALL_ROLE_AUXILIARY, v1::CALL_ROLE_AGENT, v1::CALL_ROLE_AUXILIARY, v1::CALL_ROLE_AGENT));
  EXPECT_EQ(t.calls(0).role_reason(), "title generator");
  EXPECT_EQ(t.calls(2).role_reason(), "summary request");
  ASSERT_THAT(BranchRoles(t), ElementsAre(v1::CALL_ROLE_AUXILIARY, v1::CALL_ROLE_AGENT, v1::CALL_ROLE_AUXILIARY));
  EXPECT_THAT(t.branches(1).call_ids(), ElementsAre("env/1", "env/3")) << "the agent's turns in one branch";
  EXPECT_EQ(t.calls_by_role().agent(), 2u);
  EXPECT_EQ(t.calls_by_role().auxiliary(), 2u);
  const v1::Trajectory again = Replayed(t);
  EXPECT_EQ(CallRoles(again), CallRoles(t));
  EXPECT_EQ(BranchRoles(again), BranchRoles(t));

  v1::Trajectory conversations;
  store.Export(v1::TRAJECTORY_FORMAT_TRAJECTORY, &conversations);
  ASSERT_EQ(conversations.branches_size(), 3);
  EXPECT_EQ(conversations.branches(1).role(), v1::CALL_ROLE_AGENT);
  EXPECT_EQ(conversations.branches(1).messages(2).role(), v1::CALL_ROLE_AGENT);  // the model's tool call
  EXPECT_EQ(conversations.branches(2).messages().rbegin()->role(), v1::CALL_ROLE_AUXILIARY);
}

TEST(CallRolesTest, WithoutRulesACallWithoutToolsBesideAnAgentWithToolsIsAuxiliary) {
  TrajectoryStore store("env");
  store.Record(Call({Msg("system", "Name this chat."), Msg("user", "list files")}, Msg("assistant", "Files"),
                    /*tools=*/false));
  std::vector<v1::ChatMessage> agent = {Msg("system", "agent"), Msg("user", "list files")};
  store.Record(Call(agent, ToolCall("bash", R"({"command":"ls"})")));
  agent.push_back(ToolCall("bash", R"({"command":"ls"})"));
  agent.push_back(Msg("tool", "a b"));
  std::vector<v1::ChatMessage> side = agent;
  side.push_back(Msg("user", "Is this a new topic? Answer yes or no."));
  store.Record(Call(side, Msg("assistant", "no"), /*tools=*/false));
  store.Record(Call(agent, Msg("assistant", "a and b")));
  const v1::Trajectory t = Calls(store);
  EXPECT_THAT(CallRoles(t),
              ElementsAre(v1::CALL_ROLE_AUXILIARY, v1::CALL_ROLE_AGENT, v1::CALL_ROLE_AUXILIARY, v1::CALL_ROLE_AGENT));
  EXPECT_EQ(t.calls(0).role_reason(), "no tools, while the agent's calls offer them");
  EXPECT_THAT(t.branches(1).call_ids(), ElementsAre("env/1", "env/3"));
  EXPECT_EQ(CallRoles(Replayed(t)), CallRoles(t));

  // A task without tools at all is all the agent's.
  TrajectoryStore plain("env");
  plain.Record(Call({Msg("user", "2+2?")}, Msg("assistant", "4"), /*tools=*/false));
  EXPECT_THAT(CallRoles(Calls(plain)), ElementsAre(v1::CALL_ROLE_AGENT));
}

TEST(CallRolesTest, AnAgentRuleKeepsAToollessLastTurnInTheAgentsConversation) {
  RoleRules rules;
  v1::CallRoleRule& r = *rules.Add();
  r.set_role(v1::CALL_ROLE_AGENT);
  r.set_reason("final answer turn");
  r.set_user_contains("Now give your final answer");
  r.set_tools(v1::CallRoleRule::TOOLS_NONE);
  for (const bool with_rule : {false, true}) {
    TrajectoryStore store("env", with_rule ? rules : RoleRules());
    std::vector<v1::ChatMessage> agent = {Msg("user", "count the files")};
    store.Record(Call(agent, ToolCall("bash", R"({"command":"ls | wc -l"})")));
    agent.push_back(ToolCall("bash", R"({"command":"ls | wc -l"})"));
    agent.push_back(Msg("tool", "3"));
    agent.push_back(Msg("user", "Now give your final answer."));
    store.Record(Call(agent, Msg("assistant", "3 files"), /*tools=*/false));
    const v1::Trajectory t = Calls(store);
    if (with_rule) {
      EXPECT_THAT(CallRoles(t), ElementsAre(v1::CALL_ROLE_AGENT, v1::CALL_ROLE_AGENT));
      EXPECT_EQ(t.branches_size(), 1);
    } else {
      EXPECT_THAT(CallRoles(t), ElementsAre(v1::CALL_ROLE_AGENT, v1::CALL_ROLE_AUXILIARY)) << "the documented limit";
    }
  }
}

TEST(CallRolesTest, APromptSampledAgainIsARetryUnlessTheConversationWentOnFromIt) {
  TrajectoryStore store("env");
  std::vector<v1::ChatMessage> prompt = {Msg("user", "pick a tool")};
  store.Record(Call(prompt, ToolCall("bash", R"({"command":"bad"})")));   // the harness rejects this one
  store.Record(Call(prompt, ToolCall("bash", R"({"command":"good"})")));  // and samples again
  prompt.push_back(ToolCall("bash", R"({"command":"good"})"));
  prompt.push_back(Msg("tool", "fine"));
  store.Record(Call(prompt, Msg("assistant", "done, first try")));
  store.Record(Call(prompt, Msg("assistant", "done")));  // the last turn sampled again: the latest is kept
  const v1::Trajectory t = Calls(store);
  EXPECT_THAT(CallRoles(t),
              ElementsAre(v1::CALL_ROLE_RETRY, v1::CALL_ROLE_AGENT, v1::CALL_ROLE_RETRY, v1::CALL_ROLE_AGENT));
  EXPECT_EQ(t.calls(0).role_reason(), "the same prompt as env/1, whose answer the conversation went on from");
  EXPECT_EQ(t.calls(2).role_reason(), "the same prompt as env/3, whose answer came later");
  ASSERT_THAT(BranchRoles(t), ElementsAre(v1::CALL_ROLE_RETRY, v1::CALL_ROLE_RETRY, v1::CALL_ROLE_AGENT));
  EXPECT_THAT(t.branches(2).call_ids(), ElementsAre("env/3"));
  EXPECT_EQ(t.branches(2).shared_prefix_messages(), 3u) << "the kept answer's branch holds the whole conversation";
  EXPECT_EQ(t.calls_by_role().retry(), 2u);
  EXPECT_EQ(CallRoles(Replayed(t)), CallRoles(t));

  // A side call appended to an answer does not make the conversation go on from it.
  TrajectoryStore side("env");
  std::vector<v1::ChatMessage> p = {Msg("user", "pick a tool")};
  side.Record(Call(p, ToolCall("bash", R"({"command":"first"})")));
  std::vector<v1::ChatMessage> title = p;
  title.push_back(ToolCall("bash", R"({"command":"first"})"));
  title.push_back(Msg("user", "Name this conversation."));
  side.Record(Call(title, Msg("assistant", "Tools"), /*tools=*/false));
  side.Record(Call(p, ToolCall("bash", R"({"command":"second"})")));
  EXPECT_THAT(CallRoles(Calls(side)), ElementsAre(v1::CALL_ROLE_RETRY, v1::CALL_ROLE_AUXILIARY, v1::CALL_ROLE_AGENT));
}

TEST(CallRolesTest, ANewConversationCarryingASummaryIsCompactionLinkedToTheAgent) {
  TrajectoryStore store("env");
  std::vector<v1::ChatMessage> agent = {Msg("system", "agent"), Msg("user", "port the parser")};
  store.Record(Call(agent, ToolCall("bash", R"({"command":"ls src"})")));
  agent.push_back(ToolCall("bash", R"({"command":"ls src"})"));
  agent.push_back(Msg("tool", "parser.c lexer.c"));
  const std::string summary =
      "We listed src: parser.c and lexer.c. Next: port parser.c to Rust, keeping the lexer's token names.";
  std::vector<v1::ChatMessage> ask = agent;
  ask.push_back(Msg("user", "Summarize the conversation so far."));
  store.Record(Call(ask, Msg("assistant", summary), /*tools=*/false));
  std::vector<v1::ChatMessage> continued = {Msg("system", "agent"),
                                            Msg("user", "This continues an earlier session. Summary:\n" + summary)};
  store.Record(Call(continued, ToolCall("bash", R"({"command":"cargo new parser"})")));
  continued.push_back(ToolCall("bash", R"({"command":"cargo new parser"})"));
  continued.push_back(Msg("tool", "created"));
  store.Record(Call(continued, Msg("assistant", "Ported.")));
  const v1::Trajectory t = Calls(store);
  EXPECT_THAT(CallRoles(t), ElementsAre(v1::CALL_ROLE_AGENT, v1::CALL_ROLE_AUXILIARY, v1::CALL_ROLE_COMPACTION,
                                        v1::CALL_ROLE_COMPACTION));
  EXPECT_EQ(t.calls(2).linked_call_id(), "env/1");
  EXPECT_EQ(t.calls(2).role_reason(), "continues from the answer of env/1");
  ASSERT_EQ(t.branches_size(), 3);
  EXPECT_EQ(t.branches(2).role(), v1::CALL_ROLE_COMPACTION);
  EXPECT_EQ(t.branches(2).linked_branch(), 0u) << "linked to the agent's branch, not the summary's";
  EXPECT_THAT(t.branches(2).call_ids(), ElementsAre("env/2", "env/3"));
  EXPECT_EQ(CallRoles(Replayed(t)), CallRoles(t));
}

TEST(CallRolesTest, ACompactionRuleLinksToTheLatestSummary) {
  RoleRules rules;
  v1::CallRoleRule& r = *rules.Add();
  r.set_role(v1::CALL_ROLE_COMPACTION);
  r.set_reason("continued (harness)");
  r.set_user_contains("What did we do so far?");
  TrajectoryStore store("env", rules);
  std::vector<v1::ChatMessage> agent = {Msg("system", "agent"), Msg("user", "task")};
  store.Record(Call(agent, ToolCall("bash", R"({"command":"ls"})")));
  const std::string summary = "So far we listed the directory and found the two sources that need porting today.";
  store.Record(Call({Msg("system", "Summarize."), Msg("user", "the conversation")}, Msg("assistant", summary), false));
  // The summary comes back as an assistant message after the harness's own question.
  store.Record(Call({Msg("system", "agent"), Msg("user", "What did we do so far?"), Msg("assistant", summary)},
                    ToolCall("bash", R"({"command":"make"})")));
  const v1::Trajectory t = Calls(store);
  EXPECT_THAT(CallRoles(t), ElementsAre(v1::CALL_ROLE_AGENT, v1::CALL_ROLE_AUXILIARY, v1::CALL_ROLE_COMPACTION));
  EXPECT_EQ(t.calls(2).role_reason(), "continued (harness)");
  EXPECT_EQ(t.calls(2).linked_call_id(), "env/1");
  EXPECT_EQ(CallRoles(Replayed(t)), CallRoles(t));
}

TEST(CallRolesTest, AConversationStartedByAToolCallsArgumentIsASubagent) {
  TrajectoryStore store("env");
  const std::string task = "Find every TODO under src and list the files that have one";
  std::vector<v1::ChatMessage> agent = {Msg("system", "agent"), Msg("user", "clean up the TODOs")};
  store.Record(Call(agent, ToolCall("Task", R"({"description":"todos","prompt":")" + task + R"("})")));
  store.Record(Call({Msg("system", "You are a search agent."), Msg("user", task)},
                    ToolCall("bash", R"({"command":"grep -rl TODO src"})")));
  const v1::Trajectory t = Calls(store);
  EXPECT_THAT(CallRoles(t), ElementsAre(v1::CALL_ROLE_AGENT, v1::CALL_ROLE_SUBAGENT));
  EXPECT_EQ(t.calls(1).role_reason(), "its first message is an argument of Task in env/0");
  EXPECT_EQ(t.branches(1).linked_branch(), 0u);
  EXPECT_EQ(t.calls_by_role().subagent(), 1u);
  EXPECT_EQ(CallRoles(Replayed(t)), CallRoles(t));
}

TEST(CallRolesTest, RulesNeedEveryConditionTheySetAndAreValidated) {
  RoleRules rules;
  v1::CallRoleRule& r = *rules.Add();
  r.set_role(v1::CALL_ROLE_AUXILIARY);
  r.set_reason("side model");
  r.add_models("claude-haiku");
  r.set_tools(v1::CallRoleRule::TOOLS_NONE);
  EXPECT_TRUE(ValidateRoleRules(rules).ok());
  EXPECT_FALSE(MatchRoleRule(rules, Call({Msg("user", "x")}, Msg("assistant", "y"), false, "claude-opus")));
  EXPECT_FALSE(MatchRoleRule(rules, Call({Msg("user", "x")}, Msg("assistant", "y"), true, "claude-haiku")));
  const auto matched = MatchRoleRule(rules, Call({Msg("user", "x")}, Msg("assistant", "y"), false, "claude-haiku"));
  ASSERT_TRUE(matched);
  EXPECT_EQ(matched->role, v1::CALL_ROLE_AUXILIARY);
  EXPECT_EQ(matched->reason, "side model");

  RoleRules bad = rules;
  bad.Add()->set_role(v1::CALL_ROLE_AUXILIARY);
  EXPECT_THAT(std::string(ValidateRoleRules(bad).message()), ::testing::HasSubstr("role_rules[1] has no condition"));
  bad[1].set_user_contains("x");
  EXPECT_THAT(std::string(ValidateRoleRules(bad).message()), ::testing::HasSubstr("role_rules[1].reason is empty"));
  bad[1].set_reason("r");
  bad[1].set_role(v1::CALL_ROLE_RETRY);
  EXPECT_THAT(std::string(ValidateRoleRules(bad).message()), ::testing::HasSubstr("role_rules[1].role must be"));
}

TEST(CallRolesTest, StringArgumentsAndCarriedAnswersIgnoreWhatIsTooShortOrNotJson) {
  EXPECT_THAT(StringArguments(R"({"a":"short","b":["a long enough argument"],"c":{"d":"  another long one here "}})"),
              ElementsAre("a long enough argument", "another long one here"));
  EXPECT_TRUE(StringArguments("not json {").empty());
  EXPECT_FALSE(CarriesAnswer("the title", "the title"));
  const std::string answer(70, 'x');
  EXPECT_TRUE(CarriesAnswer("summary: " + answer + " (end)", "\n" + answer + "\n"));
}

}  // namespace
}  // namespace corral
