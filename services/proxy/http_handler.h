// The proxy's OpenAI-compatible HTTP side, a thin adapter: routes, authenticates the env token to a session,
// applies its policy, has the UpstreamDispatcher send the call, relays the answer — SSE event by event with a
// flush per event — and has the SessionLedger record and journal the call before the response's last byte.
// Every error answer comes from api_errors.h.
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
#include "services/proxy/upstream_dispatcher.h"

namespace corral::proxy {

class HttpHandler {
 public:
  HttpHandler(SessionLedger* ledger, UpstreamDispatcher* dispatcher, const UpstreamPool* upstreams,
              ProxyMetrics* metrics, Clock* clock, const PolicyVersion* policy_version, GenerationGate* gate)
      : ledger_(ledger),
        dispatcher_(dispatcher),
        upstreams_(upstreams),
        metrics_(metrics),
        clock_(clock),
        policy_version_(policy_version),
        gate_(gate) {}

  boost::asio::awaitable<void> Handle(http::Request& request, http::Responder& responder);

  struct Call;  // one call in progress (http_handler.cc)

 private:
  boost::asio::awaitable<void> Completion(http::Request& request, http::Responder& responder,
                                          std::shared_ptr<Session> session, ProxyMetrics::Route api);
  // The session's models, in OpenAI's list shape or Anthropic's.
  boost::asio::awaitable<void> Models(http::Responder& responder, const Session& session, bool anthropic_shape);
  // POST /v1/messages/count_tokens: an estimate of the request's input tokens (docs/proxy.md says how).
  boost::asio::awaitable<void> CountTokens(http::Request& request, http::Responder& responder);
  // Waits at the generation gate (keepalives to a streaming agent), then counts the call upstream. False when the
  // session closed or the agent left meanwhile: the call has failed and the agent was answered.
  boost::asio::awaitable<bool> Admit(Call& call, http::Responder& responder);
  // False when a pause cut the response before it was complete (the call is sent again after the resume).
  boost::asio::awaitable<bool> RelayWhole(Call& call, http::ClientConnection& upstream, http::Responder& responder);
  // A stream a pause cuts goes on with a continuation (Continue) in the same response to the agent.
  boost::asio::awaitable<void> RelayStream(Call& call, std::unique_ptr<http::ClientConnection>& upstream,
                                           http::Responder& responder);
  // Native pass-through: one event of the upstream's stream (read for the record and for an error), and the
  // record of the whole answer once the stream is complete (an error when it never came).
  void NativeEvent(Call& call, const http::SseEvent& event);
  void EndNativeStream(Call& call);
  // While the upstream has not answered, a streaming agent gets SSE comments so nothing in between times out.
  static UpstreamDispatcher::OnWait Keepalive(http::Responder& responder);
  // After a cut: waits for the resume, then sends the continuation. Null on failure: either the call's error
  // is set, or (the session closed or the agent left while paused) the call has already failed and been recorded.
  boost::asio::awaitable<std::unique_ptr<http::ClientConnection>> Continue(Call& call, http::Responder& responder);
  // Notes a policy update that arrived since the call's version was last read: from the next completion token
  // on, the tokens are the new version's.
  void NoteVersion(Call& call);
  // Records the call and journals it (the ledger); the agent is answered afterwards.
  boost::asio::awaitable<absl::Status> Finish(Call& call);
  // Ends a call that failed: records it, then tells the agent (an error body, or an error event mid-stream).
  boost::asio::awaitable<void> Fail(Call& call, http::Responder& responder, ApiError error, int http_status,
                                    const std::string& message);
  // Refuses a request before any call exists (counted; nothing recorded).
  boost::asio::awaitable<void> Refuse(http::Responder& responder, ProxyMetrics::Route route, ApiError error,
                                      const std::string& message, bool chat = true);

  SessionLedger* const ledger_;
  UpstreamDispatcher* const dispatcher_;
  const UpstreamPool* const upstreams_;
  ProxyMetrics* const metrics_;
  Clock* const clock_;
  const PolicyVersion* const policy_version_;
  GenerationGate* const gate_;
};

}  // namespace corral::proxy
