// Every metric of corral-proxy, in one place. Labels are routes, statuses and upstream names, never env ids.
#pragma once

#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

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
        tokens(prometheus::BuildCounter().Name("corral_proxy_tokens_total").Help("Tokens by direction (prompt, completion).").Register(r)),
        prompt_tokens(tokens.Add({{"direction", "prompt"}})),
        completion_tokens(tokens.Add({{"direction", "completion"}})),
        open_sessions(prometheus::BuildGauge().Name("corral_proxy_open_sessions").Help("Open sessions.").Register(r).Add({})),
        open_streams(prometheus::BuildGauge().Name("corral_proxy_open_streams").Help("Streams being relayed.").Register(r).Add({})),
        upstream_healthy(prometheus::BuildGauge()
                             .Name("corral_proxy_upstream_healthy")
                             .Help("1 when the upstream passes its health checks and its circuit is closed.")
                             .Register(r)),
        retries(prometheus::BuildCounter()
                    .Name("corral_proxy_upstream_retries_total")
                    .Help("Upstream attempts retried (failures before the first response byte).")
                    .Register(r)
                    .Add({})),
        journal_commit(prometheus::BuildHistogram()
                           .Name("corral_proxy_journal_commit_seconds")
                           .Help("Time to make a recorded call durable (group commit included).")
                           .Register(r)
                           .Add({}, prometheus::Histogram::BucketBoundaries{0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                                            0.025, 0.05, 0.1, 0.5})) {}

  static prometheus::Histogram::BucketBoundaries LatencyBuckets() {
    return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
  }
  prometheus::Counter& Request(const std::string& route, int status, const std::string& upstream) {
    return requests.Add({{"route", route}, {"status", std::to_string(status)}, {"upstream", upstream}});
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
  prometheus::Histogram& journal_commit;
};

}  // namespace corral::proxy
