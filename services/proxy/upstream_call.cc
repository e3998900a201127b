#include "services/proxy/upstream_call.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "boost/json.hpp"
#include "libs/api/proto_time.h"
#include "services/proxy/continuation.h"

namespace corral::proxy {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
constexpr size_t kMaxUpstreamBody = 64 << 20;
constexpr size_t kMaxRefusalBody = 1 << 20;

}  // namespace

UpstreamCall::UpstreamCall(CallParts parts, CallRequest request, asio::any_io_executor executor)
    : parts_(parts),
      request_(std::move(request)),
      assembler_(request_.chat),
      gate_(parts_.gate->Register(std::move(executor))),
      version_(parts_.policy_version->current()) {
  request_.recorded.mutable_call()->set_policy_version(version_);
  if (request_.native) {  // never cut by a pause: a native stream cannot be continued
    gate_->continuable = false;
    native_stream_.emplace(request_.api->native->stream);
  }
}

UpstreamCall::~UpstreamCall() {
  if (!recorded_) request_.session->AbandonCall();
  if (streaming_) parts_.metrics->open_streams.Decrement();
  parts_.gate->Leave(*gate_);
  parts_.gate->Unregister(gate_);
  if (upstream_ != nullptr) parts_.dispatcher->Return(std::move(upstream_));
  const int status = journal_failed_ ? 500 : error_ ? error_->http_status : 200;
  parts_.metrics->Request(*request_.api, status, upstream_index()).Increment();
}

int UpstreamCall::upstream_index() const { return dispatch_.lease ? dispatch_.lease.get()->index : -1; }

std::string UpstreamCall::upstream_route() const {
  return request_.api->UpstreamTarget(request_.native, request_.rewrite.model);
}

UpstreamDispatcher::OnWait UpstreamCall::Keepalive(AgentLink& agent) {
  return [&agent]() -> asio::awaitable<void> {
    const bool written = co_await agent.Comment(": keepalive\n\n");
    (void)written;  // a gone agent is noticed by the relay's next write
  };
}

void UpstreamCall::SetError(CallError error) {
  if (!error_) error_ = std::move(error);
}

bool UpstreamCall::told_by_upstream() const {
  return native_stream_.has_value() && error_.has_value() && !error_->message.empty() &&
         native_stream_->error() == error_->message;
}

asio::awaitable<bool> UpstreamCall::Admit(AgentLink& agent) {
  parts_.gate->Leave(*gate_);  // a cut request is upstream no more
  const bool cut = gate_->aborted;
  auto tick = [&]() -> asio::awaitable<bool> {
    if (!request_.session->open()) co_return false;
    if (!request_.rewrite.stream) co_return true;
    const bool written = co_await agent.Comment(": paused\n\n");
    co_return written;
  };
  if (!co_await parts_.gate->Enter(gate_, parts_.dispatcher->options().keepalive_interval, tick)) {
    CallError error{.kind = ApiError::kUpstream,
                    .http_status = 499,
                    .message = "the client disconnected while generation was paused"};
    if (!request_.session->open())
      error = {.kind = ApiError::kSessionClosed, .http_status = 410, .message = "session closed"};
    co_await Fail(std::move(error));
    co_return false;
  }
  if (cut) parts_.gate->Continued(*gate_);
  if (assembler_.generated_tokens() == 0) {  // nothing generated yet: all under today's version
    version_ = parts_.policy_version->current();
    request_.recorded.mutable_call()->set_policy_version(version_);
  }
  co_return true;
}

DispatchRequest UpstreamCall::Request(std::string body) const {
  DispatchRequest request{request_.session->env_id(), request_.rewrite.model,
                          upstream_route(),           std::move(body),
                          request_.rewrite.stream,    gate_.get()};
  request.estimated_tokens = parts_.dispatcher->EstimateTokens(request_.body, request.body.size());
  return request;
}

asio::awaitable<void> UpstreamCall::Send(AgentLink& agent, const DispatchRequest& request) {
  dispatch_ = co_await parts_.dispatcher->Send(request, Keepalive(agent));
  upstream_wait_ += dispatch_.waited;
  upstream_ = std::move(dispatch_.connection);
}

asio::awaitable<UpstreamCall::Opened> UpstreamCall::Open(AgentLink& agent) {
  const DispatchRequest request = Request(json::serialize(request_.native ? request_.native_body : request_.body));
  while (true) {
    if (!co_await Admit(agent)) co_return Opened::kFailed;
    co_await Send(agent, request);
    if (gate_->aborted) continue;  // cut before it answered: sent again after the resume
    if (upstream_ == nullptr) {
      CallError error{.kind = dispatch_.http_status == 429 ? ApiError::kRateLimited : ApiError::kUpstream,
                      .http_status = dispatch_.http_status,
                      .message = dispatch_.error};
      co_await Fail(std::move(error));
      co_return Opened::kFailed;
    }
    request_.session->SetUpstream(dispatch_.lease.get()->spec.name);
    if (upstream_->status() != 200) {
      // The upstream refused the request itself (4xx): the agent gets its answer as is; recorded failed.
      absl::StatusOr<std::string> answer =
          co_await upstream_->ReadAll(parts_.dispatcher->options().idle_timeout, kMaxRefusalBody);
      SetError({.kind = ApiError::kUpstream,
                .http_status = upstream_->status(),
                .message = absl::StrCat("upstream answered HTTP ", upstream_->status())});
      refusal_ = answer.ok() ? *std::move(answer) : ErrorBody(ApiError::kUpstream, error_->message);
      (void)co_await Record();
      co_return Opened::kRefused;
    }
    parser_.emplace();
    if (request_.rewrite.stream && !streaming_) {
      parts_.metrics->open_streams.Increment();
      streaming_ = true;
    }
    co_return Opened::kAnswering;
  }
}

asio::awaitable<std::optional<UpstreamCall::WholeAnswer>> UpstreamCall::Whole(AgentLink& agent) {
  Clock* clock = parts_.clock;
  while (true) {
    const absl::Time start = clock->Now();
    absl::StatusOr<std::string> body =
        co_await upstream_->ReadAll(parts_.dispatcher->options().idle_timeout, kMaxUpstreamBody);
    upstream_wait_ += clock->Now() - start;
    if (!body.ok() && gate_->aborted) {  // cut by a pause: sent again after the resume
      upstream_.reset();
      const Opened again = co_await Open(agent);
      if (again != Opened::kAnswering) co_return std::nullopt;
      continue;
    }
    parts_.gate->Leave(*gate_);  // complete: nothing left for a pause to cut
    std::optional<CallError> error;
    boost::system::error_code ec;
    json::value parsed;
    std::optional<json::object> native_chat;
    if (!body.ok()) {
      error = CallError{.message = std::string(body.status().message())};
    } else if (parsed = json::parse(*body, ec); ec || !parsed.is_object()) {
      error = CallError{.message = "the upstream's response is not a JSON object"};
    } else if (!request_.session->open()) {
      error = CallError{.kind = ApiError::kSessionClosed, .http_status = 410, .message = "session closed"};
    } else if (request_.native &&
               !(native_chat = request_.api->native->answer_to_chat(parsed.as_object())).has_value()) {
      error =
          CallError{.message = absl::StrCat("the upstream's answer is not a ", request_.api->native->name, " answer")};
    }
    if (error.has_value()) {
      co_await Fail(*std::move(error));
      co_return std::nullopt;
    }
    assembler_.AddWhole(request_.native ? *native_chat : parsed.as_object());
    WholeAnswer whole{.answer = std::move(parsed.as_object()), .raw = *std::move(body)};
    co_return whole;
  }
}

asio::awaitable<std::optional<std::vector<http::SseEvent>>> UpstreamCall::NextEvents(AgentLink& agent) {
  Clock* clock = parts_.clock;
  while (true) {
    if (!request_.session->open()) {  // CloseSession while the call was in flight: it ends here, recorded failed
      SetError({.kind = ApiError::kSessionClosed, .http_status = 410, .message = "session closed"});
      co_return std::nullopt;
    }
    const absl::Time start = clock->Now();
    absl::StatusOr<std::string> piece = co_await upstream_->ReadSome(parts_.dispatcher->options().idle_timeout);
    upstream_wait_ += clock->Now() - start;
    if (!piece.ok() && gate_->aborted) {  // cut by a pause: continued after the resume
      parts_.gate->Leave(*gate_);
      upstream_.reset();
      if (!co_await Continue(agent)) co_return std::nullopt;
      parser_.emplace();
      continue;
    }
    if (!piece.ok()) {
      SetError({.kind = ApiError::kUpstream,
                .http_status = 502,
                .message = absl::StrCat("upstream disconnected mid-stream: ", piece.status().message())});
      co_return std::nullopt;
    }
    if (piece->empty()) {  // the upstream's stream is complete: nothing left for a pause to cut
      parts_.gate->Leave(*gate_);
      if (native_stream_.has_value() && !error_) {
        // A native stream's whole answer, for the record (an error when it never came).
        const std::optional<json::object>& answer = native_stream_->answer();
        std::optional<json::object> chat =
            answer.has_value() ? request_.api->native->answer_to_chat(*answer) : std::nullopt;
        if (!chat.has_value()) {
          SetError({.kind = ApiError::kUpstream,
                    .http_status = 502,
                    .message = absl::StrCat("the upstream's ", request_.api->native->name,
                                            " stream ended without its whole answer")});
          co_return std::nullopt;
        }
        assembler_.AddWhole(*chat);
      }
      std::vector<http::SseEvent> none;
      co_return none;
    }
    absl::StatusOr<std::vector<http::SseEvent>> events = parser_->Feed(*piece);
    if (!events.ok()) {
      SetError({.kind = ApiError::kUpstream, .http_status = 502, .message = std::string(events.status().message())});
      co_return std::nullopt;
    }
    if (!events->empty()) co_return *std::move(events);
  }
}

asio::awaitable<bool> UpstreamCall::Continue(AgentLink& agent) {
  const absl::Time first_byte = dispatch_.first_byte;
  const int attempts = dispatch_.attempts;
  while (true) {
    if (!co_await Admit(agent)) co_return false;  // the call failed there (recorded)
    assembler_.BeginContinuation();
    const DispatchRequest request =
        Request(json::serialize(ContinuationBody(request_.body, request_.chat, assembler_)));
    co_await Send(agent, request);
    dispatch_.first_byte = first_byte;
    dispatch_.attempts += attempts;
    if (gate_->aborted) continue;  // paused again before it answered
    if (upstream_ != nullptr && upstream_->status() == 200) co_return true;
    CallError error{.kind = ApiError::kUpstream, .http_status = 502};
    if (upstream_ == nullptr) {
      error.message = absl::StrCat("continuing after a pause: ", dispatch_.error);
      error.http_status = dispatch_.http_status;
    } else {
      absl::StatusOr<std::string> answer =
          co_await upstream_->ReadAll(parts_.dispatcher->options().idle_timeout, kMaxRefusalBody);
      error.message = absl::StrCat("continuing after a pause: the upstream answered HTTP ", upstream_->status(), ": ",
                                   answer.ok() ? answer->substr(0, 512) : std::string(answer.status().message()));
    }
    SetError(std::move(error));
    parts_.gate->Leave(*gate_);
    co_return false;
  }
}

bool UpstreamCall::TakeChunk(json::object& chunk) {
  if (const json::value* err = chunk.if_contains("error"); err != nullptr) {
    // The agent's response started 200: that is the status recorded, with the upstream's error.
    SetError({.kind = ApiError::kUpstream,
              .http_status = 200,
              .message = absl::StrCat("upstream error mid-stream: ", json::serialize(*err))});
  }
  NoteVersion();
  assembler_.AddChunk(chunk);
  if (stream_id_.empty()) {
    if (const json::value* id = chunk.if_contains("id"); id != nullptr && id->is_string()) stream_id_ = id->as_string();
  }
  const bool continued = assembler_.continued();
  if (continued) AdaptContinuationChunk(stream_id_, chunk);
  return continued;
}

void UpstreamCall::TakeNativeEvent(const http::SseEvent& event) {
  boost::system::error_code ec;
  json::value data = json::parse(event.data, ec);
  if (ec || !data.is_object()) return;
  NoteVersion();
  native_stream_->Add(data.as_object());
  if (!native_stream_->error().empty()) {
    SetError({.kind = ApiError::kUpstream, .http_status = 200, .message = native_stream_->error()});
  }
}

void UpstreamCall::UpdateContinuable() {
  gate_->continuable = !request_.native && Continuable(request_.body, request_.chat, assembler_);
}

void UpstreamCall::NoteVersion() {
  const int64_t now = parts_.policy_version->current();
  if (now == version_) return;
  version_ = now;
  v1::PolicyVersionChange* change = request_.recorded.mutable_call()->add_version_changes();
  change->set_completion_token(static_cast<uint32_t>(assembler_.completion_token_ids().size()));
  change->set_version(now);
}

asio::awaitable<absl::Status> UpstreamCall::Record() {
  if (recorded_) co_return journal_failed_ ? absl::InternalError("the call could not be journaled") : absl::OkStatus();
  const absl::Time done = parts_.clock->Now();
  const bool ok = !error_.has_value();
  assembler_.FillRecord(ok, &request_.recorded);
  NoteVersion();  // an update during a whole response (or after the last chunk): after its last token
  v1::LlmCall& call = *request_.recorded.mutable_call();
  const Dispatch& d = dispatch_;
  ToProto(request_.received, call.mutable_timings()->mutable_received());
  if (d.upstream_start != absl::Time()) ToProto(d.upstream_start, call.mutable_timings()->mutable_upstream_start());
  if (d.first_byte != absl::Time()) ToProto(d.first_byte, call.mutable_timings()->mutable_first_token());
  ToProto(done, call.mutable_timings()->mutable_done());
  call.set_upstream(d.lease ? d.lease.get()->spec.name : "");
  call.set_upstream_attempts(static_cast<uint32_t>(d.attempts));
  call.set_http_status(ok ? 200 : error_->http_status);
  call.set_error(ok ? "" : error_->message);
  recorded_ = true;  // the ledger records it before its first suspension
  std::vector<uint32_t> prompt_nodes = std::move(request_.prompt_nodes);
  absl::Status stored = co_await parts_.ledger->RecordCall(*request_.session, request_.recorded, prompt_nodes);
  journal_failed_ = !stored.ok();
  const v1::Usage& usage = call.usage();
  // The token quotas were charged an estimate: now the reported usage (none reported: the estimate stands for a
  // call that ran, nothing for one that failed).
  const int64_t used = static_cast<int64_t>(usage.prompt_tokens()) + static_cast<int64_t>(usage.completion_tokens());
  dispatch_.quota.Settle(used > 0 ? used : ok ? dispatch_.quota.charged_tokens() : 0);
  ProxyMetrics& m = *parts_.metrics;
  m.prompt_tokens.Increment(static_cast<double>(usage.prompt_tokens()));
  m.completion_tokens.Increment(static_cast<double>(usage.completion_tokens()));
  m.latency.Observe(absl::ToDoubleSeconds(done - request_.received));
  if (d.first_byte != absl::Time()) m.ttft.Observe(absl::ToDoubleSeconds(d.first_byte - request_.received));
  m.overhead.Observe(std::max(0.0, absl::ToDoubleSeconds(done - request_.received - upstream_wait_)));
  co_return stored;
}

asio::awaitable<void> UpstreamCall::Fail(CallError error) {
  SetError(std::move(error));
  (void)co_await Record();
}

}  // namespace corral::proxy
