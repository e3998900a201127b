// `corral up --demo`'s sandbox API part: verl's SandboxFusion request, answered from a leased sandbox.
#include <iostream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "boost/asio/co_spawn.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/use_future.hpp"
#include "boost/json.hpp"
#include "libs/core/host_port.h"
#include "libs/http/client.h"
#include "tools/corral/demo.h"

namespace corral::cli {

int RunCodeDemo(const std::string& http_address) {
  std::cout << "\ndemo: the sandbox API — SandboxFusion's /run_code, posted as verl posts it\n";
  auto host_port = SplitHostPort(http_address);
  if (!host_port.ok()) return 1;
  http::Request request{boost::beast::http::verb::post, "/run_code", 11};
  request.set(boost::beast::http::field::host, http_address);
  request.set(boost::beast::http::field::content_type, "application/json");
  request.body() = R"j({"compile_timeout": 10, "run_timeout": 10, "code": "print(int(input()) * 2)", "stdin": "21", )j"
                   R"j("memory_limit_MB": 1024, "language": "python", "files": {}, "fetch_files": []})j";
  boost::asio::io_context io;
  const absl::Time start = absl::Now();
  auto done =
      boost::asio::co_spawn(io,
                            http::Fetch(io.get_executor(), host_port->first, static_cast<uint16_t>(host_port->second),
                                        std::move(request), absl::Seconds(60)),
                            boost::asio::use_future);
  io.run();
  auto reply = done.get();
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

}  // namespace corral::cli
