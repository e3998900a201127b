// Every metric of corral-proxy, in one place. Labels are routes, statuses and upstream names, never env ids.
#pragma once

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "services/proxy/api_registry.h"

namespace corral::proxy {

// Thread-safe (prometheus-cpp metrics are).
struct ProxyMetrics {
  explicit ProxyMetrics(prometheus::Registry& r)
      : requests(prometheus::BuildCounter()
                     .Name("corral_proxy_requests_total")
                     .Help("HTTP requests by route, status and upstream.")
                     .Register(r)),
        overhead(prometheus::BuildHistogram()
                     .Name("corral_proxy_overhead_seconds")
                     .Help("Time a call spent in the proxy itself (total minus time waiting on the upstream).")
                     .Register(r)
                     .Add({}, prometheus::Histogram::BucketBoundaries{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                                      0.01, 0.025, 0.05, 0.1})),
        ttft(prometheus::BuildHistogram()
                 .Name("corral_proxy_time_to_first_token_seconds")
                 .Help("From the request's arrival to the upstream's first response byte.")
                 .Register(r)
                 .Add({}, LatencyBuckets())),
        latency(prometheus::BuildHistogram()
                    .Name("corral_proxy_call_seconds")
                    .Help("From the request's arrival to the response's last byte.")
                    .Register(r)
                    .Add({}, LatencyBuckets())),
        tokens(prometheus::BuildCounter()
                   .Name("corral_proxy_tokens_total")
                   .Help("Tokens by direction (prompt, completion).")
                   .Register(r)),
        prompt_tokens(tokens.Add({{"direction", "prompt"}})),
        completion_tokens(tokens.Add({{"direction", "completion"}})),
        open_sessions(
            prometheus::BuildGauge().Name("corral_proxy_open_sessions").Help("Open sessions.").Register(r).Add({})),
        open_streams(prometheus::BuildGauge()
                         .Name("corral_proxy_open_streams")
                         .Help("Streams being relayed.")
                         .Register(r)
                         .Add({})),
        upstream_healthy(prometheus::BuildGauge()
                             .Name("corral_proxy_upstream_healthy")
                             .Help("1 when the upstream passes its health checks and its circuit is closed.")
                             .Register(r)),
        retries(prometheus::BuildCounter()
                    .Name("corral_proxy_upstream_retries_total")
                    .Help("Upstream attempts retried (failures before the first response byte).")
                    .Register(r)
                    .Add({})),
        upstream_errors(
            prometheus::BuildCounter()
                .Name("corral_proxy_upstream_errors_total")
                .Help("Upstream attempts that failed: no connection, a timeout, or a 5xx before the first byte.")
                .Register(r)),
        journal_errors(
            prometheus::BuildCounter()
                .Name("corral_proxy_journal_errors_total")
                .Help("Journal writes that failed (disk full, I/O error): the call or session is not durable.")
                .Register(r)
                .Add({})),
        journal_commit(
            prometheus::BuildHistogram()
                .Name("corral_proxy_journal_commit_seconds")
                .Help(
                    "Time to make a recorded call durable (its append to the record log; a commit with journal_fsync).")
                .Register(r)
                .Add({}, prometheus::Histogram::BucketBoundaries{0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                                 0.05, 0.1, 0.5})),
        pauses(prometheus::BuildCounter()
                   .Name("corral_proxy_pauses_total")
                   .Help("Generation pauses (PauseGeneration on an unpaused proxy).")
                   .Register(r)
                   .Add({})),
        paused(prometheus::BuildGauge()
                   .Name("corral_proxy_paused")
                   .Help("1 while generation is paused.")
                   .Register(r)
                   .Add({})),
        paused_seconds(prometheus::BuildCounter()
                           .Name("corral_proxy_paused_seconds_total")
                           .Help("Time generation was paused, counted at each resume.")
                           .Register(r)
                           .Add({})),
        paused_calls(prometheus::BuildCounter()
                         .Name("corral_proxy_paused_calls_total")
                         .Help("Calls a pause touched: held (waited to go upstream), aborted (cut upstream), "
                               "continued (sent again after the resume).")
                         .Register(r)),
        calls_held(paused_calls.Add({{"outcome", "held"}})),
        calls_aborted(paused_calls.Add({{"outcome", "aborted"}})),
        calls_continued(paused_calls.Add({{"outcome", "continued"}})),
        quota_wait(prometheus::BuildHistogram()
                       .Name("corral_proxy_quota_wait_seconds")
                       .Help("Time a call waited for its quotas at the ratelimiter (calls with quotas only).")
                       .Register(r)
                       .Add({}, LatencyBuckets())),
        quota_calls(prometheus::BuildCounter()
                        .Name("corral_proxy_quota_calls_total")
                        .Help("Quota outcomes: refused (not granted within quota_max_wait: the agent got 429), "
                              "throttled (an upstream 429 absorbed: the quota was held and the call waited again).")
                        .Register(r)),
        quota_refused(quota_calls.Add({{"outcome", "refused"}})),
        quota_throttled(quota_calls.Add({{"outcome", "throttled"}})),
        policy_version(prometheus::BuildGauge()
                           .Name("corral_proxy_policy_version")
                           .Help("The policy version the upstreams serve, as the trainer last said.")
                           .Register(r)
                           .Add({})) {}

  static prometheus::Histogram::BucketBoundaries LatencyBuckets() {
    return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
  }
  // The counter of requests to `api` (its path is the `route` label) answered `status` by upstream number
  // `upstream` (-1: none), created on first use and kept (no label-map lookup per request). Call SetUpstreams
  // first.
  // Also creates each upstream's error counter at zero, so a dashboard or an alert sees it before any error.
  void SetUpstreams(std::vector<std::string> names) {
    upstream_names_ = std::move(names);
    upstream_error_counters_.clear();
    for (const std::string& name : upstream_names_)
      upstream_error_counters_.push_back(&upstream_errors.Add({{"upstream", name}}));
  }
  void UpstreamFailed(int upstream) {
    if (upstream >= 0 && upstream < static_cast<int>(upstream_error_counters_.size())) {
      upstream_error_counters_[static_cast<size_t>(upstream)]->Increment();
    }
  }
  prometheus::Counter& Request(const ApiSpec& api, int status, int upstream) {
    const int64_t key = (static_cast<int64_t>(api.index) << 40) | (static_cast<int64_t>(status & 0xffff) << 24) |
                        static_cast<int64_t>(upstream + 1);
    absl::MutexLock lock(&request_mu_);
    prometheus::Counter*& counter = request_counters_[key];
    if (counter == nullptr) {
      const std::string name = upstream >= 0 && upstream < static_cast<int>(upstream_names_.size())
                                   ? upstream_names_[static_cast<size_t>(upstream)]
                                   : "";
      counter =
          &requests.Add({{"route", std::string(api.path)}, {"status", std::to_string(status)}, {"upstream", name}});
    }
    return *counter;
  }

  prometheus::Family<prometheus::Counter>& requests;
  prometheus::Histogram& overhead;
  prometheus::Histogram& ttft;
  prometheus::Histogram& latency;
  prometheus::Family<prometheus::Counter>& tokens;
  prometheus::Counter& prompt_tokens;
  prometheus::Counter& completion_tokens;
  prometheus::Gauge& open_sessions;
  prometheus::Gauge& open_streams;
  prometheus::Family<prometheus::Gauge>& upstream_healthy;
  prometheus::Counter& retries;
  prometheus::Family<prometheus::Counter>& upstream_errors;
  prometheus::Counter& journal_errors;
  prometheus::Histogram& journal_commit;
  prometheus::Counter& pauses;
  prometheus::Gauge& paused;
  prometheus::Counter& paused_seconds;
  prometheus::Family<prometheus::Counter>& paused_calls;
  prometheus::Counter& calls_held;
  prometheus::Counter& calls_aborted;
  prometheus::Counter& calls_continued;
  prometheus::Histogram& quota_wait;
  prometheus::Family<prometheus::Counter>& quota_calls;
  prometheus::Counter& quota_refused;
  prometheus::Counter& quota_throttled;
  prometheus::Gauge& policy_version;

 private:
  std::vector<std::string> upstream_names_;
  std::vector<prometheus::Counter*> upstream_error_counters_;
  absl::Mutex request_mu_;
  absl::flat_hash_map<int64_t, prometheus::Counter*> request_counters_ ABSL_GUARDED_BY(request_mu_);
};

}  // namespace corral::proxy
