#include "services/scheduler/remote/placement.h"

#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace corral::scheduler {
namespace {

HostSnapshot Host(const std::string& address, uint32_t in_use, uint32_t capacity) {
  HostSnapshot h;
  h.address = address;
  h.state = v1::HOST_STATE_HEALTHY;
  h.in_use = in_use;
  h.capacity = capacity;
  return h;
}

TEST(Placement, SkipsUnhealthyDrainingRejectedAndFullHosts) {
  std::vector<HostSnapshot> hosts;
  hosts.push_back(Host("a-unreachable", 0, 10));
  hosts.back().state = v1::HOST_STATE_UNREACHABLE;
  hosts.push_back(Host("b-draining", 0, 10));
  hosts.back().draining = true;
  hosts.push_back(Host("c-rejected", 0, 10));
  hosts.back().rejected = true;
  hosts.push_back(Host("d-full", 10, 10));
  hosts.push_back(Host("e-unspecified", 0, 10));
  hosts.back().state = v1::HOST_STATE_UNSPECIFIED;
  hosts.push_back(Host("f-no-capacity", 0, 0));
  hosts.push_back(Host("z-ok", 9, 10));
  for (size_t i = 0; i + 1 < hosts.size(); ++i) EXPECT_FALSE(Fits(hosts[i], {})) << hosts[i].address;
  EXPECT_TRUE(Fits(hosts.back(), {}));
  EXPECT_EQ(ChooseHost(hosts, {}), std::optional<size_t>(6));
}

TEST(Placement, AHostWithoutTheHarnessNeverFits) {
  std::vector<HostSnapshot> hosts = {Host("idle-without", 0, 10), Host("busy-with", 9, 10)};
  hosts[0].has_harness = false;
  EXPECT_FALSE(Fits(hosts[0], {}));
  EXPECT_EQ(ChooseHost(hosts, {}), std::optional<size_t>(1));
}

TEST(Placement, SkipsHostsLackingRequiredFeatures) {
  HostSnapshot plain = Host("plain", 0, 10);
  HostSnapshot mounts = Host("mounts", 5, 10);
  mounts.features.set_mount_namespaces(true);
  HostSnapshot netns = Host("netns", 5, 10);
  netns.features.set_network_namespaces(true);
  HostSnapshot landlock3 = Host("landlock3", 0, 10);
  landlock3.features.set_landlock_abi(3);
  HostSnapshot landlock4 = Host("landlock4", 5, 10);
  landlock4.features.set_landlock_abi(4);
  HostSnapshot forks = Host("forks", 7, 10);
  forks.features.set_forks(true);
  const std::vector<HostSnapshot> hosts = {plain, mounts, netns, landlock3, landlock4, forks};

  EXPECT_EQ(ChooseHost(hosts, {.private_view = true}), std::optional<size_t>(1));
  EXPECT_EQ(ChooseHost(hosts, {.network_namespace = true}), std::optional<size_t>(2));
  EXPECT_EQ(ChooseHost(hosts, {.landlock_net = true}), std::optional<size_t>(4));
  EXPECT_FALSE(Fits(landlock3, {.landlock_net = true}));
  EXPECT_EQ(ChooseHost(hosts, {.forks = true}), std::optional<size_t>(5));  // a branching task's host forks
  EXPECT_FALSE(Fits(plain, {.forks = true}));
  EXPECT_EQ(ChooseHost(hosts, {.private_view = true, .network_namespace = true}), std::nullopt);
}

TEST(Placement, AnImageGoesToAHostThatRunsImagesPreferablyOneHoldingIt) {
  HostSnapshot idle_without = Host("idle-without", 0, 10);
  idle_without.features.set_images(true);
  HostSnapshot holds_but_cannot = Host("holds-but-cannot", 1, 10);
  holds_but_cannot.has_image = true;
  HostSnapshot busy_with = Host("busy-with", 8, 10);
  busy_with.features.set_images(true);
  busy_with.has_image = true;
  const std::vector<HostSnapshot> hosts = {idle_without, holds_but_cannot, busy_with};
  EXPECT_EQ(ChooseHost(hosts, {.image = "localhost/swe:1"}), std::optional<size_t>(2));  // busy, but holds it
  // Nowhere holds it: the idle image host pulls it; a host that cannot run images never gets it.
  EXPECT_EQ(ChooseHost({holds_but_cannot, idle_without}, {.image = "localhost/swe:1"}), std::optional<size_t>(1));
  EXPECT_EQ(ChooseHost({holds_but_cannot}, {.image = "localhost/swe:1"}), std::nullopt);
  EXPECT_EQ(ChooseHost(hosts, {}), std::optional<size_t>(0));  // without an image, the least loaded
}

TEST(Placement, PrefersAHostWithTheTemplateOverALessLoadedOne) {
  HostSnapshot idle = Host("idle", 0, 10);
  HostSnapshot busy_with_template = Host("busy", 8, 10);
  busy_with_template.has_template = true;
  EXPECT_EQ(ChooseHost({idle, busy_with_template}, {}), std::optional<size_t>(1));
  EXPECT_EQ(ChooseHost({busy_with_template, idle}, {}), std::optional<size_t>(0));
}

TEST(Placement, OtherwiseLeastLoadedByFractionOfCapacity) {
  // "small" has fewer sandboxes in use, but a larger fraction of its capacity.
  const std::vector<HostSnapshot> hosts = {Host("small", 2, 4), Host("large", 3, 12), Host("mid", 3, 6)};
  EXPECT_EQ(ChooseHost(hosts, {}), std::optional<size_t>(1));
}

TEST(Placement, AmongTemplateHostsLeastLoadedWins) {
  HostSnapshot a = Host("a", 6, 10);
  HostSnapshot b = Host("b", 2, 10);
  HostSnapshot c = Host("c", 0, 10);
  a.has_template = b.has_template = true;
  EXPECT_EQ(ChooseHost({a, b, c}, {}), std::optional<size_t>(1));
}

TEST(Placement, EqualLoadTieGoesToTheLowerAddress) {
  EXPECT_EQ(ChooseHost({Host("host-b", 1, 4), Host("host-a", 2, 8)}, {}), std::optional<size_t>(1));
}

TEST(Placement, NothingFitsIsNullopt) {
  EXPECT_EQ(ChooseHost({}, {}), std::nullopt);
  HostSnapshot draining = Host("d", 0, 10);
  draining.draining = true;
  EXPECT_EQ(ChooseHost({Host("full", 4, 4), draining}, {}), std::nullopt);
}

}  // namespace
}  // namespace corral::scheduler
