// The E2B wire's plain parts: the Connect protocol's envelopes and errors, and multipart uploads as undici's
// FormData sends them — garbage refused, never a crash.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/http/connect_codec.h"
#include "services/sandbox_api/e2b/multipart.h"

namespace corral::sandbox_api {
namespace {

using ::testing::HasSubstr;

TEST(ConnectCodecTest, EnvelopesAreFlagLengthAndJson) {
  const std::string e = http::connect::Envelope(R"({"event":{"start":{"pid":100}}})");
  ASSERT_EQ(e.size(), 5u + 31u);
  EXPECT_EQ(e.substr(0, 5), std::string("\x00\x00\x00\x00\x1f", 5));
  EXPECT_EQ(http::connect::EndOfStream(absl::OkStatus()), std::string("\x02\x00\x00\x00\x02{}", 7));
  EXPECT_THAT(http::connect::EndOfStream(absl::NotFoundError("no pid 9")),
              HasSubstr(R"({"error":{"code":"not_found","message":"no pid 9"}})"));
  EXPECT_EQ(*http::connect::OnlyMessage(e), R"({"event":{"start":{"pid":100}}})");
  EXPECT_FALSE(http::connect::OnlyMessage("").ok());
  EXPECT_FALSE(http::connect::OnlyMessage(e + e).ok());                         // one message only
  EXPECT_FALSE(http::connect::OnlyMessage(e.substr(0, e.size() - 1)).ok());     // truncated
  EXPECT_FALSE(http::connect::OnlyMessage("\x01" + e.substr(1)).ok());          // compressed
  EXPECT_EQ(http::connect::HttpStatus(absl::StatusCode::kAlreadyExists), 409);  // the SDK's makeDir() -> false
  EXPECT_EQ(http::connect::HttpStatus(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(std::string(http::connect::Code(absl::StatusCode::kUnauthenticated)), "unauthenticated");
}

TEST(MultipartTest, ReadsUndiciFormDataAndRefusesGarbage) {
  const std::string ct = "multipart/form-data; boundary=----formdata-undici-0046";
  const std::string body =
      "------formdata-undici-0046\r\n"
      "Content-Disposition: form-data; name=\"file\"; filename=\"/home/user/a.txt\"\r\n"
      "Content-Type: application/octet-stream\r\n\r\n"
      "hello\r\n--not-the-boundary\r\n"
      "\r\n------formdata-undici-0046\r\n"
      "Content-Disposition: form-data; name=\"file\"; filename=\"rel.txt\"\r\n\r\n"
      "\x01\x02\r\n"
      "------formdata-undici-0046--\r\n";
  auto boundary = MultipartBoundary(ct);
  ASSERT_TRUE(boundary.ok());
  auto parts = ParseMultipart(body, *boundary);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[0].name, "file");
  EXPECT_EQ((*parts)[0].filename, "/home/user/a.txt");
  EXPECT_EQ((*parts)[0].data, "hello\r\n--not-the-boundary\r\n");
  EXPECT_EQ((*parts)[1].filename, "rel.txt");
  EXPECT_EQ((*parts)[1].data, "\x01\x02");

  EXPECT_FALSE(MultipartBoundary("application/json").ok());
  EXPECT_FALSE(MultipartBoundary("multipart/form-data").ok());
  for (size_t cut = 0; cut < body.size() - 4; cut += 7) {
    EXPECT_FALSE(ParseMultipart(body.substr(0, cut), *boundary).ok()) << cut;  // every truncation refused
  }
  EXPECT_FALSE(ParseMultipart("------formdata-undici-0046\r\nno headers end", *boundary).ok());
}

}  // namespace
}  // namespace corral::sandbox_api
