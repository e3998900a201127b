#include "libs/rpc/channel.h"

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/channel_arguments.h"
#include "libs/core/status_macros.h"

namespace corral {
namespace {

// Applies to every method of every service on the channel (an empty name matches all).
constexpr char kRetryServiceConfig[] = R"({
  "methodConfig": [{
    "name": [{}],
    "retryPolicy": {
      "maxAttempts": 4,
      "initialBackoff": "0.05s",
      "maxBackoff": "1s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]
})";

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& target, const ChannelOptions& options) {
  if (target.empty()) return absl::InvalidArgumentError("empty service address; expected HOST:PORT");
  CORRAL_ASSIGN_OR_RETURN(auto credentials, MakeChannelCredentials(options.tls));
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_time)));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_timeout)));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  if (options.own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (options.retry_unavailable) {
    args.SetInt(GRPC_ARG_ENABLE_RETRIES, 1);
    args.SetServiceConfigJSON(kRetryServiceConfig);
  } else {
    args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  }
  return grpc::CreateCustomChannel(target, credentials, args);
}

void SetDeadline(grpc::ClientContext& context, absl::Duration timeout) {
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

}  // namespace corral
