// The inference backends behind the proxy and how a call picks one: session-sticky by consistent hashing on
// env_id (weighted virtual nodes, so a multi-turn episode keeps hitting the same KV prefix cache), and when the
// sticky backend is unavailable — unhealthy by active checks, circuit open after consecutive failures, or
// already tried by this call — the least-outstanding available backend serving the model. When too few of the
// backends serving a model are available (Envoy's panic threshold; with one backend: none), every one of them is
// tried regardless: a saturated vLLM answers /health late exactly when it is busiest, and refusing every call
// untried would turn a slow health check into an outage. Plain C++.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "libs/core/clock.h"

namespace corral::proxy {

// Ratelimiter limits a call is charged against (the proxy's quotas.h): any of the three may be empty.
struct QuotaSpec {
  std::string requests;     // a rate limit: one token per call
  std::string tokens;       // a rate limit: the call's tokens, estimated up front and corrected by its usage
  std::string concurrency;  // a concurrency limit: one permit while the call is upstream
  std::string key;          // the instance key of keyed limits; "{model}" stands for the model's name
  bool empty() const { return requests.empty() && tokens.empty() && concurrency.empty(); }
};

struct UpstreamSpec {
  std::string name;
  std::string host;  // an IP address
  uint16_t port = 0;
  std::vector<std::string> models;  // empty: any model
  int weight = 1;
  QuotaSpec quota;  // empty: none
  // Agent APIs the upstream serves itself ("responses": /v1/responses, "messages": /v1/messages): calls in them go
  // through untranslated (native pass-through) when every upstream serving the model lists the API.
  std::vector<std::string> dialects;
  // A translated call offering tools the upstream cannot run (server and built-in tools) is refused (HTTP 400
  // naming the tool) instead of going without them. YAML: `unrunnable_tools: refuse` (default `leave_out`).
  bool refuse_unrunnable_tools = false;
};

// "http://HOST:PORT[/...]" (HOST an IP address). INVALID_ARGUMENT otherwise. The name is "HOST:PORT".
absl::StatusOr<UpstreamSpec> ParseUpstreamUrl(const std::string& url);

struct Upstream {
  UpstreamSpec spec;
  int index = 0;  // in UpstreamPool::all()
  std::atomic<int64_t> outstanding{0};
  std::atomic<int> consecutive_failures{0};
  std::atomic<int64_t> open_until_ns{0};  // circuit open (refused) until then
  std::atomic<bool> healthy{true};        // last active health check, or a call that got through since
  bool Serves(const std::string& model) const;
  // The last health check's verdict, with why it failed ("" when healthy).
  void SetHealth(bool ok, std::string why);
  std::string health_error() const;
  // Model ids the upstream lists at GET /v1/models (learned by the health checks).
  void SetDiscovered(std::vector<std::string> models);
  std::vector<std::string> discovered() const;

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> discovered_ ABSL_GUARDED_BY(mu_);
  std::string health_error_ ABSL_GUARDED_BY(mu_);
};

struct BreakerOptions {
  int failures_to_open = 3;
  absl::Duration open_for = absl::Seconds(10);
  // Below this share (percent) of available upstreams among those serving a model, calls go to all of them
  // (healthy or not, circuit open or not). 0: never; health and circuits always decide.
  int64_t panic_threshold_percent = 50;
};

// Thread-safe.
class UpstreamPool {
 public:
  UpstreamPool(std::vector<UpstreamSpec> specs, Clock* clock, BreakerOptions breaker = {});

  // nullptr when no available upstream serves `model` (excluding `tried`); in panic (see above) unavailable
  // upstreams count as available.
  Upstream* Pick(const std::string& env_id, const std::string& model, const std::vector<Upstream*>& tried);
  // Outcome of an attempt: failures before the first response byte count toward the circuit breaker; a success
  // marks the upstream healthy and closes its circuit (it answered, whatever its last health check said).
  void Succeeded(Upstream* u);
  void Failed(Upstream* u);
  bool Available(const Upstream& u) const;
  bool Serves(const std::string& model) const;
  // Why Pick passes over the upstreams serving `model` that are not in `tried`: "NAME (unhealthy: WHY), NAME
  // (circuit open for 4s more)"; "" when it passes over none (in panic it passes over none).
  std::string Skipped(const std::string& model, const std::vector<Upstream*>& tried) const;

  const std::vector<Upstream*>& all() const { return raw_; }
  // Every model some upstream declares or lists (GET /v1/models when a session's policy allows any).
  std::vector<std::string> models() const;
  // The same, but nullopt while some upstream's models are unknown (it declares none and has not answered
  // GET /v1/models yet): what may be checked against.
  std::optional<std::vector<std::string>> known_models() const;
  // Whether a call to `model` in the agent API `dialect` goes to the upstream untranslated: some upstream serves
  // the model and every one that does serves the API itself (so whichever is picked, retries included, can).
  bool ServesNatively(const std::string& model, absl::string_view dialect) const;
  // Whether some upstream serving `model` refuses calls offering tools it cannot run (refuse_unrunnable_tools).
  bool RefusesUnrunnableTools(const std::string& model) const;

 private:
  Clock* const clock_;
  const BreakerOptions breaker_;
  std::vector<std::unique_ptr<Upstream>> upstreams_;
  std::vector<Upstream*> raw_;
  std::vector<std::pair<uint64_t, size_t>> ring_;  // virtual node hash → upstream index, sorted

  // Whether too few of the upstreams serving `model` are available (see BreakerOptions).
  bool Panicking(const std::string& model) const;
};

uint64_t Hash64(const std::string& s);

}  // namespace corral::proxy
