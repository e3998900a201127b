// ResolveImageUser against layers written here: names, numbers, groups, the top layer deciding, whiteouts, and
// users the image does not define.
#include "services/sandbox_host/images/image_user.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "services/sandbox_host/images/layer_unpack.h"

namespace corral::sandbox {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class ImageUserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() / ("corral-imageuser-" + std::to_string(getpid()));
    for (const char* d : {"bottom/etc", "top/etc"}) fs::create_directories(base_ / d);
    std::ofstream(base_ / "bottom/etc/passwd") << "root:x:0:0:root:/root:/bin/bash\n"
                                                  "# a comment\n"
                                                  "garbage line\n"
                                                  "app:x:1000:1000::/home/app:/bin/sh\n"
                                                  "nohome:x:1001:100::relative:/bin/sh\n";
    std::ofstream(base_ / "bottom/etc/group") << "root:x:0:\nusers:x:100:\napp:x:1000:\n";
  }
  void TearDown() override { fs::remove_all(base_); }
  std::vector<std::string> Layers() const { return {(base_ / "top").string(), (base_ / "bottom").string()}; }

  fs::path base_;
};

TEST_F(ImageUserTest, EmptyIsRootWithRootsHome) {
  auto user = ResolveImageUser(Layers(), "");
  ASSERT_THAT(user, IsOk());
  EXPECT_EQ(user->uid, 0u);
  EXPECT_EQ(user->gid, 0u);
  EXPECT_EQ(user->name, "root");
  EXPECT_EQ(user->home, "/root");
}

TEST_F(ImageUserTest, NamesAndNumbersComeFromPasswdAndGroup) {
  auto app = ResolveImageUser(Layers(), "app");
  ASSERT_THAT(app, IsOk());
  EXPECT_EQ(app->uid, 1000u);
  EXPECT_EQ(app->gid, 1000u);
  EXPECT_EQ(app->home, "/home/app");
  auto by_number = ResolveImageUser(Layers(), "1000:users");
  ASSERT_THAT(by_number, IsOk());
  EXPECT_EQ(by_number->name, "app");
  EXPECT_EQ(by_number->gid, 100u);
  auto unknown_number = ResolveImageUser(Layers(), "4242:7");  // a number need not be in /etc/passwd
  ASSERT_THAT(unknown_number, IsOk());
  EXPECT_EQ(unknown_number->uid, 4242u);
  EXPECT_EQ(unknown_number->gid, 7u);
  EXPECT_EQ(unknown_number->home, "/");
  EXPECT_EQ(ResolveImageUser(Layers(), "nohome")->home, "/");  // a relative home is no home
}

TEST_F(ImageUserTest, WhatTheImageDoesNotDefineIsRefusedByName) {
  EXPECT_THAT(ResolveImageUser(Layers(), "nobody-here"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'nobody-here'")));
  EXPECT_THAT(ResolveImageUser(Layers(), "app:nogroup"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'nogroup'")));
  EXPECT_THAT(ResolveImageUser(Layers(), "99999999"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0 to 65535")));
  EXPECT_THAT(ResolveImageUser(Layers(), "12abc"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ImageUserTest, TheTopLayerThatHasTheFileDecides) {
  std::ofstream(base_ / "top/etc/passwd") << "root:x:0:0:root:/srv/root:/bin/sh\n";
  EXPECT_EQ(ResolveImageUser(Layers(), "")->home, "/srv/root");
  EXPECT_THAT(ResolveImageUser(Layers(), "app"), StatusIs(absl::StatusCode::kInvalidArgument));
  // A whiteout in the top layer deletes the bottom layer's file: root by default, names unknown.
  fs::remove(base_ / "top/etc/passwd");
  if (geteuid() == 0 && CheckLayerFilesystem(base_.string()).ok()) {  // overlayfs (a container's root) cannot hold one
    ASSERT_EQ(mknod((base_ / "top/etc/passwd").c_str(), S_IFCHR | 0, makedev(0, 0)), 0);
    EXPECT_EQ(ResolveImageUser(Layers(), "")->home, "/root");
    EXPECT_THAT(ResolveImageUser(Layers(), "app"), StatusIs(absl::StatusCode::kInvalidArgument));
  }
  // A symlink pointing out of the layer is not followed there.
  fs::remove(base_ / "top/etc/passwd");
  fs::create_symlink("/etc/passwd", base_ / "top/etc/passwd");
  EXPECT_THAT(ResolveImageUser(Layers(), "app"), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace corral::sandbox
