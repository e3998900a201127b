// Limiter, continued: its limits — created, updated, deleted, read — and the instance of a limit for a key.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "libs/core/status_macros.h"
#include "services/ratelimiter/limiter.h"
#include "services/ratelimiter/limiter_internal.h"

namespace corral::ratelimiter {

// ---------------------------------------------------------------------------------------------- limits

internal::Limit* Limiter::FindLimit(const std::string& name) const {
  auto it = limits_.find(name);
  return it == limits_.end() ? nullptr : it->second.get();
}

absl::Status Limiter::CreateLimit(LimitSpec spec) {
  CORRAL_RETURN_IF_ERROR(NormalizeLimitSpec(spec));
  absl::MutexLock lock(&mu_);
  if (limits_.count(spec.name)) {
    return absl::AlreadyExistsError(
        absl::StrCat("limit '", spec.name, "' already exists; use UpdateLimit to resize it"));
  }
  auto limit = std::make_unique<Limit>();
  limit->spec = std::move(spec);
  limit->metrics = metrics_->AddLimit(limit->spec.name);
  limit->metrics.capacity->Set(static_cast<double>(limit->spec.capacity()));
  Limit* raw = limit.get();
  limits_.emplace(raw->spec.name, std::move(limit));
  if (!raw->spec.keyed()) (void)ResolveInstance(raw->spec.name, "", /*create=*/true);
  return absl::OkStatus();
}

absl::StatusOr<LimitSpec> Limiter::UpdateLimit(LimitSpec spec) {
  CORRAL_RETURN_IF_ERROR(NormalizeLimitSpec(spec));
  Completions out;
  LimitSpec result;
  {
    absl::MutexLock lock(&mu_);
    Limit* limit = FindLimit(spec.name);
    if (limit == nullptr) return absl::NotFoundError(absl::StrCat("limit '", spec.name, "' not found"));
    if (spec.kind != limit->spec.kind || spec.key_template != limit->spec.key_template) {
      return absl::InvalidArgumentError(
          absl::StrCat("limit '", spec.name, "': kind and key template cannot change; delete and re-create the limit"));
    }
    spec.source = limit->spec.source;
    // Tokens earned so far were earned at the old rate.
    if (spec.kind == LimitKind::kRate) {
      for (auto& [key, inst] : limit->instances) Refill(*inst);
    }
    limit->spec = spec;
    limit->metrics.capacity->Set(static_cast<double>(spec.capacity()));
    const absl::Status too_big = absl::FailedPreconditionError(
        absl::StrCat("limit '", spec.name, "' shrank to ", spec.capacity(), "; this request can never be granted"));
    for (auto& [key, inst] : limit->instances) {
      if (spec.kind == LimitKind::kRate) inst->bucket.Cap(static_cast<double>(spec.burst));
      // A waiter above the new capacity would block the FIFO queue forever: it fails now.
      for (auto it = inst->queue.begin(); it != inst->queue.end();) {
        auto next = std::next(it);
        if (it->permits > spec.capacity() && !it->allow_debt) {
          auto done = std::move(it->done);
          RemoveWaiter(*inst, it);
          limit->metrics.rejected->Increment();
          out.push_back([done = std::move(done), too_big]() mutable { done(too_big); });
        }
        it = next;
      }
      // Growing wakes waiters in FIFO order; shrinking only stops new grants (held leases stay).
      Pump(*inst, out);
    }
    result = limit->spec;
  }
  Run(out);
  return result;
}

absl::Status Limiter::DeleteLimit(const std::string& name, bool force) {
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    Limit* limit = FindLimit(name);
    if (limit == nullptr) return absl::NotFoundError(absl::StrCat("limit '", name, "' not found"));
    int64_t held = 0, waiting = 0;
    for (auto& [key, inst] : limit->instances) {
      held += inst->leases;
      waiting += static_cast<int64_t>(inst->queue.size());
    }
    if ((held > 0 || waiting > 0) && !force) {
      return absl::FailedPreconditionError(absl::StrCat("limit '", name, "' has ", held, " leases and ", waiting,
                                                        " waiters; release them first or delete with force"));
    }
    const absl::Status gone = absl::NotFoundError(absl::StrCat("limit '", name, "' was deleted"));
    for (auto& [key, inst] : limit->instances) {
      while (!inst->queue.empty()) {
        auto done = std::move(inst->queue.front().done);
        RemoveWaiter(*inst, inst->queue.begin());
        out.push_back([done = std::move(done), gone]() mutable { done(gone); });
      }
      clock_->Cancel(inst->rate_timer);
    }
    for (const auto& id : leases_->IdsOf(*limit)) {
      EndLease(id, gone, out);
      leases_->RememberEnded(id, "its limit was deleted");
    }
    metrics_->RemoveLimit(limit->metrics);
    limits_.erase(name);
  }
  Run(out);
  return absl::OkStatus();
}

absl::Status Limiter::LimitNotFound(const std::string& name) const {
  std::vector<std::string> names;
  for (auto& [n, l] : limits_) names.push_back(n);
  return absl::NotFoundError(absl::StrCat(
      "limit '", name, "' not found; declared limits: ", names.empty() ? "(none)" : absl::StrJoin(names, ", ")));
}

absl::StatusOr<LimitSpec> Limiter::GetLimit(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  Limit* limit = FindLimit(name);
  if (limit == nullptr) {
    return LimitNotFound(name);
  }
  return limit->spec;
}

std::vector<LimitSpec> Limiter::ListLimits() const {
  absl::MutexLock lock(&mu_);
  std::vector<LimitSpec> out;
  for (auto& [name, limit] : limits_) out.push_back(limit->spec);
  return out;
}

absl::StatusOr<internal::Instance*> Limiter::ResolveInstance(const std::string& name, const std::string& key,
                                                             bool create) {
  Limit* limit = FindLimit(name);
  if (limit == nullptr) {
    return LimitNotFound(name);
  }
  if (limit->spec.keyed()) {
    if (key.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("limit '", name, "' is keyed by ", limit->spec.key_template, "; pass a key"));
    }
    CORRAL_RETURN_IF_ERROR(ValidateKey(key));
  } else if (!key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("limit '", name, "' is not keyed; leave the key empty"));
  }
  auto it = limit->instances.find(key);
  if (it != limit->instances.end()) return it->second.get();
  if (!create) return absl::NotFoundError(absl::StrCat("limit '", name, "' has no instance '", key, "'"));
  auto inst = std::make_unique<Instance>(limit, key, static_cast<double>(limit->spec.burst), clock_->Now());
  Instance* raw = inst.get();
  limit->instances.emplace(key, std::move(inst));
  CapToEarned(*raw);
  return raw;
}

void Limiter::CapToEarned(Instance& inst) {
  const LimitSpec& spec = inst.limit->spec;
  if (spec.kind != LimitKind::kRate || rate_earned_since_ == absl::InfinitePast()) return;
  const double earned =
      spec.rate_per_s * absl::ToDoubleSeconds(std::max(clock_->Now() - rate_earned_since_, absl::ZeroDuration()));
  inst.bucket.Cap(std::min(static_cast<double>(spec.burst), earned));
}

}  // namespace corral::ratelimiter
