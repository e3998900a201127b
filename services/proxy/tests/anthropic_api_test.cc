#include "services/proxy/anthropic_api.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "services/proxy/tests/proxy_test_support.h"

namespace corral::proxy::anthropic {
namespace {

namespace json = boost::json;
using ::testing::HasSubstr;

json::object Parse(const char* text) { return json::parse(text).as_object(); }

TEST(AnthropicApiTest, ARequestBecomesAChatBody) {
  auto chat = ToChat(Parse(R"({
    "model": "claude", "max_tokens": 64, "temperature": 0.5, "stop_sequences": ["END"], "stream": true,
    "system": [{"type": "text", "text": "Be brief."}],
    "tools": [{"name": "bash", "description": "run", "input_schema": {"type": "object", "properties": {}}}],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
    "messages": [
      {"role": "user", "content": "list files"},
      {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": "ok"},
                                        {"type": "tool_use", "id": "tu1", "name": "bash", "input": {"cmd": "ls"}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu1", "content": [{"type": "text", "text": "a.txt"}]},
                                   {"type": "text", "text": "and now?"},
                                   {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAA"}}]}
    ]})"));
  ASSERT_THAT(chat, IsOk());
  const json::object expected = Parse(R"({
    "model": "claude",
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "list files"},
      {"role": "assistant", "content": "ok",
       "tool_calls": [{"id": "tu1", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\":\"ls\"}"}}]},
      {"role": "tool", "tool_call_id": "tu1", "content": "a.txt"},
      {"role": "user", "content": [{"type": "text", "text": "and now?"},
                                   {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}}]}
    ],
    "tools": [{"type": "function", "function": {"name": "bash", "description": "run",
                                                "parameters": {"type": "object", "properties": {}}}}],
    "tool_choice": "required", "parallel_tool_calls": false,
    "max_tokens": 64, "temperature": 0.5, "stop": ["END"],
    "stream": true, "stream_options": {"include_usage": true}})");
  EXPECT_EQ(*chat, expected) << json::serialize(*chat);
}

TEST(AnthropicApiTest, WhatIsMalformedIsRefusedNamingTheField) {
  EXPECT_THAT(ToChat(Parse(R"({"model": 7, "messages": []})")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model")));
  EXPECT_THAT(ToChat(Parse(R"({"model": "m"})")), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("messages")));
  EXPECT_THAT(ToChat(Parse(R"({"model": "m", "messages": [{"role": "tool", "content": "x"}]})")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("messages[0].role")));
  EXPECT_THAT(ToChat(Parse(R"({"model": "m", "messages": [], "tool_choice": {"type": "maybe"}})")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tool_choice.type")));
}

// The shape Claude Code sends (2.1.x): a system list with cache_control, a system message after the first user
// turn, thinking and other settings a chat upstream has no use for, tools without a type beside a server tool,
// thinking blocks in the history and a tool result holding an image.
TEST(AnthropicApiTest, AHarnessRequestTranslatesWithWhatHasNoChatFormNotedNotRefused) {
  json::object notes;
  auto chat = ToChat(Parse(R"({
    "model": "claude-x", "max_tokens": 32000, "stream": true,
    "system": [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}],
    "messages": [
      {"role": "user", "content": [{"type": "text", "text": "fix the bug", "cache_control": {"type": "ephemeral"}}]},
      {"role": "system", "content": [{"type": "text", "text": "cwd: /workspace"}]},
      {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": "s"},
                                        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                    "content": [{"type": "text", "text": "a.py"}, {"type": "image", "source": {}}]}]}],
    "tools": [{"name": "Bash", "description": "run", "input_schema": {"type": "object"}},
              {"type": "web_search_20250305", "name": "web_search"}],
    "thinking": {"type": "adaptive"}, "context_management": {"edits": []}, "output_config": {"effort": "high"},
    "metadata": {"user_id": "u"}})"),
                     &notes);
  ASSERT_THAT(chat, IsOk());
  const json::array& messages = (*chat)["messages"].as_array();
  ASSERT_EQ(messages.size(), 5u);
  EXPECT_EQ(messages[0], json::parse(R"({"role": "system", "content": "You are a coding agent."})"));
  EXPECT_EQ(messages[2], json::parse(R"({"role": "system", "content": "cwd: /workspace"})"));  // where it stood
  EXPECT_EQ(messages[3].as_object().at("tool_calls").as_array().size(), 1u);
  EXPECT_EQ(messages[4], json::parse(R"({"role": "tool", "tool_call_id": "t1", "content": "a.py\n[image omitted]"})"));
  ASSERT_EQ((*chat)["tools"].as_array().size(), 1u);  // the server tool is left out
  EXPECT_EQ(notes["ignored"].as_object().size(), 4u);
  EXPECT_TRUE(notes["ignored"].as_object().contains("thinking"));
  std::string dropped = json::serialize(notes["dropped"]);
  EXPECT_THAT(dropped, HasSubstr(R"({"field":"tools[1]","type":"web_search_20250305")"));
  EXPECT_THAT(dropped, HasSubstr(R"("field":"messages[2].content[0]","type":"thinking")"));
  EXPECT_THAT(dropped, HasSubstr(R"("type":"image")"));
}

TEST(AnthropicApiTest, AToolChoiceNamingALeftOutServerToolBecomesAuto) {
  json::object notes;
  auto chat = ToChat(Parse(R"({"model": "m", "messages": [], "tools": [{"type": "web_search_20250305", "name": "w"}],
                               "tool_choice": {"type": "tool", "name": "w"}})"),
                     &notes);
  ASSERT_THAT(chat, IsOk());
  EXPECT_EQ((*chat)["tool_choice"], json::value("auto"));
  EXPECT_FALSE(chat->contains("tools"));
}

TEST(AnthropicApiTest, CountTokensIsAnEstimateFromTheTranslatedRequestAndModelsHaveAnthropicsShape) {
  auto chat = ToChat(Parse(R"({"model": "m", "messages": [{"role": "user", "content": "hello world, twelve!"}]})"));
  ASSERT_THAT(chat, IsOk());
  const int64_t n = chat_json::EstimateTokens(*chat);
  EXPECT_GE(n, 5);
  EXPECT_LE(n, 20);
  EXPECT_EQ(
      json::parse(ModelList({"a", "b"})),
      json::parse(R"({"data": [{"type": "model", "id": "a", "display_name": "a", "created_at": "1970-01-01T00:00:00Z"},
                                     {"type": "model", "id": "b", "display_name": "b", "created_at": "1970-01-01T00:00:00Z"}],
                            "has_more": false, "first_id": "a", "last_id": "b"})"));
}

TEST(AnthropicApiTest, AChatCompletionBecomesAMessage) {
  const json::object message = FromChat(Parse(R"({
    "id": "c1", "model": "m", "usage": {"prompt_tokens": 7, "completion_tokens": 3},
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "Let me look.",
      "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\":\"ls\"}"}}]}}]})"));
  EXPECT_EQ(message, Parse(R"({
    "id": "msg_c1", "type": "message", "role": "assistant", "model": "m",
    "content": [{"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "t1", "name": "bash", "input": {"cmd": "ls"}}],
    "stop_reason": "tool_use", "stop_sequence": null, "usage": {"input_tokens": 7, "output_tokens": 3}})"))
      << json::serialize(message);
  EXPECT_EQ(FromChat(Parse(R"({"choices": [{"finish_reason": "length", "message": {"content": ""}}]})"))["stop_reason"],
            "max_tokens");
  EXPECT_EQ(ErrorBody(401, "no key"), R"({"type":"error","error":{"type":"authentication_error","message":"no key"}})");
}

TEST(AnthropicApiTest, AChatStreamBecomesMessageEvents) {
  StreamTranslator t;
  std::string out = t.Chunk(Parse(R"({"id": "c1", "model": "m", "choices": [{"delta": {"role": "assistant"}}]})"));
  out += t.Chunk(Parse(R"({"choices": [{"delta": {"content": "Hi"}}]})"));
  out += t.Chunk(Parse(
      R"({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "t1", "function": {"name": "bash", "arguments": ""}}]}}]})"));
  out += t.Chunk(
      Parse(R"({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\":1}"}}]}}]})"));
  out += t.Chunk(Parse(R"({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]})"));
  out += t.Chunk(Parse(R"({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}})"));
  out += t.End();
  EXPECT_THAT(testing::EventTypes(out),
              ::testing::ElementsAre("message_start", "content_block_start", "content_block_delta",
                                     "content_block_stop", "content_block_start", "content_block_delta",
                                     "content_block_stop", "message_delta", "message_stop"));
  EXPECT_THAT(out, HasSubstr(R"("delta":{"type":"text_delta","text":"Hi"})"));
  EXPECT_THAT(out, HasSubstr(R"("content_block":{"type":"tool_use","id":"t1","name":"bash","input":{}})"));
  EXPECT_THAT(out, HasSubstr(R"("delta":{"type":"input_json_delta","partial_json":"{\"a\":1}"})"));
  EXPECT_THAT(
      out,
      HasSubstr(
          R"("delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":5,"output_tokens":2})"));
}

TEST(AnthropicApiTest, AReasoningModelsReasoningBecomesAThinkingBlock) {
  const json::object whole = FromChat(Parse(R"({"choices": [{"finish_reason": "stop",
    "message": {"reasoning_content": "2 and 2", "content": "4"}}]})"));
  EXPECT_EQ(whole.at("content"), json::parse(R"([{"type": "thinking", "thinking": "2 and 2", "signature": ""},
                                                 {"type": "text", "text": "4"}])"));
  StreamTranslator t;
  std::string out = t.Chunk(Parse(R"({"id": "c1", "model": "m", "choices": [{"delta": {"role": "assistant"}}]})"));
  out += t.Chunk(Parse(R"({"choices": [{"delta": {"reasoning_content": "2 and "}}]})"));
  out += t.Chunk(Parse(R"({"choices": [{"delta": {"reasoning": "2"}}]})"));  // newer vLLM's name
  out += t.Chunk(Parse(R"({"choices": [{"delta": {"content": "4"}}]})"));
  out += t.End();
  EXPECT_THAT(testing::EventTypes(out),
              ::testing::ElementsAre("message_start", "content_block_start", "content_block_delta",
                                     "content_block_delta", "content_block_stop", "content_block_start",
                                     "content_block_delta", "content_block_stop", "message_delta", "message_stop"));
  EXPECT_THAT(out, HasSubstr(R"("index":0,"content_block":{"type":"thinking","thinking":"","signature":""})"));
  EXPECT_THAT(out, HasSubstr(R"("delta":{"type":"thinking_delta","thinking":"2 and "})"));
  EXPECT_THAT(out, HasSubstr(R"("index":1,"content_block":{"type":"text","text":""})"));
}

}  // namespace
}  // namespace corral::proxy::anthropic
