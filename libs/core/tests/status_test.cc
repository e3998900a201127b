#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/status_macros.h"
#include "libs/core/testing/status_matchers.h"

namespace corral {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  CORRAL_ASSIGN_OR_RETURN(int half, Half(x));
  CORRAL_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

absl::Status CheckEven(int x, int* calls) {
  ++*calls;
  return x % 2 == 0 ? absl::OkStatus() : absl::OutOfRangeError("not even");
}

absl::Status BothEven(int a, int b, int* calls) {
  CORRAL_RETURN_IF_ERROR(CheckEven(a, calls));
  CORRAL_RETURN_IF_ERROR(CheckEven(b, calls));
  return absl::OkStatus();
}

TEST(StatusMacros, AssignOrReturnPassesValuesAndStopsAtFirstError) {
  EXPECT_THAT(Quarter(8), IsOkAndHolds(2));
  EXPECT_THAT(Quarter(6), StatusIs(absl::StatusCode::kInvalidArgument, "odd"));
  EXPECT_THAT(Quarter(3), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(StatusMacros, ReturnIfErrorEvaluatesOnceAndShortCircuits) {
  int calls = 0;
  EXPECT_THAT(BothEven(2, 4, &calls), IsOk());
  EXPECT_EQ(calls, 2);
  calls = 0;
  EXPECT_THAT(BothEven(1, 4, &calls), StatusIs(absl::StatusCode::kOutOfRange, "not even"));
  EXPECT_EQ(calls, 1);
}

TEST(StatusMatchers, DistinguishCodesMessagesAndValues) {
  absl::Status not_found = absl::NotFoundError("limit 'cpu' not found");
  EXPECT_THAT(not_found, Not(IsOk()));
  EXPECT_THAT(not_found, StatusIs(absl::StatusCode::kNotFound, HasSubstr("cpu")));
  EXPECT_THAT(not_found, Not(StatusIs(absl::StatusCode::kNotFound, HasSubstr("gpu"))));
  EXPECT_THAT(not_found, Not(StatusIs(absl::StatusCode::kInternal)));
  absl::StatusOr<int> value = 7;
  EXPECT_THAT(value, IsOkAndHolds(7));
  EXPECT_THAT(value, Not(IsOkAndHolds(8)));
  EXPECT_THAT(absl::StatusOr<int>(not_found), Not(IsOkAndHolds(7)));
  EXPECT_THAT(value, IsOk());
}

}  // namespace
}  // namespace corral
