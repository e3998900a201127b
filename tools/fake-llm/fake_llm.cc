#include "tools/fake-llm/fake_llm.h"

#include <algorithm>
#include <chrono>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/this_coro.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "boost/json.hpp"
#include "libs/async/sleep.h"
#include "libs/http/openai_json.h"
#include "tools/fake-llm/native_gemini.h"
#include "tools/fake-llm/native_messages.h"
#include "tools/fake-llm/native_responses.h"
#include "tools/fake-llm/reply.h"

namespace corral::fakellm {
namespace {

namespace json = boost::json;
namespace asio = boost::asio;

// A call of an agent API the fake serves itself.
struct NativeCall {
  NativeApi api = NativeApi::kResponses;
  bool stream = false;  // the path asks for a stream (Gemini's :streamGenerateContent)
  std::string model;    // named in the path (Gemini's)
};

// The agent API `target` calls, when the fake serves it itself.
std::optional<NativeCall> NativeCallOf(const Options& o, const std::string& target) {
  if (o.native_responses && target == "/v1/responses") return NativeCall{.api = NativeApi::kResponses};
  if (o.native_messages && target == "/v1/messages") return NativeCall{.api = NativeApi::kMessages};
  if (!o.native_gemini) return std::nullopt;
  const std::string path = target.substr(0, target.find('?'));
  for (const absl::string_view prefix : {"/v1beta/models/", "/v1/models/"}) {
    if (!absl::StartsWith(path, prefix)) continue;
    const std::string rest = path.substr(prefix.size());
    const size_t colon = rest.rfind(':');
    const std::string action = colon == std::string::npos ? "" : rest.substr(colon + 1);
    if (colon == 0 || (action != "generateContent" && action != "streamGenerateContent")) return std::nullopt;
    return NativeCall{
        .api = NativeApi::kGemini, .stream = action == "streamGenerateContent", .model = rest.substr(0, colon)};
  }
  return std::nullopt;
}

// A native call's request as the fake's chat body.
json::object AsChat(const NativeCall& call, const json::object& request) {
  if (call.api == NativeApi::kResponses) return ResponsesAsChat(request);
  if (call.api == NativeApi::kMessages) return MessagesAsChat(request);
  json::object chat = GeminiAsChat(request);
  chat["model"] = call.model;
  return chat;
}

}  // namespace

asio::awaitable<void> FakeLlm::Handle(http::Request& request, http::Responder& responder) {
  const std::string target(request.target());
  if (co_await AnswerAdmin(target, request, responder)) co_return;
  if (!options_.request_log.empty() && request.method() == boost::beast::http::verb::post) LogRequest(target, request);
  if (target == "/v1/models") {
    co_await responder.Send(200, "application/json", http::ModelListJson(options_.models, "corral-fake-llm"));
    co_return;
  }
  // An upstream that serves an agent API itself (--native-responses, …) answers it as a chat call, reshaped.
  const std::optional<NativeCall> native_call = NativeCallOf(options_, target);
  const bool native = native_call.has_value();
  const bool chat = target == "/v1/chat/completions" || native;
  if (!chat && target != "/v1/completions") {
    co_await responder.Send(404, "application/json", http::ErrorJson("no such route", "invalid_request_error"));
    co_return;
  }
  const int64_t n = ++requests_;
  if (std::optional<double> retry_after = OverQuota()) {
    const http::Fields headers = {
        {"retry-after", absl::StrCat(static_cast<int64_t>(std::ceil(*retry_after)))},
        {"retry-after-ms", absl::StrCat(static_cast<int64_t>(std::ceil(*retry_after * 1000)))}};
    co_await responder.Send(429, "application/json", http::ErrorJson("quota exceeded", "rate_limit_exceeded"), headers);
    co_return;
  }
  // The call counts against the concurrency quota until it is answered (or the client leaves).
  struct InFlight {
    FakeLlm* llm;
    ~InFlight() {
      absl::MutexLock lock(&llm->mu_);
      --llm->quota_.in_flight;
    }
  } in_flight{this};
  boost::system::error_code ec;
  json::value parsed = json::parse(request.body(), ec);
  if (ec || !parsed.is_object()) {
    co_await responder.Send(400, "application/json",
                            http::ErrorJson("body is not a JSON object", "invalid_request_error"));
    co_return;
  }
  const bool native_stream = native && (native_call->stream || BoolOr(parsed.as_object(), "stream"));
  if (native) {
    const NativeApi api = native_call->api;
    ++(api == NativeApi::kResponses  ? native_responses_
       : api == NativeApi::kMessages ? native_messages_
                                     : native_gemini_);
    parsed = AsChat(*native_call, parsed.as_object());
  }
  const Reply reply = BuildReply(options_, n, chat, parsed.as_object());
  if (reply.continued_from >= 0) {
    absl::MutexLock lock(&mu_);
    continuations_.push_back({reply.continued_from, version_.load()});
  }
  co_await async::SleepFor(reply.plan.ttft);
  if (reply.plan.status != 200) {
    co_await responder.Send(reply.plan.status, "application/json", http::ErrorJson("injected failure", "server_error"));
    co_return;
  }
  if (native) {
    co_await SendNative(reply, native_call->api, native_stream, responder);
    co_return;
  }
  co_await SendChat(reply, responder);
}

asio::awaitable<bool> FakeLlm::AnswerAdmin(const std::string& target, http::Request& request,
                                           http::Responder& responder) {
  if (target == "/health") {
    co_await responder.Send(200, "text/plain", "ok\n");
    co_return true;
  }
  if (target == "/admin/version" && request.method() == boost::beast::http::verb::post) {
    // Stands for a weight update: the version this server reports serving from now on.
    boost::system::error_code ec;
    json::value v = json::parse(request.body(), ec);
    if (ec || !v.is_object() || !v.as_object().contains("version") || !v.as_object().at("version").is_int64()) {
      co_await responder.Send(400, "application/json",
                              http::ErrorJson("expected {\"version\": N}", "invalid_request_error"));
      co_return true;
    }
    version_.store(v.as_object().at("version").as_int64());
    co_await responder.Send(200, "application/json", Stats());
    co_return true;
  }
  if (target == "/admin/stats") {
    co_await responder.Send(200, "application/json", Stats());
    co_return true;
  }
  co_return false;
}

void FakeLlm::LogRequest(const std::string& target, const http::Request& request) {
  boost::system::error_code ec;
  json::value body = json::parse(request.body(), ec);
  if (!ec) {
    absl::MutexLock lock(&log_mu_);
    std::ofstream(options_.request_log, std::ios::app)
        << json::serialize(json::object{{"path", target}, {"body", body}}) << "\n";
  }
}

asio::awaitable<void> FakeLlm::SendNative(const Reply& reply, NativeApi api, bool stream, http::Responder& responder) {
  const std::vector<std::string> answer = AsNative(api, reply.whole, stream);
  if (!stream) {
    co_await responder.Send(200, "application/json", answer.front());
    co_return;
  }
  if (!co_await responder.StartStream(200, "text/event-stream")) co_return;
  for (const std::string& event : answer) {
    co_await async::SleepFor(reply.plan.inter_token);
    if (!co_await responder.WriteChunk(event)) co_return;
  }
  co_await responder.EndStream();
}

asio::awaitable<void> FakeLlm::SendChat(const Reply& reply, http::Responder& responder) {
  if (!reply.stream) {
    co_await responder.Send(200, "application/json", reply.whole);
    co_return;
  }
  if (!co_await responder.StartStream(200, "text/event-stream")) co_return;
  for (size_t i = 0; i < reply.events.size(); ++i) {
    const auto chunks = static_cast<int64_t>(i);
    if (reply.plan.disconnect_after_chunks >= 0 && chunks >= reply.plan.disconnect_after_chunks) {
      responder.Abort();  // mid-stream, without the terminating chunk
      co_return;
    }
    if (reply.plan.stall_after_chunks >= 0 && chunks >= reply.plan.stall_after_chunks) {
      co_await async::SleepFor(absl::Hours(1));  // hold the stream open, silent (the client gives up first)
      co_return;
    }
    if (i > 1) co_await async::SleepFor(reply.plan.inter_token);
    if (!co_await responder.WriteChunk(reply.events[i])) {
      ++aborted_streams_;  // the client went away: generation stops, as vLLM's does
      co_return;
    }
  }
  co_await responder.WriteChunk("data: [DONE]\n\n");
  co_await responder.EndStream();
}

std::optional<double> FakeLlm::OverQuota() {
  absl::MutexLock lock(&mu_);
  Quota& q = quota_;
  const auto burst = static_cast<double>(options_.quota_burst);
  const bool rated = options_.quota_rps > 0;
  if (rated) {
    const absl::Time now = absl::Now();
    if (!q.requests) q.requests.emplace(burst, now);
    q.requests->Refill(now, options_.quota_rps, burst);
  }
  const bool rate_out = rated && !q.requests->Has(1);
  const bool busy = options_.quota_concurrency > 0 && q.in_flight >= options_.quota_concurrency;
  if (rate_out || busy) {
    ++q.throttled;
    return rate_out ? absl::ToDoubleSeconds(q.requests->TimeUntil(1, options_.quota_rps)) : 1.0;
  }
  if (rated) q.requests->Spend(1);
  q.max_in_flight = std::max(q.max_in_flight, ++q.in_flight);
  return std::nullopt;
}

std::string FakeLlm::Stats() const {
  json::object out;
  out["version"] = version_.load();
  out["requests"] = requests_.load();
  out["aborted_streams"] = aborted_streams_.load();
  out["native_responses"] = native_responses_.load();
  out["native_messages"] = native_messages_.load();
  out["native_gemini"] = native_gemini_.load();
  json::array continuations;
  {
    absl::MutexLock lock(&mu_);
    out["throttled"] = quota_.throttled;
    out["max_in_flight"] = quota_.max_in_flight;
    for (const auto& [from, version] : continuations_) {
      json::object c;
      c["continued_from"] = from;
      c["version"] = version;
      continuations.push_back(std::move(c));
    }
  }
  out["continuations"] = std::move(continuations);
  return json::serialize(out);
}

}  // namespace corral::fakellm
