#include "libs/http/prometheus_text.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"

namespace corral::http {
namespace {

using ::testing::HasSubstr;

TEST(PrometheusText, ParsesFamiliesLabelsAndSuffixedSamples) {
  auto parsed = ParsePrometheusText(
      "# HELP x_total Things.\n# TYPE x_total counter\nx_total{a=\"1\",b=\"q\\\"uote\"} 3\n"
      "# TYPE lat_seconds histogram\nlat_seconds_bucket{le=\"+Inf\"} 2\nlat_seconds_sum 0.5\nlat_seconds_count 2\n"
      "# TYPE g gauge\ng NaN\n");
  ASSERT_THAT(parsed, IsOk());
  EXPECT_THAT(parsed->Value("x_total", {{"a", "1"}, {"b", "q\"uote"}}), IsOkAndHolds(3));
  EXPECT_THAT(parsed->Value("lat_seconds_count"), IsOkAndHolds(2));
  EXPECT_TRUE(std::isnan(*parsed->Value("g")));
  EXPECT_EQ(parsed->types.at("lat_seconds"), "histogram");
  EXPECT_THAT(parsed->Value("x_total"), StatusIs(absl::StatusCode::kNotFound));
}

TEST(PrometheusText, RejectsGarbageNamingTheLine) {
  EXPECT_THAT(ParsePrometheusText("# TYPE a gauge\na{x=\"1\" 2\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("line 2")));
  EXPECT_THAT(ParsePrometheusText("undeclared 1\n"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("TYPE")));
  EXPECT_THAT(ParsePrometheusText("# TYPE a gauge\na one\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad value")));
  EXPECT_THAT(ParsePrometheusText("# TYPE a weird\n"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParsePrometheusText("# TYPE a gauge\n{x=\"1\"} 2\n"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParsePrometheusText("# TYPE a gauge\na{x=\"1\",x=\"2\"} 2\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("duplicate label")));
}

}  // namespace
}  // namespace corral::http
