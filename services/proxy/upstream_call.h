// One agent call on its way upstream and back, in the middle layer: admitted at the generation gate, sent by the
// UpstreamDispatcher, cut by a pause and then continued (a stream) or sent again (a whole answer) after the
// resume, its answer assembled and its policy versions noted for the record, and recorded by the SessionLedger.
// The HTTP handler builds it from the agent's request and relays what it yields in the agent's API; the handler
// never touches the gate, the upstream connection or the record.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "boost/asio/any_io_executor.hpp"
#include "boost/asio/awaitable.hpp"
#include "boost/json/object.hpp"
#include "libs/core/clock.h"
#include "libs/http/client.h"
#include "libs/http/sse.h"
#include "services/proxy/api_errors.h"
#include "services/proxy/capture.h"
#include "services/proxy/dialect.h"
#include "services/proxy/generation_gate.h"
#include "services/proxy/metrics.h"
#include "services/proxy/native_answers.h"
#include "services/proxy/policy.h"
#include "services/proxy/policy_version.h"
#include "services/proxy/session_ledger.h"
#include "services/proxy/upstream_dispatcher.h"

namespace corral::proxy {

// Why a call failed: the kind (the shape of the agent's answer), the HTTP status recorded and answered, and
// what is recorded and told.
struct CallError {
  ApiError kind = ApiError::kUpstream;
  int http_status = 502;
  std::string message;
};

// What a call may do to its agent while it waits: a keepalive comment to a streaming agent (its stream started
// first if need be). False when the agent is gone. The HTTP handler implements it over its responder.
class AgentLink {
 public:
  virtual ~AgentLink() = default;
  virtual boost::asio::awaitable<bool> Comment(absl::string_view comment) = 0;
};

struct CallParts {
  SessionLedger* ledger;
  UpstreamDispatcher* dispatcher;
  ProxyMetrics* metrics;
  Clock* clock;
  const PolicyVersion* policy_version;
  GenerationGate* gate;
};

// What the handler made of the agent's request, the session's call slot already taken (Session::TryBeginCall).
struct CallRequest {
  std::shared_ptr<Session> session;
  const ApiSpec* api = &ChatApi();  // as the agent called it
  bool chat = true;                 // chat (the Messages and Responses APIs too) or completions
  boost::json::object body;         // chat or completions, as the policy rewrote it
  Rewrite rewrite;
  // The Messages or Responses API: the body was translated to chat and answers go back translated. Null for chat
  // and completions.
  std::unique_ptr<Dialect> dialect;
  // Native pass-through: an upstream that serves the dialect itself gets `native_body` (the agent's, with the
  // policy's model) and its answer goes back as it came, read for the record.
  bool native = false;
  boost::json::object native_body;
  absl::Time received;
  RecordedCall recorded;               // what the request says (prompt, params, tools, model)
  std::vector<uint32_t> prompt_nodes;  // the stored nodes its prompt's first messages are (Session::Restore)
};

class UpstreamCall {
 public:
  // Registers at the generation gate for the call's whole life, on `executor` (the one its coroutine runs on).
  UpstreamCall(CallParts parts, CallRequest request, boost::asio::any_io_executor executor);
  // Whatever happened (an exception included): an unrecorded call gives its session slot back, the gauges come
  // down, the upstream connection goes back to its pool, and the call is counted by status.
  ~UpstreamCall();
  UpstreamCall(const UpstreamCall&) = delete;
  UpstreamCall& operator=(const UpstreamCall&) = delete;

  enum class Opened {
    kAnswering,  // the upstream answered 200: its answer comes from Whole or NextEvents
    kRefused,    // the upstream refused the request (4xx): recorded failed; refusal() is its answer as is
    kFailed,     // error() says why, recorded: no upstream answered, or the session closed or the agent left
                 // while generation was paused
  };
  // At the generation gate (keepalives to a streaming agent while paused), then upstream; a pause's cut before
  // the answer started waits at the gate again and sends it again.
  boost::asio::awaitable<Opened> Open(AgentLink& agent);

  // An unstreamed answer, whole (the assembler has it for the record): the upstream's answer as an object (a
  // native one in the dialect's own shape) and its body as it came. A pause's cut sends the call again after the
  // resume. Null when the call failed or was refused meanwhile (error(); refusal() when refused).
  struct WholeAnswer {
    boost::json::object answer;
    std::string raw;
  };
  boost::asio::awaitable<std::optional<WholeAnswer>> Whole(AgentLink& agent);

  // A streamed answer: the events of the next piece, and after a cut those of its continuation (which goes on
  // with the same answer). Empty once the stream is complete; null when it failed (error(); recorded by
  // Record as for any end).
  boost::asio::awaitable<std::optional<std::vector<http::SseEvent>>> NextEvents(AgentLink& agent);
  // A streamed event read for the record: an upstream error in it becomes the call's error, a policy update
  // since the last is noted, the assembler takes the chunk. A chunk of a continuation is adapted to continue
  // the first answer (its id). Returns true when the agent gets it changed (a continuation's).
  bool TakeChunk(boost::json::object& chunk);
  // A native stream's event, read for the record (its error, if any, becomes the call's).
  void TakeNativeEvent(const http::SseEvent& event);
  // After a piece was taken: whether a pause may cut the stream here and continue it.
  void UpdateContinuable();
  // Ends the call with `error` (the agent left, a relay failed). The first error stands.
  void SetError(CallError error);

  // Records the call and journals it (the ledger) once; the agent is answered afterwards. A native stream's
  // answer is taken first (an error when it never came whole). Not OK when it could not be journaled.
  boost::asio::awaitable<absl::Status> Record();
  // Ends the call with `error`, recorded.
  boost::asio::awaitable<void> Fail(CallError error);

  const std::optional<CallError>& error() const { return error_; }
  // The upstream's refusal as it came (its status is error()->http_status; an error body in OpenAI's shape when
  // it could not be read). Empty unless refused.
  const std::string& refusal() const { return refusal_; }
  bool recorded() const { return recorded_; }
  const CallRequest& request() const { return request_; }
  const Dialect* dialect() const { return request_.dialect.get(); }
  Dialect* dialect() { return request_.dialect.get(); }
  // A native stream whose upstream sent its own error event (the agent has it already).
  bool told_by_upstream() const;

 private:
  boost::asio::awaitable<bool> Admit(AgentLink& agent);
  // The request upstream with `body` (the call's, or a continuation's).
  DispatchRequest Request(std::string body) const;
  // Sends `request` once admitted: upstream_ is the answer, null when no upstream answered or a pause cut it
  // (gate_->aborted).
  boost::asio::awaitable<void> Send(AgentLink& agent, const DispatchRequest& request);
  // After a cut mid-stream: waits for the resume, then sends the continuation. False when it failed (error()).
  boost::asio::awaitable<bool> Continue(AgentLink& agent);
  // Notes a policy update since the call's version was last read: from the next completion token on, the
  // tokens are the new version's.
  void NoteVersion();
  int upstream_index() const;
  // The upstream's route: chat completions for a chat call (the Messages and Responses APIs included, unless the
  // upstream serves them itself).
  std::string upstream_route() const;
  // Keepalives to a streaming agent while the upstream has not answered.
  static UpstreamDispatcher::OnWait Keepalive(AgentLink& agent);

  const CallParts parts_;
  CallRequest request_;
  ResponseAssembler assembler_;
  GenerationGate::CallRef gate_;  // its registration at the generation gate
  Dispatch dispatch_;             // the upstream that answered (its lease), attempts, timings
  std::unique_ptr<http::ClientConnection> upstream_;
  std::optional<http::SseParser> parser_;  // a new one per upstream response
  absl::Duration upstream_wait_;           // sending plus reading the response
  int64_t version_ = 0;                    // the policy version its tokens are attributed to now
  std::string stream_id_;                  // the first chunk's id, which a continuation's chunks take
  std::optional<NativeStream> native_stream_;
  std::optional<CallError> error_;
  std::string refusal_;
  bool journal_failed_ = false;
  bool recorded_ = false;   // Record ran
  bool streaming_ = false;  // counted in open_streams
};

}  // namespace corral::proxy
