// `corral limiter status|acquire`: look at and use a corral-ratelimiter from the shell.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "libs/api/proto_time.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/status_conversion.h"
#include "services/ratelimiter/client/ratelimit_client.h"
#include "tools/corral/commands.h"
#include "tools/corral/connect_flags.h"
#include "tools/corral/output.h"

namespace corral::cli {
namespace {

std::string Age(absl::Duration d) {
  return d == absl::ZeroDuration() ? "-" : absl::StrFormat("%.3fs", absl::ToDoubleSeconds(d));
}

int RunStatus(const ConnectFlags& flags, const std::string& limit) {
  auto token = flags.BearerToken();
  auto channel = MakeChannel(flags.address, flags.Channel());
  if (!token.ok() || !channel.ok()) return Fail("limiter status", token.ok() ? channel.status() : token.status());
  grpc::ClientContext context;
  SetDeadline(context, absl::Seconds(flags.timeout_s));
  AttachBearer(context, *token);
  v1::GetStatusRequest request;
  request.set_limit(limit);
  v1::GetStatusResponse status;
  grpc::Status rpc = v1::RateLimiter::NewStub(*channel)->GetStatus(&context, request, &status);
  if (!rpc.ok()) return Fail("limiter status", FromGrpcStatus(rpc));
  std::string learning;
  if (status.learning_mode()) {
    const absl::Duration left = absl::Trunc(FromProto(status.learning_mode_end()) - absl::Now(), absl::Seconds(1));
    learning = absl::StrCat(", LEARNING MODE for ", absl::FormatDuration(std::max(left, absl::ZeroDuration())),
                            " more (only re-claims granted)");
  }
  std::cout << absl::StrFormat("sessions %d, leases %d (%s)%s\n", status.sessions(), status.leases(),
                               status.durable_leases() ? "kept on disk" : "in memory only", learning);
  std::cout << absl::StrFormat("%-20s %-12s %-12s %10s %10s %8s %12s\n", "LIMIT", "KEY", "KIND", "CAPACITY", "IN USE",
                               "WAITERS", "OLDEST WAIT");
  for (const v1::LimitStatus& l : status.limits()) {
    std::cout << absl::StrFormat(
        "%-20s %-12s %-12s %10d %10d %8d %12s\n", l.limit(), l.key().empty() ? "-" : l.key(),
        l.kind() == v1::LIMIT_KIND_RATE ? absl::StrCat("rate ", l.rate_per_s(), "/s") : "concurrency", l.capacity(),
        l.in_use(), l.waiters(), Age(FromProto(l.oldest_waiter_age())));
  }
  return 0;
}

struct AcquireFlags {
  std::string limit, key;
  int64_t permits = 1;
  double hold_s = 0;
  double wait_s = 30;
  double ttl_s = 0;
};

int RunAcquire(const ConnectFlags& flags, const AcquireFlags& a) {
  auto token = flags.BearerToken();
  if (!token.ok()) return Fail("limiter acquire", token.status());
  ratelimiter::ClientOptions options;
  options.address = flags.address;
  options.token = *token;
  options.channel = flags.Channel();
  options.client_id = absl::StrCat("corral-cli pid ", getpid());
  options.connect_timeout = absl::Seconds(flags.timeout_s);
  auto client = ratelimiter::RateLimitClient::Connect(options);
  if (!client.ok()) return Fail("limiter acquire", client.status());
  ratelimiter::PermitRequest request{a.limit, a.key, a.permits,
                                     a.wait_s > 0 ? absl::Seconds(a.wait_s) : absl::InfiniteDuration(),
                                     absl::Seconds(a.ttl_s)};
  auto permit = (*client)->Acquire(request);
  if (!permit.ok()) return Fail("limiter acquire: no permit", permit.status());
  const v1::Lease& lease = permit->lease();
  std::cout << absl::StrFormat("granted %d permit(s) of %s%s lease=%s fencing_token=%d expires=%s\n", a.permits,
                               a.limit, a.key.empty() ? "" : "/" + a.key,
                               lease.lease_id().empty() ? "-" : lease.lease_id(), lease.fencing_token(),
                               absl::FormatTime(FromProto(lease.expire_time())))
            << std::flush;
  if (a.hold_s > 0) {
    // Hold until the time is up or SIGINT/SIGTERM; the client keeps the lease alive meanwhile.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    timespec hold{static_cast<time_t>(a.hold_s), static_cast<long>((a.hold_s - static_cast<time_t>(a.hold_s)) * 1e9)};
    sigtimedwait(&set, nullptr, &hold);
  }
  if (!permit->valid()) {
    std::cerr << "corral limiter acquire: the lease was lost while held (the limiter ended it, or its TTL ran out "
                 "while this process was not renewing it): what it guarded may have a newer holder\n";
    return 1;
  }
  if (auto s = permit->Release(); !s.ok()) {
    std::cerr << "corral limiter acquire: release failed: " << s << "\n";
    return 1;
  }
  std::cout << "released\n";
  return 0;
}

}  // namespace

void RegisterLimiter(CLI::App& app, int& exit_code) {
  CLI::App* limiter = app.add_subcommand("limiter", "inspect and use a corral-ratelimiter");
  limiter->require_subcommand(1);

  auto status_flags = std::make_shared<ConnectFlags>();
  auto status_limit = std::make_shared<std::string>();
  CLI::App* status = limiter->add_subcommand("status", "each limit: capacity, in use, waiters, oldest waiter's age");
  AddConnectFlags(status, *status_flags, "ratelimiter");
  status->add_option("--limit", *status_limit, "only this limit");
  status->callback([status_flags, status_limit, &exit_code] { exit_code = RunStatus(*status_flags, *status_limit); });

  auto acquire_flags = std::make_shared<ConnectFlags>();
  auto a = std::make_shared<AcquireFlags>();
  CLI::App* acquire = limiter->add_subcommand(
      "acquire", "acquire permits, print the lease, hold them, release; non-zero exit with the reason on failure");
  AddConnectFlags(acquire, *acquire_flags, "ratelimiter");
  acquire->add_option("--limit", a->limit, "limit name")->required();
  acquire->add_option("--key", a->key, "instance key of a keyed limit (e.g. python for code_exec/{language})");
  acquire->add_option("--permits", a->permits, "permits (or tokens) to acquire")->capture_default_str();
  acquire->add_option("--hold", a->hold_s, "seconds to hold before releasing (SIGINT releases early)")
      ->capture_default_str();
  acquire->add_option("--wait", a->wait_s, "seconds to wait in the queue (0: forever)")->capture_default_str();
  acquire->add_option("--ttl", a->ttl_s, "lease TTL in seconds (0: the limiter's default)");
  acquire->callback([acquire_flags, a, &exit_code] {
    // Block SIGINT/SIGTERM before the client's threads start, so the hold can wait for them.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    exit_code = RunAcquire(*acquire_flags, *a);
  });
}

}  // namespace corral::cli
