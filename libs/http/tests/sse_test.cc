#include "libs/http/sse.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"

namespace corral::http {
namespace {

std::vector<std::string> Data(const std::vector<SseEvent>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) out.push_back(e.data);
  return out;
}

TEST(SseParserTest, EventsSplitAnywhereAcrossFeedsComeOutWhole) {
  SseParser p;
  const std::string stream = ": keepalive\n\ndata: {\"a\":1}\n\ndata: [DONE]\n\n";
  std::vector<std::string> got;
  for (char c : stream) {  // one byte at a time: the worst split there is
    auto events = p.Feed(std::string(1, c));
    ASSERT_THAT(events, IsOk());
    for (auto& d : Data(*events)) got.push_back(d);
  }
  EXPECT_THAT(got, ::testing::ElementsAre("{\"a\":1}", "[DONE]"));
}

TEST(SseParserTest, CrLfAndCrLineEndsMultiLineDataAndEventNames) {
  SseParser p;
  auto events = p.Feed("event: delta\r\ndata: one\r\ndata:two\r\r\ndata: x\n\n");
  ASSERT_THAT(events, IsOk());
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[0].event, "delta");
  EXPECT_EQ((*events)[0].data, "one\ntwo");
  EXPECT_EQ((*events)[1].data, "x");
}

TEST(SseParserTest, CommentsAloneProduceNoEventAndOversizeEventsAreRefused) {
  SseParser p(16);
  auto events = p.Feed(": ping\n\n: ping\n\n");
  ASSERT_THAT(events, IsOk());
  EXPECT_TRUE(events->empty());
  EXPECT_THAT(p.Feed("data: 0123456789abcdefghij"), StatusIs(absl::StatusCode::kResourceExhausted));
}

}  // namespace
}  // namespace corral::http
