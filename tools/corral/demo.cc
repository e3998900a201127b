#include "tools/corral/demo.h"

#include <atomic>
#include <iostream>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/status_conversion.h"
#include "services/ratelimiter/client/ratelimit_client.h"

namespace corral::cli {
namespace {

constexpr char kDemoLimit[] = "demo_gpu";
constexpr int kWorkers = 6;
constexpr int kPermits = 2;

absl::Status CallLimits(v1::RateLimiter::Stub& stub, const std::string& token, bool create) {
  grpc::ClientContext context;
  SetDeadline(context, absl::Seconds(10));
  AttachBearer(context, token);
  if (create) {
    v1::CreateLimitRequest request;
    request.mutable_limit()->set_name(kDemoLimit);
    request.mutable_limit()->set_kind(v1::LIMIT_KIND_CONCURRENCY);
    request.mutable_limit()->set_permits(kPermits);
    v1::Limit response;
    return FromGrpcStatus(stub.CreateLimit(&context, request, &response));
  }
  v1::DeleteLimitRequest request;
  request.set_name(kDemoLimit);
  request.set_force(true);
  v1::DeleteLimitResponse response;
  return FromGrpcStatus(stub.DeleteLimit(&context, request, &response));
}

}  // namespace

int RunRateLimiterDemo(const std::string& address, const std::string& token) {
  std::cout << "\ndemo: " << kWorkers << " workers share a " << kPermits << "-permit limit '" << kDemoLimit
            << "' (each holds it 300 ms)\n";
  auto channel = MakeChannel(address);
  if (!channel.ok()) return 1;
  auto stub = v1::RateLimiter::NewStub(*channel);
  if (absl::Status s = CallLimits(*stub, token, /*create=*/true); !s.ok() && !absl::IsAlreadyExists(s)) {
    std::cerr << "demo: cannot create the demo limit: " << s << "\n";
    return 1;
  }
  std::vector<std::unique_ptr<ratelimiter::RateLimitClient>> clients;
  for (int i = 0; i < kWorkers; ++i) {
    ratelimiter::ClientOptions options;
    options.address = address;
    options.token = token;
    options.client_id = absl::StrFormat("demo-worker-%d", i);
    auto client = ratelimiter::RateLimitClient::Connect(options);
    if (!client.ok()) {
      std::cerr << "demo: " << client.status() << "\n";
      return 1;
    }
    clients.push_back(*std::move(client));
  }
  absl::Mutex mu;
  std::vector<int> order;
  std::atomic<int> holders = 0, max_holders = 0, failures = 0;
  const absl::Time start = absl::Now();
  std::vector<std::thread> workers;
  for (int i = 0; i < kWorkers; ++i) {
    // Staggered by a few ms so arrival order is the worker number.
    absl::SleepFor(absl::Milliseconds(5));
    workers.emplace_back([&, i] {
      auto permit = clients[i]->Acquire({.limit = kDemoLimit, .wait_timeout = absl::Seconds(30)});
      if (!permit.ok()) {
        ++failures;
        return;
      }
      int now = ++holders;
      for (int seen = max_holders; now > seen && !max_holders.compare_exchange_weak(seen, now);) {
      }
      {
        absl::MutexLock lock(&mu);
        order.push_back(i);
        std::cout << absl::StrFormat("  t=%.2fs  worker %d granted (%d holder(s) now)\n",
                                     absl::ToDoubleSeconds(absl::Now() - start), i, now)
                  << std::flush;
      }
      absl::SleepFor(absl::Milliseconds(300));
      --holders;
      (void)permit->Release();
    });
  }
  for (auto& w : workers) w.join();
  (void)CallLimits(*stub, token, /*create=*/false);
  const bool fifo = std::is_sorted(order.begin(), order.end());
  std::cout << absl::StrFormat("demo: %d/%d served, at most %d holder(s) at once, %s order\n",
                               static_cast<int>(order.size()), kWorkers, max_holders.load(),
                               fifo ? "FIFO" : "NON-FIFO");
  return failures == 0 && max_holders <= kPermits && fifo ? 0 : 1;
}

}  // namespace corral::cli
