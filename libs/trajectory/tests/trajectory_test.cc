#include "libs/trajectory/trajectory.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/trajectory/tests/chat_message.h"

namespace corral {
namespace {

using testing::Msg;

// A call whose prompt is `prompt` and whose reply is `reply`, with token ids when given.
RecordedCall Call(std::vector<v1::ChatMessage> prompt, const std::string& reply, std::vector<int32_t> prompt_ids = {},
                  std::vector<int32_t> completion_ids = {}) {
  RecordedCall c;
  for (v1::ChatMessage& m : prompt) *c.add_prompt() = std::move(m);
  *c.mutable_response() = Msg("assistant", reply);
  for (int32_t id : prompt_ids) c.mutable_call()->add_prompt_token_ids(id);
  for (int32_t id : completion_ids) {
    c.mutable_call()->add_completion_token_ids(id);
    c.mutable_call()->add_completion_logprobs(-0.5f);
  }
  return c;
}

// The hash is part of the trajectory a trainer gets (MessageNode.hash): its spelling must not change. Pinned on
// messages with every field and the characters JSON escapes.
TEST(TrajectoryStoreTest, ChainHashesAreStable) {
  EXPECT_EQ(TrajectoryStore::ChainHash("", v1::ChatMessage()),
            "28a3a18f6cd6406b086e9ffda1f9b8a13dbcf44b0f3f32cb9031a11fd053acf9");  // sha256("\\0{}")
  EXPECT_EQ(TrajectoryStore::ChainHash("", Msg("user", "hello")),
            "8ed074c722f2636be2e0939e0c4b2480154c8f29a159dff1473b0fb113b0e6c7");
  v1::ChatMessage m = Msg("assistant", "quote \" backslash \\ slash / tab \t newline \n nul " + std::string(1, '\0') +
                                           " bell \x07 del \x7f utf-8 \xc3\xa9 \xe2\x82\xac");
  m.set_content_parts_json(R"([{"type":"text","text":"x"}])");
  m.set_reasoning_content("thinking");
  auto* tc = m.add_tool_calls();
  tc->set_id("call_1");
  tc->set_type("function");
  tc->set_function_name("run");
  tc->set_arguments(R"({"cmd":"ls -l"})");
  m.add_tool_calls()->set_id("call_2");  // the other fields empty
  m.set_tool_call_id("t1");
  m.set_name("bob");
  EXPECT_EQ(TrajectoryStore::ChainHash(TrajectoryStore::ChainHash("", Msg("user", "hello")), m),
            "456a036d59c255d7b6fa022f137285d494675fe9db94d30a12c24f499e320fad");
}

TEST(TrajectoryStoreTest, AThirtyTurnToolConversationStoresEachMessageOnce) {
  TrajectoryStore store("env-1");
  std::vector<v1::ChatMessage> history = {Msg("system", "you are an agent"), Msg("user", "fix the bug")};
  for (int turn = 0; turn < 30; ++turn) {
    const std::string reply = "call tool " + std::to_string(turn);
    store.Record(Call(history, reply));
    history.push_back(Msg("assistant", reply));
    history.push_back(Msg("tool", "result " + std::to_string(turn)));
  }
  // 2 initial messages + 30 replies + 30 tool results (the last one never sent), each stored once.
  EXPECT_EQ(store.nodes(), 2u + 30u + 29u);
  EXPECT_EQ(store.branches(), 1u);
  v1::Trajectory t;
  store.Export(v1::TRAJECTORY_FORMAT_TRAJECTORY, &t);
  ASSERT_EQ(t.branches_size(), 1);
  const v1::Branch& b = t.branches(0);
  EXPECT_EQ(b.messages_size(), 61);
  EXPECT_EQ(b.call_ids_size(), 30);
  EXPECT_FALSE(b.messages(0).generated());
  EXPECT_TRUE(b.messages(2).generated());   // the first reply
  EXPECT_FALSE(b.messages(3).generated());  // the tool result the agent sent back
  EXPECT_EQ(b.messages(60).message().content(), "call tool 29");
}

TEST(TrajectoryStoreTest, ARewrittenHistoryForksFromTheLongestCommonPrefix) {
  TrajectoryStore store("env-1");
  std::vector<v1::ChatMessage> h = {Msg("system", "s"), Msg("user", "u1")};
  store.Record(Call(h, "a1"));
  h.push_back(Msg("assistant", "a1"));
  h.push_back(Msg("user", "u2"));
  store.Record(Call(h, "a2"));
  // The agent summarises: the history after the system prompt is replaced.
  std::vector<v1::ChatMessage> summarised = {Msg("system", "s"), Msg("user", "summary of u1 a1 u2")};
  const v1::LlmCall& forked = store.Record(Call(summarised, "a3"));
  EXPECT_EQ(forked.branch(), 1u);
  EXPECT_EQ(store.branches(), 2u);
  v1::Trajectory t;
  store.Export(v1::TRAJECTORY_FORMAT_CALLS, &t);
  ASSERT_EQ(t.branches_size(), 2);
  EXPECT_EQ(t.branches(1).parent_branch(), 0u);
  EXPECT_EQ(t.branches(1).shared_prefix_messages(), 1u);  // the system prompt
  EXPECT_EQ(t.messages_size(), 7);                        // s, u1, a1, u2, a2, summary, a3: nothing duplicated
  EXPECT_EQ(t.calls(2).call_id(), "env-1/2");
  // Continuing the summarised conversation stays on branch 1.
  summarised.push_back(Msg("assistant", "a3"));
  summarised.push_back(Msg("user", "u4"));
  EXPECT_EQ(store.Record(Call(summarised, "a4")).branch(), 1u);
}

TEST(TrajectoryStoreTest, TheFlatTokenViewSplicesPromptsAndMarksGeneratedTokens) {
  TrajectoryStore store("env-1");
  std::vector<v1::ChatMessage> h = {Msg("user", "q")};
  store.Record(Call(h, "a", {1, 2, 3}, {10, 11}));
  h.push_back(Msg("assistant", "a"));
  h.push_back(Msg("user", "q2"));
  store.Record(Call(h, "b", {1, 2, 3, 10, 11, 4, 5}, {12}));
  v1::Trajectory t;
  store.Export(v1::TRAJECTORY_FORMAT_TRAJECTORY, &t);
  const v1::Branch& b = t.branches(0);
  EXPECT_THAT(b.token_ids(), ::testing::ElementsAre(1, 2, 3, 10, 11, 4, 5, 12));
  EXPECT_THAT(b.token_generated(), ::testing::ElementsAre(false, false, false, true, true, false, false, true));
  EXPECT_TRUE(b.tokens_consistent());
  EXPECT_THAT(b.messages(1).token_ids(), ::testing::ElementsAre(10, 11));
  EXPECT_FLOAT_EQ(b.token_logprobs(3), -0.5f);
  // A prompt that does not extend the previous context is spliced whole and flagged.
  h.push_back(Msg("assistant", "b"));
  h.push_back(Msg("user", "q3"));
  store.Record(Call(h, "c", {9, 9, 9}, {13}));
  v1::Trajectory t2;
  store.Export(v1::TRAJECTORY_FORMAT_TRAJECTORY, &t2);
  EXPECT_FALSE(t2.branches(0).tokens_consistent());
}

TEST(TrajectoryStoreTest, TokenVersionsFollowEachCallsVersionAndTheUpdatesThatCrossedIt) {
  TrajectoryStore store("env-1");
  std::vector<v1::ChatMessage> h = {Msg("user", "q")};
  RecordedCall first = Call(h, "a", {1, 2}, {10, 11, 12});
  first.mutable_call()->set_policy_version(3);
  v1::PolicyVersionChange* change = first.mutable_call()->add_version_changes();
  change->set_completion_token(2);  // an update arrived after two tokens
  change->set_version(4);
  store.Record(std::move(first));
  h.push_back(Msg("assistant", "a"));
  h.push_back(Msg("user", "q2"));
  RecordedCall second = Call(h, "b", {1, 2, 10, 11, 12, 5}, {13});
  second.mutable_call()->set_policy_version(4);
  store.Record(std::move(second));
  v1::Trajectory t;
  store.Export(v1::TRAJECTORY_FORMAT_TRAJECTORY, &t);
  const v1::Branch& b = t.branches(0);
  EXPECT_THAT(b.token_ids(), ::testing::ElementsAre(1, 2, 10, 11, 12, 5, 13));
  EXPECT_THAT(b.token_versions(), ::testing::ElementsAre(-1, -1, 3, 3, 4, -1, 4));
  EXPECT_EQ(t.first_policy_version(), 3);
  EXPECT_EQ(t.last_policy_version(), 4);
  // A failed call's version does not count; a trajectory with no successful call has no span.
  TrajectoryStore failed_only("env-2");
  RecordedCall failed = Call({Msg("user", "q")}, "x");
  failed.mutable_call()->set_policy_version(9);
  failed.mutable_call()->set_error("upstream disconnected mid-stream");
  failed_only.Record(std::move(failed));
  v1::Trajectory none;
  failed_only.Export(v1::TRAJECTORY_FORMAT_CALLS, &none);
  EXPECT_FALSE(none.has_first_policy_version());
  EXPECT_FALSE(none.has_last_policy_version());
}

TEST(TrajectoryStoreTest, FailedCallsCountAndKeepTheirPrompt) {
  TrajectoryStore store("env-1");
  RecordedCall failed;
  *failed.add_prompt() = Msg("user", "q");
  failed.mutable_call()->set_error("upstream disconnected mid-stream");
  store.Record(std::move(failed));
  v1::Trajectory t;
  store.Export(v1::TRAJECTORY_FORMAT_CALLS, &t);
  EXPECT_EQ(t.call_count(), 1u);
  EXPECT_EQ(t.failed_call_count(), 1u);
  EXPECT_FALSE(t.calls(0).has_response_message());
  EXPECT_EQ(t.messages_size(), 1);
}

// The model's tool call as a backend answers it, and as a harness sends it back on the next turn.
v1::ChatMessage ToolCallMessage(const std::string& id, const std::string& arguments, const std::string& content = "") {
  v1::ChatMessage m = Msg("assistant", content);
  v1::ToolCall* tc = m.add_tool_calls();
  tc->set_id(id);
  tc->set_type("function");
  tc->set_function_name("bash");
  tc->set_arguments(arguments);
  return m;
}
v1::ChatMessage ToolResult(const std::string& id, const std::string& content) {
  v1::ChatMessage m = Msg("tool", content);
  m.set_tool_call_id(id);
  return m;
}
RecordedCall CallReplying(std::vector<v1::ChatMessage> prompt, v1::ChatMessage reply) {
  RecordedCall c;
  for (v1::ChatMessage& m : prompt) *c.add_prompt() = std::move(m);
  *c.mutable_response() = std::move(reply);
  return c;
}

TEST(TrajectoryStoreRestoreTest, ReEncodedArgumentsAndRenamedIdsAreTheModelsMessageAndTheBranchContinues) {
  TrajectoryStore store("env-1");
  const v1::ChatMessage sampled = ToolCallMessage("call_1", R"({"command": "echo hi"})");
  store.Record(CallReplying({Msg("user", "say hi")}, sampled));
  // The harness sends the call back re-encoded, under its own id, and the tool result under that id.
  std::vector<v1::ChatMessage> prompt = {Msg("user", "say hi"), ToolCallMessage("toolu_9", R"({"command":"echo hi"})"),
                                         ToolResult("toolu_9", "hi")};
  const std::vector<v1::RestoredMessage> restored = store.Restore(prompt);
  ASSERT_EQ(restored.size(), 2u);
  EXPECT_EQ(restored[0].index(), 1u);
  EXPECT_THAT(restored[0].changes(), ::testing::ElementsAre("arguments re-encoded", "tool-call ids"));
  EXPECT_EQ(restored[1].index(), 2u);
  EXPECT_THAT(restored[1].changes(), ::testing::ElementsAre("tool_call_id"));
  EXPECT_EQ(prompt[1].SerializeAsString(), sampled.SerializeAsString());
  EXPECT_EQ(prompt[2].tool_call_id(), "call_1");
  // Recorded as restored, the second turn continues the first one's branch.
  store.Record(CallReplying(prompt, Msg("assistant", "done")));
  v1::Trajectory t;
  store.Export(v1::TRAJECTORY_FORMAT_TRAJECTORY, &t);
  ASSERT_EQ(t.branches_size(), 1);
  EXPECT_EQ(t.branches(0).call_ids_size(), 2);
  EXPECT_EQ(t.branches(0).messages_size(), 4);
  // The third turn: the earlier tool result, sent under the harness's id again, is found as stored.
  std::vector<v1::ChatMessage> third = {Msg("user", "say hi"), ToolCallMessage("toolu_9", R"({"command":"echo hi"})"),
                                        ToolResult("toolu_9", "hi"), Msg("assistant", "done"), Msg("user", "again")};
  EXPECT_EQ(store.Restore(third).size(), 2u);
  EXPECT_EQ(third[2].tool_call_id(), "call_1");
}

TEST(TrajectoryStoreRestoreTest, TheNodesRestoreMatchedAreRecordedWithoutHashingAndABadHintIsIgnored) {
  TrajectoryStore store("env-1");
  store.Record(CallReplying({Msg("system", "s"), Msg("user", "u")}, Msg("assistant", "a")));
  std::vector<v1::ChatMessage> prompt = {Msg("system", "s"), Msg("user", "u"), Msg("assistant", "a"),
                                         Msg("user", "next")};
  std::vector<uint32_t> matched;
  store.Restore(prompt, &matched);
  EXPECT_THAT(matched, ::testing::ElementsAre(0u, 1u, 2u)) << "the stored prefix, not the new message";
  RecordedCall call = CallReplying(prompt, Msg("assistant", "b"));
  store.RecordKeeping(call, matched);
  EXPECT_EQ(call.call().prompt_last_message(), 3u);
  EXPECT_EQ(store.nodes(), 5u);
  EXPECT_EQ(store.branches(), 1u);
  // A hint that does not fit (another parent, out of range) is hashed instead: the same nodes.
  RecordedCall again = CallReplying(prompt, Msg("assistant", "c"));
  const std::vector<uint32_t> bad = {1, 99, 0};
  store.RecordKeeping(again, bad);
  EXPECT_EQ(again.call().prompt_last_message(), 3u);
  EXPECT_EQ(store.nodes(), 6u);
}

TEST(TrajectoryStoreRestoreTest, TrimmedContentAndLeftOutReasoningAreTheModelsMessage) {
  TrajectoryStore store("env-1");
  v1::ChatMessage sampled = Msg("assistant", "The answer is 4.\n");
  sampled.set_reasoning_content("2 + 2 = 4");
  store.Record(CallReplying({Msg("user", "2+2?")}, sampled));
  std::vector<v1::ChatMessage> prompt = {Msg("user", "2+2?"), Msg("assistant", "The answer is 4."), Msg("user", "x2?")};
  const std::vector<v1::RestoredMessage> restored = store.Restore(prompt);
  ASSERT_EQ(restored.size(), 1u);
  EXPECT_THAT(restored[0].changes(), ::testing::ElementsAre("content whitespace", "reasoning left out"));
  EXPECT_EQ(prompt[1].reasoning_content(), "2 + 2 = 4");
  EXPECT_EQ(prompt[1].content(), "The answer is 4.\n");
}

TEST(TrajectoryStoreRestoreTest, AGenuineEditStaysAsSentAndStartsABranch) {
  TrajectoryStore store("env-1");
  store.Record(CallReplying({Msg("user", "say hi")}, ToolCallMessage("call_1", R"({"command": "echo hi"})")));
  for (const v1::ChatMessage& edited :
       {ToolCallMessage("call_1", R"({"command": "echo bye"})"),
        ToolCallMessage("call_1", R"({"command": "echo hi"})", "I will"), Msg("assistant", "no tool after all")}) {
    std::vector<v1::ChatMessage> prompt = {Msg("user", "say hi"), edited, ToolResult("call_1", "bye")};
    EXPECT_TRUE(store.Restore(prompt).empty()) << edited.ShortDebugString();
    EXPECT_EQ(prompt[1].SerializeAsString(), edited.SerializeAsString());
  }
  v1::ChatMessage other_tool = ToolCallMessage("call_1", R"({"command": "echo hi"})");
  other_tool.mutable_tool_calls(0)->set_function_name("python");
  std::vector<v1::ChatMessage> prompt = {Msg("user", "say hi"), other_tool};
  EXPECT_TRUE(store.Restore(prompt).empty());
  store.Record(CallReplying(prompt, Msg("assistant", "ok")));
  v1::Trajectory t;
  store.Export(v1::TRAJECTORY_FORMAT_CALLS, &t);
  EXPECT_EQ(t.branches_size(), 2) << "an edited history is a branch of its own";
}

}  // namespace
}  // namespace corral
