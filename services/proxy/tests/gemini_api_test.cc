#include "services/proxy/gemini_api.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "services/proxy/tests/proxy_test_support.h"

namespace corral::proxy::gemini {
namespace {

namespace json = boost::json;
using ::testing::HasSubstr;

json::object Parse(const char* text) { return json::parse(text).as_object(); }

TEST(GeminiApiTest, ARequestBecomesAChatBody) {
  json::object notes;
  auto chat = ToChat(Parse(R"({
    "model": "gemini-2.5-pro", "stream": true,
    "systemInstruction": {"role": "user", "parts": [{"text": "Be brief."}, {"text": "Use tools."}]},
    "contents": [
      {"role": "user", "parts": [{"text": "list files"}]},
      {"role": "model", "parts": [{"text": "hm", "thought": true}, {"text": "ok"},
                                  {"functionCall": {"id": "fc1", "name": "run_shell_command", "args": {"command": "ls"}},
                                   "thoughtSignature": "c2ln"}]},
      {"role": "user", "parts": [{"functionResponse": {"id": "fc1", "name": "run_shell_command",
                                                       "response": {"output": "a.txt"}}},
                                 {"text": "and now?"},
                                 {"inlineData": {"mimeType": "image/png", "data": "AAA"}}]}
    ],
    "tools": [{"functionDeclarations": [{"name": "run_shell_command", "description": "run",
                                         "parameters": {"type": "OBJECT", "properties": {"command": {"type": "STRING"}},
                                                        "required": ["command"]}}]},
              {"googleSearch": {}}],
    "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["run_shell_command"]}},
    "generationConfig": {"temperature": 0.5, "topP": 0.9, "topK": 40, "maxOutputTokens": 64,
                         "stopSequences": ["END"], "seed": 7, "thinkingConfig": {"includeThoughts": true}},
    "safetySettings": []
  })"),
                     &notes);
  ASSERT_THAT(chat, IsOk());
  const json::object expected = Parse(R"({
    "model": "gemini-2.5-pro",
    "messages": [
      {"role": "system", "content": "Be brief.\nUse tools."},
      {"role": "user", "content": "list files"},
      {"role": "assistant", "content": "ok",
       "tool_calls": [{"id": "fc1", "type": "function",
                       "function": {"name": "run_shell_command", "arguments": "{\"command\":\"ls\"}"}}]},
      {"role": "tool", "tool_call_id": "fc1", "content": "a.txt"},
      {"role": "user", "content": [{"type": "text", "text": "and now?"},
                                   {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}}]}
    ],
    "tools": [{"type": "function", "function": {"name": "run_shell_command", "description": "run",
               "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                              "required": ["command"]}}}],
    "tool_choice": {"type": "function", "function": {"name": "run_shell_command"}},
    "temperature": 0.5, "top_p": 0.9, "top_k": 40, "max_tokens": 64, "stop": ["END"], "seed": 7,
    "stream": true, "stream_options": {"include_usage": true}
  })");
  EXPECT_EQ(*chat, expected) << json::serialize(*chat);
  // What had no chat form is in the notes, never a refusal.
  const std::string noted = json::serialize(notes);
  EXPECT_THAT(noted, HasSubstr(R"("safetySettings":[])"));
  EXPECT_THAT(noted, HasSubstr(R"("generationConfig.thinkingConfig":{"includeThoughts":true})"));
  EXPECT_THAT(noted, HasSubstr(R"({"field":"tools[1]","type":"googleSearch")"));
  EXPECT_THAT(noted, HasSubstr(R"({"field":"contents[1].parts[0]","type":"thought")"));
}

TEST(GeminiApiTest, CallsWithoutIdsGetOneAndTheirResponsesFindThemByNameInOrder) {
  auto chat = ToChat(Parse(R"({"contents": [
      {"role": "user", "parts": [{"text": "go"}]},
      {"role": "model", "parts": [{"functionCall": {"name": "read", "args": {"p": "a"}}},
                                  {"functionCall": {"name": "read", "args": {"p": "b"}}},
                                  {"functionCall": {"name": "ls"}}]},
      {"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {"files": ["x"]}}},
                                 {"functionResponse": {"name": "read", "response": {"output": "A"}}},
                                 {"functionResponse": {"name": "read", "response": {"output": "B"}}}]}]})"));
  ASSERT_THAT(chat, IsOk());
  const json::array& m = (*chat)["messages"].as_array();
  ASSERT_EQ(m.size(), 5u);
  const json::array& calls = m[1].as_object().at("tool_calls").as_array();
  EXPECT_EQ(calls[0].at("id"), "call_0_0");
  EXPECT_EQ(calls[1].at("id"), "call_0_1");
  EXPECT_EQ(calls[2].at("id"), "call_0_2");
  EXPECT_EQ(calls[2].at("function").at("arguments"), "{}");
  EXPECT_EQ(m[2].at("tool_call_id"), "call_0_2");
  EXPECT_EQ(m[2].at("content"), R"({"files":["x"]})");  // not Gemini CLI's {output} shape: the response as JSON
  EXPECT_EQ(m[3].at("tool_call_id"), "call_0_0");
  EXPECT_EQ(m[3].at("content"), "A");
  EXPECT_EQ(m[4].at("tool_call_id"), "call_0_1");
  EXPECT_FALSE(chat->contains("stream"));
}

TEST(GeminiApiTest, ModesSchemasAndJsonAnswersTranslate) {
  auto chat = ToChat(Parse(R"({"contents": [{"parts": [{"text": "hi"}]}],
      "toolConfig": {"functionCallingConfig": {"mode": "NONE"}},
      "generationConfig": {"responseMimeType": "application/json",
                           "responseSchema": {"type": "ARRAY", "items": {"type": "INTEGER"}}}})"));
  ASSERT_THAT(chat, IsOk());
  EXPECT_EQ((*chat)["tool_choice"], "none");
  EXPECT_EQ((*chat)["response_format"], Parse(R"({"type": "json_schema", "json_schema": {"name": "response",
                      "schema": {"type": "array", "items": {"type": "integer"}}}})"));
  EXPECT_EQ((*chat)["messages"].as_array()[0], Parse(R"({"role": "user", "content": "hi"})"));  // no role: user
  chat = ToChat(Parse(R"({"contents": [], "toolConfig": {"functionCallingConfig": {"mode": "ANY"}},
                          "generationConfig": {"responseMimeType": "application/json"}})"));
  ASSERT_THAT(chat, IsOk());
  EXPECT_EQ((*chat)["tool_choice"], "required");
  EXPECT_EQ((*chat)["response_format"], Parse(R"({"type": "json_object"})"));
}

TEST(GeminiApiTest, ASystemInstructionMayBeAPartOrAString) {
  for (const char* system : {R"({"text": "Be brief."})", R"("Be brief.")"}) {
    auto chat = ToChat(Parse(absl::StrCat(R"({"contents": [], "systemInstruction": )", system, "}").c_str()));
    ASSERT_THAT(chat, IsOk());
    EXPECT_EQ((*chat)["messages"].as_array()[0], Parse(R"({"role": "system", "content": "Be brief."})")) << system;
  }
}

TEST(GeminiApiTest, MalformedRequestsAreRefusedNamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({})", "contents: is required"},
      {R"({"contents": {"parts": []}})", "contents: is required"},
      {R"({"contents": [7]})", "contents[0]: must be an object"},
      {R"({"contents": [{"role": "system", "parts": []}]})", "contents[0].role: must be user or model"},
      {R"({"contents": [{"role": "user", "parts": "hi"}]})", "contents[0].parts: must be an array"},
      {R"({"contents": [{"role": "user", "parts": [1]}]})", "contents[0].parts[0]: must be an object"},
      {R"({"contents": [], "systemInstruction": 3})", "systemInstruction: must be a Content"},
      {R"({"contents": [], "tools": [{"functionDeclarations": [1]}]})", "tools[0].functionDeclarations[0]"},
      {R"({"contents": [], "toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}}})",
       "toolConfig.functionCallingConfig.mode: 'SOMETIMES'"},
      {R"({"contents": [], "generationConfig": []})", "generationConfig: must be an object"},
      {R"({"contents": [], "model": 5})", "model: must be a string"},
  };
  for (const auto& [body, message] : cases) {
    auto chat = ToChat(Parse(body));
    EXPECT_THAT(chat, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(message))) << body;
  }
}

TEST(GeminiApiTest, AWholeCompletionBecomesOneCandidate) {
  const json::object answer = FromChat(Parse(R"({"id": "c9", "model": "m", "choices": [{"index": 0,
      "message": {"role": "assistant", "reasoning_content": "think", "content": "Running it.",
                  "tool_calls": [{"id": "t1", "type": "function",
                                  "function": {"name": "run", "arguments": "{\"command\":\"ls\"}"}}]},
      "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 11, "completion_tokens": 4}})"));
  EXPECT_EQ(answer, Parse(R"({
    "candidates": [{"content": {"parts": [{"text": "think", "thought": true}, {"text": "Running it."},
                                          {"functionCall": {"id": "t1", "name": "run", "args": {"command": "ls"}}}],
                                "role": "model"},
                    "finishReason": "STOP", "index": 0}],
    "usageMetadata": {"promptTokenCount": 11, "candidatesTokenCount": 4, "totalTokenCount": 15},
    "modelVersion": "m", "responseId": "c9"})"))
      << json::serialize(answer);
  const json::object cut = FromChat(Parse(R"({"choices": [{"message": {"content": ""}, "finish_reason": "length"}]})"));
  EXPECT_EQ(cut.at("candidates").at(0).at("finishReason"), "MAX_TOKENS");
  EXPECT_EQ(cut.at("candidates").at(0).at("content").at("parts"), json::parse(R"([{"text": ""}])"));
}

// The data of each event of a translated stream, as JSON.
std::vector<json::object> Events(const std::string& sse) {
  std::vector<json::object> out;
  size_t at = 0;
  while ((at = sse.find("data: ", at)) != std::string::npos) {
    const size_t end = sse.find("\r\n\r\n", at);
    out.push_back(json::parse(sse.substr(at + 6, end - at - 6)).as_object());
    at = end;
  }
  return out;
}

TEST(GeminiApiTest, AStreamIsOneResponsePerPieceWithEachCallWholeAtTheEnd) {
  StreamTranslator t;
  std::string sse;
  sse += t.Chunk(Parse(R"({"id": "s1", "model": "m", "choices": [{"index": 0,
      "delta": {"role": "assistant", "reasoning_content": "hm"}}]})"));
  sse += t.Chunk(Parse(R"({"choices": [{"index": 0, "delta": {"content": "Let me"}}]})"));
  sse += t.Chunk(Parse(R"({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "t1",
      "type": "function", "function": {"name": "run", "arguments": "{\"comm"}}]}}]})"));
  sse += t.Chunk(Parse(R"({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0,
      "function": {"arguments": "and\":\"ls\"}"}}]}, "finish_reason": "tool_calls"}]})"));
  sse += t.Chunk(Parse(R"({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3}})"));
  sse += t.End();
  const std::vector<json::object> events = Events(sse);
  ASSERT_EQ(events.size(), 3u) << sse;
  EXPECT_EQ(events[0].at("candidates").at(0).at("content").at("parts"),
            json::parse(R"([{"text": "hm", "thought": true}])"));
  EXPECT_EQ(events[0].at("responseId"), "s1");
  EXPECT_FALSE(events[0].at("candidates").at(0).as_object().contains("finishReason"));
  EXPECT_EQ(events[1].at("candidates").at(0).at("content").at("parts"), json::parse(R"([{"text": "Let me"}])"));
  EXPECT_EQ(events[2].at("candidates").at(0), json::parse(R"({"content": {"parts": [{"functionCall":
      {"id": "t1", "name": "run", "args": {"command": "ls"}}}], "role": "model"}, "index": 0, "finishReason": "STOP"})"));
  EXPECT_EQ(events[2].at("usageMetadata"),
            json::parse(R"({"promptTokenCount": 9, "candidatesTokenCount": 3, "totalTokenCount": 12})"));
  EXPECT_EQ(events[2].at("modelVersion"), "m");
}

TEST(GeminiApiTest, AnEmptyStreamStillEndsWithAFinishReason) {
  StreamTranslator t;
  const std::vector<json::object> events = Events(t.End());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].at("candidates").at(0).at("finishReason"), "STOP");
}

TEST(GeminiApiTest, ErrorsCountsAndModelsHaveGooglesShapes) {
  EXPECT_EQ(json::parse(ErrorBody(429, "slow down")),
            json::parse(R"({"error": {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"}})"));
  EXPECT_EQ(ErrorEvent(401, "who"),
            "data: {\"error\":{\"code\":401,\"message\":\"who\",\"status\":\"UNAUTHENTICATED\"}}\r\n\r\n");
  EXPECT_THAT(ErrorBody(500, "x"), HasSubstr(R"("status":"INTERNAL")"));
  GeminiDialect d;
  auto plain = d.CountTokens(Parse(R"({"contents": [{"role": "user", "parts": [{"text": "hello world, twelve!"}]}]})"));
  auto wrapped = d.CountTokens(Parse(
      R"({"generateContentRequest": {"model": "models/m", "contents": [{"parts": [{"text": "hello world, twelve!"}]}]}})"));
  ASSERT_THAT(plain, IsOk());
  ASSERT_THAT(wrapped, IsOk());
  const int64_t n = json::parse(*plain).at("totalTokens").as_int64();
  EXPECT_GE(n, 5);
  EXPECT_LE(n, 20);
  EXPECT_EQ(*wrapped, *plain);
  EXPECT_THAT(d.CountTokens(Parse(R"({"contents": 1})")), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(json::parse(d.ModelList({"a"})), json::parse(R"({"models": [{"name": "models/a", "displayName": "a",
                            "supportedGenerationMethods": ["generateContent", "countTokens"]}]})"));
}

}  // namespace
}  // namespace corral::proxy::gemini
