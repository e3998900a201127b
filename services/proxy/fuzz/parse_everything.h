// One input through every parser on the proxy's request path: the HTTP/1.1 request parser (with the server's
// limits), the JSON body, the policy rewrite, the message conversion, the Messages and Responses translations
// (requests, whole answers, stream chunks), the response assembler and the SSE parser. Shared by the libFuzzer target
// (request_fuzzer.cc, clang) and the replay test that runs in CI.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http/parser.hpp"
#include "boost/beast/http/string_body.hpp"
#include "boost/json.hpp"
#include "libs/http/sse.h"
#include "services/proxy/anthropic_api.h"
#include "services/proxy/api_registry.h"
#include "services/proxy/capture.h"
#include "services/proxy/policy.h"
#include "services/proxy/responses_api.h"

namespace corral::proxy {

// Returns 2 when the input reached the policy as a JSON object, 1 when it parsed as an HTTP request, else 0.
inline int ParseEverything(const uint8_t* data, size_t size) {
  namespace bhttp = boost::beast::http;
  const std::string input(reinterpret_cast<const char*>(data), size);
  // As an HTTP request.
  bhttp::request_parser<bhttp::string_body> parser;
  parser.header_limit(16 * 1024);
  parser.body_limit(1 << 20);
  parser.eager(true);
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(input), ec);
  int depth = parser.is_done() ? 1 : 0;
  std::string body = parser.is_done() ? parser.get().body() : input;
  // As a JSON request body, through the policy (both endpoints) and the message conversion.
  boost::json::value v = boost::json::parse(body, ec);
  if (!ec && v.is_object()) {
    depth = 2;
    v1::SessionPolicy policy;
    policy.set_capture_token_ids(true);
    policy.set_capture_logprobs(true);
    policy.mutable_sampling_caps()->set_max_tokens(64);
    policy.mutable_budget()->set_max_completion_tokens(100);
    (*policy.mutable_model_aliases())["*"] = "m";
    for (bool chat : {true, false}) {
      boost::json::object copy = v.as_object();
      PolicyOutcome out = ApplyPolicy(policy, BudgetUse{1, 5, 5}, chat, copy);
      if (auto* msgs = copy.if_contains("messages"); msgs != nullptr && msgs->is_array()) {
        (void)MessagesFrom(msgs->as_array());
      }
      // As a response and as a stream chunk.
      ResponseAssembler a(chat);
      a.AddWhole(v.as_object());
      a.AddChunk(v.as_object());
      (void)a.message();
      boost::json::object strip = v.as_object();
      (void)StripForAgent(out.rewrite, strip);
    }
    // As a request of every API with a dialect, and as a chat answer or chunk to translate back.
    for (const ApiSpec& api : Apis()) {
      if (api.dialect == nullptr) continue;
      std::unique_ptr<Dialect> d = api.dialect();
      (void)d->ToChat(v.as_object());
      (void)d->CountTokens(v.as_object());
      (void)d->Whole(v.as_object());
      (void)d->Chunk(v.as_object());
      (void)d->End();
    }
  }
  // As a server-sent event stream.
  http::SseParser sse(1 << 16);
  (void)sse.Feed(input);
  return depth;
}

}  // namespace corral::proxy
