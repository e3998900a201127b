#include "services/proxy/native_answers.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace corral::proxy {
namespace {

namespace json = boost::json;

json::object Parse(const char* text) { return json::parse(text).as_object(); }

const json::object& Message(const json::object& completion) {
  return completion.at("choices").as_array()[0].as_object().at("message").as_object();
}

TEST(NativeAnswers, AResponseBecomesTextToolCallsAndUsage) {
  auto chat = ResponseToChat(Parse(R"({"id": "resp_1", "object": "response", "status": "completed",
    "model": "m", "output": [
      {"type": "reasoning", "id": "rs_1", "summary": []},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
      {"type": "function_call", "call_id": "call_9", "name": "exec_command", "arguments": "{\"cmd\":\"ls\"}"}],
    "usage": {"input_tokens": 12, "output_tokens": 5, "total_tokens": 17}})"));
  ASSERT_TRUE(chat.has_value());
  const json::object& m = Message(*chat);
  EXPECT_EQ(m.at("content").as_string(), "Let me look.");
  const json::object& call = m.at("tool_calls").as_array()[0].as_object();
  EXPECT_EQ(call.at("id").as_string(), "call_9");
  EXPECT_EQ(call.at("function").as_object().at("name").as_string(), "exec_command");
  EXPECT_EQ(call.at("function").as_object().at("arguments").as_string(), "{\"cmd\":\"ls\"}");
  EXPECT_EQ(chat->at("choices").as_array()[0].as_object().at("finish_reason").as_string(), "tool_calls");
  EXPECT_EQ(chat->at("usage").as_object().at("prompt_tokens").as_int64(), 12);
  EXPECT_EQ(chat->at("usage").as_object().at("completion_tokens").as_int64(), 5);
  EXPECT_FALSE(ResponseToChat(Parse(R"({"choices": []})")).has_value());
}

TEST(NativeAnswers, AMessagesAnswerBecomesTextToolCallsAndUsage) {
  auto chat = MessageToChat(Parse(R"({"id": "msg_1", "type": "message", "role": "assistant",
    "model": "m", "stop_reason": "max_tokens", "content": [
      {"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "Done"}],
    "usage": {"input_tokens": 3, "output_tokens": 2}})"));
  ASSERT_TRUE(chat.has_value());
  EXPECT_EQ(Message(*chat).at("content").as_string(), "Done");
  EXPECT_EQ(chat->at("choices").as_array()[0].as_object().at("finish_reason").as_string(), "length");
  EXPECT_FALSE(MessageToChat(Parse(R"({"type": "error"})")).has_value());
}

TEST(NativeStream, AResponsesStreamIsWholeAtResponseCompleted) {
  NativeStream stream(NativeStream::Shape::kResponses);
  stream.Add(Parse(R"({"type": "response.created", "response": {"output": []}})"));
  stream.Add(Parse(R"({"type": "response.output_text.delta", "delta": "Hi"})"));
  EXPECT_FALSE(stream.answer().has_value());
  stream.Add(Parse(R"({"type": "response.completed", "response": {"id": "r", "output": [
    {"type": "message", "content": [{"type": "output_text", "text": "Hi"}]}]}})"));
  ASSERT_TRUE(stream.answer().has_value());
  EXPECT_EQ(Message(*ResponseToChat(*stream.answer())).at("content").as_string(), "Hi");
  EXPECT_EQ(stream.error(), "");
  NativeStream failed(NativeStream::Shape::kResponses);
  failed.Add(Parse(R"({"type": "error", "message": "overloaded"})"));
  EXPECT_EQ(failed.error(), "overloaded");
}

TEST(NativeStream, AMessagesStreamIsAssembledFromItsBlocksAndDeltas) {
  NativeStream stream(NativeStream::Shape::kMessages);
  for (const char* event : {
           R"({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
               "content": [], "usage": {"input_tokens": 7, "output_tokens": 1}}})",
           R"({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})",
           R"({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Run"}})",
           R"({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ning"}})",
           R"({"type": "content_block_stop", "index": 0})",
           R"({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "tu_1",
               "name": "Bash", "input": {}}})",
           R"({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta",
               "partial_json": "{\"command\": "}})",
           R"({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta",
               "partial_json": "\"ls\"}"}})",
           R"({"type": "content_block_stop", "index": 1})",
           R"({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}})",
       }) {
    stream.Add(Parse(event));
  }
  EXPECT_FALSE(stream.answer().has_value());
  stream.Add(Parse(R"({"type": "message_stop"})"));
  ASSERT_TRUE(stream.answer().has_value());
  auto chat = MessageToChat(*stream.answer());
  ASSERT_TRUE(chat.has_value());
  EXPECT_EQ(Message(*chat).at("content").as_string(), "Running");
  const json::object& fn = Message(*chat).at("tool_calls").as_array()[0].as_object().at("function").as_object();
  EXPECT_EQ(fn.at("name").as_string(), "Bash");
  EXPECT_EQ(json::parse(fn.at("arguments").as_string()), json::parse(R"({"command": "ls"})"));
  EXPECT_EQ(chat->at("usage").as_object().at("prompt_tokens").as_int64(), 7);
  EXPECT_EQ(chat->at("usage").as_object().at("completion_tokens").as_int64(), 9);
}

TEST(NativeAnswers, AGeminiResponseBecomesTextToolCallsAndUsage) {
  auto chat = GenerateContentToChat(Parse(R"({"responseId": "g1", "modelVersion": "m",
      "candidates": [{"content": {"role": "model", "parts": [{"text": "hm", "thought": true}, {"text": "Running"},
                      {"functionCall": {"id": "fc1", "name": "run", "args": {"command": "ls"}}}]},
                      "finishReason": "STOP"}],
      "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 3}})"));
  ASSERT_TRUE(chat.has_value());
  EXPECT_EQ(chat->at("id").as_string(), "g1");
  EXPECT_EQ(Message(*chat).at("content").as_string(), "Running");  // thoughts are not the answer
  const json::object& call = Message(*chat).at("tool_calls").as_array()[0].as_object();
  EXPECT_EQ(call.at("id").as_string(), "fc1");
  EXPECT_EQ(call.at("function").at("arguments").as_string(), R"({"command":"ls"})");
  EXPECT_EQ(chat->at("choices").as_array()[0].at("finish_reason").as_string(), "tool_calls");
  EXPECT_EQ(chat->at("usage").at("completion_tokens").as_int64(), 3);
  EXPECT_FALSE(GenerateContentToChat(Parse(R"({"error": {"code": 500}})")).has_value());
}

TEST(NativeStream, AGeminiStreamIsGatheredAndWholeOnceItHasAFinishReason) {
  NativeStream stream(NativeStream::Shape::kGemini);
  stream.Add(Parse(R"({"responseId": "g2", "candidates": [{"content": {"parts": [{"text": "Run"}]}}]})"));
  stream.Add(Parse(R"({"candidates": [{"content": {"parts": [{"text": "ning"}]}}]})"));
  EXPECT_FALSE(stream.answer().has_value());
  stream.Add(Parse(R"({"candidates": [{"content": {"parts": [{"functionCall": {"name": "run", "args": {}}}]},
                                       "finishReason": "STOP"}]})"));
  stream.Add(Parse(R"({"usageMetadata": {"promptTokenCount": 4, "candidatesTokenCount": 2}})"));  // after the end
  ASSERT_TRUE(stream.answer().has_value());
  auto chat = GenerateContentToChat(*stream.answer());
  ASSERT_TRUE(chat.has_value());
  EXPECT_EQ(Message(*chat).at("content").as_string(), "Running");
  EXPECT_EQ(Message(*chat).at("tool_calls").as_array()[0].at("function").at("name").as_string(), "run");
  EXPECT_EQ(chat->at("usage").at("prompt_tokens").as_int64(), 4);
  NativeStream failing(NativeStream::Shape::kGemini);
  failing.Add(Parse(R"({"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}})"));
  EXPECT_EQ(failing.error(), "overloaded");
}

}  // namespace
}  // namespace corral::proxy
