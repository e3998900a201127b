// Every metric of corral-sandbox-api, in one place. Labels are routes, HTTP codes and answer statuses.
#pragma once

#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace corral::sandbox_api {

// Thread-safe (prometheus-cpp metrics are).
struct SandboxApiMetrics {
  explicit SandboxApiMetrics(prometheus::Registry& r)
      : requests(prometheus::BuildCounter()
                     .Name("corral_sandbox_api_requests_total")
                     .Help("HTTP requests by route and HTTP status.")
                     .Register(r)),
        run_code(prometheus::BuildCounter()
                     .Name("corral_sandbox_api_run_code_total")
                     .Help("/run_code answers by status (Success, Failed, SandboxError, or the refusal).")
                     .Register(r)),
        run_code_seconds(prometheus::BuildHistogram()
                             .Name("corral_sandbox_api_run_code_seconds")
                             .Help("A /run_code call, from its arrival to its answer.")
                             .Register(r)
                             .Add({}, Buckets())),
        permit_wait_seconds(prometheus::BuildHistogram()
                                .Name("corral_sandbox_api_permit_wait_seconds")
                                .Help("Time a /run_code call waited for its code_limit permit.")
                                .Register(r)
                                .Add({}, Buckets())),
        lease_seconds(prometheus::BuildHistogram()
                          .Name("corral_sandbox_api_lease_seconds")
                          .Help("Time a /run_code call waited for its sandbox (LeaseSandbox).")
                          .Register(r)
                          .Add({}, Buckets())),
        running(prometheus::BuildGauge()
                    .Name("corral_sandbox_api_running")
                    .Help("/run_code calls holding a permit now.")
                    .Register(r)
                    .Add({})),
        e2b_processes(prometheus::BuildGauge()
                          .Name("corral_sandbox_api_e2b_processes")
                          .Help("Processes started through the E2B API on this replica that run now.")
                          .Register(r)
                          .Add({})) {}

  void Request(const std::string& route, int code) {
    requests.Add({{"route", route}, {"code", std::to_string(code)}}).Increment();
  }

  prometheus::Family<prometheus::Counter>& requests;
  prometheus::Family<prometheus::Counter>& run_code;
  prometheus::Histogram& run_code_seconds;
  prometheus::Histogram& permit_wait_seconds;
  prometheus::Histogram& lease_seconds;
  prometheus::Gauge& running;
  prometheus::Gauge& e2b_processes;

 private:
  static prometheus::Histogram::BucketBoundaries Buckets() {
    return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
  }
};

}  // namespace corral::sandbox_api
