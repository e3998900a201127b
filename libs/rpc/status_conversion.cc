#include "libs/rpc/status_conversion.h"

#include <string>

namespace corral {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  int code = static_cast<int>(status.error_code());
  // gRPC reserves values above UNAUTHENTICATED (16) for nothing today; anything unknown is UNKNOWN.
  if (code < 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) code = 2;
  return absl::Status(static_cast<absl::StatusCode>(code), status.error_message());
}

}  // namespace corral
