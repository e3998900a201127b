#include "services/proxy/http_handler.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "boost/asio/this_coro.hpp"
#include "boost/json.hpp"
#include "libs/api/proto_time.h"
#include "libs/http/openai_json.h"
#include "libs/http/sse.h"
#include "libs/http/url.h"
#include "services/proxy/anthropic_api.h"
#include "services/proxy/capture.h"
#include "services/proxy/continuation.h"
#include "services/proxy/gemini_api.h"
#include "services/proxy/native_answers.h"
#include "services/proxy/responses_api.h"

namespace corral::proxy {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
namespace bhttp = boost::beast::http;

}  // namespace

namespace {

// LlmCall.translation_json of a dialect call: the path taken, and what the translation left out or changed.
std::string TranslationRecord(const Dialect& dialect, bool native) {
  json::object notes = native ? json::object() : dialect.notes();
  notes["path"] = native ? "native" : "translated";
  return json::serialize(notes);
}

// The body an upstream serving the dialect itself gets: the agent's, with what the session's policy set on the
// chat body it was translated to — the model (in the body, or in the path: UpstreamTarget), and its sampling keys
// under the dialect's own names and where it keeps them (the token cap as its own field).
json::object NativeBody(json::object native, const json::object& chat, const Rewrite& rewrite, const NativeApi& api) {
  if (!api.model_in_path) native["model"] = rewrite.model;
  json::object* settings = &native;
  if (!api.settings_field.empty()) {
    json::value& field = native[json::string_view(api.settings_field.data(), api.settings_field.size())];
    if (!field.is_object()) field = json::object();
    settings = &field.as_object();
  }
  const auto name = [&](const std::string& key) {
    if (key == "max_tokens" || key == "max_completion_tokens") return std::string(api.token_cap);
    return api.setting_name != nullptr ? api.setting_name(key) : key;
  };
  for (const std::string& key : rewrite.removed_keys) settings->erase(name(key));
  for (const std::string& key : rewrite.set_keys) {
    if (const json::value* v = chat.if_contains(key); v != nullptr) (*settings)[name(key)] = *v;
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

// The translation an API needs (null: it is chat or completions itself).
std::unique_ptr<Dialect> DialectOf(const ApiSpec& api) { return api.dialect != nullptr ? api.dialect() : nullptr; }

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

// What the request says, in the call's record: the endpoint as the agent called it, the models, the prompt (with
// the model's own messages restored where the agent re-serialized them: in the request sent upstream too), the
// tools and every other parameter, and a dialect call's translation.
void DescribeForTheRecord(CallRequest& c) {
  v1::LlmCall& record = *c.recorded.mutable_call();
  record.set_endpoint(std::string(c.api->path));  // as the agent called it
  record.set_requested_model(c.rewrite.requested_model);
  record.set_model(c.rewrite.model);
  record.set_stream(c.rewrite.stream);
  record.set_neutralized_json(c.rewrite.neutralized_json);
  if (c.chat) {
    json::array& messages = c.body["messages"].as_array();
    std::vector<v1::ChatMessage> prompt = MessagesFrom(messages);
    if (prompt.size() == messages.size()) {  // the model's own messages where the agent re-serialized them
      std::vector<v1::RestoredMessage> restored = c.session->Restore(prompt, &c.prompt_nodes);
      WriteRestored(prompt, restored, messages);
      for (v1::RestoredMessage& r : restored) *record.add_restored() = std::move(r);
    }
    for (v1::ChatMessage& m : prompt) *c.recorded.add_prompt() = std::move(m);
  } else {
    record.set_prompt_text(std::string(c.body["prompt"].as_string()));
  }
  if (auto* tools = c.body.if_contains("tools"); tools != nullptr && !tools->is_null()) {
    record.set_tools_json(json::serialize(*tools));
  }
  json::object params;  // everything but the conversation itself (no copy of a long history)
  for (const auto& [key, value] : c.body) {
    if (key != "messages" && key != "prompt" && key != "tools") params[key] = value;
  }
  record.set_params_json(json::serialize(params));
  if (c.dialect != nullptr) record.set_translation_json(TranslationRecord(*c.dialect, c.native));
}

// A query parameter of the request's target ("" when absent or the target is malformed).
std::string QueryParam(const http::Request& request, const std::string& key) {
  const absl::StatusOr<http::Target> target =
      http::ParseTarget(absl::string_view(request.target().data(), request.target().size()));
  if (!target.ok()) return "";
  const auto it = target->query.find(key);
  return it != target->query.end() ? it->second : "";
}

// The env token a request carries: `Authorization: Bearer`, or as Anthropic's clients send a key (`x-api-key`), or
// Google's (`x-goog-api-key`, or `?key=`); "" when none.
std::string EnvToken(const http::Request& request) {
  const std::string auth(request[bhttp::field::authorization]);
  if (absl::StartsWith(auth, "Bearer ")) return auth.substr(7);
  if (!auth.empty()) return "";
  for (const char* header : {"x-api-key", "x-goog-api-key"}) {
    if (request.count(header) > 0) return std::string(request[header]);
  }
  return QueryParam(request, "key");
}

// Whether a Gemini stream asks for server-sent events (`?alt=sse`) rather than one JSON array, which the proxy does
// not serve: a pause's keepalive comments could not be carried in it.
bool AsksForSse(const http::Request& request) { return QueryParam(request, "alt") == "sse"; }

// The shape of a model list: Anthropic's for its clients (an anthropic-version header), Google's for its clients
// (a key as Google's clients send it) on OpenAI's path, else the API's own.
std::unique_ptr<Dialect> ModelListShape(const http::Request& request, const ApiSpec& api) {
  if (request.count("anthropic-version") > 0) return std::make_unique<anthropic::MessagesDialect>();
  if (request.count("x-goog-api-key") > 0 || !QueryParam(request, "key").empty()) {
    return std::make_unique<gemini::GeminiDialect>();
  }
  return DialectOf(api);
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

// What a call waiting upstream may write to its agent.
class ResponderLink : public AgentLink {
 public:
  explicit ResponderLink(http::Responder& responder) : responder_(responder) {}
  asio::awaitable<bool> Comment(absl::string_view comment) override {
    const bool written = co_await SseComment(responder_, comment);
    co_return written;
  }

 private:
  http::Responder& responder_;
};

}  // namespace

asio::awaitable<void> HttpHandler::Refuse(http::Responder& responder, const ApiSpec& api, ApiError error,
                                          const std::string& message, bool chat) {
  const ApiErrorShape shape = ShapeOf(error);
  parts_.metrics->Request(api, shape.http_status, -1).Increment();
  const std::string body = ErrorFor(DialectOf(api).get(), error, message, chat);
  co_await responder.Send(shape.http_status, "application/json", body);
}

asio::awaitable<void> HttpHandler::Handle(http::Request& request, http::Responder& responder) {
  std::string target(request.target());
  target = target.substr(0, target.find('?'));
  const ApiSpec* api = FindApi(target);
  if (api != nullptr && api->kind == ApiKind::kHealth) {
    co_await responder.Send(200, "application/json", "{\"status\":\"ok\"}");
    co_return;
  }
  // Refusals of the route itself come in the shape of the API the path belongs to (Anthropic's under /v1/messages).
  if (api == nullptr) {
    const std::unique_ptr<Dialect> shape = RefusalShapeFor(target);
    const std::string body = ErrorFor(shape.get(), ApiError::kUnknownRoute, absl::StrCat("unknown route ", target));
    co_await responder.Send(404, "application/json", body);
    co_return;
  }
  if (api->method.has_value() && request.method() != *api->method) {
    const std::unique_ptr<Dialect> shape = RefusalShapeFor(target);
    const std::string message = absl::StrCat(target, " does not accept ", std::string(request.method_string()));
    const std::string body = ErrorFor(shape.get(), ApiError::kMethodNotAllowed, message);
    co_await responder.Send(405, "application/json", body);
    co_return;
  }
  const std::string token = EnvToken(request);
  absl::StatusOr<std::shared_ptr<Session>> session =
      !token.empty() ? parts_.ledger->store().Authenticate(token)
                     : absl::UnauthenticatedError("missing Authorization: Bearer <env token>");
  if (!session.ok()) {
    const ApiError error =
        absl::IsFailedPrecondition(session.status()) ? ApiError::kSessionClosed : ApiError::kUnauthenticated;
    co_await Refuse(responder, *api, error, std::string(session.status().message()));
    co_return;
  }
  switch (api->kind) {
    case ApiKind::kModels: co_await Models(responder, **session, ModelListShape(request, *api), *api); break;
    case ApiKind::kCountTokens: co_await CountTokens(request, responder, *api); break;
    default:
      if (api->streams && !AsksForSse(request)) {
        co_await Refuse(responder, *api, ApiError::kBadRequest,
                        "this stream is served as server-sent events only: add ?alt=sse (as @google/genai does)");
        break;
      }
      co_await Completion(request, responder, *std::move(session), *api, api->ModelIn(target));
  }
}

asio::awaitable<void> HttpHandler::CountTokens(http::Request& request, http::Responder& responder, const ApiSpec& api) {
  boost::system::error_code ec;
  json::value parsed = json::parse(request.body(), ec);
  absl::StatusOr<std::string> answer =
      ec || !parsed.is_object()
          ? absl::StatusOr<std::string>(absl::InvalidArgumentError("the body must be a JSON object"))
          : DialectOf(api)->CountTokens(parsed.as_object());
  if (!answer.ok()) {
    const std::string message(answer.status().message());
    co_await Refuse(responder, api, ApiError::kBadRequest, message);
    co_return;
  }
  parts_.metrics->Request(api, 200, -1).Increment();
  co_await responder.Send(200, "application/json", *answer);
}

asio::awaitable<void> HttpHandler::Models(http::Responder& responder, const Session& session,
                                          std::unique_ptr<Dialect> shape, const ApiSpec& api) {
  std::vector<std::string> names(session.policy().allowed_models().begin(), session.policy().allowed_models().end());
  if (names.empty()) names = upstreams_->models();
  for (const auto& [alias, target] : session.policy().model_aliases()) {
    if (alias != "*") names.push_back(alias);
  }
  parts_.metrics->Request(api, 200, -1).Increment();
  const std::string body = shape != nullptr ? shape->ModelList(names) : http::ModelListJson(names, "corral");
  co_await responder.Send(200, "application/json", body);
}

asio::awaitable<void> HttpHandler::Completion(http::Request& request, http::Responder& responder,
                                              std::shared_ptr<Session> session, const ApiSpec& api,
                                              std::string path_model) {
  CallRequest c;
  c.session = std::move(session);
  c.dialect = DialectOf(api);
  const bool chat = api.chat;
  c.chat = chat;
  c.api = &api;
  c.received = parts_.clock->Now();
  boost::system::error_code ec;
  json::value parsed = json::parse(request.body(), ec);
  if (ec || !parsed.is_object()) {
    // Refused before anything is recorded. (Computed before co_await: GCC 12 mishandles temporaries of a
    // conditional inside a co_await expression.)
    const std::string message =
        ec ? absl::StrCat("malformed JSON body: ", ec.message()) : std::string("the body must be a JSON object");
    co_await Refuse(responder, *c.api, ApiError::kBadRequest, message);
    co_return;
  }
  c.body = std::move(parsed.as_object());
  // Gemini's API names the model and whether to stream in the path: the translation reads them from the body.
  const bool named_in_path = !path_model.empty();
  if (named_in_path) {
    c.body["model"] = std::move(path_model);
    c.body["stream"] = api.streams;
  }
  json::object original;       // a dialect's body as the agent sent it, for an upstream that serves the dialect itself
  if (c.dialect != nullptr) {  // from here on a chat call; only its answer is translated back
    absl::StatusOr<json::object> translated = c.dialect->ToChat(c.body);
    if (!translated.ok()) {
      const std::string message(translated.status().message());
      co_await Refuse(responder, *c.api, ApiError::kBadRequest, message);
      co_return;
    }
    original = std::move(c.body);  // moved, not copied: kept only if the call goes native (below)
    c.body = *std::move(translated);
    if (named_in_path) {  // not the API's own fields: an upstream serving it gets them in its path
      original.erase("model");
      original.erase("stream");
    }
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
    co_await Refuse(responder, *c.api, error, policy.message, chat);
    co_return;
  }
  c.rewrite = policy.rewrite;
  if (api.native != nullptr && upstreams_->ServesNatively(c.rewrite.model, api.native->name)) {
    c.native = true;
    c.native_body = NativeBody(std::move(original), c.body, c.rewrite, *api.native);
  }
  original = json::object();  // a translated call does not hold the agent's body as well while it runs
  if (c.dialect != nullptr && !c.native && upstreams_->RefusesUnrunnableTools(c.rewrite.model)) {
    if (const std::string left_out = LeftOutTool(c.dialect->notes()); !left_out.empty()) {
      co_await Refuse(responder, *c.api, ApiError::kBadRequest, left_out, chat);
      co_return;
    }
  }
  if (parts_.ledger->records()) DescribeForTheRecord(c);
  if (!c.session->TryBeginCall()) {  // max_calls, checked and counted atomically with the calls in flight
    const std::string message = absl::StrCat("budget exhausted: max_calls=", c.session->policy().budget().max_calls());
    co_await Refuse(responder, *c.api, ApiError::kBudgetExhausted, message, chat);
    co_return;
  }
  UpstreamCall call(parts_, std::move(c), co_await asio::this_coro::executor);
  ResponderLink agent(responder);
  const UpstreamCall::Opened opened = co_await call.Open(agent);
  if (opened == UpstreamCall::Opened::kRefused) {
    co_await TellRefusal(call, responder);
  } else if (opened == UpstreamCall::Opened::kFailed) {
    co_await Tell(call, responder);
  } else if (call.request().rewrite.stream) {
    co_await RelayStream(call, agent, responder);
  } else {
    co_await RelayWhole(call, agent, responder);
  }
}

asio::awaitable<void> HttpHandler::RelayWhole(UpstreamCall& call, AgentLink& agent, http::Responder& responder) {
  std::optional<UpstreamCall::WholeAnswer> whole = co_await call.Whole(agent);
  if (!whole.has_value()) {
    if (!call.refusal().empty()) {
      co_await TellRefusal(call, responder);
    } else {
      co_await Tell(call, responder);
    }
    co_return;
  }
  if (absl::Status s = co_await call.Record(); !s.ok()) {
    co_await responder.Send(500, "application/json",
                            ErrorFor(call.dialect(), ApiError::kServer, "the call could not be journaled"));
    co_return;
  }
  const Rewrite& rw = call.request().rewrite;
  const bool native = call.request().native;
  const bool rewrite = !native && (rw.strip_token_ids || rw.strip_logprobs);
  if (rewrite) StripForAgent(rw, whole->answer);
  std::string answer = native                      ? std::move(whole->raw)
                       : call.dialect() != nullptr ? call.dialect()->Whole(whole->answer)
                       : rewrite                   ? json::serialize(whole->answer)
                                                   : std::move(whole->raw);
  co_await responder.Send(200, "application/json", std::move(answer));
}

asio::awaitable<void> HttpHandler::RelayStream(UpstreamCall& call, AgentLink& agent, http::Responder& responder) {
  if (!responder.started() && !co_await responder.StartStream(200, "text/event-stream")) {
    call.SetError({.kind = ApiError::kUpstream, .http_status = 499, .message = "the client disconnected"});
    (void)co_await call.Record();
    co_return;
  }
  const Rewrite& rw = call.request().rewrite;
  const bool native = call.request().native;
  Dialect* dialect = call.dialect();
  const bool rewrite = rw.strip_token_ids || rw.strip_logprobs || rw.strip_usage_chunk;
  while (!call.error().has_value()) {
    std::optional<std::vector<http::SseEvent>> events = co_await call.NextEvents(agent);
    if (!events.has_value() || events->empty()) break;
    std::string out;
    for (http::SseEvent& ev : *events) {
      if (native) {
        call.TakeNativeEvent(ev);
        out += AsCame(ev);
        continue;
      }
      if (ev.data == "[DONE]") continue;  // sent by the proxy itself once the call is journaled
      boost::system::error_code ec;
      json::value chunk = json::parse(ev.data, ec);
      if (ec || !chunk.is_object()) {
        if (dialect == nullptr) absl::StrAppend(&out, "data: ", ev.data, "\n\n");
        continue;
      }
      json::object& o = chunk.as_object();
      const bool continued = call.TakeChunk(o);
      if (dialect != nullptr) {
        out += dialect->Chunk(o);
      } else if (!rewrite && !continued) {
        absl::StrAppend(&out, "data: ", ev.data, "\n\n");
      } else if (StripForAgent(rw, o)) {
        absl::StrAppend(&out, "data: ", json::serialize(chunk), "\n\n");
      }
    }
    call.UpdateContinuable();
    if (!out.empty() && !co_await responder.WriteChunk(out)) {
      call.SetError({.kind = ApiError::kUpstream, .http_status = 499, .message = "the client disconnected mid-stream"});
    }
  }
  const bool told = call.told_by_upstream();  // the agent has the upstream's own error event
  const bool journaled = (co_await call.Record()).ok();
  if (responder.client_gone()) co_return;
  if (told) {
    // Nothing to add.
  } else if (call.error().has_value()) {
    co_await responder.WriteChunk(ErrorEventFor(dialect, call.error()->kind, call.error()->message));
  } else if (!journaled) {
    co_await responder.WriteChunk(ErrorEventFor(dialect, ApiError::kServer, "the call could not be journaled"));
  } else if (!native) {  // a native stream ended as the upstream ended it
    // (A plain statement before co_await: GCC 12 mishandles a conditional's temporary inside a co_await.)
    const std::string end = dialect != nullptr ? dialect->End() : std::string("data: [DONE]\n\n");
    co_await responder.WriteChunk(end);
  }
  co_await responder.EndStream();
}

asio::awaitable<void> HttpHandler::Tell(const UpstreamCall& call, http::Responder& responder) {
  const CallError& error = *call.error();
  if (!responder.started()) {
    const std::string body =
        ErrorFor(call.dialect(), error.kind, error.message, call.request().chat, error.http_status);
    co_await responder.Send(error.http_status, "application/json", body);
  } else {
    co_await responder.WriteChunk(ErrorEventFor(call.dialect(), error.kind, error.message));
    co_await responder.EndStream();
  }
}

asio::awaitable<void> HttpHandler::TellRefusal(const UpstreamCall& call, http::Responder& responder) {
  const CallError& error = *call.error();
  if (!responder.started()) {
    std::string answer = call.refusal();
    if (call.dialect() != nullptr) answer = call.dialect()->ErrorBody(error.http_status, answer.substr(0, 2048));
    co_await responder.Send(error.http_status, "application/json", answer);
  } else {
    co_await responder.WriteChunk(ErrorEventFor(call.dialect(), ApiError::kUpstream, error.message));
  }
}

}  // namespace corral::proxy
