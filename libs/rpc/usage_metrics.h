// What each tenant used, as Prometheus counters — corral_usage_{episodes,cpu_seconds,memory_gib_seconds,
// sandbox_seconds,llm_calls,tokens,tool_calls,cost}_total{tenant} — for the services that do work for tenants (the
// scheduler's batches, the sandbox API's keys and callers). Labels stay few: past `max_tenants` names, a new
// tenant is counted as "other".
#pragma once

#include <map>
#include <string>

#include "absl/synchronization/mutex.h"
#include "libs/core/usage_totals.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/registry.h"

namespace corral {

// Thread-safe.
class UsageMetrics {
 public:
  explicit UsageMetrics(prometheus::Registry& registry, size_t max_tenants = 64);

  void Add(const std::string& tenant, const UsageTotals& usage);

 private:
  struct Counters {
    prometheus::Counter *episodes, *cpu, *memory, *sandbox, *llm_calls, *prompt, *completion, *cached, *tools, *cost;
  };
  Counters& For(const std::string& tenant) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_tenants_;
  prometheus::Family<prometheus::Counter>& episodes_;
  prometheus::Family<prometheus::Counter>& cpu_;
  prometheus::Family<prometheus::Counter>& memory_;
  prometheus::Family<prometheus::Counter>& sandbox_;
  prometheus::Family<prometheus::Counter>& llm_calls_;
  prometheus::Family<prometheus::Counter>& tokens_;
  prometheus::Family<prometheus::Counter>& tools_;
  prometheus::Family<prometheus::Counter>& cost_;
  absl::Mutex mu_;
  std::map<std::string, Counters> tenants_ ABSL_GUARDED_BY(mu_);
};

}  // namespace corral
