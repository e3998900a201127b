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
#include "tools/fake-llm/reply.h"

namespace corral::fakellm {

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
  // /health and /admin/*: whether `target` was one (then it is answered).
  boost::asio::awaitable<bool> AnswerAdmin(const std::string& target, http::Request& request,
                                           http::Responder& responder);
  // Appends the POST to options_.request_log.
  void LogRequest(const std::string& target, const http::Request& request);
  // The reply as the Responses (or Messages) API's answer or stream; as a chat or completions answer or stream.
  boost::asio::awaitable<void> SendNative(const Reply& reply, NativeApi api, bool stream, http::Responder& responder);
  boost::asio::awaitable<void> SendChat(const Reply& reply, http::Responder& responder);

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
  std::atomic<int64_t> native_gemini_{0};     // and to its own Gemini API
  mutable absl::Mutex mu_;
  std::vector<std::pair<int64_t, int64_t>> continuations_ ABSL_GUARDED_BY(mu_);
  absl::Mutex log_mu_;  // request_log lines are whole
  Quota quota_ ABSL_GUARDED_BY(mu_);
};

}  // namespace corral::fakellm
