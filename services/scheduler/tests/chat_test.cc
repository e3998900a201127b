#include "services/scheduler/episode/chat.h"

#include <string>

#include "boost/json.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "services/scheduler/tests/tool_spec.h"

namespace corral::scheduler {
namespace {

namespace json = boost::json;

using ::testing::HasSubstr;

using testing_support::Tool;

// The function object of tools[i].
const json::object& Function(const json::array& tools, size_t i) {
  return tools.at(i).as_object().at("function").as_object();
}

// ---------------------------------------------------------------------------------------- InitialMessages

TEST(Chat, InitialMessagesFromPromptIsOneUserMessage) {
  v1::Task task;
  task.set_prompt("What is 2+2?");
  EXPECT_EQ(InitialMessages(task), json::parse(R"([{"role": "user", "content": "What is 2+2?"}])"));
}

TEST(Chat, InitialMessagesFromMessagesKeepsRolesToolCallsAndContentParts) {
  v1::Task task;
  auto* system = task.add_messages();
  system->set_role("system");
  system->set_content("Be brief.");
  auto* user = task.add_messages();
  user->set_role("user");
  user->set_content("look");
  user->set_content_parts_json(R"([{"type": "text", "text": "look"}])");
  auto* assistant = task.add_messages();
  assistant->set_role("assistant");
  auto* call = assistant->add_tool_calls();
  call->set_id("call_1");
  call->set_function_name("bash");
  call->set_arguments(R"({"command": "ls"})");
  auto* tool = task.add_messages();
  tool->set_role("tool");
  tool->set_tool_call_id("call_1");
  tool->set_content("a.txt");

  EXPECT_EQ(InitialMessages(task), json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "look"}]},
    {"role": "assistant", "content": "", "tool_calls": [
      {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}]},
    {"role": "tool", "content": "a.txt", "tool_call_id": "call_1"}
  ])"));
}

// ---------------------------------------------------------------------------------------------- ToolsJson

TEST(Chat, ToolsJsonGivesBuiltInSchemas) {
  v1::Task task;
  *task.mutable_tool_loop()->add_tools() = Tool("python", v1::TOOL_KIND_CODE_INTERPRETER);
  *task.mutable_tool_loop()->add_tools() = Tool("shell", v1::TOOL_KIND_BASH);
  *task.mutable_tool_loop()->add_tools() = Tool("write", v1::TOOL_KIND_WRITE_FILE);
  const json::array tools = ToolsJson(task);
  ASSERT_EQ(tools.size(), 3u);
  EXPECT_EQ(tools[0].as_object().at("type"), "function");

  const json::object& py = Function(tools, 0);
  EXPECT_EQ(py.at("name"), "python");
  EXPECT_THAT(std::string(py.at("description").as_string()), HasSubstr("python"));
  EXPECT_TRUE(py.at("parameters").at("properties").as_object().contains("code"));
  EXPECT_EQ(py.at("parameters").at("required"), json::parse(R"(["code"])"));

  const json::object& sh = Function(tools, 1);
  EXPECT_EQ(sh.at("name"), "shell");
  EXPECT_TRUE(sh.at("parameters").at("properties").as_object().contains("command"));
  EXPECT_EQ(sh.at("parameters").at("required"), json::parse(R"(["command"])"));

  EXPECT_EQ(Function(tools, 2).at("parameters").at("required"), json::parse(R"(["path", "content"])"));
}

TEST(Chat, ToolsJsonKeepsTheTasksDescriptionSchemaAndLanguage) {
  v1::Task task;
  v1::ToolSpec ruby = Tool("ruby", v1::TOOL_KIND_CODE_INTERPRETER);
  ruby.set_language("ruby");
  *task.mutable_tool_loop()->add_tools() = ruby;
  v1::ToolSpec grade = Tool("grade", v1::TOOL_KIND_COMMAND);
  grade.set_description("Grades an answer.");
  grade.set_parameters_json(R"({"type": "object", "properties": {"answer": {"type": "string"}}})");
  *task.mutable_tool_loop()->add_tools() = grade;
  const json::array tools = ToolsJson(task);
  ASSERT_EQ(tools.size(), 2u);
  EXPECT_THAT(std::string(Function(tools, 0).at("description").as_string()), HasSubstr("ruby"));
  EXPECT_EQ(Function(tools, 1).at("description"), "Grades an answer.");
  EXPECT_EQ(Function(tools, 1).at("parameters"), json::parse(grade.parameters_json()));
}

TEST(Chat, ToolsJsonIsEmptyWithoutTools) { EXPECT_TRUE(ToolsJson(v1::Task()).empty()); }

// ----------------------------------------------------------------------------------------------- ChatBody

TEST(Chat, ChatBodyMergesParamsAndOmitsEmptyTools) {
  const json::array messages = json::parse(R"([{"role": "user", "content": "hi"}])").as_array();
  const json::value body = json::parse(ChatBody("m", R"({"temperature": 0.2, "model": "ignored"})", messages, {}));
  EXPECT_EQ(body,
            json::parse(R"({"temperature": 0.2, "model": "m", "messages": [{"role": "user", "content": "hi"}]})"));
}

// ----------------------------------------------------------------------------------------- ParseChatReply

TEST(Chat, ParseChatReplyExtractsContentToolCallsAndFinishReason) {
  const std::string body = R"({"id": "x", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
      "role": "assistant", "content": "Let me check.", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}},
        {"id": "call_2", "type": "function", "function": {"name": "python", "arguments": "{}"}}]}}]})";
  auto reply = ParseChatReply(body);
  ASSERT_THAT(reply, IsOk());
  EXPECT_EQ(reply->content, "Let me check.");
  EXPECT_EQ(reply->finish_reason, "tool_calls");
  ASSERT_EQ(reply->tool_calls.size(), 2u);
  EXPECT_EQ(reply->tool_calls[0].id, "call_1");
  EXPECT_EQ(reply->tool_calls[0].name, "bash");
  EXPECT_EQ(reply->tool_calls[0].arguments, R"({"command":"ls"})");
  EXPECT_EQ(reply->tool_calls[1].name, "python");
  // The assistant message is kept verbatim for the next request.
  EXPECT_EQ(json::value(reply->message), json::parse(body).at("choices").at(0).at("message"));
}

TEST(Chat, ParseChatReplyWithNullContentAndNoToolCalls) {
  auto reply = ParseChatReply(R"({"choices": [{"finish_reason": "stop", "message": {"role": "assistant",
                                  "content": null}}]})");
  ASSERT_THAT(reply, IsOk());
  EXPECT_EQ(reply->content, "");
  EXPECT_EQ(reply->finish_reason, "stop");
  EXPECT_TRUE(reply->tool_calls.empty());
}

TEST(Chat, ParseChatReplyRejectsBodiesWithoutChoices) {
  for (const char* bad : {"not json", "[]", "{}", R"({"choices": []})", R"({"choices": "x"})", R"({"choices": [1]})"}) {
    EXPECT_THAT(ParseChatReply(bad), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no choices"))) << bad;
  }
  EXPECT_THAT(ParseChatReply(R"({"choices": [{"finish_reason": "stop"}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no message")));
}

// ------------------------------------------------------------------------------------------------- errors

TEST(Chat, IsBudgetExhaustedOnlyForTheProxysBudgetRefusal) {
  const std::string budget =
      R"({"error": {"message": "budget", "type": "invalid_request_error", "param": null, "code": "budget_exhausted"},
          "choices": [{"index": 0, "finish_reason": "length"}]})";
  EXPECT_TRUE(IsBudgetExhausted(400, budget));
  EXPECT_FALSE(IsBudgetExhausted(429, budget));
  EXPECT_FALSE(IsBudgetExhausted(400, R"({"error": {"message": "bad model", "code": "model_not_found"}})"));
}

TEST(Chat, ErrorMessageFromAnOpenAiErrorOrTheBody) {
  EXPECT_EQ(ErrorMessage(R"({"error": {"message": "no such model"}})"), "no such model");
  EXPECT_EQ(ErrorMessage("upstream down"), "upstream down");
  EXPECT_EQ(ErrorMessage(std::string(1000, 'x')).size(), 256u);
}

// -------------------------------------------------------------------------------------------- tool calls

TEST(Chat, ParseArgumentsAcceptsObjectsAndEmpty) {
  auto args = ParseArguments(R"({"command": "ls -l", "n": 3})");
  ASSERT_THAT(args, IsOk());
  EXPECT_EQ(StringArg(*args, "command"), "ls -l");
  EXPECT_EQ(StringArg(*args, "n"), "");  // not a string
  EXPECT_EQ(StringArg(*args, "missing"), "");
  EXPECT_THAT(ParseArguments(""), IsOkAndHolds(json::object()));
}

TEST(Chat, ParseArgumentsRejectsNonObjects) {
  for (const char* bad : {"[1, 2]", R"("ls")", "42", "null", "{not json"}) {
    EXPECT_THAT(ParseArguments(bad), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
}

TEST(Chat, ToolMessageAnswersACall) {
  EXPECT_EQ(json::value(ToolMessage("call_1", "out")),
            json::parse(R"({"role": "tool", "tool_call_id": "call_1", "content": "out"})"));
}

}  // namespace
}  // namespace corral::scheduler
