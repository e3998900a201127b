#include "services/scheduler/metrics.h"

#include "absl/strings/ascii.h"
#include "libs/api/proto_time.h"
#include "services/scheduler/table/submission.h"
#include "services/scheduler/table/usage_totals.h"

namespace corral::scheduler {
namespace {

prometheus::Histogram::BucketBoundaries PhaseBuckets() {
  return {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800};
}

std::string Lower(const std::string& enum_name, const char* prefix) {
  return absl::AsciiStrToLower(enum_name.substr(std::string(prefix).size()));
}

}  // namespace

SchedulerMetrics::SchedulerMetrics(prometheus::Registry& r)
    : episodes_(prometheus::BuildCounter()
                    .Name("corral_scheduler_episodes_total")
                    .Help("Episode attempts ended, by runner, status and failure class (retried attempts included).")
                    .Register(r)),
      phase_(prometheus::BuildHistogram()
                 .Name("corral_scheduler_phase_seconds")
                 .Help("Time episodes spent per phase (queue, acquire, setup, agent, tools, verifier, total).")
                 .Register(r)),
      reward_(prometheus::BuildHistogram()
                  .Name("corral_scheduler_reward")
                  .Help("Rewards of finished episodes.")
                  .Register(r)
                  .Add({}, prometheus::Histogram::BucketBoundaries{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1})),
      retries_(prometheus::BuildCounter()
                   .Name("corral_scheduler_retries_total")
                   .Help("Attempts retried after an infra failure.")
                   .Register(r)
                   .Add({})),
      journal_errors_(prometheus::BuildCounter()
                          .Name("corral_scheduler_journal_errors_total")
                          .Help("Journal writes that failed (disk full, I/O error): what they carried is not durable.")
                          .Register(r)
                          .Add({})),
      queued_(prometheus::BuildGauge()
                  .Name("corral_scheduler_queued_episodes")
                  .Help("Episodes waiting to run.")
                  .Register(r)
                  .Add({})),
      running_(prometheus::BuildGauge()
                   .Name("corral_scheduler_running_episodes")
                   .Help("Episodes running.")
                   .Register(r)
                   .Add({})),
      awaiting_ack_(prometheus::BuildGauge()
                        .Name("corral_scheduler_results_awaiting_ack")
                        .Help("Results kept until the trainer acknowledges them.")
                        .Register(r)
                        .Add({})),
      hosts_(prometheus::BuildGauge().Name("corral_scheduler_hosts").Help("Sandbox hosts by state.").Register(r)),
      warm_ready_(prometheus::BuildGauge()
                      .Name("corral_scheduler_warm_pool_ready")
                      .Help("Warm sandboxes ready to be taken.")
                      .Register(r)
                      .Add({})),
      leased_(prometheus::BuildGauge()
                  .Name("corral_scheduler_leased_sandboxes")
                  .Help("Sandboxes leased now (LeaseSandbox, ForkLease).")
                  .Register(r)
                  .Add({})),
      leases_expired_(prometheus::BuildCounter()
                          .Name("corral_scheduler_leases_expired_total")
                          .Help("Leases that expired unreleased; their sandboxes were deleted.")
                          .Register(r)
                          .Add({})),
      warm_hits_(prometheus::BuildCounter()
                     .Name("corral_scheduler_warm_pool_hits_total")
                     .Help("Episodes that took a warm sandbox.")
                     .Register(r)
                     .Add({})),
      warm_misses_(prometheus::BuildCounter()
                       .Name("corral_scheduler_warm_pool_misses_total")
                       .Help("Episodes that found no warm sandbox of their spec and created one inline.")
                       .Register(r)
                       .Add({})),
      groups_(prometheus::BuildCounter()
                  .Name("corral_scheduler_groups_total")
                  .Help("Groups of batches with a group filter, target_groups or a failure policy, by verdict "
                        "(passed, filtered, dropped, surplus).")
                  .Register(r)),
      stale_reruns_(prometheus::BuildCounter()
                        .Name("corral_scheduler_stale_reruns_total")
                        .Help("Episodes run again because their result was older than max_staleness allows (wasted).")
                        .Register(r)
                        .Add({})),
      staleness_(prometheus::BuildHistogram()
                     .Name("corral_scheduler_delivered_staleness")
                     .Help("Policy versions between a delivered result's first version and the current one.")
                     .Register(r)
                     .Add({}, prometheus::Histogram::BucketBoundaries{0, 1, 2, 3, 4, 6, 8, 16, 32})),
      usage_(r) {
  auto& by_phase =
      prometheus::BuildGauge()
          .Name("corral_scheduler_running_by_phase")
          .Help("Running episodes by what they are doing now (acquire, setup, agent, tool, verifier, reward).")
          .Register(r);
  for (size_t i = 0; i < std::size(kRunPhases); ++i)
    running_by_phase_[i] = &by_phase.Add({{"phase", RunPhaseName(kRunPhases[i])}});
  // Every verdict exists from the start (at 0), so dashboards and rates see the series before the first one.
  absl::MutexLock lock(&mu_);
  for (const char* outcome : {"passed", "filtered", "dropped", "surplus"}) {
    group_counters_[outcome] = &groups_.Add({{"outcome", outcome}});
  }
}

void SchedulerMetrics::SetWarmPool(int64_t ready, int64_t hits, int64_t misses) {
  warm_ready_.Set(static_cast<double>(ready));
  // The pool keeps totals; the counters follow them.
  if (hits > warm_hits_.Value()) warm_hits_.Increment(static_cast<double>(hits) - warm_hits_.Value());
  if (misses > warm_misses_.Value()) warm_misses_.Increment(static_cast<double>(misses) - warm_misses_.Value());
}

void SchedulerMetrics::SetLeases(size_t leased, int64_t expired) {
  leased_.Set(static_cast<double>(leased));
  if (expired > leases_expired_.Value())
    leases_expired_.Increment(static_cast<double>(expired) - leases_expired_.Value());
}

void SchedulerMetrics::EpisodeEnded(v1::Runner runner, const v1::EpisodeResult& result, const std::string& tenant) {
  usage_.Add(tenant, UsageTotalsOf(result.usage()));
  prometheus::Counter* counter;
  std::vector<std::pair<std::string, prometheus::Histogram*>> phases;
  {
    absl::MutexLock lock(&mu_);
    auto key = std::make_tuple(static_cast<int>(runner), static_cast<int>(result.status()),
                               static_cast<int>(result.failure_class()));
    auto it = episode_counters_.find(key);
    if (it == episode_counters_.end()) {
      prometheus::Counter& c =
          episodes_.Add({{"runner", RunnerName(runner)},
                         {"status", Lower(v1::EpisodeStatus_Name(result.status()), "EPISODE_STATUS_")},
                         {"failure_class", Lower(v1::FailureClass_Name(result.failure_class()), "FAILURE_CLASS_")}});
      it = episode_counters_.emplace(key, &c).first;
    }
    counter = it->second;
    for (const char* p : {"queue", "acquire", "setup", "agent", "tools", "verifier", "total"}) {
      auto h = phase_histograms_.find(p);
      if (h == phase_histograms_.end())
        h = phase_histograms_.emplace(p, &phase_.Add({{"phase", p}}, PhaseBuckets())).first;
      phases.emplace_back(p, h->second);
    }
  }
  counter->Increment();
  const v1::PhaseTimings& t = result.timings();
  const google::protobuf::Duration* values[] = {&t.queue(), &t.sandbox_acquire(), &t.setup(), &t.agent(),
                                                &t.tools(), &t.verifier(),        &t.total()};
  for (size_t i = 0; i < phases.size(); ++i) {
    const absl::Duration d = FromProto(*values[i]);
    if (d > absl::ZeroDuration()) phases[i].second->Observe(absl::ToDoubleSeconds(d));
  }
  if (result.status() == v1::EPISODE_STATUS_FINISHED && result.has_reward()) reward_.Observe(result.reward());
}

void SchedulerMetrics::GroupDecided(const char* outcome) {
  absl::MutexLock lock(&mu_);
  auto it = group_counters_.find(outcome);
  if (it == group_counters_.end()) it = group_counters_.emplace(outcome, &groups_.Add({{"outcome", outcome}})).first;
  it->second->Increment();
}

void SchedulerMetrics::SetRunningPhases(const std::array<int, std::size(kRunPhases)>& counts) {
  for (size_t i = 0; i < counts.size(); ++i) running_by_phase_[i]->Set(counts[i]);
}

void SchedulerMetrics::SetHosts(const std::map<v1::HostState, int>& by_state) {
  absl::MutexLock lock(&mu_);
  for (v1::HostState s : {v1::HOST_STATE_HEALTHY, v1::HOST_STATE_UNREACHABLE, v1::HOST_STATE_DRAINING}) {
    auto it = host_gauges_.find(s);
    if (it == host_gauges_.end()) {
      it = host_gauges_.emplace(s, &hosts_.Add({{"state", Lower(v1::HostState_Name(s), "HOST_STATE_")}})).first;
    }
    auto n = by_state.find(s);
    it->second->Set(n == by_state.end() ? 0 : n->second);
  }
}

}  // namespace corral::scheduler
