// `corral up --demo`'s sandbox API part: verl's SandboxFusion request, answered from a leased sandbox, and an E2B
// sandbox created, used and killed as the e2b SDK does it.
#include <iostream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "boost/asio/co_spawn.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/use_future.hpp"
#include "boost/json.hpp"
#include "libs/api/e2b_auth.h"
#include "libs/core/host_port.h"
#include "libs/core/token.h"
#include "libs/http/client.h"
#include "libs/http/connect_codec.h"
#include "tools/corral/demo.h"

namespace corral::cli {
namespace {

namespace bhttp = boost::beast::http;

// One request to `http_address`, answered whole.
absl::StatusOr<http::FetchResult> Call(const std::string& http_address, http::Request request) {
  auto host_port = SplitHostPort(http_address);
  if (!host_port.ok()) return host_port.status();
  request.set(bhttp::field::host, http_address);
  boost::asio::io_context io;
  auto done =
      boost::asio::co_spawn(io,
                            http::Fetch(io.get_executor(), host_port->first, static_cast<uint16_t>(host_port->second),
                                        std::move(request), absl::Seconds(60)),
                            boost::asio::use_future);
  io.run();
  return done.get();
}

}  // namespace

int RunCodeDemo(const std::string& http_address) {
  std::cout << "\ndemo: the sandbox API — SandboxFusion's /run_code, posted as verl posts it\n";
  http::Request request{boost::beast::http::verb::post, "/run_code", 11};
  request.set(boost::beast::http::field::content_type, "application/json");
  request.body() = R"j({"compile_timeout": 10, "run_timeout": 10, "code": "print(int(input()) * 2)", "stdin": "21", )j"
                   R"j("memory_limit_MB": 1024, "language": "python", "files": {}, "fetch_files": []})j";
  const absl::Time start = absl::Now();
  auto reply = Call(http_address, std::move(request));
  if (!reply.ok() || reply->status != 200) {
    std::cerr << "demo: /run_code failed: "
              << (reply.ok() ? absl::StrCat("HTTP ", reply->status, " ", reply->body) : reply.status().ToString())
              << "\n";
    return 1;
  }
  boost::system::error_code ec;
  boost::json::value answer = boost::json::parse(reply->body, ec);
  const boost::json::object* o = ec ? nullptr : answer.if_object();
  const boost::json::value* run = o != nullptr ? o->if_contains("run_result") : nullptr;
  const boost::json::value* stdout_text =
      run != nullptr && run->is_object() ? run->as_object().if_contains("stdout") : nullptr;
  const std::string status = o != nullptr && o->contains("status") && o->at("status").is_string()
                                 ? std::string(o->at("status").as_string())
                                 : "?";
  const std::string out =
      stdout_text != nullptr && stdout_text->is_string() ? std::string(stdout_text->as_string()) : "";
  std::cout << absl::StrFormat(
      "  print(int(input()) * 2) with stdin 21 -> %s, %s, in %d ms (its own sandbox, leased)\n",
      absl::StripTrailingAsciiWhitespace(out), status, absl::ToInt64Milliseconds(absl::Now() - start));
  return status == "Success" && out == "42\n" ? 0 : 1;
}

int RunE2bDemo(const std::string& http_address, const std::string& secret_file) {
  std::cout << "\ndemo: the E2B API — a sandbox created, used and killed as the e2b SDK does it\n";
  auto signer = TokenSigner::FromKeyFile(secret_file);
  if (!signer.ok()) return 1;
  const std::string key = *api::E2bAuth(*std::move(signer)).MintApiKey("corral-up-demo");
  const absl::Time start = absl::Now();
  auto fail = [](const std::string& step, const absl::StatusOr<http::FetchResult>& r) {
    std::cerr << "demo: E2B " << step
              << " failed: " << (r.ok() ? absl::StrCat("HTTP ", r->status, " ", r->body) : r.status().ToString())
              << "\n";
    return 1;
  };
  http::Request create{bhttp::verb::post, "/v2/sandboxes", 11};
  create.set("X-API-KEY", key);
  create.set(bhttp::field::content_type, "application/json");
  create.body() = R"({"templateID":"base","timeout":60})";
  create.prepare_payload();
  auto created = Call(http_address, std::move(create));
  if (!created.ok() || created->status != 201) return fail("create", created);
  boost::system::error_code ec;
  boost::json::value sandbox = boost::json::parse(created->body, ec);
  if (ec || !sandbox.is_object()) return fail("create", created);
  const std::string id(sandbox.at("sandboxID").as_string());

  // process.Process/Start: one enveloped JSON message; the answer is a stream of them.
  const std::string message =
      R"j({"process":{"cmd":"/bin/bash","args":["-l","-c","echo hello from $(pwd)"]},"stdin":false})j";
  http::Request run{bhttp::verb::post, "/process.Process/Start", 11};
  run.set("E2b-Sandbox-Id", id);
  run.set("X-Access-Token", std::string(sandbox.at("envdAccessToken").as_string()));
  run.set(bhttp::field::content_type, "application/connect+json");
  run.set("Connect-Protocol-Version", "1");
  run.body() = http::connect::Envelope(message);
  run.prepare_payload();
  auto ran = Call(http_address, std::move(run));
  if (!ran.ok() || ran->status != 200) return fail("run", ran);
  std::string out;
  int64_t exit_code = -1;
  auto envelopes = http::connect::ReadEnvelopes(ran->body);
  for (const auto& [flags, json] : envelopes.ok() ? *envelopes : decltype(envelopes)::value_type()) {
    boost::json::value event = boost::json::parse(json, ec);
    if (ec || !event.is_object() || !event.as_object().contains("event")) continue;
    const boost::json::object& e = event.at("event").as_object();
    std::string chunk;
    if (e.contains("data") && e.at("data").as_object().contains("stdout") &&
        absl::Base64Unescape(std::string(e.at("data").at("stdout").as_string()), &chunk)) {
      out += chunk;
    }
    if (e.contains("end")) {
      const boost::json::object& end = e.at("end").as_object();
      exit_code = end.contains("exitCode") ? end.at("exitCode").to_number<int64_t>() : 0;
    }
  }
  const int64_t ms = absl::ToInt64Milliseconds(absl::Now() - start);

  http::Request kill{bhttp::verb::delete_, "/sandboxes/" + id, 11};
  kill.set("X-API-KEY", key);
  kill.prepare_payload();
  auto killed = Call(http_address, std::move(kill));
  if (!killed.ok() || killed->status != 204) return fail("kill", killed);
  std::cout << absl::StrFormat(
      "  sandbox %s: echo hello from $(pwd) -> \"%s\", exit %d; create to output in %d ms; killed\n", id,
      absl::StripTrailingAsciiWhitespace(out), exit_code, ms);
  return out == "hello from /home/user\n" && exit_code == 0 ? 0 : 1;
}

}  // namespace corral::cli
