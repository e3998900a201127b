// google.protobuf.Duration / Timestamp ↔ absl::Duration / absl::Time.
#pragma once

#include "absl/time/time.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/timestamp.pb.h"

namespace corral {

absl::Duration FromProto(const google::protobuf::Duration& d);
absl::Time FromProto(const google::protobuf::Timestamp& t);
void ToProto(absl::Duration d, google::protobuf::Duration* out);
void ToProto(absl::Time t, google::protobuf::Timestamp* out);

}  // namespace corral
