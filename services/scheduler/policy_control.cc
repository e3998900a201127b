#include "services/scheduler/policy_control.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "boost/asio/co_spawn.hpp"
#include "boost/asio/deferred.hpp"
#include "boost/asio/experimental/parallel_group.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "libs/api/policy_version.h"
#include "libs/api/proto_time.h"
#include "libs/async/sleep.h"
#include "libs/async/spawn.h"
#include "libs/core/logging.h"
#include "libs/core/status_macros.h"
#include "libs/http/server.h"
#include "spdlog/spdlog.h"

namespace corral::scheduler {

namespace asio = boost::asio;

PolicyState PolicyControl::state() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

void PolicyControl::Change(const std::function<absl::Status(PolicyState&)>& change,
                           std::function<void(PolicyState)> push, std::function<void(absl::Status)> fail) {
  PolicyState next;
  absl::Status valid;
  {
    absl::MutexLock lock(&mu_);
    next = state_;
    valid = change(next);
    if (valid.ok()) {
      next.sequence = state_.sequence + 1;
      state_ = next;
    }
  }
  if (!valid.ok()) return fail(valid);
  journal_->SavePolicy(next, [this, next, push = std::move(push), fail = std::move(fail)](absl::Status durable) {
    if (!durable.ok()) {
      return fail(absl::UnavailableError(absl::StrCat("the change could not be journaled: ", durable.message())));
    }
    if (pauses_ != nullptr) pauses_->Set(next.paused, clock_->Now());
    push(next);
  });
}

void PolicyControl::Spawn(asio::awaitable<void> push) {
  async::Spawn(executor_, std::move(push), "applying a policy change on the proxies");
}

template <class R>
asio::awaitable<std::vector<absl::StatusOr<R>>> PolicyControl::OnEveryReplica(
    std::function<asio::awaitable<absl::StatusOr<R>>(ProxyApi&)> call) {
  using Op = decltype(asio::co_spawn(executor_, std::declval<asio::awaitable<absl::StatusOr<R>>>(), asio::deferred));
  std::vector<Op> ops;
  for (const auto& proxy : proxies_) ops.push_back(asio::co_spawn(executor_, call(*proxy), asio::deferred));
  auto [order, exceptions, results] = co_await asio::experimental::make_parallel_group(std::move(ops))
                                          .async_wait(asio::experimental::wait_for_all(), asio::use_awaitable);
  for (size_t i = 0; i < results.size(); ++i) {
    if (exceptions[i]) results[i] = absl::InternalError("a proxy replica's call threw");
  }
  co_return std::move(results);
}

template <class R>
absl::Status PolicyControl::Outcome(const std::vector<absl::StatusOr<R>>& results) const {
  std::vector<std::string> failed;
  absl::Status refused;
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].ok()) continue;
    const absl::Status& s = results[i].status();
    if (absl::IsFailedPrecondition(s) || absl::IsInvalidArgument(s)) refused = s;
    failed.push_back(absl::StrCat(proxies_[i]->address(), " (", s.message(), ")"));
  }
  if (failed.empty()) return absl::OkStatus();
  if (!refused.ok())
    return absl::Status(refused.code(), absl::StrCat("a proxy replica refused: ", absl::StrJoin(failed, "; ")));
  return absl::UnavailableError(absl::StrCat("not applied by proxy replica(s) ", absl::StrJoin(failed, "; "),
                                             "; the change stands and is pushed to them when they answer"));
}

void PolicyControl::UpdatePolicy(const v1::UpdatePolicyRequest& request, absl::Time deadline,
                                 Done<v1::UpdatePolicyResponse> done) {
  auto previous = std::make_shared<int64_t>(0);
  Change(
      [&](PolicyState& s) {
        CORRAL_RETURN_IF_ERROR(CheckPolicyVersion(request.version(), s.version));
        *previous = s.version;
        s.version = request.version();
        return absl::OkStatus();
      },
      [this, deadline, done, previous](PolicyState s) { Spawn(PushUpdate(s, *previous, deadline, done)); },
      [done](absl::Status s) { done(s); });
}

asio::awaitable<void> PolicyControl::PushUpdate(PolicyState s, int64_t previous, absl::Time deadline,
                                                Done<v1::UpdatePolicyResponse> done) {
  v1::UpdatePolicyRequest push;
  push.set_version(s.version);
  push.set_sequence(s.sequence);
  auto results =
      co_await OnEveryReplica<v1::UpdatePolicyResponse>([&](ProxyApi& p) { return p.UpdatePolicy(push, deadline); });
  // After the replicas (those that answered) serve it: episodes admitted for it record it.
  if (on_version_) on_version_(s.version);
  if (absl::Status out = Outcome(results); !out.ok()) co_return done(out);
  if (previous != s.version) spdlog::info("policy version {} -> {}", previous, s.version);
  v1::UpdatePolicyResponse r;
  r.set_previous_version(previous);
  r.set_version(s.version);
  r.set_replicas(static_cast<uint32_t>(results.size()));
  done(r);
}

void PolicyControl::Pause(const v1::PauseGenerationRequest& request, absl::Time deadline,
                          Done<v1::PauseGenerationResponse> done) {
  Change(
      [&](PolicyState& s) {
        if (!v1::PauseMode_IsValid(request.mode())) {
          return absl::InvalidArgumentError(absl::StrCat("mode ", request.mode(), " is not a PauseMode"));
        }
        if (FromProto(request.abort_after()) < absl::ZeroDuration()) {
          return absl::InvalidArgumentError("abort_after must not be negative");
        }
        s.paused = true;
        s.mode = request.mode() == v1::PAUSE_MODE_ABORT ? v1::PAUSE_MODE_ABORT : v1::PAUSE_MODE_DRAIN;
        return absl::OkStatus();
      },
      [this, request, deadline, done](PolicyState s) { Spawn(PushPause(s, request, deadline, done)); },
      [done](absl::Status s) { done(s); });
}

asio::awaitable<void> PolicyControl::PushPause(PolicyState s, v1::PauseGenerationRequest request, absl::Time deadline,
                                               Done<v1::PauseGenerationResponse> done) {
  v1::PauseGenerationRequest push = request;
  push.set_sequence(s.sequence);
  const absl::Time start = clock_->Now();
  auto results =
      co_await OnEveryReplica<v1::PauseGenerationResponse>([&](ProxyApi& p) { return p.Pause(push, deadline); });
  if (absl::Status out = Outcome(results); !out.ok()) co_return done(out);
  v1::PauseGenerationResponse r;
  for (const auto& one : results) {
    r.set_drained(r.drained() + one->drained());
    r.set_aborted(r.aborted() + one->aborted());
    r.set_held(r.held() + one->held());
  }
  ToProto(clock_->Now() - start, r.mutable_waited());
  r.set_replicas(static_cast<uint32_t>(results.size()));
  spdlog::info("generation paused on {} proxy replica(s) ({}): {} drained, {} aborted, {} held", results.size(),
               v1::PauseMode_Name(s.mode), r.drained(), r.aborted(), r.held());
  done(r);
}

void PolicyControl::Resume(const v1::ResumeGenerationRequest& request, absl::Time deadline,
                           Done<v1::ResumeGenerationResponse> done) {
  Change(
      [&](PolicyState& s) {
        if (request.has_version()) {
          CORRAL_RETURN_IF_ERROR(CheckPolicyVersion(request.version(), s.version));
          s.version = request.version();
        }
        s.paused = false;
        return absl::OkStatus();
      },
      [this, deadline, done](PolicyState s) { Spawn(PushResume(s, deadline, done)); },
      [done](absl::Status s) { done(s); });
}

asio::awaitable<void> PolicyControl::PushResume(PolicyState s, absl::Time deadline,
                                                Done<v1::ResumeGenerationResponse> done) {
  v1::ResumeGenerationRequest push;
  push.set_version(s.version);
  push.set_sequence(s.sequence);
  auto results =
      co_await OnEveryReplica<v1::ResumeGenerationResponse>([&](ProxyApi& p) { return p.Resume(push, deadline); });
  if (on_version_) on_version_(s.version);
  if (absl::Status out = Outcome(results); !out.ok()) co_return done(out);
  v1::ResumeGenerationResponse r;
  r.set_version(s.version);
  absl::Duration longest;
  for (const auto& one : results) {
    r.set_released(r.released() + one->released());
    longest = std::max(longest, FromProto(one->paused_for()));
  }
  if (longest > absl::ZeroDuration()) ToProto(longest, r.mutable_paused_for());
  r.set_replicas(static_cast<uint32_t>(results.size()));
  spdlog::info("generation resumed at version {} on {} proxy replica(s): {} call(s) released", s.version,
               results.size(), r.released());
  done(r);
}

asio::awaitable<void> PolicyControl::Run(const std::atomic<bool>* stopping, absl::Duration interval) {
  while (!*stopping) {
    co_await async::SleepFor(*clock_, interval);
    const PolicyState s = state();
    if (s.sequence == 0) continue;  // the trainer never said anything: the replicas' defaults stand
    const absl::Time deadline = clock_->Now() + std::min(interval, absl::Seconds(5));
    auto results = co_await OnEveryReplica<bool>([&](ProxyApi& p) -> asio::awaitable<absl::StatusOr<bool>> {
      if (!s.paused) {
        v1::ResumeGenerationRequest resume;
        resume.set_version(s.version);
        resume.set_sequence(s.sequence);
        auto r = co_await p.Resume(resume, deadline);
        if (!r.ok()) co_return r.status();
        co_return true;
      }
      v1::UpdatePolicyRequest update;
      update.set_version(s.version);
      update.set_sequence(s.sequence);
      auto u = co_await p.UpdatePolicy(update, deadline);
      if (!u.ok()) co_return u.status();
      v1::PauseGenerationRequest pause;
      pause.set_mode(s.mode);
      pause.set_sequence(s.sequence);
      auto r = co_await p.Pause(pause, deadline);  // a replica still draining answers past the deadline: fine
      if (!r.ok() && !absl::IsDeadlineExceeded(r.status())) co_return r.status();
      co_return true;
    });
    for (size_t i = 0; i < results.size(); ++i) {
      if (!results[i].ok() && !absl::IsUnavailable(results[i].status())) {
        spdlog::warn("proxy {}: pushing policy version {} ({}): {}", proxies_[i]->address(), s.version,
                     s.paused ? "paused" : "generating", results[i].status());
      }
    }
  }
}

}  // namespace corral::scheduler
