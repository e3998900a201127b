// The fuzz target (fuzz/parse_everything.h) over seeds and 20,000 deterministic mutations of them, plus inputs
// built to hurt (deep nesting, huge numbers, NULs, invalid UTF-8, oversize headers): every one must be survived.
#include "gtest/gtest.h"
#include "services/proxy/fuzz/parse_everything.h"
#include "tests/support/mutations.h"

namespace corral::proxy {
namespace {

const char* const kSeeds[] = {
    "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 88\r\n\r\n"
    R"({"model":"gpt","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true})",
    "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n0\r\n\r\n",
    R"({"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}],"tools":[{"type":"function"}]})",
    R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":3,"function":{"arguments":"x"}}]},"token_ids":[1,2],"logprobs":{"content":[{"logprob":-1}]}}],"usage":{"prompt_tokens":1},"prompt_token_ids":[5]})",
    "data: {\"choices\":[]}\n\n: keepalive\r\n\r\ndata: [DONE]\n\n",
    R"({"model":"m","prompt":"p","logprobs":3,"stream_options":{"include_usage":false}})",
    // The Messages and Responses APIs' requests.
    R"({"model":"c","max_tokens":8,"system":[{"type":"text","text":"s"}],"tools":[{"name":"t","input_schema":{}}],"tool_choice":{"type":"tool","name":"t"},"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"u","name":"t","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"u","content":[{"type":"text","text":"r"}],"is_error":true},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA"}}]}]})",
    R"({"model":"o","instructions":"i","input":[{"role":"developer","content":[{"type":"input_text","text":"x"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"o"}],"tools":[{"type":"function","name":"f"}],"text":{"format":{"type":"json_schema","name":"n","schema":{}}}})",
};

TEST(ParseReplayTest, SeedsAndTwentyThousandMutationsAreSurvived) {
  testing::Mutator mutator(20261122);
  int runs = 0;
  int reached_policy = 0, parsed_http = 0;
  for (const char* seed : kSeeds) {
    const std::string s(seed);
    ParseEverything(reinterpret_cast<const uint8_t*>(s.data()), s.size());
    for (int i = 0; i < 20000 / static_cast<int>(std::size(kSeeds)); ++i) {
      const std::string m = mutator.Mutate(s);
      const int depth = ParseEverything(reinterpret_cast<const uint8_t*>(m.data()), m.size());
      reached_policy += depth == 2 ? 1 : 0;
      parsed_http += depth >= 1 ? 1 : 0;
      ++runs;
    }
  }
  const std::vector<std::string> hostile_inputs = {
      std::string(100000, '['),
      std::string(50000, '{') + std::string(50000, '}'),
      std::string(R"({"model":"m","messages":[{"role":"user"}],"max_tokens":1e400})"),
      std::string("{\"model\":\"\0\"}", 14),
      std::string("{\"model\":\"\xff\xfe\"}"),
      "POST / HTTP/1.1\r\nX: " + std::string(40000, 'a') + "\r\n\r\n",
      "data:" + std::string(70000, 'x')};
  for (const std::string& hostile : hostile_inputs) {
    ParseEverything(reinterpret_cast<const uint8_t*>(hostile.data()), hostile.size());
    ++runs;
  }
  const int per_seed = 20000 / static_cast<int>(std::size(kSeeds));
  EXPECT_EQ(runs, per_seed * static_cast<int>(std::size(kSeeds)) + static_cast<int>(hostile_inputs.size()));
  // (reached the end: nothing crashed or hung)
  // The mutations are not all rejected at the door: many still reach the policy and the assembler.
  EXPECT_GT(reached_policy, 1000) << reached_policy;
  EXPECT_GT(parsed_http, 300) << parsed_http;
}

}  // namespace
}  // namespace corral::proxy
