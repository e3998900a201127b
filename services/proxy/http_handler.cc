#include "services/proxy/http_handler.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "boost/asio/this_coro.hpp"
#include "boost/json.hpp"
#include "libs/api/proto_time.h"
#include "libs/http/openai_json.h"
#include "libs/http/sse.h"
#include "services/proxy/anthropic_api.h"
#include "services/proxy/capture.h"
#include "services/proxy/continuation.h"
#include "services/proxy/native_answers.h"
#include "services/proxy/responses_api.h"

namespace corral::proxy {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
namespace bhttp = boost::beast::http;
using Route = ProxyMetrics::Route;
constexpr size_t kMaxUpstreamBody = 64 << 20;

}  // namespace

struct HttpHandler::Call {
  std::shared_ptr<Session> session;
  bool chat = true;
  Route route = Route::kChat;
  json::object body;
  Rewrite rewrite;
  RecordedCall recorded;
  ResponseAssembler assembler{true};
  absl::Time received;
  Dispatch dispatch;             // the upstream that answered (its lease), attempts, timings
  absl::Duration upstream_wait;  // sending plus reading the response
  int http_status = 200;
  std::string error;
  bool recorded_done = false;    // Finish ran (the call is recorded)
  bool streaming = false;        // counted in open_streams
  int64_t version = 0;           // the policy version its tokens are attributed to now
  GenerationGate::CallRef gate;  // its registration at the generation gate
  std::string stream_id;         // the first chunk's id, which a continuation's chunks take
  // An agent API other than chat and completions (/v1/messages, /v1/responses): the body was translated to chat,
  // answers are translated back. Null for chat and completions.
  std::unique_ptr<Dialect> dialect;
  // Native pass-through: an upstream that serves the dialect itself gets the agent's body untranslated (the
  // policy's model in it) and its answer goes back as it came, read for the record (NativeAnswerToChat).
  bool native = false;
  json::object native_body;
  std::optional<NativeStream> native_stream;
};

namespace {

// Whatever happens to a call after it started (an exception included), the session's in-flight slot is given
// back if it was never recorded, and the open-streams gauge comes down. (The upstream's count is the lease's.)
struct CallGuard {
  HttpHandler::Call& c;
  ProxyMetrics* metrics;
  GenerationGate* gate;
  ~CallGuard() {
    if (!c.recorded_done) c.session->AbandonCall();
    if (c.streaming) metrics->open_streams.Decrement();
    gate->Unregister(c.gate);
  }
};

int UpstreamIndex(const HttpHandler::Call& c) { return c.dispatch.lease ? c.dispatch.lease.get()->index : -1; }

// The upstream's route: chat completions for a chat call (the Messages and Responses APIs' included, unless the
// upstream serves them itself).
std::string UpstreamRoute(const HttpHandler::Call& c) {
  if (c.native) return ProxyMetrics::RouteName(c.route);
  return ProxyMetrics::RouteName(c.chat ? Route::kChat : Route::kCompletions);
}

// LlmCall.translation_json of a dialect call: the path taken, and what the translation left out or changed.
std::string TranslationRecord(const Dialect& dialect, bool native) {
  json::object notes = native ? json::object() : dialect.notes();
  notes["path"] = native ? "native" : "translated";
  return json::serialize(notes);
}

// The body an upstream serving the dialect itself gets: the agent's, with what the session's policy set on the
// chat body it was translated to — the model, and its sampling keys (the token cap as the dialect's own field).
json::object NativeBody(json::object native, const json::object& chat, const Rewrite& rewrite, absl::string_view api) {
  native["model"] = rewrite.model;
  for (const std::string& key : rewrite.set_keys) {
    const json::value* v = chat.if_contains(key);
    if (v == nullptr) continue;
    const bool cap = key == "max_tokens" || key == "max_completion_tokens";
    native[cap ? (api == "responses" ? "max_output_tokens" : "max_tokens") : key] = *v;
  }
  return native;
}

// The first tool a translation left out (a server or built-in tool), as a refusal's message; "" when none.
std::string LeftOutTool(const json::object& notes) {
  const json::value* dropped = notes.if_contains("dropped");
  if (dropped == nullptr || !dropped->is_array()) return "";
  for (const json::value& d : dropped->as_array()) {
    const std::string field = http::StringOf(d.as_object().if_contains("field"));
    if (!absl::StartsWith(field, "tools[")) continue;
    return absl::StrCat(field, ": ", http::StringOf(d.as_object().if_contains("why")), " ('",
                        http::StringOf(d.as_object().if_contains("type")),
                        "'), and this model's upstream refuses such requests (unrunnable_tools: refuse)");
  }
  return "";
}

// One event of a native stream, as the agent gets it: as it came.
std::string AsCame(const http::SseEvent& ev) {
  if (ev.event.empty()) return absl::StrCat("data: ", ev.data, "\n\n");
  return absl::StrCat("event: ", ev.event, "\ndata: ", ev.data, "\n\n");
}

// The translation a route needs (null: it is chat or completions itself).
std::unique_ptr<Dialect> DialectOf(Route route) {
  if (route == Route::kMessages || route == Route::kCountTokens) return std::make_unique<anthropic::MessagesDialect>();
  if (route == Route::kResponses) return std::make_unique<responses::ResponsesDialect>();
  return nullptr;
}

// An error answered in the API's own shape.
std::string ErrorFor(const Dialect* dialect, ApiError error, absl::string_view message, bool chat = true,
                     int http_status = 0) {
  if (dialect == nullptr) return ErrorBody(error, message, chat);
  return dialect->ErrorBody(http_status != 0 ? http_status : ShapeOf(error).http_status, message);
}
std::string ErrorEventFor(const Dialect* dialect, ApiError error, absl::string_view message) {
  if (dialect == nullptr) return ErrorEvent(error, message);
  return dialect->ErrorEvent(ShapeOf(error).http_status, message);
}

// Writes an SSE comment to a streaming agent, starting its stream first if need be; false when the agent is gone.
// (Plain statements around each co_await: GCC 12 miscompiles temporaries inside co_await expressions.)
asio::awaitable<bool> SseComment(http::Responder& responder, absl::string_view comment) {
  if (!responder.started()) {
    const bool started = co_await responder.StartStream(200, "text/event-stream");
    if (!started) co_return false;
  }
  const bool written = co_await responder.WriteChunk(comment);
  co_return written;
}

}  // namespace

asio::awaitable<void> HttpHandler::Refuse(http::Responder& responder, Route route, ApiError error,
                                          const std::string& message, bool chat) {
  const ApiErrorShape shape = ShapeOf(error);
  metrics_->Request(route, shape.http_status, -1).Increment();
  const std::string body = ErrorFor(DialectOf(route).get(), error, message, chat);
  co_await responder.Send(shape.http_status, "application/json", body);
}

asio::awaitable<void> HttpHandler::Handle(http::Request& request, http::Responder& responder) {
  std::string target(request.target());
  target = target.substr(0, target.find('?'));
  if (target == "/health") {
    co_await responder.Send(200, "application/json", "{\"status\":\"ok\"}");
    co_return;
  }
  const bool messages = target == ProxyMetrics::RouteName(Route::kMessages);
  const bool responses = target == ProxyMetrics::RouteName(Route::kResponses);
  const bool count_tokens = target == ProxyMetrics::RouteName(Route::kCountTokens);
  const bool chat = target == ProxyMetrics::RouteName(Route::kChat) || messages || responses;
  const bool models = target == ProxyMetrics::RouteName(Route::kModels);
  // Refusals of the route itself come in the shape of the API the path belongs to (Anthropic's under /v1/messages).
  const std::unique_ptr<Dialect> path_shape =
      absl::StartsWith(target, ProxyMetrics::RouteName(Route::kMessages)) ? DialectOf(Route::kMessages) : nullptr;
  if (!chat && !models && !count_tokens && target != ProxyMetrics::RouteName(Route::kCompletions)) {
    const std::string body =
        ErrorFor(path_shape.get(), ApiError::kUnknownRoute, absl::StrCat("unknown route ", target));
    co_await responder.Send(404, "application/json", body);
    co_return;
  }
  if ((models && request.method() != bhttp::verb::get) || (!models && request.method() != bhttp::verb::post)) {
    const std::string message = absl::StrCat(target, " does not accept ", std::string(request.method_string()));
    const std::string body = ErrorFor(path_shape.get(), ApiError::kMethodNotAllowed, message);
    co_await responder.Send(405, "application/json", body);
    co_return;
  }
  // The env token: `Authorization: Bearer`, or (Anthropic's clients) `x-api-key`.
  std::string auth(request[bhttp::field::authorization]);
  if (auth.empty() && request.count("x-api-key") > 0) auth = absl::StrCat("Bearer ", std::string(request["x-api-key"]));
  absl::StatusOr<std::shared_ptr<Session>> session =
      absl::StartsWith(auth, "Bearer ") ? ledger_->store().Authenticate(auth.substr(7))
                                        : absl::UnauthenticatedError("missing Authorization: Bearer <env token>");
  const Route route = messages       ? Route::kMessages
                      : responses    ? Route::kResponses
                      : chat         ? Route::kChat
                      : models       ? Route::kModels
                      : count_tokens ? Route::kCountTokens
                                     : Route::kCompletions;
  if (!session.ok()) {
    const ApiError error =
        absl::IsFailedPrecondition(session.status()) ? ApiError::kSessionClosed : ApiError::kUnauthenticated;
    co_await Refuse(responder, route, error, std::string(session.status().message()));
    co_return;
  }
  if (models) {
    // Anthropic's clients (anthropic-version header) get the list in Anthropic's shape.
    co_await Models(responder, **session, request.count("anthropic-version") > 0);
    co_return;
  }
  if (count_tokens) {
    co_await CountTokens(request, responder);
    co_return;
  }
  co_await Completion(request, responder, *std::move(session), route);
}

asio::awaitable<void> HttpHandler::CountTokens(http::Request& request, http::Responder& responder) {
  boost::system::error_code ec;
  json::value parsed = json::parse(request.body(), ec);
  absl::StatusOr<json::object> chat =
      ec || !parsed.is_object()
          ? absl::StatusOr<json::object>(absl::InvalidArgumentError("the body must be a JSON object"))
          : anthropic::ToChat(parsed.as_object());
  if (!chat.ok()) {
    const std::string message(chat.status().message());
    co_await Refuse(responder, Route::kCountTokens, ApiError::kBadRequest, message);
    co_return;
  }
  metrics_->Request(Route::kCountTokens, 200, -1).Increment();
  const std::string body = json::serialize(json::object{{"input_tokens", anthropic::EstimateTokens(*chat)}});
  co_await responder.Send(200, "application/json", body);
}

asio::awaitable<void> HttpHandler::Models(http::Responder& responder, const Session& session, bool anthropic_shape) {
  std::vector<std::string> names(session.policy().allowed_models().begin(), session.policy().allowed_models().end());
  if (names.empty()) names = upstreams_->models();
  for (const auto& [alias, target] : session.policy().model_aliases()) {
    if (alias != "*") names.push_back(alias);
  }
  metrics_->Request(Route::kModels, 200, -1).Increment();
  const std::string body = anthropic_shape ? anthropic::ModelList(names) : http::ModelListJson(names, "corral");
  co_await responder.Send(200, "application/json", body);
}

asio::awaitable<void> HttpHandler::Completion(http::Request& request, http::Responder& responder,
                                              std::shared_ptr<Session> session, Route api) {
  Call c;
  c.session = std::move(session);
  c.dialect = DialectOf(api);
  const bool chat = api != Route::kCompletions;
  c.chat = chat;
  c.route = api;
  const std::string route = ProxyMetrics::RouteName(c.route);  // as the agent called it (recorded)
  c.assembler = ResponseAssembler(chat);
  c.received = clock_->Now();
  boost::system::error_code ec;
  json::value parsed = json::parse(request.body(), ec);
  if (ec || !parsed.is_object()) {
    // Refused before anything is recorded. (Computed before co_await: GCC 12 mishandles temporaries of a
    // conditional inside a co_await expression.)
    const std::string message =
        ec ? absl::StrCat("malformed JSON body: ", ec.message()) : std::string("the body must be a JSON object");
    co_await Refuse(responder, c.route, ApiError::kBadRequest, message);
    co_return;
  }
  c.body = std::move(parsed.as_object());
  json::object original;       // a dialect's body as the agent sent it, for an upstream that serves the dialect itself
  if (c.dialect != nullptr) {  // from here on a chat call; only its answer is translated back
    absl::StatusOr<json::object> translated = c.dialect->ToChat(c.body);
    if (!translated.ok()) {
      const std::string message(translated.status().message());
      co_await Refuse(responder, c.route, ApiError::kBadRequest, message);
      co_return;
    }
    original = std::move(c.body);  // moved, not copied: kept only if the call goes native (below)
    c.body = *std::move(translated);
  }
  // A call that names no model gets its session's (or the upstreams' only one, if the session was opened before
  // they were known).
  std::string session_model = c.session->request().model();
  if (session_model.empty()) {
    if (auto known = upstreams_->known_models(); known.has_value() && known->size() == 1)
      session_model = known->front();
  }
  PolicyOutcome policy = ApplyPolicy(c.session->policy(), c.session->used(), chat, c.body, session_model);
  if (policy.refusal != Refusal::kNone) {
    const ApiError error = policy.refusal == Refusal::kModelNotAllowed   ? ApiError::kModelNotAllowed
                           : policy.refusal == Refusal::kBudgetExhausted ? ApiError::kBudgetExhausted
                                                                         : ApiError::kBadRequest;
    co_await Refuse(responder, c.route, error, policy.message, chat);
    co_return;
  }
  c.rewrite = policy.rewrite;
  if (c.dialect != nullptr && upstreams_->ServesNatively(c.rewrite.model, c.dialect->api())) {
    c.native = true;
    c.native_body = NativeBody(std::move(original), c.body, c.rewrite, c.dialect->api());
  }
  original = json::object();  // a translated call does not hold the agent's body as well while it runs
  if (c.dialect != nullptr && !c.native && upstreams_->RefusesUnrunnableTools(c.rewrite.model)) {
    if (const std::string left_out = LeftOutTool(c.dialect->notes()); !left_out.empty()) {
      co_await Refuse(responder, c.route, ApiError::kBadRequest, left_out, chat);
      co_return;
    }
  }
  v1::LlmCall& call = *c.recorded.mutable_call();
  c.version = policy_version_->current();
  call.set_policy_version(c.version);
  call.set_endpoint(route);
  call.set_requested_model(c.rewrite.requested_model);
  call.set_model(c.rewrite.model);
  call.set_stream(c.rewrite.stream);
  if (chat) {
    for (v1::ChatMessage& m : MessagesFrom(c.body["messages"].as_array())) *c.recorded.add_prompt() = std::move(m);
  } else {
    call.set_prompt_text(std::string(c.body["prompt"].as_string()));
  }
  if (auto* tools = c.body.if_contains("tools"); tools != nullptr && !tools->is_null()) {
    call.set_tools_json(json::serialize(*tools));
  }
  json::object params;  // everything but the conversation itself (no copy of a long history)
  for (const auto& [key, value] : c.body) {
    if (key != "messages" && key != "prompt" && key != "tools") params[key] = value;
  }
  call.set_params_json(json::serialize(params));
  if (c.dialect != nullptr) call.set_translation_json(TranslationRecord(*c.dialect, c.native));

  if (!c.session->TryBeginCall()) {  // max_calls, checked and counted atomically with the calls in flight
    const std::string message = absl::StrCat("budget exhausted: max_calls=", c.session->policy().budget().max_calls());
    co_await Refuse(responder, c.route, ApiError::kBudgetExhausted, message, chat);
    co_return;
  }
  c.gate = gate_->Register(co_await asio::this_coro::executor);
  CallGuard guard{c, metrics_, gate_};
  if (c.native) {  // never cut by a pause: a native stream cannot be continued
    c.gate->continuable = false;
    c.native_stream.emplace(std::string(c.dialect->api()));
  }
  const std::string upstream_route = UpstreamRoute(c);  // what the upstream is asked
  DispatchRequest dispatch{c.session->env_id(), c.rewrite.model,
                           upstream_route,      json::serialize(c.native ? c.native_body : c.body),
                           c.rewrite.stream,    c.gate.get()};
  dispatch.estimated_tokens = dispatcher_->EstimateTokens(c.body, dispatch.body.size());
  std::unique_ptr<http::ClientConnection> upstream;
  // At the generation gate first; a pause's cut before the response is complete (an unstreamed one is sent
  // again whole) waits there once more.
  while (true) {
    if (!co_await Admit(c, responder)) break;
    c.dispatch = co_await dispatcher_->Send(dispatch, Keepalive(responder));
    c.upstream_wait += c.dispatch.waited;
    upstream = std::move(c.dispatch.connection);
    if (c.gate->aborted) continue;
    if (upstream == nullptr) {
      const ApiError error = c.dispatch.http_status == 429 ? ApiError::kRateLimited : ApiError::kUpstream;
      co_await Fail(c, responder, error, c.dispatch.http_status, c.dispatch.error);
      break;
    }
    c.session->SetUpstream(c.dispatch.lease.get()->spec.name);
    if (upstream->status() != 200) {
      // The upstream refused the request itself (4xx): the agent gets its answer as is; recorded failed.
      auto body = co_await upstream->ReadAll(dispatcher_->options().idle_timeout, 1 << 20);
      c.http_status = upstream->status();
      c.error = absl::StrCat("upstream answered HTTP ", c.http_status);
      (void)co_await Finish(c);
      if (!responder.started()) {
        std::string answer = body.ok() ? *body : ErrorBody(ApiError::kUpstream, c.error);
        if (c.dialect != nullptr) answer = c.dialect->ErrorBody(c.http_status, answer.substr(0, 2048));
        co_await responder.Send(c.http_status, "application/json", answer);
      } else {
        co_await responder.WriteChunk(ErrorEventFor(c.dialect.get(), ApiError::kUpstream, c.error));
      }
    } else if (c.rewrite.stream) {
      metrics_->open_streams.Increment();
      c.streaming = true;
      co_await RelayStream(c, upstream, responder);
    } else if (!co_await RelayWhole(c, *upstream, responder)) {
      gate_->Leave(*c.gate);
      upstream.reset();
      continue;
    }
    break;
  }
  gate_->Leave(*c.gate);
  if (upstream != nullptr) dispatcher_->Return(std::move(upstream));
  metrics_->Request(c.route, c.http_status, UpstreamIndex(c)).Increment();
}

asio::awaitable<bool> HttpHandler::Admit(Call& c, http::Responder& responder) {
  gate_->Leave(*c.gate);  // a cut request is upstream no more
  const bool cut = c.gate->aborted;
  auto tick = [&]() -> asio::awaitable<bool> {
    if (!c.session->open()) co_return false;
    if (!c.rewrite.stream) co_return true;
    const bool written = co_await SseComment(responder, ": paused\n\n");
    co_return written;
  };
  if (!co_await gate_->Enter(c.gate, dispatcher_->options().keepalive_interval, tick)) {
    const bool closed = !c.session->open();
    co_await Fail(c, responder, closed ? ApiError::kSessionClosed : ApiError::kUpstream, closed ? 410 : 499,
                  closed ? "session closed" : "the client disconnected while generation was paused");
    co_return false;
  }
  if (cut) gate_->Continued(*c.gate);
  if (c.assembler.generated_tokens() == 0) {  // nothing generated yet: all under today's version
    c.version = policy_version_->current();
    c.recorded.mutable_call()->set_policy_version(c.version);
  }
  co_return true;
}

asio::awaitable<bool> HttpHandler::RelayWhole(Call& c, http::ClientConnection& upstream, http::Responder& responder) {
  const absl::Time start = clock_->Now();
  absl::StatusOr<std::string> body = co_await upstream.ReadAll(dispatcher_->options().idle_timeout, kMaxUpstreamBody);
  c.upstream_wait += clock_->Now() - start;
  if (!body.ok() && c.gate->aborted) co_return false;  // cut by a pause: sent again after the resume
  gate_->Leave(*c.gate);                               // complete: nothing left for a pause to cut
  if (!body.ok()) {
    co_await Fail(c, responder, ApiError::kUpstream, 502, std::string(body.status().message()));
    co_return true;
  }
  boost::system::error_code ec;
  json::value parsed = json::parse(*body, ec);
  if (ec || !parsed.is_object()) {
    co_await Fail(c, responder, ApiError::kUpstream, 502, "the upstream's response is not a JSON object");
    co_return true;
  }
  if (!c.session->open()) {
    co_await Fail(c, responder, ApiError::kSessionClosed, 410, "session closed");
    co_return true;
  }
  std::optional<json::object> native_chat;
  if (c.native) {
    native_chat = NativeAnswerToChat(c.dialect->api(), parsed.as_object());
    if (!native_chat.has_value()) {
      const std::string message = absl::StrCat("the upstream's answer is not a ", c.dialect->api(), " answer");
      co_await Fail(c, responder, ApiError::kUpstream, 502, message);
      co_return true;
    }
  }
  c.assembler.AddWhole(c.native ? *native_chat : parsed.as_object());
  if (absl::Status s = co_await Finish(c); !s.ok()) {
    co_await responder.Send(500, "application/json",
                            ErrorFor(c.dialect.get(), ApiError::kServer, "the call could not be journaled"));
    co_return true;
  }
  const bool rewrite = !c.native && (c.rewrite.strip_token_ids || c.rewrite.strip_logprobs);
  if (rewrite) StripForAgent(c.rewrite, parsed.as_object());
  std::string answer = c.native               ? *std::move(body)
                       : c.dialect != nullptr ? c.dialect->Whole(parsed.as_object())
                       : rewrite              ? json::serialize(parsed)
                                              : *std::move(body);
  co_await responder.Send(200, "application/json", std::move(answer));
  co_return true;
}

asio::awaitable<void> HttpHandler::RelayStream(Call& c, std::unique_ptr<http::ClientConnection>& upstream,
                                               http::Responder& responder) {
  if (!responder.started() && !co_await responder.StartStream(200, "text/event-stream")) {
    c.error = "the client disconnected";
    c.http_status = 499;
    (void)co_await Finish(c);
    co_return;
  }
  const bool rewrite = c.rewrite.strip_token_ids || c.rewrite.strip_logprobs || c.rewrite.strip_usage_chunk;
  std::optional<http::SseParser> parser{std::in_place};  // a new one per upstream response
  while (c.error.empty()) {
    if (!c.session->open()) {  // CloseSession while the call was in flight: it ends here, recorded failed
      c.error = "session closed";
      c.http_status = 410;
      break;
    }
    const absl::Time start = clock_->Now();
    absl::StatusOr<std::string> piece = co_await upstream->ReadSome(dispatcher_->options().idle_timeout);
    c.upstream_wait += clock_->Now() - start;
    if (!piece.ok() && c.gate->aborted) {  // cut by a pause: continued after the resume
      gate_->Leave(*c.gate);
      upstream.reset();
      upstream = co_await Continue(c, responder);
      if (upstream == nullptr) {
        if (c.recorded_done) co_return;  // the session closed or the agent left while paused: answered already
        break;                           // no continuation: c.error says why
      }
      parser.emplace();
      continue;
    }
    if (!piece.ok()) {
      c.error = absl::StrCat("upstream disconnected mid-stream: ", piece.status().message());
      c.http_status = 502;
      break;
    }
    if (piece->empty()) {  // the upstream's stream is complete: nothing left for a pause to cut
      gate_->Leave(*c.gate);
      break;
    }
    auto events = parser->Feed(*piece);
    if (!events.ok()) {
      c.error = std::string(events.status().message());
      c.http_status = 502;
      break;
    }
    std::string out;
    for (http::SseEvent& ev : *events) {
      if (c.native) {
        NativeEvent(c, ev);
        out += AsCame(ev);
        continue;
      }
      if (ev.data == "[DONE]") continue;  // sent by the proxy itself once the call is journaled
      boost::system::error_code ec;
      json::value chunk = json::parse(ev.data, ec);
      if (ec || !chunk.is_object()) {
        if (c.dialect == nullptr) absl::StrAppend(&out, "data: ", ev.data, "\n\n");
        continue;
      }
      json::object& o = chunk.as_object();
      if (auto* err = o.if_contains("error"); err != nullptr) {
        c.error = absl::StrCat("upstream error mid-stream: ", json::serialize(*err));
      }
      NoteVersion(c);
      c.assembler.AddChunk(o);
      if (c.stream_id.empty()) {
        if (auto* id = o.if_contains("id"); id != nullptr && id->is_string()) c.stream_id = id->as_string();
      }
      const bool continued = c.assembler.continued();
      if (continued) AdaptContinuationChunk(c.stream_id, o);
      if (c.dialect != nullptr) {
        out += c.dialect->Chunk(o);
      } else if (!rewrite && !continued) {
        absl::StrAppend(&out, "data: ", ev.data, "\n\n");
      } else if (StripForAgent(c.rewrite, o)) {
        absl::StrAppend(&out, "data: ", json::serialize(chunk), "\n\n");
      }
    }
    c.gate->continuable = !c.native && Continuable(c.body, c.chat, c.assembler);
    if (!out.empty() && !co_await responder.WriteChunk(out)) {
      c.error = "the client disconnected mid-stream";
      c.http_status = 499;
    }
  }
  const bool told = c.native && c.native_stream->error() == c.error && !c.error.empty();  // its own error event
  if (c.native && c.error.empty()) EndNativeStream(c);
  const bool journaled = (co_await Finish(c)).ok();
  if (responder.client_gone()) co_return;
  if (told) {
    // The agent has the upstream's error event already.
  } else if (!c.error.empty()) {
    co_await responder.WriteChunk(
        ErrorEventFor(c.dialect.get(), c.http_status == 410 ? ApiError::kSessionClosed : ApiError::kUpstream, c.error));
  } else if (!journaled) {
    co_await responder.WriteChunk(ErrorEventFor(c.dialect.get(), ApiError::kServer, "the call could not be journaled"));
  } else if (!c.native) {  // a native stream ended as the upstream ended it
    // (A plain statement before co_await: GCC 12 mishandles a conditional's temporary inside a co_await.)
    const std::string end = c.dialect != nullptr ? c.dialect->End() : std::string("data: [DONE]\n\n");
    co_await responder.WriteChunk(end);
  }
  co_await responder.EndStream();
}

asio::awaitable<std::unique_ptr<http::ClientConnection>> HttpHandler::Continue(Call& c, http::Responder& responder) {
  const absl::Time first_byte = c.dispatch.first_byte;
  const int attempts = c.dispatch.attempts;
  while (true) {
    if (!co_await Admit(c, responder)) co_return nullptr;  // the call failed there, and the agent was told
    c.assembler.BeginContinuation();
    DispatchRequest request{c.session->env_id(),
                            c.rewrite.model,
                            UpstreamRoute(c),
                            json::serialize(ContinuationBody(c.body, c.chat, c.assembler)),
                            true,
                            c.gate.get()};
    request.estimated_tokens = dispatcher_->EstimateTokens(c.body, request.body.size());
    c.dispatch = co_await dispatcher_->Send(request, Keepalive(responder));
    c.upstream_wait += c.dispatch.waited;
    c.dispatch.first_byte = first_byte;
    c.dispatch.attempts += attempts;
    std::unique_ptr<http::ClientConnection> upstream = std::move(c.dispatch.connection);
    if (c.gate->aborted) continue;  // paused again before it answered
    if (upstream != nullptr && upstream->status() == 200) co_return upstream;
    if (upstream == nullptr) {
      c.error = absl::StrCat("continuing after a pause: ", c.dispatch.error);
      c.http_status = c.dispatch.http_status;
    } else {
      auto body = co_await upstream->ReadAll(dispatcher_->options().idle_timeout, 1 << 20);
      c.error = absl::StrCat("continuing after a pause: the upstream answered HTTP ", upstream->status(), ": ",
                             body.ok() ? body->substr(0, 512) : std::string(body.status().message()));
      c.http_status = 502;
    }
    gate_->Leave(*c.gate);
    co_return nullptr;
  }
}

UpstreamDispatcher::OnWait HttpHandler::Keepalive(http::Responder& responder) {
  return [&responder]() -> asio::awaitable<void> {
    const bool written = co_await SseComment(responder, ": keepalive\n\n");
    (void)written;  // a gone agent is noticed by the relay's next write
  };
}

void HttpHandler::NativeEvent(Call& c, const http::SseEvent& ev) {
  boost::system::error_code ec;
  json::value data = json::parse(ev.data, ec);
  if (ec || !data.is_object()) return;
  NoteVersion(c);
  c.native_stream->Add(data.as_object());
  if (c.error.empty() && !c.native_stream->error().empty()) c.error = c.native_stream->error();
}

void HttpHandler::EndNativeStream(Call& c) {
  const std::optional<json::object>& answer = c.native_stream->answer();
  std::optional<json::object> chat = answer.has_value() ? NativeAnswerToChat(c.dialect->api(), *answer) : std::nullopt;
  if (!chat.has_value()) {
    c.error = absl::StrCat("the upstream's ", c.dialect->api(), " stream ended without its whole answer");
    c.http_status = 502;
    return;
  }
  c.assembler.AddWhole(*chat);
}

void HttpHandler::NoteVersion(Call& c) {
  const int64_t now = policy_version_->current();
  if (now == c.version) return;
  c.version = now;
  v1::PolicyVersionChange* change = c.recorded.mutable_call()->add_version_changes();
  change->set_completion_token(static_cast<uint32_t>(c.assembler.completion_token_ids().size()));
  change->set_version(now);
}

asio::awaitable<absl::Status> HttpHandler::Finish(Call& c) {
  const absl::Time done = clock_->Now();
  const bool ok = c.error.empty();
  c.assembler.FillRecord(ok, &c.recorded);
  NoteVersion(c);  // an update during a whole response (or after the last chunk): after its last token
  v1::LlmCall& call = *c.recorded.mutable_call();
  const Dispatch& d = c.dispatch;
  ToProto(c.received, call.mutable_timings()->mutable_received());
  if (d.upstream_start != absl::Time()) ToProto(d.upstream_start, call.mutable_timings()->mutable_upstream_start());
  if (d.first_byte != absl::Time()) ToProto(d.first_byte, call.mutable_timings()->mutable_first_token());
  ToProto(done, call.mutable_timings()->mutable_done());
  call.set_upstream(d.lease ? d.lease.get()->spec.name : "");
  call.set_upstream_attempts(static_cast<uint32_t>(d.attempts));
  call.set_http_status(c.http_status);
  call.set_error(c.error);
  c.recorded_done = true;  // the ledger records it before its first suspension
  absl::Status stored = co_await ledger_->RecordCall(*c.session, c.recorded);
  if (!stored.ok()) c.http_status = 500;
  const v1::Usage& usage = call.usage();
  // The token quotas were charged an estimate: now the reported usage (none reported: the estimate stands for a
  // call that ran, nothing for one that failed).
  const int64_t used = static_cast<int64_t>(usage.prompt_tokens()) + static_cast<int64_t>(usage.completion_tokens());
  c.dispatch.quota.Settle(used > 0 ? used : ok ? c.dispatch.quota.charged_tokens() : 0);
  metrics_->prompt_tokens.Increment(static_cast<double>(usage.prompt_tokens()));
  metrics_->completion_tokens.Increment(static_cast<double>(usage.completion_tokens()));
  metrics_->latency.Observe(absl::ToDoubleSeconds(done - c.received));
  if (d.first_byte != absl::Time()) metrics_->ttft.Observe(absl::ToDoubleSeconds(d.first_byte - c.received));
  metrics_->overhead.Observe(std::max(0.0, absl::ToDoubleSeconds(done - c.received - c.upstream_wait)));
  co_return stored;
}

asio::awaitable<void> HttpHandler::Fail(Call& c, http::Responder& responder, ApiError error, int http_status,
                                        const std::string& message) {
  c.http_status = http_status;
  c.error = message;
  (void)co_await Finish(c);
  if (!responder.started()) {
    co_await responder.Send(http_status, "application/json",
                            ErrorFor(c.dialect.get(), error, message, c.chat, http_status));
  } else {
    co_await responder.WriteChunk(ErrorEventFor(c.dialect.get(), error, message));
    co_await responder.EndStream();
  }
}

}  // namespace corral::proxy
