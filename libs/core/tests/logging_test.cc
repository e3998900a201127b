#include "libs/core/logging.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"

namespace corral {
namespace {

TEST(Logging, JsonLineEscapesQuotesNewlinesAndControlBytes) {
  EXPECT_EQ(FormatJsonLogLine("2026-11-22T00:00:00Z", "info", "ratelimiter", "say \"hi\"\n\x01\\"),
            R"({"ts":"2026-11-22T00:00:00Z","level":"info","service":"ratelimiter","msg":"say \"hi\"\n\u0001\\"})");
}

TEST(Logging, UnknownLevelOrFormatIsRejected) {
  EXPECT_THAT(InitLogging("t", {.level = "loud", .format = "text"}),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("'loud'")));
  EXPECT_THAT(InitLogging("t", {.level = "info", .format = "xml"}),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("text or json")));
  EXPECT_THAT(InitLogging("t", {.level = "debug", .format = "json"}), IsOk());
  EXPECT_THAT(InitLogging("t", {.level = "off", .format = "text"}), IsOk());
}

}  // namespace
}  // namespace corral
