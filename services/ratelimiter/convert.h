// proto ↔ core conversions for the ratelimiter's gRPC adapter (and its client library and CLI).
#pragma once

#include "corral/v1/ratelimit.pb.h"
#include "libs/api/proto_time.h"
#include "services/ratelimiter/limiter.h"

namespace corral::ratelimiter {

// The time conversions join the overload set of the ones below.
using ::corral::FromProto;
using ::corral::ToProto;

LimitSpec FromProto(const v1::Limit& limit);
void ToProto(const LimitSpec& spec, v1::Limit* out);
void ToProto(const Grant& grant, v1::AcquireResponse* out);
void ToProto(const Grant& grant, v1::Lease* out);
// INVALID_ARGUMENT for an explicit non-positive lease_ttl (unset means the default).
absl::StatusOr<AcquireParams> FromProto(const v1::AcquireRequest& request);
AdjustParams FromProto(const v1::AdjustRequest& request);
void ToProto(const LimiterStatus& status, v1::GetStatusResponse* out);
void ToProto(const absl::Status& status, v1::CallStatus* out);

}  // namespace corral::ratelimiter
