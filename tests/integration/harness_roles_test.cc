// Recorded requests of real harnesses (tests/harness/fixtures: what Claude Code, Codex, OpenCode and Qwen Code
// at their pinned versions sent while a scripted model drove them) replayed through a real proxy, in a session
// opened as the scheduler opens a harness's: every call gets the role a trainer needs. The agent's turns are one
// conversation, a title call is a side call, a prompt sent again is a retry, and a summary request followed by a
// conversation continued from the summary is a side call and a compaction linked to the agent's conversation.
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "boost/json.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/harness/harnesses.h"
#include "libs/trajectory/roles.h"
#include "tests/integration/proxy_fixture.h"

namespace corral {
namespace {

namespace json = boost::json;

struct Request {
  std::string path;
  json::object body;
};

// A fixture's requests in the order they were sent.
std::vector<Request> Fixture(const std::string& name) {
  std::ifstream in(std::string(CORRAL_SOURCE_DIR) + "/tests/harness/fixtures/" + name + ".jsonl");
  EXPECT_TRUE(in.good()) << name;
  std::vector<Request> requests;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    json::object o = json::parse(line).as_object();
    requests.push_back({std::string(o.at("path").as_string()), o.at("body").as_object()});
  }
  return requests;
}

// The agent's conversation array of a request in its API: Messages' and chat's `messages`, Responses' `input`.
json::array& Conversation(Request& r) { return r.body[r.path == "/v1/responses" ? "input" : "messages"].as_array(); }

json::object UserMessage(const std::string& path, const std::string& text) {
  if (path == "/v1/responses") {
    return {{"type", "message"},
            {"role", "user"},
            {"content", json::array{json::object{{"type", "input_text"}, {"text", text}}}}};
  }
  return {{"role", "user"}, {"content", text}};
}

// The request with `text` said by the user after its conversation.
Request Asking(Request r, const std::string& text) {
  Conversation(r).push_back(UserMessage(r.path, text));
  return r;
}

// A new conversation on the same system prompt and tools: only `messages` (chat keeps its system messages).
Request Restarted(Request r, const json::array& messages) {
  json::array& conversation = Conversation(r);
  json::array kept;
  for (const json::value& m : conversation) {
    if (r.path == "/v1/chat/completions" && m.as_object().at("role") == "system") kept.push_back(m);
  }
  for (const json::value& m : messages) kept.push_back(m);
  conversation = std::move(kept);
  return r;
}

// The roles of a trajectory's calls and branches, for failure messages: "calls 0:agent@b1 ... branches 0:auxiliary".
std::string Roles(const v1::Trajectory& t) {
  std::string out = "calls";
  for (const v1::LlmCall& c : t.calls()) {
    absl::StrAppend(&out, " ", c.seq(), ":", RoleName(c.role()), "@b", c.branch(), " (", c.role_reason(), ")");
  }
  absl::StrAppend(&out, "; branches");
  for (const v1::Branch& b : t.branches()) absl::StrAppend(&out, " ", b.branch_id(), ":", RoleName(b.role()));
  return out;
}

class HarnessRolesTest : public ProxyFixture {
 protected:
  void SetUp() override {
    ProxyFixture::SetUp();
    StartProxy({StartBackend({"--shell-agent"})});
  }

  // Opens a session as the scheduler does for `harness` (token ids captured, and its role rules when it is in
  // the harness table).
  std::string OpenFor(const std::string& harness, const std::string& env_id) {
    auto h = ResolveHarness(harness);
    v1::SessionPolicy policy;
    (*policy.mutable_model_aliases())["*"] = "fake-model";
    policy.set_capture_token_ids(true);
    if (h.ok()) AddRoleRules(*h->harness, policy);
    return Open(env_id, policy);
  }

  std::string Send(const std::string& token, const Request& r) {
    const HttpReply reply = Post(r.path, token, json::serialize(r.body));
    EXPECT_EQ(reply.status, 200) << r.path << ": " << reply.body;
    return reply.body;
  }

  v1::Trajectory Replay(const std::string& harness, const std::vector<Request>& requests, const std::string& env_id) {
    const std::string token = OpenFor(harness, env_id);
    for (const Request& r : requests) Send(token, r);
    auto t = Trajectory(env_id);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.value_or(v1::Trajectory());
  }

  // The one agent branch (failing when there is not exactly one).
  static const v1::Branch* AgentBranch(const v1::Trajectory& t) {
    const v1::Branch* agent = nullptr;
    int n = 0;
    for (const v1::Branch& b : t.branches()) {
      if (b.role() == v1::CALL_ROLE_AGENT) {
        agent = &b;
        ++n;
      }
    }
    EXPECT_EQ(n, 1) << Roles(t);
    return agent;
  }

  // What a trainer gets from the agent's branch (TRAJECTORY form) of `calls` (its CALLS form): every agent
  // answer in one conversation, and every token the agent's calls generated in its token view.
  void ExpectOneTrainingSample(const v1::Trajectory& calls) {
    auto t = Trajectory(calls.env_id(), v1::TRAJECTORY_FORMAT_TRAJECTORY);
    ASSERT_TRUE(t.ok()) << t.status();
    const v1::Branch* agent = AgentBranch(*t);
    ASSERT_NE(agent, nullptr);
    uint32_t answers = 0;
    for (const v1::TrajectoryMessage& m : agent->messages()) answers += m.generated() ? 1 : 0;
    EXPECT_EQ(answers, calls.calls_by_role().agent()) << Roles(*t);
    int generated = 0, expected = 0;
    for (bool g : agent->token_generated()) generated += g ? 1 : 0;
    for (const v1::LlmCall& c : calls.calls()) {
      if (c.role() == v1::CALL_ROLE_AGENT) expected += c.completion_token_ids_size();
    }
    EXPECT_GT(expected, 0);
    EXPECT_EQ(generated, expected) << Roles(*t);
  }

  // The recorded run: its agent turns in one branch, everything else a side call.
  void ExpectOneAgentConversation(const std::string& harness) {
    const v1::Trajectory t = Replay(harness, Fixture(harness), harness);
    EXPECT_GE(t.calls_by_role().agent(), 2u) << Roles(t);
    EXPECT_EQ(t.calls_by_role().agent() + t.calls_by_role().auxiliary(), t.call_count()) << Roles(t);
    const v1::Branch* agent = AgentBranch(t);
    ASSERT_NE(agent, nullptr);
    EXPECT_EQ(static_cast<uint32_t>(agent->call_ids_size()), t.calls_by_role().agent()) << Roles(t);
    ExpectOneTrainingSample(t);
  }

  // The last request sent again: the first answer is a retry; the agent's conversation goes on from the second,
  // and its sample still holds every agent turn.
  void ExpectAResampleIsARetry(const std::string& harness) {
    std::vector<Request> requests = Fixture(harness);
    requests.push_back(requests.back());
    const v1::Trajectory t = Replay(harness, requests, harness + "-retry");
    EXPECT_EQ(t.calls_by_role().retry(), 1u) << Roles(t);
    EXPECT_EQ(t.calls(t.calls_size() - 2).role(), v1::CALL_ROLE_RETRY) << Roles(t);
    const v1::Branch* agent = AgentBranch(t);
    ASSERT_NE(agent, nullptr);
    EXPECT_EQ(*agent->call_ids().rbegin(), t.calls().rbegin()->call_id());
    ExpectOneTrainingSample(t);
  }

  // The harness's summary request after its last turn, then a new conversation continued from the summary.
  void ExpectSummaryAndContinueIsCompaction(const std::string& harness, const std::string& ask,
                                            const json::array& continued, const std::string& summary_reason) {
    std::vector<Request> requests = Fixture(harness);
    const std::string env_id = harness + "-compaction";
    const std::string token = OpenFor(harness, env_id);
    for (const Request& r : requests) Send(token, r);
    Send(token, Asking(requests.back(), ask));
    Send(token, Restarted(requests.back(), continued));
    auto t = Trajectory(env_id);
    ASSERT_TRUE(t.ok()) << t.status();
    const v1::LlmCall& summary = t->calls(t->calls_size() - 2);
    const v1::LlmCall& compaction = t->calls(t->calls_size() - 1);
    EXPECT_EQ(summary.role(), v1::CALL_ROLE_AUXILIARY) << Roles(*t);
    EXPECT_EQ(summary.role_reason(), summary_reason);
    EXPECT_EQ(compaction.role(), v1::CALL_ROLE_COMPACTION) << Roles(*t);
    const v1::Branch* agent = AgentBranch(*t);
    ASSERT_NE(agent, nullptr);
    const v1::Branch& b = t->branches(static_cast<int>(compaction.branch()));
    EXPECT_EQ(b.role(), v1::CALL_ROLE_COMPACTION);
    ASSERT_TRUE(b.has_linked_branch());
    EXPECT_EQ(b.linked_branch(), agent->branch_id());
  }

  // Gemini CLI and its fork Qwen Code ask for a <state_snapshot> under a system prompt of their own
  // (`summary_system`), then start again from a user turn holding the snapshot (and their own "Got it" answer).
  void ExpectSnapshotCompaction(const std::string& harness, const std::string& summary_system) {
    std::vector<Request> requests = Fixture(harness);
    Request ask = Asking(requests.back(), "Generate a new <state_snapshot> based on the provided history.");
    ask.body["messages"].as_array()[0].as_object()["content"] = summary_system;
    ask.body.erase("tools");
    const std::string env_id = harness + "-compaction";
    const std::string token = OpenFor(harness, env_id);
    for (const Request& r : requests) Send(token, r);
    Send(token, ask);
    Send(token,
         Restarted(requests.back(), json::array{UserMessage("/v1/chat/completions",
                                                            "<state_snapshot><task_state>proof.txt written</task_state>"
                                                            "</state_snapshot>"),
                                                json::object{{"role", "assistant"},
                                                             {"content", "Got it. Thanks for the additional context!"}},
                                                UserMessage("/v1/chat/completions", "Continue.")}));
    auto t = Trajectory(env_id);
    ASSERT_TRUE(t.ok()) << t.status();
    const v1::LlmCall& summary = t->calls(t->calls_size() - 2);
    EXPECT_EQ(summary.role(), v1::CALL_ROLE_AUXILIARY) << Roles(*t);
    EXPECT_EQ(summary.role_reason(), absl::StrCat("summary request (", harness, ")"));
    const v1::LlmCall& compaction = t->calls(t->calls_size() - 1);
    EXPECT_EQ(compaction.role(), v1::CALL_ROLE_COMPACTION) << Roles(*t);
    EXPECT_EQ(compaction.role_reason(), absl::StrCat("continued from a summary (", harness, ")"));
    const v1::Branch* agent = AgentBranch(*t);
    ASSERT_NE(agent, nullptr);
    EXPECT_EQ(t->branches(static_cast<int>(compaction.branch())).linked_branch(), agent->branch_id());
  }
};

TEST_F(HarnessRolesTest, ClaudeCodesTurnsAreOneConversation) { ExpectOneAgentConversation("claude-code"); }
TEST_F(HarnessRolesTest, CodexsTurnsAreOneConversation) { ExpectOneAgentConversation("codex"); }
TEST_F(HarnessRolesTest, QwenCodesTurnsAreOneConversation) { ExpectOneAgentConversation("qwen-code"); }

TEST_F(HarnessRolesTest, OpenCodesTurnsAreOneConversationAndItsTitleCallASideCall) {
  ExpectOneAgentConversation("opencode");
  const v1::Trajectory t = *Trajectory("opencode");
  int titles = 0;
  for (const v1::LlmCall& c : t.calls()) {
    if (c.role_reason() != "title generator (opencode)") continue;
    ++titles;
    EXPECT_EQ(c.role(), v1::CALL_ROLE_AUXILIARY);
    EXPECT_EQ(t.branches(static_cast<int>(c.branch())).role(), v1::CALL_ROLE_AUXILIARY);
  }
  EXPECT_EQ(titles, 1) << Roles(t);
}

TEST_F(HarnessRolesTest, AResampledTurnIsARetry) {
  for (const char* harness : {"claude-code", "codex", "opencode", "qwen-code", "gemini-cli", "pi", "cline"}) {
    SCOPED_TRACE(harness);
    ExpectAResampleIsARetry(harness);
  }
}

TEST_F(HarnessRolesTest, ClaudeCodesCompactionIsLinkedToItsConversation) {
  ExpectSummaryAndContinueIsCompaction(
      "claude-code", "Your task is to create a detailed summary of the conversation so far, paying close attention.",
      json::array{UserMessage("/v1/messages",
                              "This session is being continued from a previous conversation that ran out of context. "
                              "The summary below covers the earlier portion of the conversation: we wrote proof.txt.")},
      "summary request (claude-code)");
}

TEST_F(HarnessRolesTest, CodexsCompactionIsLinkedToItsConversation) {
  ExpectSummaryAndContinueIsCompaction(
      "codex", "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary for another LLM.",
      json::array{UserMessage("/v1/responses",
                              "Another language model started to solve this problem and produced a summary of its "
                              "thinking process: proof.txt is written.")},
      "summary request (codex)");
}

TEST_F(HarnessRolesTest, GeminiClisTurnsAreOneConversation) { ExpectOneAgentConversation("gemini-cli"); }
TEST_F(HarnessRolesTest, PisTurnsAreOneConversation) { ExpectOneAgentConversation("pi"); }
TEST_F(HarnessRolesTest, ClinesTurnsAreOneConversation) { ExpectOneAgentConversation("cline"); }

TEST_F(HarnessRolesTest, ClinesCompactionIsLinkedToItsConversation) {
  ExpectSummaryAndContinueIsCompaction(
      "cline",
      "You have been working on the task described above but have not yet completed it. Write a continuation "
      "summary that will allow you (or another instance of yourself) to resume work efficiently.",
      json::array{UserMessage("/v1/chat/completions", "Write the proof file, then say so."),
                  UserMessage("/v1/chat/completions",
                              "<SYSTEM_NOTICE>\nEarlier context was compacted. Summary of your actions after the "
                              "request above:\nproof.txt is written.</SYSTEM_NOTICE>")},
      "summary request (cline)");
}

// pi summarizes under a system prompt of its own, then continues from a user turn that says it was compacted.
TEST_F(HarnessRolesTest, PisCompactionIsLinkedToItsConversation) {
  std::vector<Request> requests = Fixture("pi");
  Request ask = Asking(requests.back(), "<conversation>...</conversation>\n\nCreate a structured summary.");
  ask.body["messages"].as_array()[0].as_object()["content"] =
      "You are a context summarization assistant. Your task is to read a conversation between a user and an AI "
      "coding assistant, then produce a structured summary following the exact format specified.";
  ask.body.erase("tools");
  const std::string token = OpenFor("pi", "pi-compaction");
  for (const Request& r : requests) Send(token, r);
  Send(token, ask);
  Send(token, Restarted(requests.back(),
                        json::array{UserMessage("/v1/chat/completions",
                                                "The conversation history before this point was compacted into the "
                                                "following summary:\n\n<summary>\nproof.txt is written.\n</summary>"),
                                    UserMessage("/v1/chat/completions", "Continue.")}));
  auto t = Trajectory("pi-compaction");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->calls(t->calls_size() - 2).role_reason(), "summary request (pi)") << Roles(*t);
  const v1::LlmCall& compaction = t->calls(t->calls_size() - 1);
  EXPECT_EQ(compaction.role(), v1::CALL_ROLE_COMPACTION) << Roles(*t);
  EXPECT_EQ(compaction.role_reason(), "continued from a summary (pi)");
  const v1::Branch* agent = AgentBranch(*t);
  ASSERT_NE(agent, nullptr);
  EXPECT_EQ(t->branches(static_cast<int>(compaction.branch())).linked_branch(), agent->branch_id());
}

TEST_F(HarnessRolesTest, GeminiClisCompactionIsLinkedToItsConversation) {
  ExpectSnapshotCompaction("gemini-cli",
                           "\nYou are a specialized system component responsible for distilling chat history into a "
                           "structured XML <state_snapshot>.");
}

TEST_F(HarnessRolesTest, QwenCodesCompactionIsLinkedToItsConversation) {
  ExpectSnapshotCompaction("qwen-code",
                           "\nYou are the component that summarizes a conversation when its context window is about to "
                           "overflow. The summary you produce will become the agent's ONLY memory.");
}

TEST_F(HarnessRolesTest, OpenCodesCompactionIsLinkedToItsConversation) {
  // OpenCode asks for the summary without tools (a side call by the built-in rule), then resends it as the
  // answer to a question of its own.
  std::vector<Request> requests = Fixture("opencode");
  Request ask = Asking(requests.back(), "Provide a detailed prompt for continuing our conversation above.");
  ask.body.erase("tools");
  ask.body["stream"] = false;
  const std::string token = OpenFor("opencode", "opencode-compaction");
  for (const Request& r : requests) Send(token, r);
  const json::value answer = json::parse(Send(token, ask));
  const json::value summary = answer.at("choices").at(0).at("message").at("content");
  Send(token, Restarted(requests.back(), json::array{UserMessage("/v1/chat/completions", "What did we do so far?"),
                                                     json::object{{"role", "assistant"}, {"content", summary}},
                                                     UserMessage("/v1/chat/completions", "Continue.")}));
  auto t = Trajectory("opencode-compaction");
  ASSERT_TRUE(t.ok()) << t.status();
  const v1::LlmCall& side = t->calls(t->calls_size() - 2);
  EXPECT_EQ(side.role(), v1::CALL_ROLE_AUXILIARY);
  EXPECT_EQ(side.role_reason(), "no tools, while the agent's calls offer them");
  const v1::LlmCall& compaction = t->calls(t->calls_size() - 1);
  EXPECT_EQ(compaction.role(), v1::CALL_ROLE_COMPACTION) << Roles(*t);
  EXPECT_EQ(compaction.role_reason(), "continued from a summary (opencode)");
  const v1::Branch* agent = AgentBranch(*t);
  ASSERT_NE(agent, nullptr);
  EXPECT_EQ(t->branches(static_cast<int>(compaction.branch())).linked_branch(), agent->branch_id());
}

}  // namespace
}  // namespace corral
