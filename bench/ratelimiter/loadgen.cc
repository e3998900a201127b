// corral-bench-ratelimiter: one load generator for both sides of the ratelimiter benchmark, so the load shape
// is identical: N client threads doing acquire→release pairs on one semaphore for a bounded time.
//   --mode=corral   each thread owns a RateLimitClient (one Session stream) to corral-ratelimiter; with --shared
//                   the threads share one (one session, as a scheduler's episodes share its client)
//   --mode=redis    each thread owns a hiredis connection; a Lua-script expiring semaphore (a sorted set of
//                   lease expiries, as Redisson's RPermitExpirableSemaphore does) with pub/sub wake-ups
//   --keys=N        (corral) the limit is a keyed template: thread i uses key k<i % N>, and all N instances are
//                   created before the timed part (each key acquired and released once), so every grant runs
//                   beside N instances
//   --mode=leases   holds --leases live leases on corral-ratelimiter and prints them held (for an RSS reading)
// Prints one line: `pairs=<n> seconds=<s> pairs_per_s=<x> p50_ms=<x> p99_ms=<x> errors=<n>`.
#include <hiredis/hiredis.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <iostream>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "services/ratelimiter/client/ratelimit_client.h"

namespace {

struct Flags {
  std::string mode = "corral", addr, token, limit = "bench";
  bool shared = false;  // --shared: every thread on one client (one session stream)
  int clients = 64, permits = 16, leases = 10000, keys = 0;
  double seconds = 5;
};

// Grant latencies of one thread, in microseconds.
struct ThreadResult {
  int64_t pairs = 0, errors = 0;
  std::vector<int64_t> latency_us;
};

constexpr char kAcquireLua[] = R"(
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], ARGV[1] + ARGV[2], ARGV[4])
  return 1
end
return 0)";
constexpr char kReleaseLua[] = R"(
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then redis.call('PUBLISH', KEYS[2], ARGV[1]) end
return 1)";

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

void RedisWorker(const Flags& f, int index, absl::Time end, ThreadResult* out) {
  std::string host = f.addr.substr(0, f.addr.rfind(':'));
  int port = std::stoi(f.addr.substr(f.addr.rfind(':') + 1));
  redisContext* c = redisConnect(host.c_str(), port);
  redisContext* sub = redisConnect(host.c_str(), port);
  if (c == nullptr || c->err || sub == nullptr || sub->err) {
    ++out->errors;
    return;
  }
  const timeval wake_timeout{0, 20000};  // a missed wake-up costs at most 20 ms, as Redisson's re-check does
  redisSetTimeout(sub, wake_timeout);
  freeReplyObject(redisCommand(sub, "SUBSCRIBE %s:released", f.limit.c_str()));
  const std::string key = f.limit;
  const std::string channel = f.limit + ":released";
  int64_t n = 0;
  while (absl::Now() < end) {
    std::string lease = absl::StrCat(index, ":", n++);
    const absl::Time start = absl::Now();
    bool granted = false;
    while (!granted && absl::Now() < end) {
      auto* r =
          static_cast<redisReply*>(redisCommand(c, "EVAL %s 1 %s %lld %d %d %s", kAcquireLua, key.c_str(),
                                                static_cast<long long>(NowMs()), 30000, f.permits, lease.c_str()));
      if (r == nullptr) {
        ++out->errors;
        return;
      }
      granted = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
      freeReplyObject(r);
      if (!granted) {
        // Wait for a release to be published (or the timeout), then try again.
        void* msg = nullptr;
        if (redisGetReply(sub, &msg) == REDIS_OK) {
          freeReplyObject(msg);
        } else {
          sub->err = 0;  // timeout: reset and re-check
        }
      }
    }
    if (!granted) break;
    out->latency_us.push_back(absl::ToInt64Microseconds(absl::Now() - start));
    auto* r = static_cast<redisReply*>(
        redisCommand(c, "EVAL %s 2 %s %s %s", kReleaseLua, key.c_str(), channel.c_str(), lease.c_str()));
    if (r == nullptr) {
      ++out->errors;
      return;
    }
    freeReplyObject(r);
    ++out->pairs;
  }
  redisFree(c);
  redisFree(sub);
}

std::unique_ptr<corral::ratelimiter::RateLimitClient> ConnectClient(const Flags& f, const std::string& id) {
  corral::ratelimiter::ClientOptions options;
  options.address = f.addr;
  options.token = f.token;
  options.client_id = id;
  options.channel.own_connection = true;  // independent clients, like the Redis side's connections
  auto client = corral::ratelimiter::RateLimitClient::Connect(options);
  return client.ok() ? *std::move(client) : nullptr;
}

// `shared`: the client every thread uses (one session, as a scheduler's episodes share one); null: its own.
void CorralWorker(const Flags& f, int index, absl::Time end, corral::ratelimiter::RateLimitClient* shared,
                  ThreadResult* out) {
  std::unique_ptr<corral::ratelimiter::RateLimitClient> own;
  if (shared == nullptr) own = ConnectClient(f, absl::StrCat("bench-", index));
  corral::ratelimiter::RateLimitClient* client = shared != nullptr ? shared : own.get();
  if (client == nullptr) {
    ++out->errors;
    return;
  }
  const std::string key = f.keys > 0 ? absl::StrCat("k", index % f.keys) : "";
  while (absl::Now() < end) {
    const absl::Time start = absl::Now();
    auto permit = client->Acquire({.limit = f.limit, .key = key, .wait_timeout = absl::Seconds(30)});
    if (!permit.ok()) {
      ++out->errors;
      continue;
    }
    out->latency_us.push_back(absl::ToInt64Microseconds(absl::Now() - start));
    if (!permit->Release().ok()) ++out->errors;
    ++out->pairs;
  }
}

int HoldLeases(const Flags& f) {
  corral::ratelimiter::ClientOptions options;
  options.address = f.addr;
  options.token = f.token;
  auto client = corral::ratelimiter::RateLimitClient::Connect(options);
  if (!client.ok()) return 1;
  std::vector<corral::ratelimiter::ScopedPermit> held;
  for (int i = 0; i < f.leases; ++i) {
    auto permit = (*client)->Acquire({.limit = f.limit});
    if (!permit.ok()) {
      std::cerr << "lease " << i << ": " << permit.status() << "\n";
      return 1;
    }
    held.push_back(*std::move(permit));
  }
  std::cout << "held " << held.size() << " leases" << std::endl;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  int sig = 0;
  sigwait(&set, &sig);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // As in every Corral service (LoadServiceConfig): absl's lock-order graph costs a few percent per lock.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      std::string prefix = absl::StrCat("--", name, "=");
      return a.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (auto v = value("mode"))
      f.mode = v;
    else if (auto v2 = value("addr"))
      f.addr = v2;
    else if (auto v3 = value("token"))
      f.token = v3;
    else if (auto v4 = value("limit"))
      f.limit = v4;
    else if (auto v5 = value("clients"))
      f.clients = std::stoi(v5);
    else if (auto v6 = value("permits"))
      f.permits = std::stoi(v6);
    else if (auto v7 = value("leases"))
      f.leases = std::stoi(v7);
    else if (auto v8 = value("seconds"))
      f.seconds = std::stod(v8);
    else if (auto v9 = value("keys"))
      f.keys = std::stoi(v9);
    else if (a == "--shared")
      f.shared = true;
    else {
      std::cerr
          << "usage: corral-bench-ratelimiter --mode=corral|redis|leases --addr=HOST:PORT [--token=T] "
             "[--limit=NAME] [--clients=64] [--permits=16] [--seconds=5] [--leases=10000] [--keys=N] [--shared]\n";
      return a == "--help" ? 0 : 2;
    }
  }
  if (f.mode == "leases") return HoldLeases(f);
  std::vector<ThreadResult> results(static_cast<size_t>(f.clients));
  std::vector<std::thread> threads;
  std::unique_ptr<corral::ratelimiter::RateLimitClient> shared;
  if (f.mode == "corral" && f.shared && (shared = ConnectClient(f, "bench-shared")) == nullptr) return 1;
  if (f.mode == "corral" && f.keys > 0) {  // every instance exists before the timed part
    auto warm = ConnectClient(f, "bench-warm");
    for (int k = 0; warm != nullptr && k < f.keys; ++k) {
      if (!warm->Acquire({.limit = f.limit, .key = absl::StrCat("k", k)}).ok()) return 1;
    }
    if (warm == nullptr) return 1;
  }
  const absl::Time start = absl::Now();
  const absl::Time end = start + absl::Seconds(f.seconds);
  for (int i = 0; i < f.clients; ++i) {
    threads.emplace_back([&, i] {
      if (f.mode == "redis")
        RedisWorker(f, i, end, &results[static_cast<size_t>(i)]);
      else
        CorralWorker(f, i, end, shared.get(), &results[static_cast<size_t>(i)]);
    });
  }
  for (auto& t : threads) t.join();
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  int64_t pairs = 0, errors = 0;
  std::vector<int64_t> lat;
  for (auto& r : results) {
    pairs += r.pairs;
    errors += r.errors;
    lat.insert(lat.end(), r.latency_us.begin(), r.latency_us.end());
  }
  std::sort(lat.begin(), lat.end());
  auto pct = [&](double p) {
    return lat.empty() ? 0.0 : lat[static_cast<size_t>(p * static_cast<double>(lat.size() - 1))] / 1000.0;
  };
  std::printf("pairs=%lld seconds=%.2f pairs_per_s=%.0f p50_ms=%.3f p99_ms=%.3f errors=%lld\n",
              static_cast<long long>(pairs), elapsed, static_cast<double>(pairs) / elapsed, pct(0.5), pct(0.99),
              static_cast<long long>(errors));
  return errors == 0 ? 0 : 1;
}
