#include "services/sandbox_host/linux/uid_pool.h"

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"

namespace corral::sandbox {
namespace {

using ::testing::Optional;

TEST(UidPool, SkipsReservedUidsAndRunsOutAsHostFull) {
  UidPool pool(100, 103, {101});
  EXPECT_THAT(pool.Acquire(), Optional(100u));
  EXPECT_THAT(pool.Acquire(), Optional(102u));
  EXPECT_THAT(pool.Acquire(), Optional(103u));
  EXPECT_EQ(pool.Acquire(), std::nullopt);
  EXPECT_EQ(pool.in_use(), 3u);
}

TEST(UidPool, FreedUidIsReusedLastAndOnlyWhenClean) {
  UidPool pool(100, 102, {});
  uid_t a = *pool.Acquire();
  uid_t b = *pool.Acquire();
  pool.Release(a, /*clean=*/true);
  pool.Release(b, /*clean=*/false);             // a process survived teardown: quarantined
  EXPECT_THAT(pool.Acquire(), Optional(102u));  // never-used uids first, then the oldest freed
  EXPECT_THAT(pool.Acquire(), Optional(a));
  EXPECT_EQ(pool.Acquire(), std::nullopt);  // b stays out while quarantined
  EXPECT_EQ(pool.quarantined(), 1u);
  EXPECT_EQ(pool.SweepQuarantine([](uid_t) { return false; }), 1u);
  EXPECT_EQ(pool.SweepQuarantine([&](uid_t u) { return u == b; }), 0u);
  EXPECT_THAT(pool.Acquire(), Optional(b));
}

TEST(UidPool, ReleasingAUidTwiceOrAForeignUidChangesNothing) {
  UidPool pool(100, 101, {});
  uid_t a = *pool.Acquire();
  pool.Release(a, true);
  pool.Release(a, true);
  pool.Release(5000, true);
  EXPECT_EQ(pool.free_count(), 2u);
}

TEST(ReadPasswdUids, ParsesThirdFieldAndSkipsGarbage) {
  std::string path = ::testing::TempDir() + "/passwd_test";
  std::ofstream(path) << "root:x:0:0:root:/root:/bin/bash\nbroken line\napp:x:20005:20005::/home/app:/bin/sh\n";
  auto uids = ReadPasswdUids(path);
  ASSERT_THAT(uids, IsOk());
  EXPECT_TRUE(uids->contains(0));
  EXPECT_TRUE(uids->contains(20005));
  EXPECT_EQ(uids->size(), 2u);
  EXPECT_THAT(ReadPasswdUids("/nonexistent"), StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace corral::sandbox
