// The ratelimiter integration tests' fixture: corral-ratelimiter started as a real process on loopback, clients of
// the real client library, and a load of permit holders that counts how many hold at once.
#pragma once

#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "corral/v1/ratelimit.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/api/proto_time.h"
#include "libs/core/testing/status_matchers.h"
#include "libs/core/token.h"
#include "libs/http/prometheus_text.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/channel.h"
#include "libs/rpc/status_conversion.h"
#include "services/ratelimiter/client/ratelimit_client.h"
#include "tests/support/subprocess.h"

namespace corral::limiter_test {

using ratelimiter::ClientOptions;
using ratelimiter::PermitRequest;
using ratelimiter::RateLimitClient;
using ::testing::HasSubstr;

// Clients acquiring, holding for `hold` and releasing one permit of `limit` in a loop, counting how many hold at
// once (never more than the limit, restarts included) and how many grants came after `restarted` was set.
struct PermitLoad {
  PermitLoad(std::vector<std::unique_ptr<RateLimitClient>>& clients, std::string limit, absl::Duration hold)
      : after_restart(clients.size()) {
    for (size_t i = 0; i < clients.size(); ++i) {
      workers.emplace_back([this, &client = *clients[i], limit, hold, i] {
        while (!stop) {
          auto permit = client.Acquire({.limit = limit, .wait_timeout = absl::Seconds(20)});
          if (!permit.ok()) continue;  // UNAVAILABLE while the limiter is down: try again
          int now = ++holders;
          int seen = max_holders;
          while (now > seen && !max_holders.compare_exchange_weak(seen, now)) {
          }
          ++grants;
          if (restarted) ++after_restart[i];
          absl::SleepFor(hold);  // the "work" done under the permit
          --holders;             // stop counting before the permit goes back
          (void)permit->Release();
        }
      });
    }
  }
  ~PermitLoad() { Stop(); }
  void Stop() {
    stop = true;
    for (auto& w : workers) {
      if (w.joinable()) w.join();
    }
  }
  int grants_after_restart() const {
    int total = 0;
    for (const auto& g : after_restart) total += g;
    return total;
  }

  std::atomic<int> holders = 0, max_holders = 0, grants = 0;
  std::atomic<bool> restarted = false, stop = false;
  std::vector<std::atomic<int>> after_restart;
  std::vector<std::thread> workers;
};

class RateLimiterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTestDir();
    token_ = MintClusterToken(*TokenSigner::FromKeyFile(testing::WriteSecretFile(dir_)));
  }

  void Start(const std::string& limits_yaml, std::vector<std::string> extra = {},
             const std::string& listen = "127.0.0.1:0") {
    std::ofstream(dir_ + "/limiter.yaml") << "limits:\n" << limits_yaml;
    std::vector<std::string> args = {"--config=" + dir_ + "/limiter.yaml",
                                     insecure_ ? "--insecure" : "--secret-file=" + dir_ + "/secret",
                                     "--grpc-listen=" + listen, "--metrics-listen=127.0.0.1:0"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto service = testing::StartService(CORRAL_RATELIMITER, args, dir_, "ratelimiter");
    ASSERT_THAT(service, IsOk());
    service_.reset();
    service_.emplace(*std::move(service));
    ChannelOptions options;
    options.retry_unavailable = false;
    stub_ = v1::RateLimiter::NewStub(*MakeChannel(service_->ready.grpc, options));
  }

  std::unique_ptr<RateLimitClient> Client(const std::string& id) {
    ClientOptions options;
    options.address = service_->ready.grpc;
    options.token = token_;
    options.client_id = id;
    options.max_reconnect_backoff = absl::Milliseconds(200);
    auto client = RateLimitClient::Connect(options);
    EXPECT_THAT(client, IsOk());
    return client.ok() ? *std::move(client) : nullptr;
  }

  absl::StatusOr<v1::GetStatusResponse> Status() {
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    AttachBearer(context, token_);
    v1::GetStatusResponse response;
    grpc::Status s = stub_->GetStatus(&context, v1::GetStatusRequest(), &response);
    if (!s.ok()) return FromGrpcStatus(s);
    return response;
  }

  // One limit's status row; nullopt when the call fails or the limit is unknown.
  std::optional<v1::LimitStatus> Row(const std::string& limit) {
    auto status = Status();
    if (!status.ok()) return std::nullopt;
    for (const auto& l : status->limits()) {
      if (l.limit() == limit) return l;
    }
    return std::nullopt;
  }
  int64_t InUse(const std::string& limit) {
    auto row = Row(limit);
    return row ? row->in_use() : -1;
  }
  int64_t Waiters(const std::string& limit) {
    auto row = Row(limit);
    return row ? static_cast<int64_t>(row->waiters()) : -1;
  }

  std::string dir_;
  std::string token_;
  bool insecure_ = false;  // --insecure (a new random signing key every start) instead of --secret-file
  std::optional<testing::RunningService> service_;
  std::unique_ptr<v1::RateLimiter::Stub> stub_;
};

}  // namespace corral::limiter_test
