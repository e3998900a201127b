#include "services/proxy/upstream_dispatcher.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "boost/asio/as_tuple.hpp"
#include "boost/asio/co_spawn.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/this_coro.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "libs/async/sleep.h"
#include "libs/async/spawn.h"
#include "libs/http/server.h"

namespace corral::proxy {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;

// The call to upstream `u`: the request's body POSTed to its route, on a connection kept alive.
http::Request UpstreamRequest(const DispatchRequest& request, const Upstream& u) {
  http::Request req{bhttp::verb::post, request.route, 11};
  req.set(bhttp::field::host, u.spec.name);
  req.set(bhttp::field::content_type, "application/json");
  req.set(bhttp::field::accept, request.stream ? "text/event-stream" : "application/json");
  req.keep_alive(true);
  req.body() = request.body;
  return req;
}

// Why no upstream answered, and which were left untried (`skipped`, "" when none).
std::string NoAnswer(int attempts, const std::string& last_error, const std::string& skipped) {
  return absl::StrCat("no upstream answered (", attempts, " attempts): ", last_error,
                      skipped.empty() ? "" : "; not tried: ", skipped);
}

}  // namespace

UpstreamLease::UpstreamLease(Upstream* upstream) : upstream_(upstream) {
  if (upstream_ != nullptr) ++upstream_->outstanding;
}

UpstreamLease& UpstreamLease::operator=(UpstreamLease&& other) noexcept {
  if (this != &other) {
    reset();
    upstream_ = std::exchange(other.upstream_, nullptr);
  }
  return *this;
}

void UpstreamLease::reset() {
  if (upstream_ != nullptr) --upstream_->outstanding;
  upstream_ = nullptr;
}

asio::awaitable<Dispatch> UpstreamDispatcher::Send(const DispatchRequest& request, OnWait on_wait) {
  Dispatch d;
  std::vector<Upstream*> tried;
  absl::Duration backoff = options_.retry_backoff;
  std::string last_error = upstreams_->Serves(request.model)
                               ? absl::StrCat("no upstream serving model '", request.model, "' is available")
                               : absl::StrCat("no upstream serves model '", request.model, "'");
  int last_status = 503;
  thread_local std::mt19937 rng{std::random_device{}()};
  const absl::Time quota_deadline =
      clock_->Now() + (quotas_ != nullptr ? quotas_->options().max_wait : absl::ZeroDuration());
  const OnWait quota_wait = request.stream ? on_wait : OnWait();
  bool throttled = false;  // the last attempt got an upstream's 429: the quota wait is the back-off
  for (int attempt = 1; attempt <= options_.max_attempts; ++attempt) {
    Upstream* u = upstreams_->Pick(request.env_id, request.model, tried);
    if (u == nullptr) break;
    if (attempt > 1 && !std::exchange(throttled, false)) {
      metrics_->retries.Increment();
      co_await async::SleepFor(backoff * std::uniform_real_distribution<double>(0.5, 1.5)(rng));
      backoff *= 2;
    }
    const std::vector<const QuotaSpec*> quota =
        quotas_ != nullptr ? quotas_->For(*u, request.model) : std::vector<const QuotaSpec*>{};
    if (!quota.empty()) {
      absl::StatusOr<QuotaHold> hold =
          co_await quotas_->Acquire(quota, request.model, request.estimated_tokens, quota_deadline - clock_->Now(),
                                    options_.keepalive_interval, quota_wait);
      if (!hold.ok()) {
        d.http_status = absl::IsResourceExhausted(hold.status()) ? 429 : 503;
        d.error = std::string(hold.status().message());
        co_return d;
      }
      d.quota = *std::move(hold);
    }
    tried.push_back(u);
    d.attempts = attempt;
    http::Request req = UpstreamRequest(request, *u);
    // Counted from the request on: a non-streamed answer's header comes only once it is complete.
    UpstreamLease lease(u);
    const absl::Time start = clock_->Now();
    d.upstream_start = start;
    auto sent = co_await Attempt(*u, req, request.stream, on_wait, request.gate);
    d.waited += clock_->Now() - start;
    if (request.gate != nullptr && request.gate->aborted) {  // cut by a pause: not the upstream's fault
      request.gate->upstream = nullptr;
      d.quota.Refund();
      co_return d;
    }
    if (!sent.ok()) {
      d.quota.Refund();  // (a timed-out call may have run: its estimate is given back all the same)
      upstreams_->Failed(u);
      metrics_->UpstreamFailed(u->index);
      last_error = absl::StrCat(u->spec.name, ": ", sent.status().message());
      last_status = absl::IsDeadlineExceeded(sent.status()) ? 504 : 502;
      continue;
    }
    std::unique_ptr<http::ClientConnection> conn = *std::move(sent);
    if (conn->status() == 429 && !quota.empty()) {
      // The upstream's own quota: everyone holds off for its Retry-After, and this call waits its turn again
      // (not an attempt, not a failure) until the quota wait's bound.
      const absl::Duration retry_after = RetryAfter(*conn, quotas_->options().default_retry_after);
      auto body = co_await conn->ReadAll(options_.idle_timeout, 1 << 20);
      if (request.gate != nullptr) request.gate->upstream = nullptr;
      pool_.Put(std::move(conn));
      const bool unlimited = d.quota.unlimited();
      d.quota.Refund();  // the upstream did not run it (given back first, or it would shorten the hold)
      const bool held = quotas_->Throttled(quota, request.model, retry_after);
      if (clock_->Now() + retry_after >= quota_deadline) {
        d.http_status = 429;
        d.error = absl::StrCat(u->spec.name, " answered HTTP 429 (retry after ", absl::FormatDuration(retry_after),
                               ") beyond the quota wait's bound: ", body.ok() ? body->substr(0, 512) : "");
        co_return d;
      }
      if (!held || unlimited) co_await async::SleepFor(retry_after);  // nothing at the limiter makes it wait
      tried.pop_back();
      --attempt;
      throttled = true;
      continue;
    }
    if (conn->status() >= 500) {  // before the first body byte: safe to try another upstream
      (void)co_await conn->ReadAll(options_.idle_timeout, 1 << 20);
      d.quota.Refund();
      upstreams_->Failed(u);
      metrics_->UpstreamFailed(u->index);
      last_error = absl::StrCat(u->spec.name, " answered HTTP ", conn->status());
      last_status = 502;
      if (request.gate != nullptr) request.gate->upstream = nullptr;
      pool_.Put(std::move(conn));
      continue;
    }
    upstreams_->Succeeded(u);
    d.connection = std::move(conn);
    d.lease = std::move(lease);
    d.first_byte = clock_->Now();
    co_return d;
  }
  d.http_status = last_status;
  d.error = NoAnswer(d.attempts, last_error, upstreams_->Skipped(request.model, tried));
  co_return d;
}

asio::awaitable<absl::StatusOr<std::unique_ptr<http::ClientConnection>>> UpstreamDispatcher::Attempt(
    Upstream& u, http::Request& req, bool stream, const OnWait& on_wait, GenerationGate::Call* gate) {
  auto executor = co_await asio::this_coro::executor;
  absl::Status sent;
  std::unique_ptr<http::ClientConnection> conn;
  for (int fresh = 0; fresh < 2; ++fresh) {
    bool reused = false;
    auto got = co_await pool_.Get(executor, u.spec.host, u.spec.port, options_.connect_timeout, &reused);
    if (!got.ok()) co_return got.status();
    conn = *std::move(got);
    if (gate != nullptr) {
      if (gate->aborted) co_return absl::CancelledError("cut by a generation pause");
      gate->upstream = conn.get();
    }
    // The send runs beside this loop, which calls `on_wait` each keepalive interval until it is done.
    bool finished = false;
    auto wake = std::make_shared<asio::steady_timer>(executor);
    asio::co_spawn(
        executor,
        [&, wake]() -> asio::awaitable<void> {
          sent = co_await conn->Send(req, options_.first_byte_timeout);
          finished = true;
          wake->cancel();
        },
        async::LogExceptions("sending to an upstream"));
    while (!finished) {
      wake->expires_after(absl::ToChronoNanoseconds(options_.keepalive_interval));
      auto [ec] = co_await wake->async_wait(asio::as_tuple(asio::use_awaitable));
      if (finished || ec || !stream || !on_wait) continue;
      co_await on_wait();
    }
    if (gate != nullptr && !sent.ok()) gate->upstream = nullptr;
    // Only a pooled connection the upstream had closed meanwhile is retried fresh; a timeout is not resent.
    if (sent.ok() || !reused || !absl::IsUnavailable(sent) || (gate != nullptr && gate->aborted)) break;
  }
  if (!sent.ok()) co_return sent;
  co_return conn;
}

}  // namespace corral::proxy
