// A connection to a corral-sandbox-host for the `corral sandbox` commands.
#pragma once

#include <memory>
#include <string>

#include "corral/v1/sandbox.grpc.pb.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/channel.h"
#include "tools/corral/connect_flags.h"
#include "tools/corral/output.h"

namespace corral::cli {

struct Client {
  std::unique_ptr<v1::SandboxHost::Stub> stub;
  std::string token;
  double timeout_s;

  void Prepare(grpc::ClientContext& ctx, absl::Duration timeout) const {
    SetDeadline(ctx, timeout);
    AttachBearer(ctx, token);
  }
};

inline absl::StatusOr<Client> Connect(const ConnectFlags& flags) {
  auto token = flags.BearerToken();
  if (!token.ok()) return token.status();
  auto channel = MakeChannel(flags.address, flags.Channel());
  if (!channel.ok()) return channel.status();
  return Client{v1::SandboxHost::NewStub(*channel), *token, flags.timeout_s};
}

// `corral sandbox cp SRC DST`: files and directories, docker-cp style.
int RunCopy(const ConnectFlags& flags, const std::string& src, const std::string& dst);

}  // namespace corral::cli
