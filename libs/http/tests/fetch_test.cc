// The blocking fetch against a real HTTP server on loopback (its TLS side is exercised by the image pull test,
// against a registry with a private CA).
#include "libs/http/fetch.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "libs/http/server.h"

namespace corral::http {
namespace {

using ::testing::HasSubstr;

class FetchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<HttpServer>(ServerLimits{}, [](Request& req, Responder& res) -> asio::awaitable<void> {
      if (req.target() == "/blob") {
        co_await res.Send(200, "application/octet-stream", std::string(100000, 'x'));
      } else if (req.target() == "/echo-agent") {
        const std::string agent(req[beast::http::field::user_agent]);
        co_await res.Send(200, "text/plain", agent + "|" + std::string(req["x-probe"]));
      } else {
        co_await res.Send(404, "application/json", "{\"errors\":[{\"code\":\"NAME_UNKNOWN\"}]}");
      }
    });
    auto port = server_->Listen("127.0.0.1:0");
    ASSERT_THAT(port, IsOk());
    base_ = absl::StrCat("http://127.0.0.1:", *port);
  }

  absl::StatusOr<FetchReply> Get(const std::string& path, std::string* body, FetchOptions options = {},
                                 std::vector<std::pair<std::string, std::string>> headers = {}) {
    absl::StatusOr<Url> url = ParseUrl(base_ + path);
    if (!url.ok()) return url.status();
    return Fetch(*url, headers, options, [body](absl::string_view piece) {
      body->append(piece.data(), piece.size());
      return absl::OkStatus();
    });
  }

  std::unique_ptr<HttpServer> server_;
  std::string base_;
};

TEST_F(FetchTest, ABodyComesThroughTheSinkWithStatusHeadersAndTheRequestsHeaders) {
  std::string body;
  auto reply = Get("/blob", &body);
  ASSERT_THAT(reply, IsOk());
  EXPECT_EQ(reply->status, 200);
  EXPECT_EQ(reply->headers.at("content-type"), "application/octet-stream");
  EXPECT_EQ(body, std::string(100000, 'x'));
  body.clear();
  reply = Get("/echo-agent", &body, FetchOptions{.user_agent = "probe-agent"}, {{"X-Probe", "yes"}});
  ASSERT_THAT(reply, IsOk());
  EXPECT_EQ(body, "probe-agent|yes");
}

TEST_F(FetchTest, AnErrorStatusIsAReplyWithItsBodyAsideAndNothingInTheSink) {
  std::string body;
  auto reply = Get("/missing", &body);
  ASSERT_THAT(reply, IsOk());
  EXPECT_EQ(reply->status, 404);
  EXPECT_THAT(reply->error_body, HasSubstr("NAME_UNKNOWN"));
  EXPECT_EQ(body, "");
}

TEST_F(FetchTest, ABodyOverMaxBytesAndASinkThatRefusesEndTheFetch) {
  std::string body;
  auto reply = Get("/blob", &body, FetchOptions{.max_bytes = 1000});
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(reply.status().message()), HasSubstr("GET "));
  auto url = ParseUrl(base_ + "/blob");
  ASSERT_THAT(url, IsOk());
  reply = Fetch(*url, {}, {}, [](absl::string_view) { return absl::DataLossError("the sink is full"); });
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(FetchTest, NobodyListeningIsUnavailable) {
  server_.reset();  // its listening socket is closed
  std::string body;
  auto reply = Get("/blob", &body, FetchOptions{.timeout = absl::Seconds(2)});
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kUnavailable) << reply.status();
}

}  // namespace
}  // namespace corral::http
