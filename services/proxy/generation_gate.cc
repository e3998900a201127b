#include "services/proxy/generation_gate.h"

#include "boost/asio/post.hpp"
#include "boost/asio/redirect_error.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "libs/api/proto_time.h"
#include "libs/core/status_macros.h"
#include "spdlog/spdlog.h"

namespace corral::proxy {

namespace asio = boost::asio;

GenerationGate::CallRef GenerationGate::Register(asio::any_io_executor executor) {
  auto call = std::make_shared<Call>(executor);
  absl::MutexLock lock(&mu_);
  calls_.insert(call);
  return call;
}

void GenerationGate::Unregister(const CallRef& call) {
  Leave(*call);
  absl::MutexLock lock(&mu_);
  calls_.erase(call);
}

asio::awaitable<bool> GenerationGate::Enter(const CallRef& call, absl::Duration interval, const OnTick& on_tick) {
  bool waited = false;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (!paused_) {
        if (waited) --waiting_;
        ++upstream_;
        call->entered = true;
        break;
      }
      if (!waited) {
        ++waiting_;
        waited = true;
        metrics_->calls_held.Increment();
      }
    }
    // A resume cancels this wait (posted to this executor, so it cannot run before the wait has begun).
    call->wake.expires_after(absl::ToChronoNanoseconds(interval));
    boost::system::error_code ec;
    co_await call->wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (!ec && !co_await on_tick()) {
      absl::MutexLock lock(&mu_);
      --waiting_;
      co_return false;
    }
  }
  co_return true;
}

void GenerationGate::Leave(Call& call) {
  call.upstream = nullptr;
  if (!call.entered) return;
  call.entered = false;
  absl::MutexLock lock(&mu_);
  --upstream_;
}

void GenerationGate::Continued(Call& call) {
  call.aborted = false;
  metrics_->calls_continued.Increment();
}

bool GenerationGate::Stale(uint64_t sequence) const { return sequence != 0 && sequence < sequence_; }

absl::Status GenerationGate::Apply(uint64_t sequence, std::optional<int64_t> version) {
  if (version) {
    CORRAL_ASSIGN_OR_RETURN(const int64_t previous, version_->Update(*version));
    if (previous != *version) spdlog::info("policy version {} -> {}", previous, *version);
    metrics_->policy_version.Set(static_cast<double>(*version));
  }
  sequence_ = std::max(sequence_, sequence);
  return absl::OkStatus();
}

absl::StatusOr<v1::UpdatePolicyResponse> GenerationGate::UpdatePolicy(const v1::UpdatePolicyRequest& request) {
  v1::UpdatePolicyResponse out;
  absl::MutexLock lock(&mu_);
  out.set_previous_version(version_->current());
  if (!Stale(request.sequence())) CORRAL_RETURN_IF_ERROR(Apply(request.sequence(), request.version()));
  out.set_version(version_->current());
  return out;
}

bool GenerationGate::Pause(const v1::PauseGenerationRequest& request) {
  {
    absl::MutexLock lock(&mu_);
    if (Stale(request.sequence())) return false;
    (void)Apply(request.sequence(), std::nullopt);  // no version: cannot fail
    if (!paused_) {
      paused_ = true;
      paused_since_ = clock_->Now();
      upstream_at_pause_ = upstream_;
      aborted_ = 0;
      metrics_->pauses.Increment();
      metrics_->paused.Set(1);
      spdlog::info("generation paused ({}): {} call(s) upstream", v1::PauseMode_Name(request.mode()), upstream_);
    }
  }
  if (request.mode() == v1::PAUSE_MODE_ABORT) AbortUpstream();
  return true;
}

void GenerationGate::AbortUpstream() {
  std::vector<CallRef> calls;
  {
    absl::MutexLock lock(&mu_);
    if (!paused_) return;
    calls.assign(calls_.begin(), calls_.end());
  }
  for (CallRef& c : calls) {
    asio::post(c->executor, [this, c] {
      if (!c->entered || !c->continuable || c->aborted) return;
      {
        absl::MutexLock lock(&mu_);
        if (!paused_) return;
        ++aborted_;
      }
      c->aborted = true;
      metrics_->calls_aborted.Increment();
      if (c->upstream != nullptr) c->upstream->Cancel();
    });
  }
}

bool GenerationGate::AwaitHeld(int64_t n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto held = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return waiting_ >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&held), timeout);
}

bool GenerationGate::Quiet() const {
  absl::MutexLock lock(&mu_);
  return upstream_ == 0;
}

bool GenerationGate::paused() const {
  absl::MutexLock lock(&mu_);
  return paused_;
}

v1::PauseGenerationResponse GenerationGate::Counts() const {
  v1::PauseGenerationResponse out;
  absl::MutexLock lock(&mu_);
  out.set_aborted(static_cast<uint32_t>(aborted_));
  out.set_drained(static_cast<uint32_t>(std::max<int64_t>(0, upstream_at_pause_ - aborted_ - upstream_)));
  out.set_held(static_cast<uint32_t>(waiting_));
  return out;
}

absl::StatusOr<v1::ResumeGenerationResponse> GenerationGate::Resume(const v1::ResumeGenerationRequest& request) {
  v1::ResumeGenerationResponse out;
  std::vector<CallRef> calls;
  {
    absl::MutexLock lock(&mu_);
    const bool stale = Stale(request.sequence());
    if (!stale) {
      CORRAL_RETURN_IF_ERROR(
          Apply(request.sequence(), request.has_version() ? std::optional<int64_t>(request.version()) : std::nullopt));
    }
    out.set_version(version_->current());
    if (stale || !paused_) return out;
    paused_ = false;
    const absl::Duration paused_for = clock_->Now() - paused_since_;
    ToProto(paused_for, out.mutable_paused_for());
    out.set_released(static_cast<uint32_t>(waiting_));
    metrics_->paused.Set(0);
    metrics_->paused_seconds.Increment(absl::ToDoubleSeconds(paused_for));
    spdlog::info("generation resumed at version {} after {}: {} call(s) released", out.version(),
                 absl::FormatDuration(paused_for), waiting_);
    calls.assign(calls_.begin(), calls_.end());
  }
  for (CallRef& c : calls) {
    asio::post(c->executor, [c] { c->wake.cancel(); });
  }
  return out;
}

}  // namespace corral::proxy
