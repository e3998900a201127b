// What a sandbox costs, measured for real (root, a cgroup): CPU and memory a process burns are in its usage within
// 10 %, its own files on disk, and a fork's child counts only what it did itself.
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "services/sandbox_host/tests/fork_fixture.h"

namespace corral::sandbox {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// A Python process that holds `mib` MiB (touched) and runs on the CPU until it has used `seconds` of its own
// time, then prints the CPU time it used in all (its allocation and start-up included), as the kernel counted it
// for the process: the figure the cgroup's must match.
std::vector<std::string> Burn(double seconds, int mib) {
  return {"python3", "-c",
          absl::StrCat("import time\nheld = bytearray(", mib, " << 20)\nwhile time.process_time() < ", seconds,
                       ":\n  for _ in range(10000): pass\nprint(time.process_time())\n")};
}

double Printed(const Collected& c) {
  double v = 0;
  EXPECT_TRUE(absl::SimpleAtod(absl::StripAsciiWhitespace(c.out), &v)) << c.out << c.err;
  return v;
}

class SandboxUsageTest : public ForkTest {
 protected:
  void SetUp() override {
    ForkTest::SetUp();
    if (IsSkipped()) return;
    if (cgroups_.mode() == CgroupMode::kNone) GTEST_SKIP() << "no cgroup to count a sandbox's use";
  }
  SandboxUsage UsageOf(const std::string& id, bool disk = true) {
    auto sb = manager_->Find(id);
    EXPECT_THAT(sb, IsOk());
    if (!sb.ok()) return {};
    auto usage = manager_->Usage(**sb, {.disk = disk});
    EXPECT_THAT(usage, IsOk());
    return usage.ok() ? *usage : SandboxUsage{};
  }
};

TEST_F(SandboxUsageTest, TheCpuAndMemoryAProcessBurnsAreInTheUsageWithinTenPercent) {
  auto sb = NewSandbox();
  ASSERT_NE(sb, nullptr);
  Sh(sb, "head -c 10485760 /dev/urandom > data.bin");
  const SandboxUsage before = UsageOf(sb->id);
  Collected c = Run(sb, Burn(2.0, 256));
  ASSERT_EQ(c.exit.exit_code, 0) << c.err;
  const double burned = Printed(c);
  ASSERT_GE(burned, 2.0);
  const SandboxUsage u = UsageOf(sb->id);
  const CgroupUsage& cg = u.metered.cgroup;
  // What the burn used, as the cgroup counted it, against what the process counted itself: within 10 %.
  EXPECT_NEAR(absl::ToDoubleSeconds(absl::Microseconds(cg.cpu_usec - before.metered.cgroup.cpu_usec)), burned,
              0.1 * burned);
  ASSERT_GE(cg.cpu_user_usec, 0);
  ASSERT_GE(cg.cpu_system_usec, 0);
  EXPECT_NEAR(static_cast<double>(cg.cpu_user_usec + cg.cpu_system_usec), static_cast<double>(cg.cpu_usec),
              0.05 * static_cast<double>(cg.cpu_usec));  // v1 counts these in clock ticks
  EXPECT_NEAR(static_cast<double>(u.metered.memory_peak_bytes), 256.0 * kMiB, 0.1 * 256 * kMiB);
  EXPECT_GT(u.metered.memory_gib_seconds, 0);
  EXPECT_EQ(u.metered.processes_started, 2);
  EXPECT_GE(u.metered.busy, absl::Seconds(burned));
  EXPECT_LE(u.metered.busy, u.wall);
  EXPECT_NEAR(static_cast<double>(u.own_disk_bytes), 10.0 * kMiB, 1.0 * kMiB);
  EXPECT_EQ(u.shared_disk_bytes, 0);  // never forked
}

TEST_F(SandboxUsageTest, AForksChildCountsOnlyItsOwnUseAndSharesTheParentsFilesAsALayer) {
  auto parent = NewSandbox();
  ASSERT_NE(parent, nullptr);
  const std::string id = parent->id;
  ASSERT_EQ(Run(parent, Burn(1.0, 16)).exit.exit_code, 0);
  Sh(parent, "head -c 4194304 /dev/urandom > data.bin");
  parent.reset();
  auto children = Fork(id, 1);
  ASSERT_EQ(children.size(), 1u);
  const SandboxUsage child = UsageOf(children[0]->id);
  EXPECT_LT(child.metered.cgroup.cpu_usec, 100000);  // none of the parent's second
  EXPECT_EQ(child.metered.processes_started, 0);
  EXPECT_NEAR(static_cast<double>(child.shared_disk_bytes), 4.0 * kMiB, 0.5 * kMiB);
  EXPECT_LT(child.own_disk_bytes, kMiB);
  // The parent's new generation goes on counting from its creation, and shares the same layer.
  const SandboxUsage after = UsageOf(id);
  EXPECT_GE(after.metered.cgroup.cpu_usec, 900000);
  EXPECT_EQ(after.metered.processes_started, 2);
  EXPECT_EQ(after.shared_disk_bytes, child.shared_disk_bytes);
  // A delete reports what it cost, its processes gone; its files walked only when asked, before the wipe.
  FinalUsage final_usage;
  ASSERT_TRUE(manager_->Delete(id, &final_usage));
  EXPECT_GE(final_usage.usage.metered.cgroup.cpu_usec, after.metered.cgroup.cpu_usec);
  EXPECT_EQ(final_usage.usage.own_disk_bytes, -1);
  Sh(children[0], "head -c 2097152 /dev/urandom > own.bin");
  const std::string child_id = children[0]->id;
  children.clear();
  FinalUsage child_final{.query = {.disk = true}};
  ASSERT_TRUE(manager_->Delete(child_id, &child_final));
  EXPECT_NEAR(static_cast<double>(child_final.usage.own_disk_bytes), 2.0 * kMiB, 0.5 * kMiB);
  EXPECT_NEAR(static_cast<double>(child_final.usage.shared_disk_bytes), 4.0 * kMiB, 0.5 * kMiB);
}

}  // namespace
}  // namespace corral::sandbox
