// Process metrics in the standard Prometheus names (process_resident_memory_bytes, process_cpu_seconds_total,
// process_open_fds, process_threads, process_start_time_seconds), read from /proc/self at scrape time.
#pragma once

#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace corral {

// Thread-safe (stateless).
class ProcessMetrics final : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;
};

}  // namespace corral
