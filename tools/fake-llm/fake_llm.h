// corral-fake-llm's backend: an OpenAI-compatible scripted model for tests, benchmarks and demos. Replies are
// deterministic (an echo of the last user message, a fixed text, or a tool call when tools are offered), split
// into word tokens with stable ids, streamed one token per SSE chunk; token ids and logprobs come back in
// vLLM's shape when asked (`return_token_ids`, `logprobs`). Latency, time to first token and faults (5xx,
// stall, disconnect mid-stream) are set per process by flags or per request by a "fake" object in the body.
// For asynchronous RL tests it has a policy "version" (POST /admin/version), honours vLLM's
// `continue_final_message`, stops a stream whose client left, and reports all three (GET /admin/stats).
// Like a paid provider it can enforce a quota of its own (requests per second, calls in flight), answering
// HTTP 429 with Retry-After beyond it.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "libs/core/token_bucket.h"
#include "libs/http/server.h"

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
  // Serve POST /v1/responses itself (as vLLM and SGLang do), answering as a chat call would, reshaped.
  bool native_responses = false;
  // Serve POST /v1/messages itself (as some servers do), the same way.
  bool native_messages = false;
  // A provider's quota of its own: completion requests per second (a token bucket of `quota_burst`, 0 = off) and
  // completions in flight (0 = off). Over it: HTTP 429 with Retry-After, counted in /admin/stats.
  double quota_rps = 0;
  int64_t quota_burst = 1;
  int64_t quota_concurrency = 0;
  // Append each POST it is sent, as {"path", "body"} on one line, to this file ("" = none): how the harness
  // request fixtures (tests/harness/fixtures) were recorded.
  std::string request_log;
};

// What the arithmetic mode does with one request: a tool call (`arguments` set) or a text reply.
struct ArithmeticPlan {
  bool tool_call = false;
  std::string arguments;  // JSON for the tool call
  std::string reply;      // otherwise
};
// `last_user` holds "A op B" (op one of + - * /); `tool_property` is the first property of the first offered
// tool's schema ("code", "command", or "" when no tool is offered); `tool_output` is the last message's content
// when it is a tool result (nullptr otherwise). One seed in four answers wrong by one. nullopt when there is no
// expression.
std::optional<ArithmeticPlan> PlanArithmetic(const std::string& last_user, const std::string& tool_property,
                                             const std::string* tool_output, int64_t seed);

// Stable fake token ids: the same text always gives the same ids, streamed or not.
std::vector<std::string> SplitTokens(const std::string& text);
int32_t TokenId(const std::string& token);

class FakeLlm {
 public:
  explicit FakeLlm(Options options) : options_(std::move(options)) {}
  boost::asio::awaitable<void> Handle(http::Request& request, http::Responder& responder);
  int64_t requests() const { return requests_.load(); }

 private:
  // GET /admin/stats: the version served, requests, streams the client cut, and each continuation request's
  // given tokens and the version it ran under.
  std::string Stats() const;
  // The quota: nullopt when the request may run (then `in_flight` counts it), else the seconds to retry after.
  std::optional<double> OverQuota();

  struct Quota {
    std::optional<TokenBucket> requests;  // the same bucket arithmetic as the ratelimiter, created full
    int64_t in_flight = 0;
    int64_t max_in_flight = 0;
    int64_t throttled = 0;
  };

  const Options options_;
  std::atomic<int64_t> requests_{0};
  std::atomic<int64_t> version_{0};  // POST /admin/version {"version": N}
  std::atomic<int64_t> aborted_streams_{0};
  std::atomic<int64_t> native_responses_{0};  // requests to its own /v1/responses
  std::atomic<int64_t> native_messages_{0};   // and to its own /v1/messages
  mutable absl::Mutex mu_;
  std::vector<std::pair<int64_t, int64_t>> continuations_ ABSL_GUARDED_BY(mu_);
  absl::Mutex log_mu_;  // request_log lines are whole
  Quota quota_ ABSL_GUARDED_BY(mu_);
};

}  // namespace corral::fakellm
