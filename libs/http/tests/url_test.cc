#include "libs/http/url.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"

namespace corral::http {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

TEST(ParseTargetTest, SplitsPathAndDecodesQuery) {
  auto t = ParseTarget("/api/episode?id=b1%3Ag0%3Ae2&note=a+b&flag&x=1&x=2");
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->path, "/api/episode");
  EXPECT_THAT(t->query, ElementsAre(Pair("flag", ""), Pair("id", "b1:g0:e2"), Pair("note", "a b"), Pair("x", "2")));
}

TEST(ParseTargetTest, PathWithoutQueryKeepsPlusSigns) {
  auto t = ParseTarget("/a+b/%7Ec#frag");
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->path, "/a+b/~c");
  EXPECT_TRUE(t->query.empty());
}

TEST(ParseTargetTest, RefusesGarbage) {
  EXPECT_THAT(ParseTarget(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseTarget("http://x/"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseTarget("/a%2"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseTarget("/a?x=%zz"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseTarget("/a?x=%"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(PercentDecodeTest, DecodesBytes) {
  EXPECT_THAT(PercentDecode("%00%ff%41", false), IsOkAndHolds(std::string("\0\xff"
                                                                          "A",
                                                                          3)));
  EXPECT_THAT(PercentDecode("a+b", false), IsOkAndHolds(std::string("a+b")));
}

TEST(ParseHttpUrlTest, SplitsHostPortAndPath) {
  auto u = ParseHttpUrl("http://10.0.0.5:8000/v1/");
  ASSERT_THAT(u, IsOk());
  EXPECT_EQ(u->host, "10.0.0.5");
  EXPECT_EQ(u->port, 8000);
  EXPECT_EQ(u->path, "/v1");
  EXPECT_EQ(u->authority(), "10.0.0.5:8000");
  u = ParseHttpUrl("http://[::1]:80");
  ASSERT_THAT(u, IsOk());
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->path, "");
  EXPECT_EQ(u->authority(), "[::1]:80");
}

TEST(ParseHttpUrlTest, RefusesWhatIsNotHttpHostPortNamingIt) {
  for (const char* bad : {"", "https://a:1", "http://a", "http://a:0", "http://a:99999", "http://:80/", "a:80"}) {
    EXPECT_THAT(ParseHttpUrl(bad, "upstream"),
                StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("upstream")))
        << bad;
  }
}

TEST(ParseUrlTest, TakesEitherSchemeWithItsDefaultPortAndKeepsTheQuery) {
  auto u = ParseUrl("https://auth.docker.io/token?service=registry.docker.io&scope=x#frag");
  ASSERT_THAT(u, IsOk());
  EXPECT_TRUE(u->tls);
  EXPECT_EQ(u->host, "auth.docker.io");
  EXPECT_EQ(u->port, 443);
  EXPECT_FALSE(u->explicit_port);
  EXPECT_EQ(u->target, "/token?service=registry.docker.io&scope=x");
  EXPECT_EQ(u->ToString(), "https://auth.docker.io:443/token?service=registry.docker.io&scope=x");
  u = ParseUrl("http://[::1]:5000?q=1");
  ASSERT_THAT(u, IsOk());
  EXPECT_FALSE(u->tls);
  EXPECT_EQ(u->port, 5000);
  EXPECT_TRUE(u->explicit_port);
  EXPECT_EQ(u->target, "/?q=1");
  EXPECT_EQ(u->authority(), "[::1]:5000");
  EXPECT_EQ(ParseUrl("http://registry.local").value().port, 80);
}

TEST(ParseUrlTest, RefusesOtherSchemesAndMissingHostsNamingTheText) {
  for (const char* bad : {"", "ftp://a/b", "registry.local/x", "https://", "http://:80/", "http://a:99999"}) {
    EXPECT_THAT(ParseUrl(bad), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
  EXPECT_THAT(ParseUrl("ftp://a/b"), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("ftp://a/b")));
}

TEST(ParseUrlTest, ReadsWhatRfc3986AllowsUserinfoAndPercentEscapedHosts) {
  auto u = ParseUrl("http://user:secret@registry.local:5000/v2/");
  ASSERT_THAT(u, IsOk());
  EXPECT_EQ(u->host, "registry.local");
  EXPECT_EQ(u->port, 5000);
  EXPECT_EQ(u->target, "/v2/");
  u = ParseUrl("https://reg%2dlocal/");
  ASSERT_THAT(u, IsOk());
  EXPECT_EQ(u->host, "reg-local");
  EXPECT_THAT(ParseUrl("http://a b/"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseUrl("http://a:8x/"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ParseTargetTest, RefusesWhatAnOriginFormTargetMayNotHold) {
  EXPECT_THAT(ParseTarget("/a b"), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("/a b")));
  EXPECT_THAT(ParseTarget("//host/path"), IsOk());  // a path that starts with two slashes is still a path
  auto t = ParseTarget("/a?&&k=v&");
  ASSERT_THAT(t, IsOk());
  EXPECT_THAT(t->query, ElementsAre(Pair("k", "v")));
}

TEST(ParseHttpUrlTest, IsParseUrlRestrictedToHttpWithAPortAndNoQuery) {
  EXPECT_THAT(ParseHttpUrl("http://a:80/v1?x=1"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseHttpUrl("http://a:80/v1"), IsOk());
}

}  // namespace
}  // namespace corral::http
