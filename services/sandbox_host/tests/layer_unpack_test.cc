// UnpackLayer against layers written here with libarchive: what a registry serves (gzip), overlay whiteouts, and
// the attacks a hostile layer carries (absolute paths, "..", symlink and hard-link escapes, a decompression bomb);
// a sandbox's upper directory adopted as a layer.
#include "services/sandbox_host/images/layer_unpack.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "libs/core/unique_fd.h"
#include "services/sandbox_host/tests/layer_scratch.h"
#include "services/sandbox_host/tests/layer_writer.h"

namespace corral::sandbox {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string Read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class LayerUnpackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (layers keep their owners; whiteouts are device nodes)";
    base_ = LayerScratchDir("corral-layer-" + std::to_string(getpid()));
    if (base_.empty()) GTEST_SKIP() << "neither the temp directory nor /var/tmp can hold layers (overlayfs)";
    fs::create_directories(base_ / "root");
    fs::create_directories(base_ / "outside");
  }
  void TearDown() override {
    if (!base_.empty()) fs::remove_all(base_);
  }
  std::string LayerPath() const { return (base_ / "layer.tar.gz").string(); }
  fs::path Root() const { return base_ / "root"; }
  absl::StatusOr<LayerStats> Unpack(const LayerLimits& limits = {}) {
    UniqueFd fd(open(LayerPath().c_str(), O_RDONLY | O_CLOEXEC));
    return UnpackLayer(fd.get(), Root().string(), limits);
  }

  fs::path base_;
};

TEST_F(LayerUnpackTest, FilesDirectoriesAndLinksKeepTheirOwnersModesAndTimes) {
  LayerWriter(LayerPath(), /*gzip=*/true)
      .Dir("usr/bin")
      .File("usr/bin/tool", "#!/bin/sh\n", 04755)
      .File("home/app/notes.txt", "hello", 0600, 1000)  // parents not listed: created
      .Symlink("bin", "usr/bin")
      .HardLink("usr/bin/tool2", "usr/bin/tool")
      .File("usr/bin/tool", "#!/bin/sh\necho v2\n", 0755);  // a later entry replaces an earlier one
  auto stats = Unpack();
  ASSERT_THAT(stats, IsOk());
  EXPECT_EQ(stats->entries, 6u);
  struct stat st {};
  ASSERT_EQ(lstat((Root() / "home/app/notes.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_mtim.tv_sec, 1'700'000'000);
  EXPECT_EQ(Read(Root() / "home/app/notes.txt"), "hello");
  EXPECT_EQ(Read(Root() / "usr/bin/tool"), "#!/bin/sh\necho v2\n");
  EXPECT_EQ(Read(Root() / "usr/bin/tool2"), "#!/bin/sh\n");  // linked to the first version, as tar would
  ASSERT_EQ(lstat((Root() / "usr/bin/tool2").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 04755u);  // set-id bits kept: sandboxes mount layers nosuid
  EXPECT_EQ(fs::read_symlink(Root() / "bin"), "usr/bin");
}

TEST_F(LayerUnpackTest, WhiteoutsAndOpaqueDirectoriesBecomeOverlayMetadata) {
  LayerWriter(LayerPath(), false).File("etc/.wh.motd", "").Dir("var/cache").File("var/cache/.wh..wh..opq", "");
  auto stats = Unpack();
  ASSERT_THAT(stats, IsOk());
  EXPECT_EQ(stats->whiteouts, 2u);
  struct stat st {};
  ASSERT_EQ(lstat((Root() / "etc/motd").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(st.st_rdev, makedev(0, 0));
  EXPECT_FALSE(fs::exists(Root() / "etc/.wh.motd"));
  char value[4] = {};
  EXPECT_EQ(getxattr((Root() / "var/cache").c_str(), "trusted.overlay.opaque", value, sizeof value), 1);
  EXPECT_EQ(value[0], 'y');
  EXPECT_FALSE(fs::exists(Root() / "var/cache/.wh..wh..opq"));
}

TEST_F(LayerUnpackTest, AbsolutePathsAndSymlinksStayInsideTheLayer) {
  const std::string outside = (base_ / "outside").string();
  LayerWriter(LayerPath(), true)
      .File("/abs.txt", "absolute")                        // re-rooted, as tar does
      .Dir(outside.substr(1))                              // the host directory's path, inside the layer
      .Symlink("to-outside", outside)                      // an absolute symlink to the host directory
      .File("to-outside/planted", "x")                     // ... written through
      .Symlink("up", "../../../../..")                     // a relative one that climbs
      .File("up/" + outside.substr(1) + "/planted2", "x")  // ... written through
      .Dir("etc-real")
      .Symlink("etc", "/etc-real")
      .File("etc/corral-layer-test-evil", "x");
  ASSERT_THAT(Unpack(), IsOk());
  EXPECT_EQ(Read(Root() / "abs.txt"), "absolute");
  // Everything landed inside the root, where the links point when the root is "/".
  EXPECT_TRUE(fs::is_empty(base_ / "outside"));
  EXPECT_FALSE(fs::exists("/etc/corral-layer-test-evil"));
  EXPECT_EQ(Read(Root() / outside.substr(1) / "planted"), "x");
  EXPECT_EQ(Read(Root() / outside.substr(1) / "planted2"), "x");
  EXPECT_EQ(Read(Root() / "etc-real/corral-layer-test-evil"), "x");
}

TEST_F(LayerUnpackTest, WritingThroughASymlinkToAMissingDirectoryIsRefused) {
  LayerWriter(LayerPath(), true).Symlink("etc", "/etc.d").File("etc/corral-layer-test-evil", "x");
  EXPECT_THAT(Unpack(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("below 'etc', a symlink to a missing directory")));
  EXPECT_FALSE(fs::exists("/etc.d/corral-layer-test-evil"));

  // A link to itself (the root's /etc is this very link) is a loop, the layer's fault.
  fs::remove_all(Root());
  fs::create_directories(Root());
  LayerWriter(LayerPath(), true).Symlink("etc", "/etc").File("etc/corral-layer-test-evil", "x");
  EXPECT_THAT(Unpack(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("Too many levels of symbolic links")));
  EXPECT_FALSE(fs::exists("/etc/corral-layer-test-evil"));
}

TEST_F(LayerUnpackTest, DotDotAndHardLinksOutOfTheLayerAreRefused) {
  LayerWriter(LayerPath(), true).File("ok", "1").File("a/../../escape", "x");
  EXPECT_THAT(Unpack(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'a/../../escape' climbs out")));
  EXPECT_FALSE(fs::exists(base_ / "escape"));

  fs::remove_all(Root());
  fs::create_directories(Root());
  LayerWriter(LayerPath(), true).HardLink("passwd", "/etc/passwd");  // the host's, if resolved naively
  EXPECT_THAT(Unpack(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a regular file earlier")));
  EXPECT_FALSE(fs::exists(Root() / "passwd"));
}

TEST_F(LayerUnpackTest, DevicesAreSkippedAndOnlyUserXattrsKept) {
  LayerWriter(LayerPath(), false).Device("dev/mem").WithXattrs("bin/ping");
  auto stats = Unpack();
  ASSERT_THAT(stats, IsOk());
  EXPECT_EQ(stats->skipped_devices, 1u);
  EXPECT_FALSE(fs::exists(Root() / "dev/mem"));
  char value[8] = {};
  EXPECT_EQ(getxattr((Root() / "bin/ping").c_str(), "user.kept", value, sizeof value), 1);
  EXPECT_EQ(getxattr((Root() / "bin/ping").c_str(), "trusted.overlay.opaque", value, sizeof value), -1);
  EXPECT_EQ(getxattr((Root() / "bin/ping").c_str(), "security.capability", value, sizeof value), -1);
}

TEST_F(LayerUnpackTest, ADecompressionBombStopsAtTheLimit) {
  LayerWriter(LayerPath(), true).Zeros("bomb", 64u << 20);
  EXPECT_LT(fs::file_size(LayerPath()), 1u << 20);  // 64 MiB of zeros in well under 1 MiB
  EXPECT_THAT(Unpack(LayerLimits{.max_bytes = 8u << 20}),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("more than 8388608 bytes (at 'bomb')")));
  EXPECT_THAT(Unpack(LayerLimits{.max_entries = 0}), StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST_F(LayerUnpackTest, ASandboxsUpperDirectoryIsAdoptedWithTheImagesIdsAndOnlyTheOpaqueMarker) {
  constexpr uid_t kPool = 45999;
  const fs::path upper = Root();
  fs::create_directories(upper / "testbed/cache");
  std::ofstream(upper / "testbed/calc.sh") << "add() { echo $(( $1 + $2 )); }\n";
  std::ofstream(upper / "testbed/theirs") << "a file of another id\n";
  ASSERT_EQ(mknod((upper / "testbed/deleted").c_str(), S_IFCHR, makedev(0, 0)), 0);  // a whiteout
  for (const char* p : {"", "testbed", "testbed/cache", "testbed/calc.sh"}) {
    ASSERT_EQ(lchown((upper / p).c_str(), kPool, kPool), 0) << p;
  }
  ASSERT_EQ(lchown((upper / "testbed/theirs").c_str(), 1000, 1000), 0);
  ASSERT_EQ(setxattr((upper / "testbed/cache").c_str(), "trusted.overlay.opaque", "y", 1, 0), 0);
  ASSERT_EQ(setxattr((upper / "testbed").c_str(), "trusted.overlay.impure", "y", 1, 0), 0);
  ASSERT_EQ(setxattr((upper / "testbed/calc.sh").c_str(), "trusted.overlay.origin", "xx", 2, 0), 0);
  ASSERT_EQ(setxattr((upper / "testbed/calc.sh").c_str(), "user.note", "kept", 4, 0), 0);

  auto stats = AdoptUpperAsLayer(upper.string(), kPool, kPool, 0, 0);
  ASSERT_THAT(stats, IsOk());
  EXPECT_EQ(stats->entries, 6u);  // the root, testbed, cache, calc.sh, theirs, the whiteout
  EXPECT_EQ(stats->bytes, 31u + 21u);
  struct stat st {};
  for (const char* p : {"", "testbed", "testbed/cache", "testbed/calc.sh"}) {
    ASSERT_EQ(lstat((upper / p).c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 0u) << p;  // the pool uid stood for the image's root
    EXPECT_EQ(st.st_gid, 0u) << p;
  }
  ASSERT_EQ(lstat((upper / "testbed/theirs").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);  // not the sandbox's: left as it was
  ASSERT_EQ(lstat((upper / "testbed/deleted").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  char value[8] = {};
  EXPECT_EQ(getxattr((upper / "testbed/cache").c_str(), "trusted.overlay.opaque", value, sizeof value), 1);
  EXPECT_LT(getxattr((upper / "testbed").c_str(), "trusted.overlay.impure", value, sizeof value), 0);
  EXPECT_LT(getxattr((upper / "testbed/calc.sh").c_str(), "trusted.overlay.origin", value, sizeof value), 0);
  EXPECT_EQ(getxattr((upper / "testbed/calc.sh").c_str(), "user.note", value, sizeof value), 4);
}

TEST_F(LayerUnpackTest, GarbageIsRefused) {
  std::ofstream(LayerPath()) << "this is not a tar archive, compressed or not\n" << std::string(2000, 'x');
  EXPECT_THAT(Unpack(), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace corral::sandbox
