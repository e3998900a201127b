#include "services/proxy/http_handler.h"

#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "boost/asio/as_tuple.hpp"
#include "boost/asio/co_spawn.hpp"
#include "boost/asio/detached.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/this_coro.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "boost/json.hpp"
#include "libs/core/logging.h"
#include "libs/http/sse.h"
#include "libs/rpc/proto_time.h"
#include "services/proxy/capture.h"
#include "spdlog/spdlog.h"

namespace corral::proxy {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
namespace bhttp = boost::beast::http;
constexpr auto kUseTuple = asio::as_tuple(asio::use_awaitable);
constexpr size_t kMaxUpstreamBody = 64 << 20;

std::string ErrorEvent(const std::string& type, const std::string& message) {
  return absl::StrCat("data: ", http::ErrorJson(message, type), "\n\n");
}

// The budget refusal an agent handles cleanly: a 400 whose body is an OpenAI error and also carries a
// finish_reason "length" choice.
std::string BudgetBody(const std::string& message, bool chat) {
  json::value error = json::parse(http::ErrorJson(message, "invalid_request_error", "budget_exhausted"));
  json::object body = error.as_object();
  json::object choice;
  choice["index"] = 0;
  choice["finish_reason"] = "length";
  if (chat) {
    json::object m;
    m["role"] = "assistant";
    m["content"] = "";
    choice["message"] = std::move(m);
  } else {
    choice["text"] = "";
  }
  body["object"] = chat ? "chat.completion" : "text_completion";
  body["choices"] = json::array{std::move(choice)};
  return json::serialize(body);
}

// The ids of an OpenAI model list ({"data": [{"id": ...}]}); empty for anything else.
std::vector<std::string> ModelIds(const std::string& body) {
  std::vector<std::string> ids;
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object()) return ids;
  auto* data = v.as_object().if_contains("data");
  if (data == nullptr || !data->is_array()) return ids;
  for (const auto& m : data->as_array()) {
    if (m.is_object() && m.as_object().contains("id") && m.as_object().at("id").is_string()) {
      ids.emplace_back(m.as_object().at("id").as_string());
    }
  }
  return ids;
}

}  // namespace

struct HttpHandler::Call {
  std::shared_ptr<Session> session;
  bool chat = true;
  std::string route;
  json::object body;
  Rewrite rewrite;
  RecordedCall recorded;
  ResponseAssembler assembler{true};
  absl::Time received, upstream_start, first_byte;
  absl::Duration upstream_wait;
  Upstream* upstream = nullptr;
  int attempts = 0;
  int http_status = 200;
  std::string error;
  bool recorded_done = false;  // Finish ran (the call is recorded)
  bool streaming = false;      // counted in open_streams
};

namespace {

// Whatever happens to a call after it started (an exception included), its counters are given back: the
// session's in-flight slot if it was never recorded, the upstream's outstanding count, the open-streams gauge.
struct CallGuard {
  HttpHandler::Call& c;
  ProxyMetrics* metrics;
  ~CallGuard() {
    if (!c.recorded_done) c.session->AbandonCall();
    if (c.upstream != nullptr) --c.upstream->outstanding;
    if (c.streaming) metrics->open_streams.Decrement();
  }
};

}  // namespace

asio::awaitable<void> HttpHandler::Handle(http::Request& request, http::Responder& responder) {
  std::string target(request.target());
  target = target.substr(0, target.find('?'));
  const bool chat = target == "/v1/chat/completions";
  if (target == "/health") {
    co_await responder.Send(200, "application/json", "{\"status\":\"ok\"}");
    co_return;
  }
  if (!chat && target != "/v1/completions" && target != "/v1/models") {
    co_await responder.Send(404, "application/json",
                            http::ErrorJson(absl::StrCat("unknown route ", target), "invalid_request_error", "not_found"));
    co_return;
  }
  const bool models = target == "/v1/models";
  if ((models && request.method() != bhttp::verb::get) || (!models && request.method() != bhttp::verb::post)) {
    co_await responder.Send(405, "application/json",
                            http::ErrorJson(absl::StrCat(target, " does not accept ", std::string(request.method_string())),
                                            "invalid_request_error", "method_not_allowed"));
    co_return;
  }
  std::string auth(request[bhttp::field::authorization]);
  absl::StatusOr<std::shared_ptr<Session>> session =
      absl::StartsWith(auth, "Bearer ") ? sessions_->Authenticate(auth.substr(7))
                                        : absl::UnauthenticatedError("missing Authorization: Bearer <env token>");
  if (absl::IsFailedPrecondition(session.status())) {
    metrics_->Request(target, 410, "").Increment();
    co_await responder.Send(410, "application/json",
                            http::ErrorJson(std::string(session.status().message()), "invalid_request_error",
                                            "session_closed"));
    co_return;
  }
  if (!session.ok()) {
    metrics_->Request(target, 401, "").Increment();
    co_await responder.Send(401, "application/json",
                            http::ErrorJson(std::string(session.status().message()), "invalid_request_error",
                                            "invalid_api_key"));
    co_return;
  }
  if (models) {
    co_await Models(responder, **session);
    co_return;
  }
  co_await Completion(request, responder, *std::move(session), chat);
}

asio::awaitable<void> HttpHandler::Models(http::Responder& responder, const Session& session) {
  std::vector<std::string> names(session.policy().allowed_models().begin(), session.policy().allowed_models().end());
  if (names.empty()) names = upstreams_->models();
  for (const auto& [alias, target] : session.policy().model_aliases()) {
    if (alias != "*") names.push_back(alias);
  }
  const std::string body = http::ModelListJson(names, "corral");
  co_await responder.Send(200, "application/json", body);
}

asio::awaitable<void> HttpHandler::Completion(http::Request& request, http::Responder& responder,
                                              std::shared_ptr<Session> session, bool chat) {
  Call c;
  c.session = std::move(session);
  c.chat = chat;
  c.route = chat ? "/v1/chat/completions" : "/v1/completions";
  c.assembler = ResponseAssembler(chat);
  c.received = clock_->Now();
  boost::system::error_code ec;
  json::value parsed = json::parse(request.body(), ec);
  if (ec || !parsed.is_object()) {
    // Refused before anything is recorded.
    metrics_->Request(c.route, 400, "").Increment();
    // (Computed before co_await: GCC 12 mishandles temporaries of a conditional inside a co_await expression.)
    const std::string error = http::ErrorJson(
        ec ? absl::StrCat("malformed JSON body: ", ec.message()) : std::string("the body must be a JSON object"),
        "invalid_request_error");
    co_await responder.Send(400, "application/json", error);
    co_return;
  }
  c.body = std::move(parsed.as_object());
  PolicyOutcome policy = ApplyPolicy(c.session->policy(), c.session->used(), chat, c.body);
  if (policy.refusal != Refusal::kNone) {
    metrics_->Request(c.route, 400, "").Increment();
    const std::string code = policy.refusal == Refusal::kModelNotAllowed   ? "model_not_allowed"
                             : policy.refusal == Refusal::kBudgetExhausted ? "budget_exhausted"
                                                                           : "";
    const std::string body = policy.refusal == Refusal::kBudgetExhausted
                                 ? BudgetBody(policy.message, chat)
                                 : http::ErrorJson(policy.message, "invalid_request_error", code);
    co_await responder.Send(400, "application/json", body);
    co_return;
  }
  c.rewrite = policy.rewrite;
  v1::LlmCall& call = c.recorded.call;
  call.set_endpoint(c.route);
  call.set_requested_model(c.rewrite.requested_model);
  call.set_model(c.rewrite.model);
  call.set_stream(c.rewrite.stream);
  if (chat) {
    c.recorded.prompt = MessagesFrom(c.body["messages"].as_array());
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

  if (!c.session->TryBeginCall()) {  // max_calls, checked and counted atomically with the calls in flight
    metrics_->Request(c.route, 400, "").Increment();
    const std::string body = BudgetBody(
        absl::StrCat("budget exhausted: max_calls=", c.session->policy().budget().max_calls()), chat);
    co_await responder.Send(400, "application/json", body);
    co_return;
  }
  CallGuard guard{c, metrics_};
  std::unique_ptr<http::ClientConnection> upstream = co_await Dispatch(c, responder);
  if (upstream == nullptr) {
    co_await Fail(c, responder, c.http_status, "upstream_error", c.error);
  } else if (upstream->status() != 200) {
    // The upstream refused the request itself (4xx): the agent gets its answer as is; the call is recorded failed.
    auto body = co_await upstream->ReadAll(options_.idle_timeout, 1 << 20);
    c.http_status = upstream->status();
    c.error = absl::StrCat("upstream answered HTTP ", c.http_status);
    c.recorded.call.set_http_status(c.http_status);
    (void)co_await Finish(c);
    if (!responder.started()) {
      const std::string answer = body.ok() ? *body : http::ErrorJson(c.error, "upstream_error");
      co_await responder.Send(c.http_status, "application/json", answer);
    } else {
      co_await responder.WriteChunk(ErrorEvent("upstream_error", c.error));
    }
  } else if (c.rewrite.stream) {
    metrics_->open_streams.Increment();
    c.streaming = true;
    co_await RelayStream(c, *upstream, responder);
  } else {
    co_await RelayWhole(c, *upstream, responder);
  }
  if (upstream != nullptr) pool_.Put(std::move(upstream));
  metrics_->Request(c.route, c.http_status, c.upstream != nullptr ? c.upstream->spec.name : "").Increment();
}

asio::awaitable<std::unique_ptr<http::ClientConnection>> HttpHandler::Dispatch(Call& c, http::Responder& responder) {
  auto executor = co_await asio::this_coro::executor;
  const std::string body = json::serialize(c.body);
  std::vector<Upstream*> tried;
  absl::Duration backoff = options_.retry_backoff;
  std::string last_error = "no upstream serves this model";
  int last_status = 503;
  thread_local std::mt19937 rng{std::random_device{}()};
  for (int attempt = 1; attempt <= options_.max_attempts; ++attempt) {
    Upstream* u = upstreams_->Pick(c.session->env_id(), c.rewrite.model, tried);
    if (u == nullptr) break;
    if (attempt > 1) {
      metrics_->retries.Increment();
      co_await http::SleepFor(backoff * std::uniform_real_distribution<double>(0.5, 1.5)(rng));
      backoff *= 2;
    }
    tried.push_back(u);
    c.attempts = attempt;
    http::Request req{bhttp::verb::post, c.route, 11};
    req.set(bhttp::field::host, u->spec.name);
    req.set(bhttp::field::content_type, "application/json");
    req.set(bhttp::field::accept, c.rewrite.stream ? "text/event-stream" : "application/json");
    req.keep_alive(true);
    req.body() = body;
    const absl::Time start = clock_->Now();
    c.upstream_start = start;
    ++u->outstanding;  // from the request on: a non-streamed answer's header comes only when it is complete
    absl::Status sent;
    std::unique_ptr<http::ClientConnection> conn;
    for (int fresh = 0; fresh < 2; ++fresh) {  // a pooled connection the upstream closed meanwhile: one fresh retry
      bool reused = false;
      auto got = co_await pool_.Get(executor, u->spec.host, u->spec.port, options_.connect_timeout, &reused);
      if (!got.ok()) {
        sent = got.status();
        break;
      }
      conn = *std::move(got);
      // Send, writing SSE keepalive comments to a streaming agent while the upstream has not answered.
      bool finished = false;
      auto wake = std::make_shared<asio::steady_timer>(executor);
      asio::co_spawn(
          executor,
          [&, wake]() -> asio::awaitable<void> {
            sent = co_await conn->Send(req, options_.first_byte_timeout);
            finished = true;
            wake->cancel();
          },
          asio::detached);
      while (!finished) {
        wake->expires_after(absl::ToChronoNanoseconds(options_.keepalive_interval));
        auto [wec] = co_await wake->async_wait(kUseTuple);
        if (finished || wec || !c.rewrite.stream) continue;
        if (!responder.started()) co_await responder.StartStream(200, "text/event-stream");
        co_await responder.WriteChunk(": keepalive\n\n");
      }
      // Only a pooled connection the upstream had closed is retried fresh; a timeout is not resent there.
      if (sent.ok() || !reused || !absl::IsUnavailable(sent)) break;
    }
    c.upstream_wait += clock_->Now() - start;
    if (!sent.ok()) {
      --u->outstanding;
      upstreams_->Failed(u);
      last_error = std::string(sent.message());
      last_status = absl::IsDeadlineExceeded(sent) ? 504 : 502;
      continue;
    }
    if (conn->status() >= 500) {  // before the first body byte: safe to try another upstream
      (void)co_await conn->ReadAll(options_.idle_timeout, 1 << 20);
      --u->outstanding;
      upstreams_->Failed(u);
      last_error = absl::StrCat(u->spec.name, " answered HTTP ", conn->status());
      last_status = 502;
      pool_.Put(std::move(conn));
      continue;
    }
    upstreams_->Succeeded(u);
    c.upstream = u;  // its outstanding count is given back when the call ends (CallGuard)
    c.first_byte = clock_->Now();
    c.session->SetUpstream(u->spec.name);
    co_return conn;
  }
  c.http_status = last_status;
  c.error = absl::StrCat("no upstream answered (", c.attempts, " attempts): ", last_error);
  co_return nullptr;
}

asio::awaitable<void> HttpHandler::RelayWhole(Call& c, http::ClientConnection& upstream, http::Responder& responder) {
  const absl::Time start = clock_->Now();
  absl::StatusOr<std::string> body = co_await upstream.ReadAll(options_.idle_timeout, kMaxUpstreamBody);
  c.upstream_wait += clock_->Now() - start;
  if (!body.ok()) {
    c.http_status = 502;
    c.error = std::string(body.status().message());
    co_await Fail(c, responder, 502, "upstream_error", c.error);
    co_return;
  }
  boost::system::error_code ec;
  json::value parsed = json::parse(*body, ec);
  if (ec || !parsed.is_object()) {
    c.http_status = 502;
    c.error = "the upstream's response is not a JSON object";
    co_await Fail(c, responder, 502, "upstream_error", c.error);
    co_return;
  }
  if (!c.session->open()) {
    co_await Fail(c, responder, 410, "invalid_request_error", "session closed");
    co_return;
  }
  c.assembler.AddWhole(parsed.as_object());
  if (absl::Status s = co_await Finish(c); !s.ok()) {
    co_await responder.Send(500, "application/json", http::ErrorJson("the call could not be journaled", "server_error"));
    co_return;
  }
  const bool rewrite = c.rewrite.strip_token_ids || c.rewrite.strip_logprobs;
  if (rewrite) StripForAgent(c.rewrite, parsed.as_object());
  std::string answer = rewrite ? json::serialize(parsed) : *std::move(body);
  co_await responder.Send(200, "application/json", std::move(answer));
}

asio::awaitable<void> HttpHandler::RelayStream(Call& c, http::ClientConnection& upstream, http::Responder& responder) {
  if (!responder.started() && !co_await responder.StartStream(200, "text/event-stream")) {
    c.error = "the client disconnected";
    c.http_status = 499;
    (void)co_await Finish(c);
    co_return;
  }
  const bool rewrite = c.rewrite.strip_token_ids || c.rewrite.strip_logprobs || c.rewrite.strip_usage_chunk;
  http::SseParser parser;
  while (c.error.empty()) {
    if (!c.session->open()) {  // CloseSession while the call was in flight: it ends here, recorded failed
      c.error = "session closed";
      c.http_status = 410;
      break;
    }
    const absl::Time start = clock_->Now();
    absl::StatusOr<std::string> piece = co_await upstream.ReadSome(options_.idle_timeout);
    c.upstream_wait += clock_->Now() - start;
    if (!piece.ok()) {
      c.error = absl::StrCat("upstream disconnected mid-stream: ", piece.status().message());
      c.http_status = 502;
      break;
    }
    if (piece->empty()) break;  // the upstream's stream is complete
    auto events = parser.Feed(*piece);
    if (!events.ok()) {
      c.error = std::string(events.status().message());
      c.http_status = 502;
      break;
    }
    std::string out;
    for (http::SseEvent& ev : *events) {
      if (ev.data == "[DONE]") continue;  // sent by the proxy itself once the call is journaled
      boost::system::error_code ec;
      json::value chunk = json::parse(ev.data, ec);
      if (ec || !chunk.is_object()) {
        absl::StrAppend(&out, "data: ", ev.data, "\n\n");
        continue;
      }
      if (auto* err = chunk.as_object().if_contains("error"); err != nullptr) {
        c.error = absl::StrCat("upstream error mid-stream: ", json::serialize(*err));
      }
      c.assembler.AddChunk(chunk.as_object());
      if (!rewrite) {
        absl::StrAppend(&out, "data: ", ev.data, "\n\n");
      } else if (StripForAgent(c.rewrite, chunk.as_object())) {
        absl::StrAppend(&out, "data: ", json::serialize(chunk), "\n\n");
      }
    }
    if (!out.empty() && !co_await responder.WriteChunk(out)) {
      c.error = "the client disconnected mid-stream";
      c.http_status = 499;
    }
  }
  const bool journaled = (co_await Finish(c)).ok();
  if (responder.client_gone()) co_return;
  if (!c.error.empty()) {
    const std::string event = ErrorEvent(c.http_status == 410 ? "invalid_request_error" : "upstream_error", c.error);
    co_await responder.WriteChunk(event);
  } else if (!journaled) {
    co_await responder.WriteChunk(ErrorEvent("server_error", "the call could not be journaled"));
  } else {
    co_await responder.WriteChunk("data: [DONE]\n\n");
  }
  co_await responder.EndStream();
}

asio::awaitable<absl::Status> HttpHandler::Finish(Call& c) {
  const absl::Time done = clock_->Now();
  v1::LlmCall& call = c.recorded.call;
  const ResponseAssembler& a = c.assembler;
  const bool ok = c.error.empty();
  if (ok && c.chat && a.saw_choice()) c.recorded.response = a.message();
  if (ok && !c.chat) call.set_completion_text(a.text());
  call.set_finish_reason(ok ? a.finish_reason() : "");
  *call.mutable_usage() = a.usage();
  *call.mutable_prompt_token_ids() = {a.prompt_token_ids().begin(), a.prompt_token_ids().end()};
  *call.mutable_completion_token_ids() = {a.completion_token_ids().begin(), a.completion_token_ids().end()};
  *call.mutable_completion_logprobs() = {a.completion_logprobs().begin(), a.completion_logprobs().end()};
  ToProto(c.received, call.mutable_timings()->mutable_received());
  if (c.upstream_start != absl::Time()) ToProto(c.upstream_start, call.mutable_timings()->mutable_upstream_start());
  if (c.first_byte != absl::Time()) ToProto(c.first_byte, call.mutable_timings()->mutable_first_token());
  ToProto(done, call.mutable_timings()->mutable_done());
  call.set_upstream(c.upstream != nullptr ? c.upstream->spec.name : "");
  call.set_upstream_attempts(static_cast<uint32_t>(c.attempts));
  call.set_http_status(c.http_status);
  call.set_error(c.error);
  const v1::LlmCall stored = c.session->EndCall(c.recorded);
  c.recorded_done = true;
  const absl::Time commit_start = clock_->Now();
  absl::Status journaled = co_await journal_->AppendCall(c.session->env_id(), stored, c.recorded);
  metrics_->journal_commit.Observe(absl::ToDoubleSeconds(clock_->Now() - commit_start));
  if (!journaled.ok()) {
    spdlog::error("session {}: journaling call {} failed: {}", c.session->env_id(), stored.seq(), journaled);
    c.http_status = 500;
    c.session->FailCall(stored.seq(), absl::StrCat("the call could not be journaled: ", journaled.message()), 500);
  }
  metrics_->prompt_tokens.Increment(static_cast<double>(a.usage().prompt_tokens()));
  metrics_->completion_tokens.Increment(static_cast<double>(a.usage().completion_tokens()));
  metrics_->latency.Observe(absl::ToDoubleSeconds(done - c.received));
  if (c.first_byte != absl::Time()) metrics_->ttft.Observe(absl::ToDoubleSeconds(c.first_byte - c.received));
  metrics_->overhead.Observe(std::max(0.0, absl::ToDoubleSeconds(done - c.received - c.upstream_wait)));
  co_return journaled;
}

asio::awaitable<void> HttpHandler::Fail(Call& c, http::Responder& responder, int status, const std::string& type,
                                        const std::string& message) {
  c.http_status = status;
  c.error = message;
  (void)co_await Finish(c);
  if (!responder.started()) {
    co_await responder.Send(status, "application/json", http::ErrorJson(message, type));
  } else {
    co_await responder.WriteChunk(ErrorEvent(type, message));
    co_await responder.EndStream();
  }
}

asio::awaitable<void> HttpHandler::HealthLoop(absl::Duration interval) {
  auto executor = co_await asio::this_coro::executor;
  while (true) {
    for (Upstream* u : upstreams_->all()) {
      http::Request req{bhttp::verb::get, "/health", 11};
      auto r = co_await http::Fetch(executor, u->spec.host, u->spec.port, req, absl::Seconds(2));
      const bool healthy = r.ok() && r->status == 200;
      if (healthy != u->healthy.load()) {
        spdlog::info("upstream {} is now {}", u->spec.name, healthy ? "healthy" : "unhealthy");
      }
      u->healthy = healthy;
      if (healthy) {
        http::Request list{bhttp::verb::get, "/v1/models", 11};
        auto models = co_await http::Fetch(executor, u->spec.host, u->spec.port, list, absl::Seconds(2));
        if (models.ok() && models->status == 200) u->SetDiscovered(ModelIds(models->body));
      }
      metrics_->upstream_healthy.Add({{"upstream", u->spec.name}}).Set(upstreams_->Available(*u) ? 1 : 0);
    }
    co_await http::SleepFor(interval);
  }
}

}  // namespace corral::proxy
