// Every change to the proxy's sessions, made the same way whoever asks — the gRPC service (open, close, ack),
// the HTTP side (a finished call) and the expiry timer (TTL, retention): the in-memory store first, then the
// journal, then the gauges. Opens, closes and calls complete once journaled, and no thread waits for a commit.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "boost/asio/awaitable.hpp"
#include "libs/core/clock.h"
#include "services/proxy/metrics.h"
#include "services/proxy/proxy_journal.h"
#include "services/proxy/sessions.h"
#include "services/proxy/upstreams.h"

namespace corral::proxy {

// Thread-safe.
class SessionLedger {
 public:
  // `upstreams` (optional) tells which models are served; `default_model` is the config's (may be empty).
  SessionLedger(SessionStore* store, ProxyJournal* journal, ProxyMetrics* metrics, Clock* clock,
                const UpstreamPool* upstreams = nullptr, std::string default_model = "", bool record = true)
      : store_(store),
        journal_(journal),
        metrics_(metrics),
        clock_(clock),
        upstreams_(upstreams),
        default_model_(std::move(default_model)),
        record_(record) {}

  using Opened = SessionStore::Opened;
  // The request's model is resolved first (ResolveSessionModel: INVALID_ARGUMENT for a model not served) and
  // kept with the session. `done` runs once the session is durable, or refused (SessionStore::Open's codes; UNAVAILABLE
  // when it could not be journaled, and then it does not exist) — at once when the journal logs it, a refusal or a
  // retried open of a session that exists already; on the journal's thread with --journal-fsync or when the journal's
  // writer is far behind.
  void Open(v1::OpenSessionRequest request, absl::AnyInvocable<void(absl::StatusOr<Opened>)> done);
  // Closes the session at once (later calls with its token are refused) and runs `done` once that is durable:
  // NOT_FOUND for an unknown env_id, UNAVAILABLE when the close could not be journaled.
  void Close(const std::string& env_id, v1::CloseReason reason,
             absl::AnyInvocable<void(absl::StatusOr<std::shared_ptr<Session>>)> done);
  // All or nothing (FAILED_PRECONDITION naming an open session); the journal forgets them afterwards.
  absl::StatusOr<uint32_t> Ack(const std::vector<std::string>& env_ids);
  // Closes sessions past their TTL and drops closed ones past their retention.
  void Expire();
  // Records a finished call in its session and makes it durable; resumes on the caller's executor. `call` (the
  // caller's, kept alive until then) is set to the call as stored. A call that cannot be journaled is marked
  // failed in the trajectory (INTERNAL). A ledger that records nothing only counts it and its usage.
  boost::asio::awaitable<absl::Status> RecordCall(Session& session, RecordedCall& call,
                                                  std::vector<uint32_t> matched = {});

  SessionStore& store() { return *store_; }
  // False with `record: false`: calls are relayed and counted, never recorded or journaled (sessions still are).
  bool records() const { return record_; }

 private:
  void UpdateGauge();

  SessionStore* const store_;
  ProxyJournal* const journal_;
  ProxyMetrics* const metrics_;
  Clock* const clock_;
  const UpstreamPool* const upstreams_;
  const std::string default_model_;
  const bool record_;
};

}  // namespace corral::proxy
