#include "libs/api/proto_time.h"

namespace corral {

absl::Duration FromProto(const google::protobuf::Duration& d) {
  return absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
}

absl::Time FromProto(const google::protobuf::Timestamp& t) {
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

void ToProto(absl::Duration d, google::protobuf::Duration* out) {
  if (d == absl::InfiniteDuration()) d = absl::Seconds(315'576'000'000);  // the largest Duration proto allows
  int64_t seconds = absl::IDivDuration(d, absl::Seconds(1), &d);
  out->set_seconds(seconds);
  out->set_nanos(static_cast<int32_t>(absl::ToInt64Nanoseconds(d)));
}

void ToProto(absl::Time t, google::protobuf::Timestamp* out) {
  int64_t seconds = absl::ToUnixSeconds(t);
  out->set_seconds(seconds);
  out->set_nanos(static_cast<int32_t>(absl::ToInt64Nanoseconds(t - absl::FromUnixSeconds(seconds))));
}

}  // namespace corral
