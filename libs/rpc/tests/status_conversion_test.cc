#include "libs/rpc/status_conversion.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"

namespace corral {
namespace {

TEST(StatusConversion, EveryCanonicalCodeRoundTripsWithItsMessage) {
  for (int code = 1; code <= 16; ++code) {
    absl::Status original(static_cast<absl::StatusCode>(code), "what went wrong");
    grpc::Status wire = ToGrpcStatus(original);
    EXPECT_EQ(static_cast<int>(wire.error_code()), code);
    EXPECT_EQ(wire.error_message(), "what went wrong");
    EXPECT_EQ(FromGrpcStatus(wire), original);
  }
}

TEST(StatusConversion, OkMapsToOkAndSpecificCodesLineUp) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_THAT(FromGrpcStatus(grpc::Status::OK), IsOk());
  EXPECT_EQ(ToGrpcStatus(absl::ResourceExhaustedError("full")).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(ToGrpcStatus(absl::UnavailableError("down")).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(FromGrpcStatus(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "no")),
              StatusIs(absl::StatusCode::kPermissionDenied, "no"));
}

TEST(StatusConversion, OutOfRangeWireCodeBecomesUnknown) {
  EXPECT_THAT(FromGrpcStatus(grpc::Status(static_cast<grpc::StatusCode>(42), "odd")),
              StatusIs(absl::StatusCode::kUnknown, "odd"));
}

}  // namespace
}  // namespace corral
