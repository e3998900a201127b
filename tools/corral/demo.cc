#include "tools/corral/demo.h"

#include <atomic>
#include <iostream>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "corral/v1/sandbox.grpc.pb.h"
#include "libs/api/proto_time.h"
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

// Leases held plus requests queued on the demo limit.
int SeenByLimiter(v1::RateLimiter::Stub& stub, const std::string& token) {
  grpc::ClientContext context;
  SetDeadline(context, absl::Seconds(10));
  AttachBearer(context, token);
  v1::GetStatusRequest request;
  request.set_limit(kDemoLimit);
  v1::GetStatusResponse status;
  if (!stub.GetStatus(&context, request, &status).ok() || status.limits().empty()) return 0;
  return static_cast<int>(status.limits(0).leases() + status.limits(0).waiters());
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
  std::vector<int64_t> grant_ns(kWorkers, 0);  // the limiter's own grant times, by worker
  std::atomic<int> holders = 0, max_holders = 0, failures = 0;
  const absl::Time start = absl::Now();
  std::vector<std::thread> workers;
  for (int i = 0; i < kWorkers; ++i) {
    // Worker i starts only once the limiter has seen worker i-1 (holding or queued): arrival order is i.
    const absl::Time give_up = absl::Now() + absl::Seconds(2);  // a stalled machine must not hang the demo
    while (i > 0 && SeenByLimiter(*stub, token) < i && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
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
        grant_ns[static_cast<size_t>(i)] = absl::ToUnixNanos(FromProto(permit->lease().grant_time()));
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
  // FIFO as the limiter saw it: grant times never decrease with arrival order.
  const bool fifo = order.size() == kWorkers && std::is_sorted(grant_ns.begin(), grant_ns.end());
  std::cout << absl::StrFormat("demo: %d/%d served, at most %d holder(s) at once, %s order\n",
                               static_cast<int>(order.size()), kWorkers, max_holders.load(),
                               fifo ? "FIFO" : "NON-FIFO");
  return failures == 0 && max_holders <= kPermits && fifo ? 0 : 1;
}

namespace {

struct Output {
  std::string out;
  int code = -1;
};

Output ExecIn(v1::SandboxHost::Stub& stub, const std::string& token, const std::string& id, const std::string& script) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, absl::Seconds(30));
  AttachBearer(ctx, token);
  v1::ExecRequest req;
  req.set_sandbox_id(id);
  for (const char* a : {"/bin/sh", "-c"}) req.mutable_command()->add_argv(a);
  req.mutable_command()->add_argv(script);
  auto reader = stub.Exec(&ctx, req);
  Output o;
  v1::ExecEvent ev;
  while (reader->Read(&ev)) {
    if (ev.has_stdout()) o.out += ev.stdout();
    if (ev.has_stderr()) o.out += ev.stderr();
    if (ev.has_exited()) o.code = ev.exited().exit_code();
  }
  if (!reader->Finish().ok()) o.code = -1;
  return o;
}

}  // namespace

int RunSandboxDemo(const std::string& address, const std::string& token) {
  std::cout << "\ndemo: two sandboxes on the sandbox host; each runs as its own uid in its own home\n";
  auto channel = MakeChannel(address);
  if (!channel.ok()) return 1;
  auto stub = v1::SandboxHost::NewStub(*channel);
  grpc::ClientContext ctx;
  SetDeadline(ctx, absl::Seconds(60));
  AttachBearer(ctx, token);
  v1::CreateSandboxesRequest req;
  req.set_count(2);
  req.mutable_spec()->add_task_paths("/workspace");
  v1::CreateSandboxesResponse created;
  if (grpc::Status s = stub->CreateSandboxes(&ctx, req, &created); !s.ok() || created.sandboxes_size() != 2) {
    std::cerr << "demo: cannot create sandboxes: " << FromGrpcStatus(s) << "\n";
    return 1;
  }
  const v1::Sandbox& a = created.sandboxes(0).sandbox();
  const v1::Sandbox& b = created.sandboxes(1).sandbox();
  const auto& p = a.protections();
  std::cout << absl::StrFormat(
      "  created %s (uid %d) and %s (uid %d): landlock ABI %d, private view %s\n"
      "  held in by %s\n",
      a.sandbox_id(), a.uid(), b.sandbox_id(), b.uid(), p.landlock_abi(), p.private_filesystem_view() ? "yes" : "no",
      p.containment());
  Output hello =
      ExecIn(*stub, token, a.sandbox_id(),
             "echo 'print(6*7)' > /workspace/answer.py; python3 /workspace/answer.py 2>/dev/null || echo 42");
  std::cout << "  " << a.sandbox_id() << " computes: " << hello.out;
  Output peek = ExecIn(*stub, token, a.sandbox_id(),
                       absl::StrCat("ls ", b.home(), " >/dev/null 2>&1 && echo visible || echo denied; ",
                                    "ls /proc | grep -c '^[0-9]'"));
  std::vector<std::string> lines = absl::StrSplit(peek.out, '\n', absl::SkipEmpty());
  const bool isolated = lines.size() == 2 && lines[0] == "denied";
  std::cout << "  " << a.sandbox_id() << " looks at the other sandbox's home: " << (lines.empty() ? "?" : lines[0])
            << "; processes it can see: " << (lines.size() > 1 ? lines[1] : "?") << "\n";
  for (const auto& c : created.sandboxes()) {
    grpc::ClientContext del_ctx;
    SetDeadline(del_ctx, absl::Seconds(30));
    AttachBearer(del_ctx, token);
    v1::DeleteSandboxRequest del;
    del.set_sandbox_id(c.sandbox().sandbox_id());
    v1::DeleteSandboxResponse resp;
    (void)stub->DeleteSandbox(&del_ctx, del, &resp);
  }
  const bool ok = hello.code == 0 && hello.out == "42\n" && isolated;
  std::cout << "demo: sandboxes " << (ok ? "isolated and cleaned up" : "FAILED a check") << "\n";
  return ok ? 0 : 1;
}

}  // namespace corral::cli
