// Client channels to Corral services: TLS from config, keepalive so a dead peer is noticed, and a retry
// policy that transparently retries UNAVAILABLE with backoff. Every call still needs its own deadline:
// use SetDeadline on each grpc::ClientContext.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "libs/rpc/tls.h"

namespace corral {

struct ChannelOptions {
  TlsConfig tls;
  bool retry_unavailable = true;  // up to 4 attempts, 50 ms → 1 s exponential backoff
  absl::Duration keepalive_time = absl::Seconds(20);
  absl::Duration keepalive_timeout = absl::Seconds(10);
  // gRPC shares one connection among channels to the same address; true gives this channel its own.
  bool own_connection = false;
};

// INVALID_ARGUMENT for an empty target; TLS errors from MakeChannelCredentials.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& target,
                                                           const ChannelOptions& options = {});

// Sets the call's deadline to now + timeout.
void SetDeadline(grpc::ClientContext& context, absl::Duration timeout);

}  // namespace corral
