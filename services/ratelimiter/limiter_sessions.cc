// Limiter, continued: lease lifetimes (release, keepalive, expiry), client sessions and re-claims, status.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "libs/core/status_macros.h"
#include "services/ratelimiter/lease_id.h"
#include "services/ratelimiter/limiter.h"
#include "services/ratelimiter/limiter_internal.h"

namespace corral::ratelimiter {

// ---------------------------------------------------------------------------------------------- leases

void Limiter::ArmLeaseTimer(Lease& lease) {
  clock_->Cancel(lease.timer);
  lease.timer = clock_->RunAt(lease.expire_time, [this, id = lease.id] { OnLeaseExpired(id); });
}

void Limiter::OnLeaseExpired(const std::string& lease_id) {
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    // Shutting down, or about to: the holder cannot renew here any more and re-claims from the next limiter.
    if (shutting_down_ || keep_leases_of_ended_sessions_) return;
    Lease* lease = leases_->Find(lease_id);
    if (lease == nullptr) return;
    // Renewed after this timer fired but before it got the lock: the new timer is armed already.
    if (clock_->Now() < lease->expire_time) return;
    lease->timer = 0;
    lease->instance->limit->metrics.expired->Increment();
    EndLease(lease_id,
             absl::DeadlineExceededError(
                 absl::StrCat("lease expired: no keepalive within its TTL of ", absl::FormatDuration(lease->ttl))),
             out);
    leases_->RememberEnded(lease_id, "expired (no keepalive within its TTL)");
  }
  Run(out);
}

void Limiter::EndLease(const std::string& lease_id, const absl::Status& lost_reason, Completions& out) {
  std::unique_ptr<Lease> lease = leases_->Remove(lease_id);
  if (lease == nullptr) return;
  clock_->Cancel(lease->timer);
  if (store_ != nullptr) store_->Ended(lease_id);
  metrics_->leases().Decrement();
  if (!lease->session_id.empty()) {
    if (auto s = sessions_.find(lease->session_id); s != sessions_.end()) {
      s->second->leases.erase(lease_id);
      if (!lost_reason.ok() && s->second->on_lost) {
        out.push_back([cb = s->second->on_lost, lease_id, lost_reason] { cb(lease_id, lost_reason); });
      }
    }
  }
  Instance& inst = *lease->instance;
  inst.held.Give(lease->permits);
  inst.leases -= 1;
  inst.last_active = clock_->Now();
  Pump(inst, out);
}

absl::Status Limiter::Release(const std::string& lease_id, const std::string& session_id) {
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    const Lease* lease = leases_->Find(lease_id);
    if (lease == nullptr) {
      if (const std::string* why = leases_->EndedWhy(lease_id)) {
        return absl::NotFoundError(absl::StrCat("lease already ended: ", *why));
      }
      return absl::NotFoundError("lease not found: it was never granted by this limiter, or ended long ago");
    }
    if (!lease->session_id.empty() && lease->session_id != session_id) {
      return absl::PermissionDeniedError("lease belongs to another session; only its session may release it");
    }
    EndLease(lease_id, absl::OkStatus(), out);
    leases_->RememberEnded(lease_id, "released");
  }
  Run(out);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Grant>> Limiter::KeepAlive(const std::vector<std::string>& lease_ids,
                                                      const std::string& session_id) {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> ids = lease_ids;
  if (ids.empty()) {
    auto s = sessions_.find(session_id);
    if (session_id.empty() || s == sessions_.end()) {
      return absl::InvalidArgumentError("name the leases to keep alive (or keep alive on a session)");
    }
    ids.assign(s->second->leases.begin(), s->second->leases.end());
  }
  // In learning mode a validly signed lease that is not live (held before a restart) is re-claimed here too,
  // so clients that keep leases alive with unary calls are counted again like session clients.
  std::vector<std::string> missing;
  absl::flat_hash_map<std::string, ReclaimTarget> reclaims;
  for (const auto& id : ids) {
    const Lease* lease = leases_->Find(id);
    if (lease == nullptr) {
      auto target = learning_mode() ? FindReclaimTarget(id) : absl::NotFoundError("");
      if (target.ok()) {
        reclaims.emplace(id, *target);
      } else {
        missing.push_back(id.substr(0, 16) + "…");
      }
    } else if (!lease->session_id.empty() && lease->session_id != session_id) {
      return absl::PermissionDeniedError("a lease belongs to another session; nothing was renewed");
    }
  }
  if (!missing.empty()) {
    return absl::NotFoundError(absl::StrCat(missing.size(), " lease(s) are not live (released or expired): ",
                                            absl::StrJoin(missing, ", "), "; nothing was renewed"));
  }
  std::vector<Grant> out;
  const absl::Time now = clock_->Now();
  const std::string bind_to = sessions_.contains(session_id) ? session_id : "";
  for (const auto& id : ids) {
    if (auto r = reclaims.find(id); r != reclaims.end()) {
      // A re-claim the store cannot keep fails the call; those before it in the list stay re-claimed.
      CORRAL_ASSIGN_OR_RETURN(Grant grant, ReclaimLease(r->second, id, bind_to));
      out.push_back(std::move(grant));
      continue;
    }
    Lease& lease = *leases_->Find(id);
    lease.expire_time = now + lease.ttl;
    ArmLeaseTimer(lease);
    out.push_back(GrantOf(lease));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------- re-claims

absl::StatusOr<Limiter::ReclaimTarget> Limiter::FindReclaimTarget(const std::string& lease_id) {
  CORRAL_ASSIGN_OR_RETURN(LeaseClaim claim, ParseLeaseId(signer_, lease_id));
  return TargetOf(claim);
}

absl::StatusOr<Limiter::ReclaimTarget> Limiter::TargetOf(const LeaseClaim& claim) {
  auto inst = ResolveInstance(claim.limit, claim.key, /*create=*/true);
  if (!inst.ok() || (*inst)->limit->spec.kind != LimitKind::kConcurrency) {
    return absl::NotFoundError(absl::StrCat("limit '", claim.limit, "' of this lease no longer exists"));
  }
  return ReclaimTarget{*inst, claim.permits, claim.fencing_token};
}

absl::StatusOr<Grant> Limiter::ReclaimLease(const ReclaimTarget& target, const std::string& lease_id,
                                            const std::string& session_id) {
  // Its token stays its own; later grants take larger ones, whatever the clock did across the restart.
  last_fencing_token_ = std::max(last_fencing_token_, target.fencing_token);
  const LeaseIdentity reclaimed{lease_id, target.fencing_token};
  CORRAL_ASSIGN_OR_RETURN(Grant grant, Take(*target.instance, target.permits, options_.default_lease_ttl, session_id,
                                            absl::ZeroDuration(), &reclaimed));
  // The client held these permits before the restart; they count whatever the limit's size is now.
  target.instance->reclaimed += target.permits;
  UpdateGauges(*target.instance);
  return grant;
}

// ---------------------------------------------------------------------------------------------- sessions

std::string Limiter::OpenSession(std::string client_id, LeaseLostCallback on_lease_lost) {
  auto session = std::make_unique<Session>();
  session->id = "s-" + internal::RandomHex(12);
  session->client_id = std::move(client_id);
  session->on_lost = std::move(on_lease_lost);
  std::string id = session->id;
  absl::MutexLock lock(&mu_);
  sessions_.emplace(id, std::move(session));
  metrics_->sessions().Increment();
  return id;
}

std::vector<ReclaimOutcome> Limiter::Reclaim(const std::string& session_id, const std::vector<std::string>& lease_ids) {
  std::vector<ReclaimOutcome> results;
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    absl::flat_hash_set<std::string> seen;
    for (const std::string& id : lease_ids) {
      ReclaimOutcome& r = results.emplace_back(ReclaimOutcome{id, absl::UnknownError("")});
      if (!sessions_.contains(session_id)) {
        r.result = absl::FailedPreconditionError("session is not open");
        continue;
      }
      if (!seen.insert(id).second) {
        r.result = absl::AlreadyExistsError("lease listed twice in one re-claim");
        continue;
      }
      const absl::Time now = clock_->Now();
      // A live lease is matched by its whole id (a bearer credential this limiter issued or restored from its
      // snapshot), so a lease restored after a key change is re-claimed by its holder like any other.
      if (Lease* held = leases_->Find(id); held != nullptr) {
        Lease& lease = *held;
        if (!lease.session_id.empty() && lease.session_id != session_id && sessions_.contains(lease.session_id)) {
          r.result = absl::PermissionDeniedError("lease is bound to another open session");
          continue;
        }
        if (!lease.session_id.empty()) {
          if (auto s = sessions_.find(lease.session_id); s != sessions_.end()) s->second->leases.erase(id);
        }
        lease.session_id = session_id;
        sessions_.at(session_id)->leases.insert(id);
        lease.expire_time = now + lease.ttl;
        ArmLeaseTimer(lease);
        r.result = GrantOf(lease);
        continue;
      }
      if (!learning_mode()) {
        const std::string* why = leases_->EndedWhy(id);
        r.result = absl::NotFoundError(absl::StrCat("lease is not live (", why != nullptr ? *why : "unknown",
                                                    ") and the limiter is not in learning mode; acquire again"));
        continue;
      }
      auto target = FindReclaimTarget(id);
      if (!target.ok()) {
        r.result = target.status();
        continue;
      }
      r.result = ReclaimLease(*target, id, session_id);
    }
  }
  Run(out);
  return results;
}

void Limiter::CloseSession(const std::string& session_id) {
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end()) return;
    std::unique_ptr<Session> session = std::move(it->second);
    sessions_.erase(it);
    metrics_->sessions().Decrement();
    for (uint64_t waiter_id : session->waiters) {
      auto idx = waiter_index_.find(waiter_id);
      if (idx == waiter_index_.end()) continue;
      Instance& inst = *idx->second;
      auto w = std::find_if(inst.queue.begin(), inst.queue.end(), [&](const Waiter& x) { return x.id == waiter_id; });
      w->session_id.clear();  // the session is already gone from sessions_
      auto done = std::move(w->done);
      RemoveWaiter(inst, w);
      out.push_back([done = std::move(done)]() mutable { done(absl::CancelledError("the session ended")); });
      inst.limit->metrics.cancelled->Increment();
      Pump(inst, out);
    }
    for (const std::string& lease_id : session->leases) {
      Lease* lease = leases_->Find(lease_id);
      if (lease == nullptr) continue;
      lease->session_id.clear();
      if (keep_leases_of_ended_sessions_) continue;  // shutting down: the holder re-claims it from the next limiter
      EndLease(lease_id, absl::OkStatus(), out);
      leases_->RememberEnded(lease_id, "released when its session ended");
    }
  }
  Run(out);
}

// ---------------------------------------------------------------------------------------------- restarts

int Limiter::Restore(const std::vector<StoredLease>& stored, absl::Time last_alive, uint64_t fencing_high_water) {
  absl::MutexLock lock(&mu_);
  last_fencing_token_ = std::max(last_fencing_token_, fencing_high_water);
  const absl::Time now = clock_->Now();
  // How long ago the previous limiter died is not known: its heartbeat is a reading of its wall clock, and wall
  // clocks step (NTP, a restored VM) between two processes. Counted from its heartbeat, a clock stepped forward
  // across the restart dropped leases their holders still held, and the permits went to others (found by
  // tests/faults). So each restored lease lives one more TTL from now unless re-claimed, and rate buckets start
  // empty when a previous limiter ran: the safe reading, at the price of one TTL of permits held for holders that
  // are gone.
  if (last_alive != absl::InfinitePast()) {
    rate_earned_since_ = now;
    for (auto& [name, limit] : limits_) {
      for (auto& [key, inst] : limit->instances) CapToEarned(*inst);
    }
  }
  int restored = 0;
  for (const StoredLease& s : stored) {
    auto claim = ReadStoredLeaseId(s.id);
    auto target = claim.ok() ? TargetOf(*claim) : absl::StatusOr<ReclaimTarget>(claim.status());
    const absl::Time expire = now + s.ttl;
    if (!target.ok() || expire <= now || leases_->contains(s.id) || s.ttl <= absl::ZeroDuration()) {
      if (store_ != nullptr) store_->Ended(s.id);
      continue;
    }
    last_fencing_token_ = std::max(last_fencing_token_, target->fencing_token);
    // Already in the store: counted whatever the store can write now.
    Lease& lease = **AddLease(*target->instance, target->permits, s.ttl, /*session_id=*/"", s.id, target->fencing_token,
                              /*record=*/false);
    lease.expire_time = expire;
    ArmLeaseTimer(lease);
    ++restored;
  }
  for (auto& [name, limit] : limits_) UpdateGauges(*limit);
  return restored;
}

void Limiter::PrepareShutdown() {
  absl::MutexLock lock(&mu_);
  keep_leases_of_ended_sessions_ = true;
}

// ---------------------------------------------------------------------------------------------- status

LimiterStatus Limiter::Status(const std::string& limit_filter) const {
  absl::MutexLock lock(&mu_);
  LimiterStatus st;
  st.start_time = start_time_;
  st.learning_mode = learning_mode();
  st.durable_leases = store_ != nullptr;
  st.learning_mode_end = learning_end_;
  st.sessions = static_cast<int64_t>(sessions_.size());
  st.leases = static_cast<int64_t>(leases_->size());
  const absl::Time now = clock_->Now();
  for (const auto& [name, limit] : limits_) {
    if (!limit_filter.empty() && name != limit_filter) continue;
    for (const auto& [key, inst] : limit->instances) {
      InstanceStatus is;
      is.limit = name;
      is.key = key;
      is.kind = limit->spec.kind;
      is.capacity = limit->spec.capacity();
      if (limit->spec.kind == LimitKind::kRate) {
        const double tokens =
            inst->bucket.TokensAt(now, limit->spec.rate_per_s, static_cast<double>(limit->spec.burst));
        is.in_use = limit->spec.burst - static_cast<int64_t>(tokens);
        is.rate_per_s = limit->spec.rate_per_s;
      } else {
        is.in_use = inst->held.in_use();
      }
      is.leases = inst->leases;
      is.waiters = static_cast<int64_t>(inst->queue.size());
      is.waiting_permits = inst->waiting_permits;
      is.oldest_waiter_age = inst->queue.empty() ? absl::ZeroDuration() : now - inst->queue.front().enqueued;
      is.reclaimed = inst->reclaimed;
      st.instances.push_back(std::move(is));
    }
  }
  return st;
}

}  // namespace corral::ratelimiter
