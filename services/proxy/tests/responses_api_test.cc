#include "services/proxy/responses_api.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "libs/http/sse.h"
#include "services/proxy/tests/proxy_test_support.h"

namespace corral::proxy::responses {
namespace {

namespace json = boost::json;
using ::testing::HasSubstr;

json::object Parse(const char* text) { return json::parse(text).as_object(); }

TEST(ResponsesApiTest, ARequestBecomesAChatBody) {
  auto chat = ToChat(Parse(R"({
    "model": "gpt", "instructions": "Be brief.", "max_output_tokens": 32, "temperature": 0.2, "stream": true,
    "tools": [{"type": "function", "name": "bash", "parameters": {"type": "object"}, "strict": false}],
    "tool_choice": {"type": "function", "name": "bash"},
    "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}}},
    "input": [
      {"role": "developer", "content": "Use tools."},
      {"role": "user", "content": [{"type": "input_text", "text": "list "}, {"type": "input_text", "text": "files"}]},
      {"type": "reasoning", "id": "rs_1", "summary": []},
      {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": "{\"cmd\":\"ls\"}"},
      {"type": "function_call", "call_id": "c2", "name": "bash", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
      {"type": "function_call_output", "call_id": "c2", "output": "b.txt"},
      {"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}
    ]})"));
  ASSERT_THAT(chat, IsOk());
  const json::object expected = Parse(R"({
    "model": "gpt",
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "system", "content": "Use tools."},
      {"role": "user", "content": "list files"},
      {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\":\"ls\"}"}},
        {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
      {"role": "tool", "tool_call_id": "c2", "content": "b.txt"},
      {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}
    ],
    "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}, "strict": false}}],
    "tool_choice": {"type": "function", "function": {"name": "bash"}},
    "response_format": {"type": "json_schema", "json_schema": {"name": "out", "schema": {"type": "object"}}},
    "max_tokens": 32, "temperature": 0.2, "stream": true, "stream_options": {"include_usage": true}})");
  EXPECT_EQ(*chat, expected) << json::serialize(*chat);
  EXPECT_EQ((*ToChat(Parse(R"({"model": "m", "input": "hi"})")))["messages"],
            json::parse(R"([{"role": "user", "content": "hi"}])"));
}

TEST(ResponsesApiTest, WhatIsMalformedOrCannotBeCarriedOutIsRefusedNamingTheField) {
  EXPECT_THAT(ToChat(Parse(R"({"model": 7, "input": "x"})")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model")));
  EXPECT_THAT(ToChat(Parse(R"({"model": "m"})")), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("input")));
  EXPECT_THAT(ToChat(Parse(R"({"model": "m", "input": "x", "previous_response_id": "resp_1"})")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("previous_response_id")));
  EXPECT_THAT(
      ToChat(Parse(R"({"model": "m", "input": [{"type": "item_reference", "id": "x"}]})")),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("input[0]: a 'item_reference' item refers to state")));
  EXPECT_THAT(ToChat(Parse(R"({"model": "m", "input": "x", "tools": [{"type": "function", "name": "f"},
                                                                       {"type": "function", "name": "f"}]})")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tools[1]: a second tool named 'f'")));
}

// The shape Codex CLI sends (0.16x): developer messages, function tools beside a namespace of functions and a
// built-in web search, reasoning settings and other fields a chat upstream has no use for; a namespaced call in
// the history. The namespace's functions are offered flat and their calls named back.
TEST(ResponsesApiTest, AHarnessRequestFlattensNamespacesAndLeavesOutBuiltInToolsNoted) {
  ResponsesDialect dialect;
  auto chat = dialect.ToChat(Parse(R"({
    "model": "gpt-x", "stream": false, "store": false, "include": ["reasoning.encrypted_content"],
    "reasoning": {"summary": "auto"}, "prompt_cache_key": "k", "client_metadata": {"a": 1}, "parallel_tool_calls": true,
    "tool_choice": "auto",
    "input": [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "be careful"}]},
              {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
              {"type": "reasoning", "summary": []},
              {"type": "function_call", "call_id": "c1", "namespace": "agents", "name": "spawn", "arguments": "{}"},
              {"type": "function_call_output", "call_id": "c1", "output": "ok"},
              {"type": "web_search_call", "status": "completed"}],
    "tools": [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
              {"type": "namespace", "name": "agents", "tools": [{"type": "function", "name": "spawn"},
                                                                  {"type": "function", "name": "wait"}]},
              {"type": "web_search", "external_web_access": true}]})"));
  ASSERT_THAT(chat, IsOk());
  std::vector<std::string> offered;
  for (const auto& t : (*chat)["tools"].as_array()) offered.emplace_back(t.at("function").at("name").as_string());
  EXPECT_EQ(offered, (std::vector<std::string>{"exec_command", "agents__spawn", "agents__wait"}));
  const json::array& messages = (*chat)["messages"].as_array();
  ASSERT_EQ(messages.size(), 4u);
  EXPECT_EQ(messages[0], json::parse(R"({"role": "system", "content": "be careful"})"));
  EXPECT_EQ(messages[2].at("tool_calls").at(0).at("function").at("name"), json::value("agents__spawn"));
  const json::object& notes = dialect.notes();
  for (const char* key : {"store", "include", "reasoning", "prompt_cache_key", "client_metadata"}) {
    EXPECT_TRUE(notes.at("ignored").as_object().contains(key)) << key;
  }
  const std::string dropped = json::serialize(notes.at("dropped"));
  EXPECT_THAT(dropped, HasSubstr(R"({"field":"tools[2]","type":"web_search")"));
  EXPECT_THAT(dropped, HasSubstr(R"({"field":"input[5]","type":"web_search_call")"));
  EXPECT_EQ(notes.at("renamed").at("agents__wait"), json::parse(R"({"namespace": "agents", "name": "wait"})"));

  // The model calls a namespaced function: the agent sees it under its namespace and name.
  const json::object answer = json::parse(R"({"id": "x", "created": 1, "model": "gpt-x", "choices": [{"index": 0,
      "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "c2",
      "type": "function", "function": {"name": "agents__wait", "arguments": "{}"}}]}}]})")
                                  .as_object();
  const json::value whole = json::parse(dialect.Whole(answer));
  const json::object& item = whole.at("output").at(0).as_object();
  EXPECT_EQ(item.at("namespace"), json::value("agents"));
  EXPECT_EQ(item.at("name"), json::value("wait"));
}

TEST(ResponsesApiTest, AChatCompletionBecomesAResponse) {
  const json::object r = FromChat(Parse(R"({
    "id": "c1", "created": 5, "model": "m", "usage": {"prompt_tokens": 7, "completion_tokens": 3},
    "choices": [{"finish_reason": "tool_calls", "message": {"content": "Looking.",
      "tool_calls": [{"id": "t1", "function": {"name": "bash", "arguments": "{}"}}]}}]})"));
  EXPECT_EQ(r.at("id"), "resp_c1");
  EXPECT_EQ(r.at("status"), "completed");
  EXPECT_EQ(r.at("output"), json::parse(R"([
    {"type": "message", "id": "msg_c1", "status": "completed", "role": "assistant",
     "content": [{"type": "output_text", "text": "Looking.", "annotations": []}]},
    {"type": "function_call", "id": "fc_t1", "call_id": "t1", "name": "bash", "arguments": "{}", "status": "completed"}])"));
  EXPECT_EQ(r.at("usage").at("total_tokens"), 10);
  const json::object cut =
      FromChat(Parse(R"({"choices": [{"finish_reason": "length", "message": {"content": "ab"}}]})"));
  EXPECT_EQ(cut.at("status"), "incomplete");
  EXPECT_EQ(cut.at("incomplete_details").at("reason"), "max_output_tokens");
}

TEST(ResponsesApiTest, AReasoningModelsReasoningBecomesAReasoningItem) {
  const json::object whole = FromChat(Parse(R"({"id": "c1", "choices": [{"finish_reason": "stop",
    "message": {"reasoning_content": "2 and 2", "content": "4"}}]})"));
  EXPECT_EQ(whole.at("output").at(0), json::parse(R"({"type": "reasoning", "id": "rs_c1", "status": "completed",
    "summary": [], "content": [{"type": "reasoning_text", "text": "2 and 2"}]})"));
  EXPECT_EQ(whole.at("output").at(1).at("type"), "message");
  ResponsesDialect d;
  std::string out = d.Chunk(Parse(R"({"id": "c1", "model": "m", "choices": [{"delta": {"role": "assistant"}}]})"));
  out += d.Chunk(Parse(R"({"choices": [{"delta": {"reasoning_content": "2 and "}}]})"));
  out += d.Chunk(Parse(R"({"choices": [{"delta": {"reasoning_content": "2"}}]})"));
  out += d.Chunk(Parse(R"({"choices": [{"delta": {"content": "4"}}]})"));
  out += d.End();
  EXPECT_THAT(
      testing::EventTypes(out),
      ::testing::ElementsAre("response.created", "response.in_progress", "response.output_item.added",
                             "response.reasoning_text.delta", "response.reasoning_text.delta",
                             "response.reasoning_text.done", "response.output_item.done", "response.output_item.added",
                             "response.content_part.added", "response.output_text.delta", "response.output_text.done",
                             "response.content_part.done", "response.output_item.done", "response.completed"));
  EXPECT_THAT(out, HasSubstr(R"("text":"2 and 2")"));
  const json::object last = json::parse(out.substr(out.rfind("data: ") + 6)).as_object();
  EXPECT_EQ(last.at("response").at("output").at(0).at("type"), "reasoning");
}

TEST(ResponsesApiTest, AChatStreamBecomesResponseEvents) {
  ResponsesDialect d;
  std::string out = d.Chunk(Parse(R"({"id": "c1", "model": "m", "choices": [{"delta": {"role": "assistant"}}]})"));
  out += d.Chunk(Parse(R"({"choices": [{"delta": {"content": "Hi"}}]})"));
  out += d.Chunk(Parse(
      R"({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "t1", "function": {"name": "bash", "arguments": "{\"a\""}}]}}]})"));
  out +=
      d.Chunk(Parse(R"({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}}]})"));
  out += d.Chunk(Parse(R"({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]})"));
  out += d.Chunk(Parse(R"({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}})"));
  out += d.End();
  EXPECT_THAT(testing::EventTypes(out),
              ::testing::ElementsAre(
                  "response.created", "response.in_progress", "response.output_item.added",
                  "response.content_part.added", "response.output_text.delta", "response.output_text.done",
                  "response.content_part.done", "response.output_item.done", "response.output_item.added",
                  "response.function_call_arguments.delta", "response.function_call_arguments.delta",
                  "response.function_call_arguments.done", "response.output_item.done", "response.completed"));
  http::SseParser sse;
  auto parsed = sse.Feed(out);
  ASSERT_THAT(parsed, IsOk());
  const http::SseEvent& args_done = (*parsed)[11];
  EXPECT_EQ(args_done.event, "response.function_call_arguments.done");
  EXPECT_EQ(json::parse(args_done.data).at("arguments"), R"({"a":1})");
  EXPECT_THAT(out, HasSubstr(R"("sequence_number":13)"));  // numbered from 0, one per event
  const size_t completed = out.rfind("data: ");
  const json::object last = json::parse(out.substr(completed + 6)).as_object();
  EXPECT_EQ(last.at("response").at("output").as_array().size(), 2u);
  EXPECT_EQ(last.at("response").at("usage").at("input_tokens"), 5);
}

TEST(ResponsesApiTest, AnErrorMidStreamEndsTheResponseFailed) {
  ResponsesDialect dialect;
  const std::string out = dialect.ErrorEvent(502, "upstream disconnected mid-stream");
  EXPECT_THAT(out, HasSubstr("event: error\n"));
  EXPECT_THAT(out, HasSubstr("event: response.failed\n"));
  EXPECT_THAT(out, HasSubstr(R"("status":"failed")"));
  EXPECT_THAT(out, HasSubstr(R"("error":{"code":"server_error","message":"upstream disconnected mid-stream"})"));
}

}  // namespace
}  // namespace corral::proxy::responses
