// Pausing generation around a weight update (Proxy.PauseGeneration / ResumeGeneration; common.proto,
// "Pausing generation"). Every call registers for its whole life and enters the gate before each request it
// sends upstream: while paused it waits there instead (ticking, so a streaming agent gets keepalives). A pause
// in ABORT mode cuts the requests upstream that can be continued; their calls wait at the gate again and go on
// after the resume. The control side (gRPC threads) never touches a call's state directly: it posts to the
// call's executor, the one I/O thread its coroutine runs on. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "boost/asio/any_io_executor.hpp"
#include "boost/asio/awaitable.hpp"
#include "boost/asio/steady_timer.hpp"
#include "corral/v1/common.pb.h"
#include "libs/core/clock.h"
#include "libs/http/client.h"
#include "services/proxy/metrics.h"
#include "services/proxy/policy_version.h"

namespace corral::proxy {

class GenerationGate {
 public:
  // One call's registration. Everything but `executor` is touched only on `executor`.
  struct Call {
    explicit Call(boost::asio::any_io_executor e) : executor(e), wake(e) {}
    boost::asio::any_io_executor executor;
    boost::asio::steady_timer wake;              // the wait at the gate; a resume cancels it
    http::ClientConnection* upstream = nullptr;  // the connection its request is on, while there is one
    bool entered = false;                        // counted upstream (between Enter and Leave)
    bool continuable = true;                     // a cut can be continued after the resume
    bool aborted = false;                        // a pause cut it; the call clears it when it goes on
  };
  using CallRef = std::shared_ptr<Call>;

  GenerationGate(PolicyVersion* version, ProxyMetrics* metrics, Clock* clock)
      : version_(version), metrics_(metrics), clock_(clock) {}

  CallRef Register(boost::asio::any_io_executor executor);
  void Unregister(const CallRef& call);

  // On the call's executor: waits while paused, running `on_tick` every `interval` (it returns false to give up,
  // and then Enter returns false), then counts the call upstream until Leave.
  using OnTick = std::function<boost::asio::awaitable<bool>()>;
  boost::asio::awaitable<bool> Enter(const CallRef& call, absl::Duration interval, const OnTick& on_tick);
  void Leave(Call& call);
  // A cut request's call goes on (counted as continued).
  void Continued(Call& call);

  // ---- Control (any thread). Each returns without effect when `sequence` is below the highest applied. ----
  absl::StatusOr<v1::UpdatePolicyResponse> UpdatePolicy(const v1::UpdatePolicyRequest& request);
  // Starts (or repeats) a pause: new requests wait from now on; in ABORT mode the continuable requests upstream
  // are cut. Returns false for a stale sequence (nothing changed).
  bool Pause(const v1::PauseGenerationRequest& request);
  // Cuts every continuable request upstream now (ABORT, or a DRAIN's abort_after).
  void AbortUpstream();
  // Nothing is upstream (a pause has taken effect).
  bool Quiet() const;
  bool paused() const;
  // The counts of the current (or last) pause, for PauseGenerationResponse.
  v1::PauseGenerationResponse Counts() const;
  // Blocks the calling thread (a control thread, never a call's executor) until at least `n` calls wait at the
  // gate; false when `timeout` passed first. It wakes when the gate changes, not on a timer.
  bool AwaitHeld(int64_t n, absl::Duration timeout) const;
  absl::StatusOr<v1::ResumeGenerationResponse> Resume(const v1::ResumeGenerationRequest& request);

 private:
  // A request older than one applied (a late re-push from the scheduler) changes nothing.
  bool Stale(uint64_t sequence) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Notes `sequence` as applied, after moving to `version` when given (which may be refused: then nothing is).
  absl::Status Apply(uint64_t sequence, std::optional<int64_t> version) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  PolicyVersion* const version_;
  ProxyMetrics* const metrics_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  std::set<CallRef> calls_ ABSL_GUARDED_BY(mu_);
  uint64_t sequence_ ABSL_GUARDED_BY(mu_) = 0;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time paused_since_ ABSL_GUARDED_BY(mu_);
  int64_t upstream_ ABSL_GUARDED_BY(mu_) = 0;  // calls entered and not left
  int64_t waiting_ ABSL_GUARDED_BY(mu_) = 0;   // calls waiting at the gate
  // This pause: calls upstream when it began, and those cut since.
  int64_t upstream_at_pause_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t aborted_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace corral::proxy
