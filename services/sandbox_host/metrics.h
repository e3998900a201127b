// Every metric of corral-sandbox-host, in one place. Labels are outcomes only, never sandbox ids.
#pragma once

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace corral::sandbox {

// Thread-safe (prometheus-cpp metrics are).
struct SandboxHostMetrics {
  explicit SandboxHostMetrics(prometheus::Registry& registry)
      : live(prometheus::BuildGauge()
                 .Name("corral_sandbox_host_sandboxes")
                 .Help("Live sandboxes.")
                 .Register(registry)
                 .Add({})),
        capacity(prometheus::BuildGauge()
                     .Name("corral_sandbox_host_capacity")
                     .Help("Most sandboxes this host keeps alive at once.")
                     .Register(registry)
                     .Add({})),
        creates(prometheus::BuildCounter()
                    .Name("corral_sandbox_host_creates_total")
                    .Help("Sandboxes asked for, by outcome: created or rejected (host full).")
                    .Register(registry)),
        created(creates.Add({{"outcome", "created"}})),
        rejected(creates.Add({{"outcome", "rejected"}})),
        deletes(prometheus::BuildCounter()
                    .Name("corral_sandbox_host_deletes_total")
                    .Help("Sandboxes deleted.")
                    .Register(registry)
                    .Add({})),
        exec_seconds(prometheus::BuildHistogram()
                         .Name("corral_sandbox_host_exec_seconds")
                         .Help("Exec duration from start to exit, by outcome.")
                         .Register(registry)),
        quarantined(prometheus::BuildGauge()
                        .Name("corral_sandbox_host_uid_quarantined")
                        .Help("uids held back because a process survived their sandbox's teardown.")
                        .Register(registry)
                        .Add({})),
        evictions(prometheus::BuildCounter()
                      .Name("corral_sandbox_host_evictions_total")
                      .Help("Sandboxes deleted because they were idle for their idle timeout.")
                      .Register(registry)
                      .Add({})),
        template_builds(prometheus::BuildHistogram()
                            .Name("corral_sandbox_host_template_build_seconds")
                            .Help("Template builds (files, setup commands, copy-out), by outcome.")
                            .Register(registry)),
        clone_seconds(prometheus::BuildHistogram()
                          .Name("corral_sandbox_host_template_clone_seconds")
                          .Help("Time to clone a template into a new sandbox home.")
                          .Register(registry)
                          .Add({}, prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                                           0.05, 0.1, 0.25, 0.5, 1, 2.5, 5})),
        forks(prometheus::BuildCounter()
                  .Name("corral_sandbox_host_forks_total")
                  .Help("ForkSandbox calls on a live sandbox, by outcome: forked, refused (processes or calls still "
                        "running, or a delete came) or failed.")
                  .Register(registry)),
        fork_seconds(prometheus::BuildHistogram()
                         .Name("corral_sandbox_host_fork_seconds")
                         .Help("Time to fork a sandbox, its freeze and all its children included.")
                         .Register(registry)
                         .Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                                          0.25, 0.5, 1, 2.5, 5})) {}

  prometheus::Histogram& Exec(const char* outcome) {
    static const prometheus::Histogram::BucketBoundaries kBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                                     0.5,   1,      2.5,   5,    10,    30,   60,  300};
    return exec_seconds.Add({{"outcome", outcome}}, kBuckets);
  }

  prometheus::Histogram& TemplateBuild(const char* outcome) {
    static const prometheus::Histogram::BucketBoundaries kBuckets = {0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800};
    return template_builds.Add({{"outcome", outcome}}, kBuckets);
  }

  prometheus::Gauge& live;
  prometheus::Gauge& capacity;
  prometheus::Family<prometheus::Counter>& creates;
  prometheus::Counter& created;
  prometheus::Counter& rejected;
  prometheus::Counter& deletes;
  prometheus::Family<prometheus::Histogram>& exec_seconds;
  prometheus::Gauge& quarantined;
  prometheus::Counter& evictions;
  prometheus::Family<prometheus::Histogram>& template_builds;
  prometheus::Histogram& clone_seconds;
  prometheus::Family<prometheus::Counter>& forks;
  prometheus::Histogram& fork_seconds;
};

}  // namespace corral::sandbox
