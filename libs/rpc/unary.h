// Ends a unary callback call with a status — its response already filled in when the status is OK. Handlers
// that do several fallible steps write them as one lambda with the status macros:
//   return FinishUnary(ctx, [&]() -> absl::Status {
//     CORRAL_ASSIGN_OR_RETURN(auto x, Step());
//     resp->set_x(*x);
//     return absl::OkStatus();
//   }());
#pragma once

#include "absl/status/status.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "libs/rpc/status_conversion.h"

namespace corral {

inline grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* ctx, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace corral
