// Every metric of corral-scheduler, in one place. Labels are runners, statuses, failure classes, phases and host
// states — never batch, episode or sandbox ids. Handles are created once (per label set) and kept.
#pragma once

#include <array>
#include <iterator>
#include <map>
#include <string>
#include <tuple>

#include "absl/synchronization/mutex.h"
#include "corral/v1/scheduler.pb.h"
#include "libs/rpc/usage_metrics.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "services/scheduler/episode/episode_driver.h"
#include "services/scheduler/table/episode_table.h"
#include "services/scheduler/table/run_control.h"

namespace corral::scheduler {

// Thread-safe.
class SchedulerMetrics : public TableObserver, public EpisodeObserver {
 public:
  explicit SchedulerMetrics(prometheus::Registry& r);

  // An attempt ended (every attempt, retried ones included): counts, phase latencies, reward, and what it cost
  // (corral_usage_*_total{tenant}: what was spent, retried attempts included).
  void EpisodeEnded(v1::Runner runner, const v1::EpisodeResult& result, const std::string& tenant) override;
  void Retried() override { retries_.Increment(); }
  // A leased sandbox (a sandbox API's) was deleted: what it cost, for its tenant.
  void SandboxRetired(const std::string& tenant, const UsageTotals& usage) { usage_.Add(tenant, usage); }
  void JournalWriteFailed() { journal_errors_.Increment(); }
  // Sampled periodically.
  void SetQueue(double queued, double running, double awaiting_ack) {
    queued_.Set(queued);
    running_.Set(running);
    awaiting_ack_.Set(awaiting_ack);
  }
  void SetHosts(const std::map<v1::HostState, int>& by_state);
  // Running episodes by what they are doing now, indexed like kRunPhases.
  void SetRunningPhases(const std::array<int, std::size(kRunPhases)>& counts);
  // Ready warm sandboxes, and the pool's hit and miss totals so far.
  void SetWarmPool(int64_t ready, int64_t hits, int64_t misses);
  // Sandboxes leased now, and leases that expired (their sandboxes deleted) since start.
  void SetLeases(size_t leased, int64_t expired);
  // Asynchronous RL (TableObserver): group verdicts, stale re-runs, staleness at delivery.
  void GroupDecided(const char* outcome) override;
  void StaleRerun() override { stale_reruns_.Increment(); }
  void Delivered(int64_t staleness) override { staleness_.Observe(static_cast<double>(staleness)); }

 private:
  prometheus::Family<prometheus::Counter>& episodes_;
  prometheus::Family<prometheus::Histogram>& phase_;
  prometheus::Histogram& reward_;
  prometheus::Counter& retries_;
  prometheus::Counter& journal_errors_;
  prometheus::Gauge& queued_;
  prometheus::Gauge& running_;
  prometheus::Gauge& awaiting_ack_;
  std::array<prometheus::Gauge*, std::size(kRunPhases)> running_by_phase_;
  prometheus::Family<prometheus::Gauge>& hosts_;
  prometheus::Gauge& warm_ready_;
  prometheus::Gauge& leased_;
  prometheus::Counter& leases_expired_;
  prometheus::Counter& warm_hits_;
  prometheus::Counter& warm_misses_;
  prometheus::Family<prometheus::Counter>& groups_;
  prometheus::Counter& stale_reruns_;
  prometheus::Histogram& staleness_;
  UsageMetrics usage_;
  absl::Mutex mu_;
  std::map<std::tuple<int, int, int>, prometheus::Counter*> episode_counters_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Histogram*> phase_histograms_ ABSL_GUARDED_BY(mu_);
  std::map<int, prometheus::Gauge*> host_gauges_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Counter*> group_counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace corral::scheduler
