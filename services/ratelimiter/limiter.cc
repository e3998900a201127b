#include "services/ratelimiter/limiter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "libs/core/status_macros.h"
#include "services/ratelimiter/lease_id.h"
#include "services/ratelimiter/limiter_internal.h"

namespace corral::ratelimiter {

Limiter::Limiter(Clock* clock, TokenSigner signer, LimiterOptions options, RateLimiterMetrics* metrics,
                 LeaseStore* store)
    : clock_(clock),
      signer_(std::move(signer)),
      options_(options),
      metrics_(metrics),
      store_(store),
      start_time_(clock->Now()),
      learning_end_(options.learning_mode ? start_time_ + options.max_lease_ttl : start_time_),
      leases_(std::make_unique<LeaseTable>()),
      last_fencing_token_(static_cast<uint64_t>(std::max<int64_t>(0, absl::ToUnixMicros(start_time_)))),
      rate_earned_since_(options.learning_mode ? start_time_ : absl::InfinitePast()) {
  if (options_.learning_mode) {
    metrics_->learning_mode().Set(1);
    learning_timer_ = clock_->RunAt(learning_end_, [this] { OnLearningEnd(); });
  }
  absl::MutexLock lock(&mu_);
  if (store_ != nullptr) store_->Alive(start_time_);
  sweep_timer_ = clock_->RunAfter(internal::kSweepEvery, [this] { SweepIdleInstances(); });
}

Limiter::~Limiter() {
  absl::MutexLock lock(&mu_);
  shutting_down_ = true;
  clock_->Cancel(learning_timer_);
  clock_->Cancel(sweep_timer_);
  leases_->ForEach([&](Lease& lease) { clock_->Cancel(lease.timer); });
  for (auto& [name, limit] : limits_) {
    for (auto& [key, inst] : limit->instances) {
      clock_->Cancel(inst->rate_timer);
      for (Waiter& w : inst->queue) clock_->Cancel(w.timeout_timer);
    }
  }
}

void Limiter::Run(Completions& completions) {
  for (auto& c : completions) c();
  completions.clear();
}

bool Limiter::learning_mode() const { return clock_->Now() < learning_end_; }

std::string Limiter::LearningNote() const {
  const absl::Duration left = learning_end_ - clock_->Now();
  if (left <= absl::ZeroDuration()) return "";
  return absl::StrCat("the limiter started at ", absl::FormatTime("%H:%M:%S", start_time_, absl::UTCTimeZone()),
                      " UTC without a lease snapshot (state_path) and is in learning mode for ",
                      absl::FormatDuration(absl::Trunc(left, absl::Seconds(1))),
                      " more: only re-claims of leases held before it started are granted until then");
}

// ---------------------------------------------------------------------------------------------- granting

void Limiter::Refill(Instance& inst) const {
  inst.bucket.Refill(clock_->Now(), inst.limit->spec.rate_per_s, static_cast<double>(inst.limit->spec.burst));
}

bool Limiter::Grantable(Instance& inst, int64_t permits) {
  if (inst.limit->spec.kind == LimitKind::kRate) {
    Refill(inst);
    return inst.bucket.Has(internal::Needed(inst.limit->spec, permits));
  }
  // During learning mode only re-claims are granted: leases from before a restart may still be held.
  if (learning_mode()) return false;
  return inst.held.Fits(permits, inst.limit->spec.permits);
}

absl::StatusOr<Grant> Limiter::Take(Instance& inst, int64_t permits, absl::Duration ttl, const std::string& session_id,
                                    absl::Duration waited, const LeaseIdentity* reuse) {
  const absl::Time now = clock_->Now();
  Limit& limit = *inst.limit;
  inst.last_active = now;
  Grant grant;
  grant.limit = limit.spec.name;
  grant.key = inst.key;
  grant.permits = permits;
  grant.grant_time = now;
  grant.waited = waited;
  if (limit.spec.kind == LimitKind::kRate) {
    inst.bucket.Spend(static_cast<double>(permits));
  } else {
    LeaseIdentity minted;
    if (reuse == nullptr) {
      minted.fencing_token = ++last_fencing_token_;
      minted.id = MintLeaseId(signer_, {limit.spec.name, inst.key, permits, minted.fencing_token});
      reuse = &minted;
    }
    CORRAL_ASSIGN_OR_RETURN(const Lease* lease,
                            AddLease(inst, permits, ttl, session_id, reuse->id, reuse->fencing_token));
    grant = GrantOf(*lease);
    grant.waited = waited;
  }
  limit.metrics.granted->Increment();
  limit.metrics.wait_seconds->Observe(absl::ToDoubleSeconds(waited));
  return grant;
}

absl::StatusOr<internal::Lease*> Limiter::AddLease(Instance& inst, int64_t permits, absl::Duration ttl,
                                                   const std::string& session_id, const std::string& lease_id,
                                                   uint64_t fencing_token, bool record) {
  // Before anyone hears of the grant; a grant the store cannot keep is not made, or a restart would forget it.
  if (record && store_ != nullptr) {
    if (absl::Status stored = store_->Held({lease_id, ttl}); !stored.ok()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the lease snapshot cannot record a grant of '", inst.limit->spec.name, "' (", stored.message(),
                       "): none is made that a restart would forget; free space under state_path"));
    }
  }
  auto lease = std::make_unique<Lease>();
  lease->id = lease_id;
  lease->fencing_token = fencing_token;
  lease->instance = &inst;
  lease->permits = permits;
  lease->grant_time = clock_->Now();
  lease->ttl = ttl;
  lease->expire_time = lease->grant_time + ttl;
  lease->session_id = session_id;
  if (!session_id.empty()) sessions_.at(session_id)->leases.insert(lease->id);
  ArmLeaseTimer(*lease);
  inst.held.Take(permits);
  inst.leases += 1;
  metrics_->leases().Increment();
  return &leases_->Add(std::move(lease));
}

Grant Limiter::GrantOf(const Lease& lease) {
  return Grant{.lease_id = lease.id,
               .limit = lease.instance->limit->spec.name,
               .key = lease.instance->key,
               .permits = lease.permits,
               .grant_time = lease.grant_time,
               .expire_time = lease.expire_time,
               .ttl = lease.ttl,
               .waited = absl::ZeroDuration(),
               .session_id = lease.session_id,
               .fencing_token = lease.fencing_token};
}

void Limiter::Pump(Instance& inst, Completions& out) {
  const absl::Time now = clock_->Now();
  while (!inst.queue.empty()) {
    Waiter& w = inst.queue.front();
    if (!Grantable(inst, w.permits)) break;
    absl::StatusOr<Grant> grant = Take(inst, w.permits, w.ttl, w.session_id, now - w.enqueued);
    if (grant.ok() && !w.request_id.empty() && !grant->lease_id.empty())
      leases_->BindRequest(w.request_id, *leases_->Find(grant->lease_id));
    auto done = std::move(w.done);
    RemoveWaiter(inst, inst.queue.begin());  // granted, or told why it cannot be
    out.push_back([done = std::move(done), grant = std::move(grant)]() mutable { done(std::move(grant)); });
  }
  if (inst.limit->spec.kind == LimitKind::kRate) {
    clock_->Cancel(inst.rate_timer);
    inst.rate_timer = 0;
    if (!inst.queue.empty()) {
      // The head gets its tokens exactly when the bucket has refilled enough; FIFO means nobody else can.
      const absl::Duration delay = inst.bucket.TimeUntil(internal::Needed(inst.limit->spec, inst.queue.front().permits),
                                                         inst.limit->spec.rate_per_s);
      inst.rate_timer =
          clock_->RunAfter(delay, [this, limit = inst.limit->spec.name, key = inst.key] { OnRateTimer(limit, key); });
    }
  }
  UpdateGauges(inst);
}

void Limiter::UpdateGauges(Instance& inst) {
  Limit& limit = *inst.limit;
  const double in_use = limit.spec.kind == LimitKind::kRate
                            ? static_cast<double>(limit.spec.burst) - inst.bucket.tokens()
                            : static_cast<double>(inst.held.in_use());
  const double waiters = static_cast<double>(inst.queue.size());
  limit.in_use += in_use - inst.counted_in_use;
  limit.waiters += waiters - inst.counted_waiters;
  inst.counted_in_use = in_use;
  inst.counted_waiters = waiters;
  limit.metrics.in_use->Set(limit.in_use);
  limit.metrics.waiters->Set(limit.waiters);
}

void Limiter::UpdateGauges(Limit& limit) {
  // From zero, which also drops the rounding a rate limit's running sums gather.
  limit.in_use = limit.waiters = 0;
  for (auto& [key, inst] : limit.instances) {
    inst->counted_in_use = inst->counted_waiters = 0;
    UpdateGauges(*inst);
  }
  limit.metrics.in_use->Set(limit.in_use);
  limit.metrics.waiters->Set(limit.waiters);
}

void Limiter::RemoveWaiter(Instance& inst, std::list<Waiter>::iterator it) {
  clock_->Cancel(it->timeout_timer);
  waiter_index_.erase(it->id);
  if (!it->session_id.empty()) {
    if (auto s = sessions_.find(it->session_id); s != sessions_.end()) s->second->waiters.erase(it->id);
  }
  inst.waiting_permits -= it->permits;
  inst.last_active = clock_->Now();
  inst.queue.erase(it);
}

absl::StatusOr<AcquireTicket> Limiter::Acquire(AcquireParams p, AcquireCallback done) {
  Completions out;
  absl::StatusOr<AcquireTicket> ticket;
  {
    absl::MutexLock lock(&mu_);
    ticket = AcquireLocked(p, done, out);
  }
  Run(out);
  return ticket;
}

absl::StatusOr<internal::Limit*> Limiter::CheckAcquire(AcquireParams& p) const {
  Limit* limit = FindLimit(p.limit);
  if (limit == nullptr) return LimitNotFound(p.limit);
  if (p.permits == 0) p.permits = 1;
  const LimitSpec& spec = limit->spec;
  p.allow_debt = p.allow_debt && spec.kind == LimitKind::kRate;
  // With debt a request may exceed the burst by up to the deepest debt (one hour of refill).
  const int64_t most =
      p.allow_debt ? spec.burst + static_cast<int64_t>(spec.rate_per_s * absl::ToDoubleSeconds(internal::kMaxDebt))
                   : spec.capacity();
  if (p.permits < 0 || p.permits > most) {
    return absl::InvalidArgumentError(
        absl::StrCat("permits must be between 1 and ", most, p.allow_debt ? " (the burst of '" : " (the capacity of '",
                     p.limit, p.allow_debt ? "' plus an hour of refill)" : "')", "; got ", p.permits));
  }
  if (p.lease_ttl == absl::ZeroDuration()) p.lease_ttl = options_.default_lease_ttl;
  if (p.lease_ttl < absl::ZeroDuration() || p.lease_ttl > options_.max_lease_ttl) {
    return absl::InvalidArgumentError(absl::StrCat("lease_ttl must be above 0 and at most ",
                                                   absl::FormatDuration(options_.max_lease_ttl), "; got ",
                                                   absl::FormatDuration(p.lease_ttl)));
  }
  if (p.wait_timeout < absl::ZeroDuration()) return absl::InvalidArgumentError("wait_timeout must not be negative");
  if (!p.session_id.empty() && !sessions_.contains(p.session_id)) {
    return absl::FailedPreconditionError(
        absl::StrCat("session '", p.session_id, "' is not open; open a Session stream first"));
  }
  return limit;
}

absl::StatusOr<std::optional<Grant>> Limiter::RetriedGrant(const AcquireParams& p, const Limit& limit) const {
  if (p.request_id.empty()) return std::nullopt;
  const Lease* found = leases_->ForRequest(p.request_id);
  if (found == nullptr) return std::nullopt;
  const Lease& lease = *found;
  if (lease.instance->limit != &limit || lease.instance->key != p.key || lease.permits != p.permits) {
    return absl::AlreadyExistsError(
        absl::StrCat("request_id '", p.request_id, "' was already used for a different acquire"));
  }
  return GrantOf(lease);
}

absl::Status Limiter::NotGrantableNow(const Instance& inst, const AcquireParams& p) const {
  const LimitSpec& spec = inst.limit->spec;
  if (!inst.queue.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat(inst.queue.size(), " request(s) are already waiting for '",
                                                     p.limit, "' (strict FIFO: no barging)"));
  }
  if (spec.kind == LimitKind::kConcurrency && learning_mode()) return absl::ResourceExhaustedError(LearningNote());
  return absl::ResourceExhaustedError(
      spec.kind == LimitKind::kRate ? absl::StrCat("'", p.limit, "' has ", static_cast<int64_t>(inst.bucket.tokens()),
                                                   " tokens now; ", p.permits, " wanted")
                                    : absl::StrCat("'", p.limit, "' has ", inst.held.in_use(), " of ", spec.permits,
                                                   " permits in use; ", p.permits, " wanted"));
}

absl::StatusOr<AcquireTicket> Limiter::AcquireLocked(AcquireParams& p, AcquireCallback& done, Completions& out) {
  CORRAL_ASSIGN_OR_RETURN(Limit * limit, CheckAcquire(p));
  auto complete = [&](absl::StatusOr<Grant> result) {
    out.push_back([done = std::move(done), result = std::move(result)]() mutable { done(std::move(result)); });
  };
  AcquireTicket ticket;
  // An idempotent retry: the lease this request_id already got is returned again.
  CORRAL_ASSIGN_OR_RETURN(std::optional<Grant> retried, RetriedGrant(p, *limit));
  if (retried) {
    complete(*std::move(retried));
    return ticket;
  }
  CORRAL_ASSIGN_OR_RETURN(Instance * inst, ResolveInstance(p.limit, p.key, /*create=*/true));
  if (inst->queue.empty() && Grantable(*inst, p.permits)) {
    CORRAL_ASSIGN_OR_RETURN(Grant grant, Take(*inst, p.permits, p.lease_ttl, p.session_id, absl::ZeroDuration()));
    if (!p.request_id.empty() && !grant.lease_id.empty())
      leases_->BindRequest(p.request_id, *leases_->Find(grant.lease_id));
    UpdateGauges(*inst);
    complete(std::move(grant));
    return ticket;
  }
  if (p.try_only) {
    limit->metrics.rejected->Increment();
    return NotGrantableNow(*inst, p);
  }
  if (limit->spec.kind == LimitKind::kRate) {
    // Tokens are reserved in FIFO order, so the wait is known now: everything queued, then this request.
    Refill(*inst);
    const absl::Duration estimate = inst->bucket.TimeUntil(
        static_cast<double>(inst->waiting_permits) + internal::Needed(limit->spec, p.permits), limit->spec.rate_per_s);
    if (estimate > p.wait_timeout) {
      limit->metrics.rejected->Increment();
      return absl::ResourceExhaustedError(absl::StrCat("'", p.limit, "' would grant ", p.permits, " tokens in ",
                                                       absl::FormatDuration(estimate), ", beyond wait_timeout ",
                                                       absl::FormatDuration(p.wait_timeout)));
    }
    ticket.estimated_wait = estimate;
  }
  if (p.wait_timeout == absl::ZeroDuration()) {
    limit->metrics.timeouts->Increment();
    complete(absl::DeadlineExceededError("wait_timeout is 0 and no permits are free now"));
    return ticket;
  }
  Waiter& w = inst->queue.emplace_back();
  w.id = next_waiter_id_++;
  w.permits = p.permits;
  w.enqueued = clock_->Now();
  w.ttl = p.lease_ttl;
  w.session_id = p.session_id;
  w.request_id = p.request_id;
  w.allow_debt = p.allow_debt;
  w.done = std::move(done);
  if (p.wait_timeout != absl::InfiniteDuration()) {
    w.timeout_timer = clock_->RunAfter(p.wait_timeout, [this, id = w.id] { OnWaitTimeout(id); });
  }
  inst->waiting_permits += p.permits;
  waiter_index_[w.id] = inst;
  if (!p.session_id.empty()) sessions_.at(p.session_id)->waiters.insert(w.id);
  ticket.waiter_id = w.id;
  ticket.queued = true;
  ticket.position = static_cast<uint32_t>(inst->queue.size());
  Pump(*inst, out);  // arms the rate timer when this request is the head
  return ticket;
}

bool Limiter::CancelWaiter(uint64_t waiter_id, const absl::Status& reason) {
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    auto idx = waiter_index_.find(waiter_id);
    if (idx == waiter_index_.end()) return false;
    Instance& inst = *idx->second;
    auto it = std::find_if(inst.queue.begin(), inst.queue.end(), [&](const Waiter& w) { return w.id == waiter_id; });
    auto done = std::move(it->done);
    RemoveWaiter(inst, it);
    inst.limit->metrics.cancelled->Increment();
    out.push_back([done = std::move(done), reason]() mutable { done(reason); });
    Pump(inst, out);  // a large request leaving the head may let smaller ones behind it through
  }
  Run(out);
  return true;
}

absl::StatusOr<double> Limiter::Adjust(const AdjustParams& p) {
  if (p.tokens > internal::kMaxAdjustTokens || p.tokens < -internal::kMaxAdjustTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens must be within ±", internal::kMaxAdjustTokens, "; got ", p.tokens));
  }
  if (p.hold_for < absl::ZeroDuration() || p.hold_for > internal::kMaxDebt) {
    return absl::InvalidArgumentError(absl::StrCat("hold_for must be between 0 and ",
                                                   absl::FormatDuration(internal::kMaxDebt), "; got ",
                                                   absl::FormatDuration(p.hold_for)));
  }
  Completions out;
  double tokens = 0;
  {
    absl::MutexLock lock(&mu_);
    Limit* limit = FindLimit(p.limit);
    if (limit == nullptr) return LimitNotFound(p.limit);
    const LimitSpec& spec = limit->spec;
    if (spec.kind != LimitKind::kRate) {
      return absl::FailedPreconditionError(absl::StrCat("'", p.limit,
                                                        "' is a concurrency limit: only rate limits are "
                                                        "adjusted (release a lease to give permits back)"));
    }
    CORRAL_ASSIGN_OR_RETURN(Instance * inst, ResolveInstance(p.limit, p.key, /*create=*/true));
    Refill(*inst);
    inst->last_active = clock_->Now();
    if (p.tokens > 0) {
      inst->bucket.Spend(static_cast<double>(p.tokens));
      inst->bucket.Floor(-spec.rate_per_s * absl::ToDoubleSeconds(internal::kMaxDebt));
    } else if (p.tokens < 0) {
      inst->bucket.Refund(static_cast<double>(-p.tokens), static_cast<double>(spec.burst));
    }
    if (p.hold_for > absl::ZeroDuration()) inst->bucket.Ceil(-spec.rate_per_s * absl::ToDoubleSeconds(p.hold_for));
    if (p.tokens > 0) limit->metrics.debited->Increment(static_cast<double>(p.tokens));
    if (p.tokens < 0) limit->metrics.refunded->Increment(static_cast<double>(-p.tokens));
    if (p.hold_for > absl::ZeroDuration()) limit->metrics.holds->Increment();
    Pump(*inst, out);  // a refund may grant waiters; a debit or a hold re-arms the head's timer later
    tokens = inst->bucket.tokens();
  }
  Run(out);
  return tokens;
}

void Limiter::OnWaitTimeout(uint64_t waiter_id) {
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return;
    auto idx = waiter_index_.find(waiter_id);
    if (idx == waiter_index_.end()) return;
    Instance& inst = *idx->second;
    // A grant due at this very moment (a rate reservation that ends exactly at wait_timeout) wins.
    Pump(inst, out);
    auto it = std::find_if(inst.queue.begin(), inst.queue.end(), [&](const Waiter& w) { return w.id == waiter_id; });
    if (it != inst.queue.end()) {
      it->timeout_timer = 0;
      const size_t ahead = static_cast<size_t>(std::distance(inst.queue.begin(), it));
      absl::Status status = absl::DeadlineExceededError(absl::StrCat(
          "waited ", absl::FormatDuration(clock_->Now() - it->enqueued), " for ", it->permits, " permit(s) of '",
          inst.limit->spec.name, "'; ", ahead, " request(s) were ahead",
          inst.limit->spec.kind == LimitKind::kConcurrency && learning_mode() ? "; " + LearningNote() : ""));
      auto done = std::move(it->done);
      RemoveWaiter(inst, it);
      inst.limit->metrics.timeouts->Increment();
      out.push_back([done = std::move(done), status]() mutable { done(status); });
      Pump(inst, out);
    }
  }
  Run(out);
}

void Limiter::OnRateTimer(const std::string& limit, const std::string& key) {
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return;
    auto inst = ResolveInstance(limit, key, /*create=*/false);
    if (!inst.ok()) return;
    (*inst)->rate_timer = 0;
    Pump(**inst, out);
  }
  Run(out);
}

void Limiter::OnLearningEnd() {
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return;
    metrics_->learning_mode().Set(0);
    for (auto& [name, limit] : limits_) {
      for (auto& [key, inst] : limit->instances) Pump(*inst, out);
    }
  }
  Run(out);
}

void Limiter::SweepIdleInstances() {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return;
  const absl::Time now = clock_->Now();
  if (store_ != nullptr) store_->Alive(now);
  for (auto& [name, limit] : limits_) {
    for (auto it = limit->instances.begin(); limit->spec.keyed() && it != limit->instances.end();) {
      Instance& inst = *it->second;
      if (limit->spec.kind == LimitKind::kRate) Refill(inst);
      bool idle =
          inst.queue.empty() && inst.leases == 0 &&
          (limit->spec.kind == LimitKind::kConcurrency || inst.bucket.Has(static_cast<double>(limit->spec.burst)));
      if (idle && now - inst.last_active >= limit->spec.instance_idle_ttl) {
        clock_->Cancel(inst.rate_timer);
        it = limit->instances.erase(it);
      } else {
        ++it;
      }
    }
    UpdateGauges(*limit);
  }
  sweep_timer_ = clock_->RunAfter(internal::kSweepEvery, [this] { SweepIdleInstances(); });
}

}  // namespace corral::ratelimiter
