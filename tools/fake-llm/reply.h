// What the fake answers one completion request: the options it runs with, what the request asks of it (its
// "fake" object: timing, failures) and the answer itself, whole or as stream chunks, in the shape OpenAI's chat
// or completions API gives — built outside any coroutine (GCC 12 miscompiles braced JSON initializers inside
// coroutine frames). FakeLlm (fake_llm.h) serves it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "boost/json.hpp"

namespace corral::fakellm {

struct Options {
  std::vector<std::string> models = {"fake-model"};
  std::string reply;                                  // fixed reply text; empty = "echo: <last user message>"
  absl::Duration ttft = absl::ZeroDuration();         // before the first token (or the whole reply)
  absl::Duration inter_token = absl::ZeroDuration();  // between streamed tokens
  int64_t fail_first = 0;                             // the first N completion requests get HTTP 500
  // Solve "A op B" from the last user message (ArithmeticPlan): a stand-in policy whose rewards vary by seed.
  bool arithmetic = false;
  // Drive an installed agent harness: call its shell tool once with the task's "RUN:" command, then answer with
  // its "ANSWER:" text (PlanShellAgent).
  bool shell_agent = false;
  std::string shell_agent_command;  // what it runs when the task has no "RUN:" line ("" = it answers at once)
  // Serve POST /v1/responses itself (as vLLM and SGLang do), answering as a chat call would, reshaped.
  bool native_responses = false;
  // Serve POST /v1/messages itself (as some servers do), the same way.
  bool native_messages = false;
  // Serve Google's Gemini API itself (POST /v1beta/models/{model}:generateContent, :streamGenerateContent).
  bool native_gemini = false;
  // A provider's quota of its own: completion requests per second (a token bucket of `quota_burst`, 0 = off) and
  // completions in flight (0 = off). Over it: HTTP 429 with Retry-After, counted in /admin/stats.
  double quota_rps = 0;
  int64_t quota_burst = 1;
  int64_t quota_concurrency = 0;
  // Append each POST it is sent, as {"path", "body"} on one line, to this file ("" = none): how the harness
  // request fixtures (tests/harness/fixtures) were recorded.
  std::string request_log;
};

// What one request asks of the fake, after flags and its "fake" object.
struct Plan {
  int status = 200;
  absl::Duration ttft, inter_token;
  int64_t stall_after_chunks = -1;       // stop sending (keep the connection) after this many chunks
  int64_t disconnect_after_chunks = -1;  // close the connection after this many chunks
  std::string reply;
  bool tool_call = false;
  std::string tool_name;
};

// Everything one completion request gets, built outside any coroutine (GCC 12 miscompiles braced JSON
// initializers inside coroutine frames).
struct Reply {
  Plan plan;
  bool stream = false;
  std::string whole;                // non-streamed body
  std::vector<std::string> events;  // streamed: each a complete "data: ...\n\n" (without the final [DONE])
  int64_t continued_from = -1;      // a continuation of a final assistant message: the tokens it already had
};

// The reply to completion request number `n` (chat or completions) with `body`.
Reply BuildReply(const Options& options, int64_t n, bool chat, const boost::json::object& body);
// The agent APIs the fake may serve itself.
enum class NativeApi { kResponses, kMessages, kGemini };
// A chat completion (the fake's whole answer) as that API's answer: the body, or the stream's events.
std::vector<std::string> AsNative(NativeApi api, const std::string& whole, bool stream);
// `o[key]` when it is true.
bool BoolOr(const boost::json::object& o, const char* key);

}  // namespace corral::fakellm
