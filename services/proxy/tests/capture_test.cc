#include "services/proxy/capture.h"

#include "boost/json.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace corral::proxy {
namespace {

namespace json = boost::json;

TEST(ResponseAssemblerTest, StreamedChunksAssembleToWhatTheWholeResponseSays) {
  ResponseAssembler whole(true), streamed(true);
  whole.AddWhole(json::parse(R"({"choices":[{"index":0,"finish_reason":"tool_calls","token_ids":[5,6],
      "logprobs":{"content":[{"token":"a","logprob":-0.25},{"token":"b","logprob":-0.5}]},
      "message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
      "function":{"name":"bash","arguments":"{\"x\": 1}"}}]}}],
      "usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5},"prompt_token_ids":[1,2,3]})")
                     .as_object());
  for (
      const char* chunk :
      {R"({"prompt_token_ids":[1,2,3],"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"bash","arguments":""}}]}}]})",
       R"({"choices":[{"index":0,"token_ids":[5],"logprobs":{"content":[{"token":"a","logprob":-0.25}]},"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"x\":"}}]}}]})",
       R"({"choices":[{"index":0,"token_ids":[6],"logprobs":{"content":[{"token":"b","logprob":-0.5}]},"delta":{"tool_calls":[{"index":0,"function":{"arguments":" 1}"}}]}}]})",
       R"({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]})",
       R"({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}})"}) {
    streamed.AddChunk(json::parse(chunk).as_object());
  }
  for (const ResponseAssembler* a : {&whole, &streamed}) {
    EXPECT_THAT(a->prompt_token_ids(), ::testing::ElementsAre(1, 2, 3));
    EXPECT_THAT(a->completion_token_ids(), ::testing::ElementsAre(5, 6));
    EXPECT_THAT(a->completion_logprobs(), ::testing::ElementsAre(-0.25f, -0.5f));
    EXPECT_EQ(a->finish_reason(), "tool_calls");
    EXPECT_EQ(a->usage().total_tokens(), 5u);
    v1::ChatMessage m = a->message();
    ASSERT_EQ(m.tool_calls_size(), 1);
    EXPECT_EQ(m.tool_calls(0).function_name(), "bash");
    EXPECT_EQ(m.tool_calls(0).arguments(), "{\"x\": 1}");
    EXPECT_EQ(m.tool_calls(0).id(), "c1");
  }
}

TEST(StripForAgentTest, RemovesOnlyWhatTheAgentDidNotAskFor) {
  Rewrite rw;
  rw.strip_token_ids = true;
  rw.strip_usage_chunk = true;
  json::object chunk = json::parse(R"({"prompt_token_ids":[1],"choices":[{"index":0,"token_ids":[5],
      "logprobs":{"content":[]},"delta":{"content":"x"}}]})")
                           .as_object();
  EXPECT_TRUE(StripForAgent(rw, chunk));
  EXPECT_FALSE(chunk.contains("prompt_token_ids"));
  EXPECT_FALSE(chunk["choices"].as_array()[0].as_object().contains("token_ids"));
  EXPECT_TRUE(chunk["choices"].as_array()[0].as_object().contains("logprobs"));  // the agent asked for these
  json::object usage_only = json::parse(R"({"choices":[],"usage":{"total_tokens":5}})").as_object();
  EXPECT_FALSE(StripForAgent(rw, usage_only));
}

TEST(MessagesFromTest, ContentPartsToolCallsAndGarbageEntries) {
  json::array msgs = json::parse(R"([{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"},
      {"type":"text","text":"b"}]}, 5, {"role":"tool","tool_call_id":"c1","content":"out"}])")
                         .as_array();
  auto out = MessagesFrom(msgs);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].content(), "ab");
  EXPECT_FALSE(out[0].content_parts_json().empty());
  EXPECT_EQ(out[1].tool_call_id(), "c1");
}

}  // namespace
}  // namespace corral::proxy
