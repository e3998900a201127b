#include "services/proxy/continuation.h"

#include "boost/json.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace corral::proxy {
namespace {

namespace json = boost::json;

json::object Obj(const char* text) { return json::parse(text).as_object(); }

TEST(ContinuationTest, AChatStreamContinuesWithItsTextAsTheFinalAssistantMessageAndFewerTokensLeft) {
  const json::object body =
      Obj(R"({"model":"m","stream":true,"max_tokens":10,"messages":[{"role":"user","content":"hi"}]})");
  ResponseAssembler so_far(true);
  so_far.AddChunk(Obj(R"({"id":"c-1","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})"));
  so_far.AddChunk(Obj(R"({"id":"c-1","choices":[{"index":0,"token_ids":[7],"delta":{"content":"Hello"}}]})"));
  so_far.AddChunk(Obj(R"({"id":"c-1","choices":[{"index":0,"token_ids":[8],"delta":{"content":" there"}}]})"));
  ASSERT_TRUE(Continuable(body, true, so_far));
  const json::object next = ContinuationBody(body, true, so_far);
  const json::array& messages = next.at("messages").as_array();
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(messages[1].as_object().at("role").as_string(), "assistant");
  EXPECT_EQ(messages[1].as_object().at("content").as_string(), "Hello there");
  EXPECT_EQ(next.at("continue_final_message").as_bool(), true);
  EXPECT_EQ(next.at("add_generation_prompt").as_bool(), false);
  EXPECT_EQ(next.at("max_tokens").as_int64(), 8);
  EXPECT_EQ(body.at("messages").as_array().size(), 1u);  // the original is untouched

  // Its usage counts on top: 2 tokens before, 3 in the continuation; the original prompt's 4 tokens stay.
  so_far.AddChunk(Obj(R"({"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":0,"total_tokens":9}})"));
  ResponseAssembler cont = so_far;
  cont.BeginContinuation();
  cont.AddChunk(Obj(R"({"choices":[],"usage":{"prompt_tokens":6,"completion_tokens":3,"total_tokens":9}})"));
  EXPECT_EQ(cont.usage().completion_tokens(), 5u);
  EXPECT_EQ(cont.usage().prompt_tokens(), 9u);
  EXPECT_EQ(cont.usage().total_tokens(), 14u);
}

TEST(ContinuationTest, ToolCallsReasoningSeveralChoicesAndEchoAreNotContinuable) {
  ResponseAssembler tools(true);
  tools.AddChunk(
      Obj(R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{"}}]}}]})"));
  EXPECT_FALSE(Continuable(Obj(R"({"messages":[]})"), true, tools));
  ResponseAssembler thinking(true);
  thinking.AddChunk(Obj(R"({"choices":[{"index":0,"delta":{"reasoning_content":"hmm"}}]})"));
  EXPECT_FALSE(Continuable(Obj(R"({"messages":[]})"), true, thinking));
  ResponseAssembler plain(true);
  EXPECT_FALSE(Continuable(Obj(R"({"messages":[],"n":2})"), true, plain));
  EXPECT_TRUE(Continuable(Obj(R"({"messages":[],"n":1})"), true, plain));
  ResponseAssembler text(false);
  EXPECT_FALSE(Continuable(Obj(R"({"prompt":"a","echo":true})"), false, text));
  EXPECT_FALSE(Continuable(Obj(R"({"prompt":[1,2]})"), false, text));
  EXPECT_TRUE(Continuable(Obj(R"({"prompt":"a","echo":false})"), false, text));
}

TEST(ContinuationTest, ATextCompletionContinuesWithItsTextAppendedToThePrompt) {
  ResponseAssembler so_far(false);
  so_far.AddChunk(Obj(R"({"choices":[{"index":0,"text":"4 5"}]})"));
  const json::object next = ContinuationBody(Obj(R"({"prompt":"1 2 3 ","max_tokens":1})"), false, so_far);
  EXPECT_EQ(next.at("prompt").as_string(), "1 2 3 4 5");
  EXPECT_EQ(next.at("max_tokens").as_int64(), 1);  // at least one token is left to ask for
}

TEST(ContinuationTest, AContinuationChunkTakesTheOriginalIdAndDropsItsRoleAndPromptIds) {
  json::object chunk =
      Obj(R"({"id":"c-2","prompt_token_ids":[1],"choices":[{"index":0,"delta":{"role":"assistant","content":" x"}}]})");
  AdaptContinuationChunk("c-1", chunk);
  EXPECT_EQ(json::serialize(chunk), R"({"id":"c-1","choices":[{"index":0,"delta":{"content":" x"}}]})");
}

}  // namespace
}  // namespace corral::proxy
