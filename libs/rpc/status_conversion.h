// The one place absl::Status and grpc::Status are mapped onto each other. The canonical codes share
// their numbering, so the mapping is lossless for code and message.
#pragma once

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace corral {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace corral
