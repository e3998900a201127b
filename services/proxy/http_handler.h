// The proxy's OpenAI-compatible HTTP side, an adapter: routes, authenticates the env token to a session, applies
// its policy and translates a dialect's body, hands the call to an UpstreamCall (upstream_call.h: the gate, the
// upstream, cuts and continuations, the record) and relays what it yields in the agent's API — SSE event by
// event with a flush per piece. Every error answer comes from api_errors.h.
#pragma once

#include <memory>
#include <string>

#include "boost/asio/awaitable.hpp"
#include "libs/core/clock.h"
#include "libs/http/server.h"
#include "libs/http/sse.h"
#include "services/proxy/api_errors.h"
#include "services/proxy/generation_gate.h"
#include "services/proxy/metrics.h"
#include "services/proxy/policy_version.h"
#include "services/proxy/session_ledger.h"
#include "services/proxy/upstream_call.h"
#include "services/proxy/upstream_dispatcher.h"

namespace corral::proxy {

class HttpHandler {
 public:
  HttpHandler(CallParts parts, const UpstreamPool* upstreams) : parts_(parts), upstreams_(upstreams) {}

  boost::asio::awaitable<void> Handle(http::Request& request, http::Responder& responder);

 private:
  // The agent's request → a CallRequest (translated, the session's policy applied, described for the record),
  // then an UpstreamCall whose answer is relayed in the agent's API. Refusals before the call exists are counted
  // and answered here; nothing is recorded for them. `path_model`: the model the path names, if it names one.
  boost::asio::awaitable<void> Completion(http::Request& request, http::Responder& responder,
                                          std::shared_ptr<Session> session, const ApiSpec& api, std::string path_model);
  // The session's models, in `shape`'s list shape (null: OpenAI's).
  boost::asio::awaitable<void> Models(http::Responder& responder, const Session& session,
                                      std::unique_ptr<Dialect> shape, const ApiSpec& api);
  // A token-count call (Anthropic's, Gemini's): an estimate of the request's input tokens (docs/proxy.md says how).
  boost::asio::awaitable<void> CountTokens(http::Request& request, http::Responder& responder, const ApiSpec& api);
  // An unstreamed answer: recorded, then sent whole (translated, or stripped of what the agent did not ask for).
  boost::asio::awaitable<void> RelayWhole(UpstreamCall& call, AgentLink& agent, http::Responder& responder);
  // A streamed answer, event by event with a flush per piece, recorded before its last event ([DONE]).
  boost::asio::awaitable<void> RelayStream(UpstreamCall& call, AgentLink& agent, http::Responder& responder);
  // Tells the agent why its call failed: an error body, or an error event ending a started stream.
  boost::asio::awaitable<void> Tell(const UpstreamCall& call, http::Responder& responder);
  // The upstream's refusal, as it came (in the dialect's error shape for a dialect call).
  boost::asio::awaitable<void> TellRefusal(const UpstreamCall& call, http::Responder& responder);
  // Refuses a request before any call exists (counted; nothing recorded).
  boost::asio::awaitable<void> Refuse(http::Responder& responder, const ApiSpec& api, ApiError error,
                                      const std::string& message, bool chat = true);

  const CallParts parts_;
  const UpstreamPool* const upstreams_;
};

}  // namespace corral::proxy
