#include "services/ratelimiter/convert.h"

#include "libs/api/proto_time.h"

namespace corral::ratelimiter {

LimitSpec FromProto(const v1::Limit& limit) {
  LimitSpec spec;
  spec.name = limit.name();
  spec.kind = limit.kind() == v1::LIMIT_KIND_RATE ? LimitKind::kRate : LimitKind::kConcurrency;
  spec.permits = limit.permits();
  spec.rate_per_s = limit.rate_per_s();
  spec.burst = limit.burst();
  spec.key_template = limit.key_template();
  if (limit.has_instance_idle_ttl()) spec.instance_idle_ttl = corral::FromProto(limit.instance_idle_ttl());
  spec.source = LimitSource::kRpc;
  return spec;
}

void ToProto(const LimitSpec& spec, v1::Limit* out) {
  out->set_name(spec.name);
  out->set_kind(spec.kind == LimitKind::kRate ? v1::LIMIT_KIND_RATE : v1::LIMIT_KIND_CONCURRENCY);
  out->set_permits(spec.kind == LimitKind::kConcurrency ? spec.permits : 0);
  out->set_rate_per_s(spec.rate_per_s);
  out->set_burst(spec.burst);
  out->set_key_template(spec.key_template);
  corral::ToProto(spec.instance_idle_ttl, out->mutable_instance_idle_ttl());
  out->set_source(spec.source == LimitSource::kConfig ? v1::LIMIT_SOURCE_CONFIG : v1::LIMIT_SOURCE_RPC);
}

void ToProto(const Grant& grant, v1::Lease* out) {
  out->set_lease_id(grant.lease_id);
  out->set_limit(grant.limit);
  out->set_key(grant.key);
  out->set_permits(grant.permits);
  corral::ToProto(grant.expire_time, out->mutable_expire_time());
  corral::ToProto(grant.ttl, out->mutable_ttl());
  corral::ToProto(grant.grant_time, out->mutable_grant_time());
  out->set_session_id(grant.session_id);
  out->set_fencing_token(grant.fencing_token);
}

void ToProto(const Grant& grant, v1::AcquireResponse* out) {
  if (!grant.lease_id.empty()) ToProto(grant, out->mutable_lease());
  corral::ToProto(grant.waited, out->mutable_waited());
}

absl::StatusOr<AcquireParams> FromProto(const v1::AcquireRequest& request) {
  if (request.has_lease_ttl() && corral::FromProto(request.lease_ttl()) <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("lease_ttl must be above 0 (leave it unset for the default)");
  }
  AcquireParams p;
  p.limit = request.limit();
  p.key = request.key();
  p.permits = request.permits();
  p.wait_timeout = request.has_wait_timeout() ? corral::FromProto(request.wait_timeout()) : absl::InfiniteDuration();
  p.lease_ttl = request.has_lease_ttl() ? corral::FromProto(request.lease_ttl()) : absl::ZeroDuration();
  p.session_id = request.session_id();
  p.request_id = request.request_id();
  p.allow_debt = request.allow_debt();
  return p;
}

AdjustParams FromProto(const v1::AdjustRequest& request) {
  AdjustParams p;
  p.limit = request.limit();
  p.key = request.key();
  p.tokens = request.tokens();
  if (request.has_hold_for()) p.hold_for = corral::FromProto(request.hold_for());
  return p;
}

void ToProto(const LimiterStatus& status, v1::GetStatusResponse* out) {
  out->set_learning_mode(status.learning_mode);
  out->set_durable_leases(status.durable_leases);
  if (status.learning_mode) corral::ToProto(status.learning_mode_end, out->mutable_learning_mode_end());
  corral::ToProto(status.start_time, out->mutable_start_time());
  out->set_sessions(static_cast<uint32_t>(status.sessions));
  out->set_leases(static_cast<uint64_t>(status.leases));
  for (const InstanceStatus& i : status.instances) {
    v1::LimitStatus* s = out->add_limits();
    s->set_limit(i.limit);
    s->set_key(i.key);
    s->set_kind(i.kind == LimitKind::kRate ? v1::LIMIT_KIND_RATE : v1::LIMIT_KIND_CONCURRENCY);
    s->set_capacity(i.capacity);
    s->set_in_use(i.in_use);
    s->set_leases(static_cast<uint32_t>(i.leases));
    s->set_waiters(static_cast<uint32_t>(i.waiters));
    s->set_waiting_permits(i.waiting_permits);
    corral::ToProto(i.oldest_waiter_age, s->mutable_oldest_waiter_age());
    s->set_rate_per_s(i.rate_per_s);
    s->set_reclaimed_permits(i.reclaimed);
  }
}

void ToProto(const absl::Status& status, v1::CallStatus* out) {
  out->set_code(static_cast<int32_t>(status.code()));
  out->set_message(std::string(status.message()));
}

}  // namespace corral::ratelimiter
