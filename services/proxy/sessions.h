// The proxy's sessions: one per episode attempt, named by env_id, with its policy, budgets used, calls in
// flight, the upstream it is sticky to, and its trajectory. Env tokens are `<env_id>.<mac>` signed with the
// cluster secret (purpose "proxy-env"), so they verify with nothing stored. Open sessions close when their TTL
// passes; closed ones are kept until acknowledged or their retention passes. Plain C++: no gRPC, no HTTP.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "corral/v1/proxy.pb.h"
#include "libs/core/clock.h"
#include "libs/core/token.h"
#include "libs/trajectory/trajectory.h"
#include "services/proxy/policy.h"

namespace corral::proxy {

inline constexpr char kEnvTokenPurpose[] = "proxy-env";

struct SessionLimits {
  int64_t max_sessions = 100000;
  absl::Duration default_ttl = absl::Hours(6);
  absl::Duration max_ttl = absl::Hours(48);
  absl::Duration default_retention = absl::Hours(24);
  v1::SessionPolicy default_policy;  // fields a request leaves unset
};

// One session. Thread-safe.
class Session {
 public:
  // `env_token`: the token the store signed for it (what Authenticate compares an agent's token with).
  Session(v1::OpenSessionRequest request, absl::Time now, absl::Duration ttl, absl::Duration retention,
          std::string env_token = "");

  const std::string& env_id() const { return request_.env_id(); }
  const v1::SessionPolicy& policy() const { return request_.policy(); }
  const v1::OpenSessionRequest& request() const { return request_; }
  const std::string& env_token() const { return env_token_; }

  bool open() const;
  BudgetUse used() const;
  // A call starts, counted in flight, unless the session's max_calls (calls recorded + in flight) is reached:
  // checked and counted under one lock, so concurrent calls cannot overrun it. Then it ends and is recorded
  // (EndCall, setting it to the call as stored), or is abandoned without a record (AbandonCall, on an internal
  // error).
  bool TryBeginCall();
  // Records `call` and sets its call to the call as stored (seq, ids and node indices); `matched` as Restore
  // gave it for the call's prompt.
  void EndCall(RecordedCall& call, std::span<const uint32_t> matched = {});
  // Ends a call a proxy that records nothing (`record: false`) made: counted (max_calls) and its usage added.
  void EndUnrecordedCall(const v1::Usage& usage);
  void AbandonCall();
  // The recorded call `seq` failed after all (its journaling did): the trajectory must not show it succeeded.
  void FailCall(uint32_t seq, const std::string& error, int http_status);
  // Replays a journaled call (after a restart).
  void Replay(RecordedCall call);
  // A new call's prompt as the model wrote it (TrajectoryStore::Restore): what was restored.
  std::vector<v1::RestoredMessage> Restore(std::vector<v1::ChatMessage>& prompt,
                                           std::vector<uint32_t>* matched = nullptr) const;
  void SetUpstream(const std::string& name);
  std::string upstream() const;

  void Close(v1::CloseReason reason, absl::Time now);
  v1::Session Snapshot() const;
  v1::Trajectory Trajectory(v1::TrajectoryFormat format) const;
  absl::Time expire_time() const;
  // An open session's TTL moves later by `d` (generation was paused that long: its agent could not call).
  void Postpone(absl::Duration d);

 private:
  void AddUsage(const v1::Usage& usage) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const v1::OpenSessionRequest request_;
  const std::string env_token_;
  const absl::Duration retention_;
  mutable absl::Mutex mu_;
  v1::SessionState state_ ABSL_GUARDED_BY(mu_) = v1::SESSION_STATE_OPEN;
  v1::CloseReason close_reason_ ABSL_GUARDED_BY(mu_) = v1::CLOSE_REASON_UNSPECIFIED;
  absl::Time open_time_, close_time_ ABSL_GUARDED_BY(mu_), expire_time_ ABSL_GUARDED_BY(mu_);
  uint32_t inflight_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t unrecorded_ ABSL_GUARDED_BY(mu_) = 0;  // calls ended by EndUnrecordedCall
  v1::Usage usage_ ABSL_GUARDED_BY(mu_);
  std::string upstream_ ABSL_GUARDED_BY(mu_);
  TrajectoryStore trajectory_ ABSL_GUARDED_BY(mu_);
};

// Thread-safe.
class SessionStore {
 public:
  SessionStore(SessionLimits limits, const TokenSigner* signer, Clock* clock);

  struct Opened {
    std::shared_ptr<Session> session;
    std::string token;
    bool created = false;  // false: an identical open session was returned (a retried OpenSession)
  };
  // INVALID_ARGUMENT (env_id, policy, TTL), ALREADY_EXISTS (env_id in use with another policy, or closed),
  // RESOURCE_EXHAUSTED (max_sessions open).
  absl::StatusOr<Opened> Open(v1::OpenSessionRequest request);
  // Restores a journaled session as it was (open or closed) without checks.
  std::shared_ptr<Session> Restore(v1::OpenSessionRequest request, absl::Time open_time);

  // The session an env token names. UNAUTHENTICATED for a malformed, forged or unknown token; FAILED_PRECONDITION
  // for a closed session (HTTP 410).
  absl::StatusOr<std::shared_ptr<Session>> Authenticate(absl::string_view token) const;
  // NOT_FOUND for an unknown (or acknowledged, or expired) env_id.
  absl::StatusOr<std::shared_ptr<Session>> Find(const std::string& env_id) const;
  std::vector<std::shared_ptr<Session>> List() const;  // by env_id
  // Closes a session (idempotent); later calls with its token are refused. NOT_FOUND for an unknown env_id.
  absl::StatusOr<std::shared_ptr<Session>> Close(const std::string& env_id, v1::CloseReason reason);
  // Closes sessions past their TTL and drops closed ones past retention; returns the env_ids closed and dropped.
  struct Expired {
    std::vector<std::shared_ptr<Session>> closed;
    std::vector<std::string> dropped;
  };
  Expired Expire();
  // Every open session's TTL moves later by `d` (a pause of generation ended after `d`).
  void PostponeOpen(absl::Duration d);
  // All or nothing: FAILED_PRECONDITION naming an open session. Returns how many were dropped.
  absl::StatusOr<uint32_t> Ack(const std::vector<std::string>& env_ids);
  size_t open_sessions() const;

 private:
  const SessionLimits limits_;
  const TokenSigner* const signer_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);
  int64_t open_count_ ABSL_GUARDED_BY(mu_) = 0;
};

// The session policy with unset fields taken from `defaults` (proto merge: set fields of the request win).
v1::SessionPolicy WithDefaults(const v1::SessionPolicy& defaults, const v1::SessionPolicy& requested);

}  // namespace corral::proxy
