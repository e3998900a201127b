#include "services/proxy/quotas.h"

#include <algorithm>
#include <memory>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "boost/asio/as_tuple.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/this_coro.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "spdlog/spdlog.h"

namespace corral::proxy {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;

int64_t IntField(const json::object& body, const char* name) {
  const json::value* v = body.if_contains(name);
  if (v == nullptr) return 0;
  if (v->is_int64()) return std::max<int64_t>(0, v->as_int64());
  if (v->is_uint64()) return static_cast<int64_t>(std::min<uint64_t>(v->as_uint64(), 1u << 30));
  return 0;
}

}  // namespace

int64_t EstimateTokens(const json::object& body, size_t body_bytes, int64_t default_max_tokens) {
  int64_t completion = IntField(body, "max_completion_tokens");
  if (completion == 0) completion = IntField(body, "max_tokens");
  if (completion == 0) completion = default_max_tokens;
  const int64_t choices = std::clamp<int64_t>(IntField(body, "n"), 1, 128);
  return static_cast<int64_t>(body_bytes / 4) + 1 + std::min<int64_t>(completion, 1 << 30) * choices;
}

absl::Duration RetryAfter(const http::ClientConnection& response, absl::Duration fallback) {
  double value = 0;
  absl::Duration wait = fallback;
  if (absl::SimpleAtod(response.header("retry-after-ms"), &value) && value >= 0) {
    wait = absl::Milliseconds(value);
  } else if (absl::SimpleAtod(response.header("retry-after"), &value) && value >= 0) {
    wait = absl::Seconds(value);  // (an HTTP date is not parsed: the fallback stands)
  }
  return std::min(wait, absl::Hours(1));
}

std::string QuotaKey(const QuotaSpec& spec, const std::string& model) {
  return absl::StrReplaceAll(spec.key, {{"{model}", model}});
}

void QuotaHold::Settle(int64_t used) {
  if (settled_ || client_ == nullptr || unlimited_) return;
  settled_ = true;
  const int64_t delta = used - charged_tokens_;
  if (delta == 0) return;
  for (const Charge& c : charges_) {
    if (c.per_token) client_->Adjust(c.limit, c.key, delta);
  }
}

void QuotaHold::Refund() {
  leases_.clear();
  if (settled_ || client_ == nullptr || unlimited_) return;
  settled_ = true;
  for (const Charge& c : charges_) client_->Adjust(c.limit, c.key, -c.tokens);
}

std::vector<const QuotaSpec*> Quotas::For(const Upstream& upstream, const std::string& model) const {
  std::vector<const QuotaSpec*> out;
  if (client_ == nullptr) return out;
  if (!upstream.spec.quota.empty()) out.push_back(&upstream.spec.quota);
  if (auto it = by_model_.find(model); it != by_model_.end()) out.push_back(&it->second);
  return out;
}

asio::awaitable<absl::StatusOr<ratelimiter::ScopedPermit>> Quotas::Wait(ratelimiter::PermitRequest request,
                                                                        absl::Duration tick, const OnWait& on_wait) {
  // The client answers on a gRPC callback thread; the answer is posted to this call's executor, which wakes the wait.
  struct State {
    explicit State(asio::any_io_executor e) : timer(e) {}
    asio::steady_timer timer;
    std::optional<absl::StatusOr<ratelimiter::ScopedPermit>> result;
  };
  auto executor = co_await asio::this_coro::executor;
  auto state = std::make_shared<State>(executor);
  client_->AcquireAsync(request, [state, executor](absl::StatusOr<ratelimiter::ScopedPermit> permit) {
    auto shared = std::make_shared<absl::StatusOr<ratelimiter::ScopedPermit>>(std::move(permit));
    asio::post(executor, [state, shared] {
      state->result.emplace(std::move(*shared));
      state->timer.cancel();
    });
  });
  while (!state->result) {
    state->timer.expires_after(absl::ToChronoNanoseconds(tick));
    auto [ec] = co_await state->timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (!state->result && !ec && on_wait) co_await on_wait();
  }
  co_return std::move(*state->result);
}

asio::awaitable<absl::StatusOr<QuotaHold>> Quotas::Acquire(const std::vector<const QuotaSpec*>& specs,
                                                           const std::string& model, int64_t tokens,
                                                           absl::Duration budget, absl::Duration tick,
                                                           const OnWait& on_wait) {
  QuotaHold hold;
  hold.client_ = client_;
  hold.charged_tokens_ = tokens;
  const absl::Time start = clock_->Now();
  const absl::Time deadline = start + budget;
  // Concurrency first (a lease is given back if the rest cannot be had), then requests, then tokens.
  struct Step {
    const std::string* limit;
    std::string key;
    int64_t permits;
    bool per_token;
  };
  std::vector<Step> steps;
  for (const QuotaSpec* spec : specs) {
    if (!spec->concurrency.empty()) steps.push_back({&spec->concurrency, QuotaKey(*spec, model), 1, false});
  }
  for (const QuotaSpec* spec : specs) {
    if (!spec->requests.empty()) steps.push_back({&spec->requests, QuotaKey(*spec, model), 1, false});
    if (!spec->tokens.empty()) steps.push_back({&spec->tokens, QuotaKey(*spec, model), tokens, true});
  }
  for (const Step& step : steps) {
    ratelimiter::PermitRequest request;
    request.limit = *step.limit;
    request.key = step.key;
    request.permits = step.permits;
    request.allow_debt = step.per_token;
    request.wait_timeout = std::max(absl::ZeroDuration(), deadline - clock_->Now());
    absl::StatusOr<ratelimiter::ScopedPermit> permit = co_await Wait(std::move(request), tick, on_wait);
    if (!permit.ok()) {
      hold.Refund();
      const absl::Status& s = permit.status();
      metrics_->quota_refused.Increment();
      if (absl::IsDeadlineExceeded(s) || absl::IsResourceExhausted(s)) {
        co_return absl::ResourceExhaustedError(absl::StrCat("quota '", *step.limit, "' not granted within ",
                                                            absl::FormatDuration(options_.max_wait), ": ",
                                                            s.message()));
      }
      if (absl::IsUnavailable(s)) co_return s;
      co_return absl::FailedPreconditionError(absl::StrCat("quota '", *step.limit, "': ", s.message()));
    }
    hold.unlimited_ = hold.unlimited_ || permit->unlimited();
    if (!permit->lease().lease_id().empty()) {
      hold.leases_.push_back(*std::move(permit));
    } else {
      hold.charges_.push_back({*step.limit, step.key, step.permits, step.per_token});
    }
  }
  metrics_->quota_wait.Observe(absl::ToDoubleSeconds(clock_->Now() - start));
  co_return hold;
}

bool Quotas::Throttled(const std::vector<const QuotaSpec*>& specs, const std::string& model,
                       absl::Duration retry_after) {
  metrics_->quota_throttled.Increment();
  bool held = false;
  for (const QuotaSpec* spec : specs) {
    const std::string& limit = !spec->requests.empty() ? spec->requests : spec->tokens;
    if (limit.empty()) continue;
    client_->Adjust(limit, QuotaKey(*spec, model), 0, retry_after);
    held = true;
  }
  spdlog::debug("an upstream answered 429: quota limits held for {}", absl::FormatDuration(retry_after));
  return held;
}

}  // namespace corral::proxy
