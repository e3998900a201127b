// GoogleMock matchers for absl::Status and absl::StatusOr<T>: IsOk(), StatusIs(code[, message]),
// IsOkAndHolds(matcher). Tests assert the specific error, never just "not ok".
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace corral::testing_internal {
inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}
}  // namespace corral::testing_internal

namespace corral {

MATCHER(IsOk, negation ? "is not OK" : "is OK") {
  const absl::Status& s = ::corral::testing_internal::GetStatus(arg);
  if (!s.ok()) *result_listener << "status is " << s;
  return s.ok();
}

MATCHER_P(StatusIs, code, "has status code " + ::testing::PrintToString(code)) {
  const absl::Status& s = ::corral::testing_internal::GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code;
}

MATCHER_P2(StatusIs, code, message_matcher,
           "has status code " + ::testing::PrintToString(code) + " and a message that " +
               ::testing::DescribeMatcher<std::string>(message_matcher)) {
  const absl::Status& s = ::corral::testing_internal::GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code && ::testing::ExplainMatchResult(message_matcher, std::string(s.message()), result_listener);
}

MATCHER_P(IsOkAndHolds, matcher,
          negation ? "is not OK or holds a value that does not match" : "is OK and holds a matching value") {
  if (!arg.ok()) {
    *result_listener << "status is " << arg.status();
    return false;
  }
  return ::testing::ExplainMatchResult(matcher, *arg, result_listener);
}

}  // namespace corral
