// Finding the host's own cgroup from the mount table, on the layouts met in practice: a cgroup-v1 machine, a
// privileged container sharing that machine's cgroup namespace, a cgroup-v2 machine, and garbage.
#include "services/sandbox_host/linux/cgroup.h"

#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/sandbox_host/linux/containment.h"
#include "tests/support/subprocess.h"

namespace corral::sandbox {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr char kContainerPath[] = "/libpod_parent/libpod-1a55228a";

class OwnCgroupDirTest : public ::testing::Test {
 protected:
  void SetUp() override { root_ = testing::MakeTestDir(); }
  // A directory standing in for a mounted hierarchy (OwnCgroupDir checks that the answer exists).
  std::string Dir(const std::string& path) {
    fs::create_directories(root_ + path);
    return root_ + path;
  }
  std::string root_;
};

TEST_F(OwnCgroupDirTest, OnACgroupV1MachineOurCgroupIsBelowTheHierarchysRoot) {
  const std::string memory = Dir("/memory");
  Dir("/memory/process_api/abc");
  const std::string mountinfo =
      absl::StrCat("30 22 0:27 / ", root_, " rw,relatime - tmpfs tmpfs rw,mode=755\n", "34 30 0:31 / ", memory,
                   " rw,relatime shared:12 - cgroup cgroup rw,memory\n", "38 30 0:35 / ", Dir("/pids"),
                   " rw,relatime - cgroup cgroup rw,pids\n");
  const auto mounts = ParseCgroupMounts(mountinfo);
  ASSERT_EQ(mounts.size(), 2u);
  EXPECT_EQ(mounts[0].root, "/");
  EXPECT_THAT(mounts[0].options, ElementsAre("rw", "memory"));
  const auto own = ParseOwnCgroups("8:pids:/\n4:memory:/process_api/abc\n1:cpu,cpuacct:/\n0::/\n");
  ASSERT_EQ(own.size(), 4u);
  EXPECT_THAT(own[2].controllers, ElementsAre("cpu", "cpuacct"));
  EXPECT_EQ(OwnCgroupDir(mounts, own, "memory"), memory + "/process_api/abc");
  EXPECT_EQ(OwnCgroupDir(mounts, own, "pids"), root_ + "/pids");
  EXPECT_EQ(OwnCgroupDir(mounts, own, "cpu"), "");  // no cpu hierarchy mounted
  EXPECT_EQ(OwnCgroupDir(mounts, own, ""), "");     // no cgroup2 mount
}

TEST_F(OwnCgroupDirTest, InAContainerSharingTheHostsCgroupNamespaceTheMountIsRootedAtOurCgroup) {
  // /proc/self/cgroup names the host's path, which does not exist in the container's view; the mount does.
  const std::string memory = Dir("/memory");
  const std::string mountinfo = absl::StrCat("87 83 0:31 ", kContainerPath, " ", memory,
                                             " rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,memory\n");
  const auto own = ParseOwnCgroups(absl::StrCat("4:memory:", kContainerPath, "\n"));
  EXPECT_EQ(OwnCgroupDir(ParseCgroupMounts(mountinfo), own, "memory"), memory);
  // A mount rooted at a sibling cgroup does not show ours.
  const std::string sibling =
      absl::StrCat("87 83 0:31 /libpod_parent/libpod-1a5 ", memory, " rw - cgroup cgroup rw,memory\n");
  EXPECT_EQ(OwnCgroupDir(ParseCgroupMounts(sibling), own, "memory"), "");
}

TEST_F(OwnCgroupDirTest, OnACgroupV2MachineTheUnifiedMountShowsOurCgroup) {
  Dir("/user.slice/session-1.scope");
  const std::string mountinfo =
      absl::StrCat("29 23 0:26 / ", root_, " rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n");
  const auto own = ParseOwnCgroups("0::/user.slice/session-1.scope\n");
  EXPECT_EQ(OwnCgroupDir(ParseCgroupMounts(mountinfo), own, ""), root_ + "/user.slice/session-1.scope");
  EXPECT_EQ(OwnCgroupDir(ParseCgroupMounts(mountinfo), own, "memory"), "");
}

TEST_F(OwnCgroupDirTest, GarbageParsesToNothing) {
  EXPECT_THAT(ParseCgroupMounts("- - -\n1 2\n36 25 0:31 / /x rw - cgroup\n\n\xff\xfe"), IsEmpty());
  EXPECT_THAT(ParseOwnCgroups("nonsense\n4:memory:relative\n::\n"), IsEmpty());
  EXPECT_EQ(OwnCgroupDir({}, {}, "memory"), "");
}

TEST(PlanContainmentTest, WithoutACgroupMemoryAndProcessesFallBackToRlimits) {
  const CgroupLimits cg{.memory_bytes = 64 << 20, .max_pids = 64, .cpu_weight = 100};
  const Rlimits rl{.nproc = 512, .file_size_bytes = 1 << 20};
  Containment c = PlanContainment(CgroupMode::kNone, {}, cg, rl);
  EXPECT_EQ(c.cgroup, CgroupMode::kNone);
  EXPECT_EQ(c.rlimits.data_bytes, 64 << 20);
  EXPECT_EQ(c.rlimits.nproc, 64);  // the tighter of RLIMIT_NPROC and the pids limit
  EXPECT_EQ(c.memory_rlimit_bytes, 64 << 20);
  EXPECT_EQ(c.process_rlimit, 64);
  EXPECT_EQ(c.summary,
            "no cgroup, rlimits only: memory 64 MiB per process (RLIMIT_DATA), 64 processes (RLIMIT_NPROC), "
            "files up to 1 MiB (RLIMIT_FSIZE), no disk quota");
}

TEST(PlanContainmentTest, ACgroupControllerReplacesItsRlimitAndAPartialCgroupMixes) {
  const CgroupLimits cg{.memory_bytes = 2ULL << 30, .max_pids = 512, .cpu_weight = 50};
  const Rlimits rl{.nproc = 100};
  Containment full = PlanContainment(CgroupMode::kV1, {"memory", "pids", "cpu"}, cg, rl);
  EXPECT_EQ(full.rlimits.data_bytes, 0);
  EXPECT_EQ(full.rlimits.nproc, 100);  // the requested rlimit stays; the cgroup adds its own cap
  EXPECT_EQ(full.memory_rlimit_bytes, 0);
  EXPECT_EQ(full.process_rlimit, 0);
  EXPECT_EQ(full.summary,
            "cgroup v1: memory 2 GiB (cgroup), 512 processes (cgroup), cpu weight 50 (cgroup), no disk quota");
  Containment memory_only = PlanContainment(CgroupMode::kV1, {"memory"}, cg, rl);
  EXPECT_EQ(memory_only.rlimits.data_bytes, 0);
  EXPECT_EQ(memory_only.process_rlimit, 100);
  EXPECT_THAT(memory_only.controllers, ElementsAre("memory"));
}

// What a cgroup counted, from its files: garbage and missing files are "not measured" (-1), never 0.
TEST(CgroupUsageTest, CountersAreReadAndWhatIsMissingIsNotMeasured) {
  CgroupUsage u = ParseCgroupUsage({.cpu_stat = "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\nnr_periods 0\n",
                                    .memory_current = "4096\n",
                                    .memory_peak = "8192\n",
                                    .memory_max = "max\n",
                                    .pids_current = "3\n",
                                    .io_stat = "8:0 rbytes=10 wbytes=4096 rios=1 wios=1\n259:0 wbytes=100 dbytes=0\n"});
  EXPECT_EQ(u.cpu_usec, 1500);
  EXPECT_EQ(u.cpu_user_usec, 1000);
  EXPECT_EQ(u.cpu_system_usec, 500);
  EXPECT_EQ(u.memory_bytes, 4096);
  EXPECT_EQ(u.memory_peak_bytes, 8192);
  EXPECT_EQ(u.memory_limit_bytes, 0);  // max: no limit
  EXPECT_EQ(u.pids, 3);
  EXPECT_EQ(u.io_write_bytes, 4196);  // summed over the devices
  u = ParseCgroupUsage({.memory_max = "1048576"});
  EXPECT_EQ(u.cpu_usec, -1);
  EXPECT_EQ(u.memory_bytes, -1);
  EXPECT_EQ(u.memory_peak_bytes, -1);
  EXPECT_EQ(u.memory_limit_bytes, 1048576);
  EXPECT_EQ(u.pids, -1);
  EXPECT_EQ(u.io_write_bytes, -1);  // no io.stat: not counted
  u = ParseCgroupUsage({.cpu_stat = "usage_usec x\ngarbage",
                        .memory_current = "twelve",
                        .memory_peak = "-5",
                        .pids_current = "-",
                        .io_stat = ""});
  EXPECT_EQ(u.cpu_usec, -1);
  EXPECT_EQ(u.memory_bytes, -1);
  EXPECT_EQ(u.memory_peak_bytes, -1);
  EXPECT_EQ(u.memory_limit_bytes, -1);
  EXPECT_EQ(u.io_write_bytes, 0);  // an empty io.stat: nothing written yet
}

}  // namespace
}  // namespace corral::sandbox
