// What one sandbox has cost since it was created, beyond what its cgroup counts by itself: memory over time
// (GiB-seconds, from readings the host takes every second and at every read), the memory peak where the cgroup
// keeps none, the time some process of it ran (busy), how many processes the host started in it, and a reading
// every few seconds for metrics over time (E2B's getMetrics). A parent keeps its meter across its forks (its
// cgroup goes on counting); a fork's child starts a meter and a cgroup of its own. Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "services/sandbox_host/linux/cgroup.h"

namespace corral::sandbox {

// One reading, as metrics over time show it; -1 where it was not measured.
struct UsageSample {
  absl::Time time;
  int64_t cpu_usec = -1;  // since the sandbox was created
  int64_t memory_bytes = -1;
  int64_t disk_used_bytes = -1;  // an image sandbox's writable layer
};

// What the meter knows at a read.
struct MeteredUsage {
  CgroupUsage cgroup;              // this reading
  double memory_gib_seconds = -1;  // memory held over time; -1 when no reading had a memory figure
  double disk_gib_seconds = -1;    // an image sandbox's writable layer over time; -1 when none was read
  int64_t memory_peak_bytes = -1;  // the cgroup's own peak where it keeps one, else the largest reading
  int64_t processes_started = 0;   // by the host (commands, background processes, tool drivers)
  absl::Duration busy;             // time during which at least one of those ran
};

class UsageMeter {
 public:
  static constexpr absl::Duration kSampleEvery = absl::Seconds(5);
  static constexpr size_t kSamplesKept = 720;  // an hour of samples

  explicit UsageMeter(absl::Time created);

  // A process the host started began, or ended.
  void ProcessStarted(absl::Time now);
  void ProcessEnded(absl::Time now);
  // A reading of the cgroup (and of the disk an image sandbox's writable layer uses; -1: none): memory and disk
  // are integrated over the time since the previous reading (trapezoids), and a sample is kept every kSampleEvery.
  // Readings older than the latest are ignored.
  // `partial`: a reading of memory (and disk) alone, never kept as a sample.
  void Observe(absl::Time now, const CgroupUsage& usage, int64_t disk_used_bytes = -1, bool partial = false);
  // Whether a reading at `now` would be kept as a sample (the periodic reader then reads everything; between
  // samples, memory alone).
  bool SampleDue(absl::Time now) const;
  // Observe, then what the meter knows as of `now`.
  MeteredUsage Measure(absl::Time now, const CgroupUsage& usage, int64_t disk_used_bytes = -1);
  // The samples kept whose time is in [from, to], oldest first.
  std::vector<UsageSample> Samples(absl::Time from, absl::Time to) const;

 private:
  void ObserveLocked(absl::Time now, const CgroupUsage& usage, int64_t disk_used_bytes, bool partial)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::Time last_reading_ ABSL_GUARDED_BY(mu_);
  int64_t last_memory_ ABSL_GUARDED_BY(mu_) = -1;
  double memory_byte_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_disk_ ABSL_GUARDED_BY(mu_) = -1;
  double disk_byte_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t largest_memory_ ABSL_GUARDED_BY(mu_) = -1;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time busy_since_ ABSL_GUARDED_BY(mu_);
  absl::Duration busy_ ABSL_GUARDED_BY(mu_);
  int64_t started_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<UsageSample> samples_ ABSL_GUARDED_BY(mu_);
};

}  // namespace corral::sandbox
