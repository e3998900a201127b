#include "services/sandbox_host/usage/usage_meter.h"

#include <algorithm>

namespace corral::sandbox {

UsageMeter::UsageMeter(absl::Time created) : last_reading_(created) {}

void UsageMeter::ProcessStarted(absl::Time now) {
  absl::MutexLock lock(&mu_);
  ++started_;
  if (running_++ == 0) busy_since_ = now;
}

void UsageMeter::ProcessEnded(absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (running_ == 0) return;
  if (--running_ == 0) busy_ += std::max(now - busy_since_, absl::ZeroDuration());
}

void UsageMeter::Observe(absl::Time now, const CgroupUsage& usage, int64_t disk_used_bytes, bool partial) {
  absl::MutexLock lock(&mu_);
  ObserveLocked(now, usage, disk_used_bytes, partial);
}

namespace {

// Adds the trapezoid from the previous reading `last` (-1: none, then 0: before its first reading the sandbox held
// close to nothing) to `value` over `seconds`, and makes `value` the last reading. A value < 0 was not read.
void Integrate(int64_t value, double seconds, int64_t& last, double& area) {
  if (value < 0) return;
  area += (static_cast<double>(std::max<int64_t>(last, 0)) + static_cast<double>(value)) / 2 * seconds;
  last = value;
}

}  // namespace

void UsageMeter::ObserveLocked(absl::Time now, const CgroupUsage& usage, int64_t disk_used_bytes, bool partial) {
  if (now < last_reading_) return;
  const double seconds = absl::ToDoubleSeconds(now - last_reading_);
  Integrate(usage.memory_bytes, seconds, last_memory_, memory_byte_seconds_);
  Integrate(disk_used_bytes, seconds, last_disk_, disk_byte_seconds_);
  largest_memory_ = std::max(largest_memory_, usage.memory_bytes);
  last_reading_ = now;
  if (!partial && (samples_.empty() || now - samples_.back().time >= kSampleEvery)) {
    samples_.push_back({now, usage.cpu_usec, usage.memory_bytes, disk_used_bytes});
    if (samples_.size() > kSamplesKept) samples_.pop_front();
  }
}

MeteredUsage UsageMeter::Measure(absl::Time now, const CgroupUsage& usage, int64_t disk_used_bytes) {
  absl::MutexLock lock(&mu_);
  ObserveLocked(now, usage, disk_used_bytes, /*partial=*/false);
  MeteredUsage m;
  m.cgroup = usage;
  if (last_memory_ >= 0) m.memory_gib_seconds = memory_byte_seconds_ / (1 << 30);
  if (last_disk_ >= 0) m.disk_gib_seconds = disk_byte_seconds_ / (1 << 30);
  m.memory_peak_bytes =
      usage.memory_peak_bytes >= 0 ? std::max(usage.memory_peak_bytes, largest_memory_) : largest_memory_;
  m.processes_started = started_;
  m.busy = busy_ + (running_ > 0 ? std::max(now - busy_since_, absl::ZeroDuration()) : absl::ZeroDuration());
  return m;
}

bool UsageMeter::SampleDue(absl::Time now) const {
  absl::MutexLock lock(&mu_);
  return samples_.empty() || now - samples_.back().time >= kSampleEvery;
}

std::vector<UsageSample> UsageMeter::Samples(absl::Time from, absl::Time to) const {
  absl::MutexLock lock(&mu_);
  std::vector<UsageSample> out;
  for (const UsageSample& s : samples_) {
    if (s.time >= from && s.time <= to) out.push_back(s);
  }
  return out;
}

}  // namespace corral::sandbox
