#include "services/sandbox_host/usage/usage_meter.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace corral::sandbox {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1000);

CgroupUsage Memory(int64_t bytes, int64_t cpu_usec = 0) {
  CgroupUsage u;
  u.memory_bytes = bytes;
  u.cpu_usec = cpu_usec;
  return u;
}

// Memory held over time is the area under the readings (trapezoids from 0 at creation), in GiB-seconds.
TEST(UsageMeterTest, MemoryOverTimeIsTheAreaUnderTheReadings) {
  UsageMeter meter(kStart);
  constexpr int64_t kGiB = int64_t{1} << 30;
  meter.Observe(kStart + absl::Seconds(2), Memory(kGiB));                      // 0 → 1 GiB over 2 s: 1 GiB-s
  meter.Observe(kStart + absl::Seconds(4), Memory(kGiB));                      // 1 GiB for 2 s: 2 GiB-s
  const MeteredUsage m = meter.Measure(kStart + absl::Seconds(6), Memory(0));  // 1 → 0 over 2 s: 1 GiB-s
  EXPECT_DOUBLE_EQ(m.memory_gib_seconds, 4.0);
  EXPECT_EQ(m.memory_peak_bytes, kGiB);  // no peak from the cgroup: the largest reading
  EXPECT_EQ(m.disk_gib_seconds, -1);     // no disk reading: not measured

  UsageMeter disk(kStart);
  disk.Observe(kStart + absl::Seconds(10), CgroupUsage{}, 2 * kGiB);  // 0 → 2 GiB over 10 s: 10 GiB-s
  EXPECT_DOUBLE_EQ(disk.Measure(kStart + absl::Seconds(20), CgroupUsage{}, 2 * kGiB).disk_gib_seconds, 30.0);
}

TEST(UsageMeterTest, TheCgroupsOwnPeakWinsOverTheReadingsAndNothingReadIsNotMeasured) {
  UsageMeter meter(kStart);
  CgroupUsage none;  // no memory controller
  MeteredUsage m = meter.Measure(kStart + absl::Seconds(1), none);
  EXPECT_EQ(m.memory_gib_seconds, -1);
  EXPECT_EQ(m.memory_peak_bytes, -1);
  CgroupUsage with_peak = Memory(100);
  with_peak.memory_peak_bytes = 5000;  // a spike between two readings
  m = meter.Measure(kStart + absl::Seconds(2), with_peak);
  EXPECT_EQ(m.memory_peak_bytes, 5000);
}

TEST(UsageMeterTest, BusyIsTheTimeSomeProcessRanAndOverlapsCountOnce) {
  UsageMeter meter(kStart);
  meter.ProcessStarted(kStart + absl::Seconds(1));
  meter.ProcessStarted(kStart + absl::Seconds(2));  // overlaps the first
  meter.ProcessEnded(kStart + absl::Seconds(3));
  meter.ProcessEnded(kStart + absl::Seconds(4));     // busy 1 → 4
  meter.ProcessStarted(kStart + absl::Seconds(10));  // still running at the read
  const MeteredUsage m = meter.Measure(kStart + absl::Seconds(12), CgroupUsage{});
  EXPECT_EQ(m.busy, absl::Seconds(5));
  EXPECT_EQ(m.processes_started, 3);
  meter.ProcessEnded(kStart + absl::Seconds(13));
  meter.ProcessEnded(kStart + absl::Seconds(14));  // an unmatched end changes nothing
  EXPECT_EQ(meter.Measure(kStart + absl::Seconds(20), CgroupUsage{}).busy, absl::Seconds(6));
}

TEST(UsageMeterTest, ASampleIsKeptEveryFiveSecondsAndTheOldestGoFirst) {
  UsageMeter meter(kStart);
  for (int s = 1; s <= 20; ++s) meter.Observe(kStart + absl::Seconds(s), Memory(s, s * 1000), s * 10);
  std::vector<UsageSample> samples = meter.Samples(absl::InfinitePast(), absl::InfiniteFuture());
  ASSERT_EQ(samples.size(), 4u);  // at 1, 6, 11, 16 s
  EXPECT_EQ(samples[1].time, kStart + absl::Seconds(6));
  EXPECT_EQ(samples[1].memory_bytes, 6);
  EXPECT_EQ(samples[1].cpu_usec, 6000);
  EXPECT_EQ(samples[1].disk_used_bytes, 60);
  EXPECT_EQ(meter.Samples(kStart + absl::Seconds(5), kStart + absl::Seconds(12)).size(), 2u);
  meter.Observe(kStart + absl::Seconds(3), Memory(1 << 30));  // older than the latest reading: ignored
  UsageMeter partial(kStart);
  EXPECT_TRUE(partial.SampleDue(kStart));
  partial.Observe(kStart + absl::Seconds(1), Memory(10), -1, /*partial=*/true);  // counted, not a sample
  EXPECT_TRUE(partial.SampleDue(kStart + absl::Seconds(1)));
  EXPECT_THAT(partial.Samples(absl::InfinitePast(), absl::InfiniteFuture()), ::testing::IsEmpty());
  EXPECT_DOUBLE_EQ(partial.Measure(kStart + absl::Seconds(1), Memory(10)).memory_gib_seconds * (1 << 30), 5.0);
  EXPECT_EQ(meter.Measure(kStart + absl::Seconds(20), Memory(20)).memory_peak_bytes, 20);

  UsageMeter long_lived(kStart);
  for (size_t i = 0; i < UsageMeter::kSamplesKept + 10; ++i) {
    long_lived.Observe(kStart + UsageMeter::kSampleEvery * static_cast<double>(i + 1), Memory(1));
  }
  samples = long_lived.Samples(absl::InfinitePast(), absl::InfiniteFuture());
  ASSERT_EQ(samples.size(), UsageMeter::kSamplesKept);
  EXPECT_EQ(samples.front().time, kStart + UsageMeter::kSampleEvery * 11.0);
}

}  // namespace
}  // namespace corral::sandbox
